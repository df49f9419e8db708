/** Running the openssl CLI as an independent judge of fleetd's certificates. */
import { spawnSync } from "node:child_process";

export interface ToolResult {
  status: number;
  stdout: string;
  stderr: string;
}

export function openssl(args: string[]): ToolResult {
  const r = spawnSync("openssl", args, { encoding: "utf8", timeout: 30_000 });
  if (r.error) throw r.error;
  return { status: r.status ?? -1, stdout: r.stdout, stderr: r.stderr };
}

/** `openssl x509 -text` of a PEM file, as one string. */
export function x509Text(pemPath: string): string {
  const r = openssl(["x509", "-in", pemPath, "-noout", "-text"]);
  if (r.status !== 0) throw new Error(`openssl x509 failed: ${r.stderr}`);
  return r.stdout;
}

/** The lines of one extension's block in `openssl x509 -text` output: its header and value lines. */
export function extensionBlock(text: string, header: string): { critical: boolean; value: string } | undefined {
  const lines = text.split("\n");
  const i = lines.findIndex((l) => l.trim().startsWith(`${header}:`));
  if (i < 0) return undefined;
  const head = lines[i] ?? "";
  const value: string[] = [];
  for (const l of lines.slice(i + 1)) {
    if (/^\s{12}\S/.test(l) && !/^\s{16}/.test(l)) break; // next extension header (12 spaces)
    if (!/^\s{16}/.test(l)) break;
    value.push(l.trim());
  }
  return { critical: /:\s*critical\s*$/.test(head), value: value.join("\n") };
}
