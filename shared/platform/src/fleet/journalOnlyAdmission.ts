/**
 * Admission where no Tinkerbell effects are configured (talos-config-server without kubernetes.management
 * .tinkerbell): intake confirmed, nothing is created; a journal line on the node asks the operator to request
 * provision in NetBox. `reason` says why the server cannot admit by itself (operator-written configuration text,
 * not machine input).
 */
import type { Admission, Journal } from "./ports.js";
import type { Node } from "./node.js";

export interface JournalOnlyLog {
  warn(o: object, msg: string): void;
}

export class JournalOnlyAdmission implements Admission {
  constructor(
    private readonly journal: Journal,
    private readonly reason: string,
    private readonly log?: JournalOnlyLog,
  ) {}

  async admit(node: Node, _facts?: unknown, journal: Journal = this.journal): Promise<void> {
    this.log?.warn({ node: node.name, reason: this.reason }, "intake confirmed; admission is not wired to Tinkerbell: set desired_action provision in NetBox");
    await journal.record(node.name, { kind: "info", summary: `admission is not automated by this server (${this.reason}): set desired_action to provision to install Talos` });
  }
}
