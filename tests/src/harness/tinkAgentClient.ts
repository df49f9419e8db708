/**
 * A Tinkerbell agent's side of the agent protocol (`proto.WorkflowService` of the pinned
 * github.com/tinkerbell/tinkerbell module, loaded at run time from the module cache with @grpc/proto-loader):
 * GetAction(agent_id, agent_attributes) and ReportActionStatus, over plaintext gRPC to a real tink-server.
 *
 * It speaks the protocol as the real tink-agent does (tink/agent/internal/transport/grpc): the same request
 * fields, RUNNING with the message "running action" before an action and the final state with "action
 * completed" after it. It does NOT run action containers: the caller decides an action's outcome and reports
 * it — for tests that script the agent's side. The real agent, which runs actions as containers on a Docker-API
 * socket (podman's in the lab), is ./tinkAgent.ts.
 */
import { join } from "node:path";
import * as grpc from "@grpc/grpc-js";
import * as protoLoader from "@grpc/proto-loader";
import { z } from "zod";
import { tinkerbellModuleDir } from "./tinkerbell.js";

/** `proto.ActionStatusRequest.StateType`. */
export type ActionState = "UNSPECIFIED" | "PENDING" | "RUNNING" | "FAILED" | "TIMEOUT" | "SUCCESS";

/** A subset of `proto.AgentAttributes` (field names as in the .proto). */
export interface AgentAttributes {
  cpu?: { total_cores?: number; total_threads?: number; processors?: { id?: number; cores?: number; threads?: number; vendor?: string; model?: string }[] };
  memory?: { total?: string; usable?: string };
  block?: { name?: string; drive_type?: string; size?: string; vendor?: string; model?: string; serial_number?: string }[];
  network?: { name?: string; mac?: string; speed?: string }[];
  chassis?: { serial?: string; vendor?: string };
  bios?: { vendor?: string; version?: string; release_date?: string };
  baseboard?: { vendor?: string; product?: string; version?: string; serial_number?: string };
  product?: { name?: string; vendor?: string; serial_number?: string };
}

const ActionResponse = z.object({
  workflow_id: z.string().default(""),
  task_id: z.string().default(""),
  agent_id: z.string().default(""),
  action_id: z.string().default(""),
  name: z.string().default(""),
  image: z.string().default(""),
  timeout: z.union([z.string(), z.number()]).default("0"),
  command: z.array(z.string()).default([]),
  volumes: z.array(z.string()).default([]),
  environment: z.array(z.string()).default([]),
  pid: z.string().default(""),
  namespaces: z.object({ network: z.string().default(""), pid: z.string().default("") }).nullish(),
});

/** One action as tink-server sends it. */
export interface AgentAction {
  /** "<namespace>/<workflow name>" */
  workflowId: string;
  taskId: string;
  agentId: string;
  actionId: string;
  name: string;
  image: string;
  /** Seconds. */
  timeout: number;
  command: string[];
  volumes: string[];
  /** Task environment merged with the action's (the wire form is sorted `K=V` strings). */
  environment: Record<string, string>;
  /** The raw `K=V` strings, in the server's order. */
  environmentList: string[];
  pid: string;
  namespaces: { network: string; pid: string } | undefined;
}

/** A gRPC failure with its status code, e.g. { code: 9, codeName: "FAILED_PRECONDITION" }. */
export class AgentRpcError extends Error {
  constructor(readonly rpc: string, readonly code: number, readonly codeName: string, readonly details: string) {
    super(`${rpc}: ${codeName} (${code}): ${details}`);
    this.name = "AgentRpcError";
  }
}

const codeName = (code: number) => (grpc.status as unknown as Record<number, string>)[code] ?? String(code);

interface WorkflowServiceClient extends grpc.Client {
  GetAction(req: object, md: grpc.Metadata, opts: grpc.CallOptions, cb: (err: grpc.ServiceError | null, res?: unknown) => void): grpc.ClientUnaryCall;
  ReportActionStatus(req: object, md: grpc.Metadata, opts: grpc.CallOptions, cb: (err: grpc.ServiceError | null, res?: unknown) => void): grpc.ClientUnaryCall;
}

let servicePromise: Promise<grpc.ServiceClientConstructor> | undefined;

