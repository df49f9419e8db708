/**
 * What the worker has settled, kept across restarts (`<stateDir>/handled.log`): per device, the decommissioning
 * request it handled (`decommission:<device>:<change>`) and the `last_updated` it saw then
 * (`settled:<device>:<last_updated>`), and the device state whose changed request it journalled
 * (`changed:<device>:<last_updated>`). Only the newest of each kind per device is ever asked about — a newer
 * request or edit replaces it — so the log keeps one line per kind and device: it is rewritten (write, fsync,
 * rename) at start and whenever superseded lines outnumber the live ones.
 */
import { existsSync, readFileSync } from "node:fs";
import { appendDurable, writeDurable } from "./durable.js";

/** `kind:device` of a key `kind:device:rest`. */
function slotOf(key: string): string {
  const a = key.indexOf(":");
  const b = a < 0 ? -1 : key.indexOf(":", a + 1);
  return b < 0 ? key : key.slice(0, b);
}

export class Handled {
  /** slot → the newest key in it. */
  private readonly live = new Map<string, string>();
  private lines = 0;

  constructor(private readonly path: string) {
    if (!existsSync(path)) return;
    for (const l of readFileSync(path, "utf8").split("\n")) if (l) this.live.set(slotOf(l), l);
    this.compact();
  }

  has(k: string): boolean {
    return this.live.get(slotOf(k)) === k;
  }

  add(k: string): void {
    if (this.has(k)) return;
    appendDurable(this.path, k);
    this.lines++;
    this.live.set(slotOf(k), k);
    if (this.lines > 2 * this.live.size + 1000) this.compact();
  }

  /** Lines in the file now (for tests and metrics). */
  get fileLines(): number {
    return this.lines;
  }

  private compact(): void {
    writeDurable(this.path, [...this.live.values()].map((k) => `${k}\n`).join(""));
    this.lines = this.live.size;
  }
}