/** The WorkflowService client constructor, from the .proto files of the pinned module. */
async function workflowService(): Promise<grpc.ServiceClientConstructor> {
  servicePromise ??= (async () => {
    const dir = join(await tinkerbellModuleDir(), "pkg/proto");
    const def = await protoLoader.load("workflow_service.proto", {
      includeDirs: [dir], keepCase: true, longs: String, enums: String, defaults: false, oneofs: true,
    });
    const pkg = grpc.loadPackageDefinition(def) as unknown as { proto?: { WorkflowService?: grpc.ServiceClientConstructor } };
    const ctor = pkg.proto?.WorkflowService;
    if (!ctor) throw new Error(`${dir}/workflow_service.proto: no service proto.WorkflowService`);
    return ctor;
  })();
  return servicePromise;
}

export interface CallOptions {
  /** Client deadline; default 90 s (tink-server itself retries a failing GetAction for up to a minute). */
  deadlineMs?: number;
}

export class TinkAgentClient {
  private constructor(private readonly client: WorkflowServiceClient) {}

  /** A plaintext channel to tink-server at `address` (host:port on loopback). */
  static async connect(address: string): Promise<TinkAgentClient> {
    const Ctor = await workflowService();
    return new TinkAgentClient(new Ctor(address, grpc.credentials.createInsecure()) as unknown as WorkflowServiceClient);
  }

  private unary(rpc: "GetAction" | "ReportActionStatus", req: object, opts: CallOptions): Promise<unknown> {
    return new Promise((res, rej) => {
      const deadline = new Date(Date.now() + (opts.deadlineMs ?? 90_000));
      this.client[rpc](req, new grpc.Metadata(), { deadline }, (err, out) => {
        if (err) rej(new AgentRpcError(rpc, err.code, codeName(err.code), err.details));
        else res(out);
      });
    });
  }

  /** GetAction; rejects with AgentRpcError (e.g. NOT_FOUND: no Workflow, FAILED_PRECONDITION: none runnable). */
  async getAction(agentId: string, attributes?: AgentAttributes, opts: CallOptions = {}): Promise<AgentAction> {
    const raw = await this.unary("GetAction", { agent_id: agentId, ...(attributes ? { agent_attributes: attributes } : {}) }, opts);
    const r = ActionResponse.parse(raw);
    const environment: Record<string, string> = {};
    for (const kv of r.environment) {
      const i = kv.indexOf("=");
      if (i < 0) environment[kv] = "";
      else environment[kv.slice(0, i)] = kv.slice(i + 1);
    }
    const timeout = Number(r.timeout);
    if (!Number.isSafeInteger(timeout)) throw new Error(`GetAction: timeout ${String(r.timeout)} is not an integer`);
    return {
      workflowId: r.workflow_id, taskId: r.task_id, agentId: r.agent_id, actionId: r.action_id, name: r.name,
      image: r.image, timeout, command: r.command, volumes: r.volumes, environment, environmentList: r.environment,
      pid: r.pid, namespaces: r.namespaces ?? undefined,
    };
  }

  /** ReportActionStatus for `action` with the fields the real agent sends. */
  async reportActionStatus(action: AgentAction, state: ActionState, report: { message: string; start: Date; stop: Date }, opts: CallOptions = {}): Promise<void> {
    const ts = (d: Date) => ({ seconds: Math.floor(d.getTime() / 1000), nanos: (d.getTime() % 1000) * 1_000_000 });
    const durationMs = Math.max(0, report.stop.getTime() - report.start.getTime());
    await this.unary("ReportActionStatus", {
      workflow_id: action.workflowId, agent_id: action.agentId, task_id: action.taskId, action_id: action.actionId,
      action_name: action.name, action_state: state, execution_start: ts(report.start), execution_stop: ts(report.stop),
      execution_duration: `${(durationMs / 1000).toFixed(3)}s`, message: { message: report.message },
    }, opts);
  }

  /**
   * What the real agent does around one action: report RUNNING ("running action"), let `execute` decide
   * the outcome, report it ("action completed").
   */
  async perform(action: AgentAction, execute: (a: AgentAction) => Promise<Exclude<ActionState, "UNSPECIFIED" | "PENDING" | "RUNNING">>): Promise<void> {
    const start = new Date();
    await this.reportActionStatus(action, "RUNNING", { message: "running action", start, stop: start });
    const outcome = await execute(action);
    await this.reportActionStatus(action, outcome, { message: "action completed", start, stop: new Date() });
  }

  close(): void {
    this.client.close();
  }
}
