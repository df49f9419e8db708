/**
 * Text that fleetd did not write — a machine's claims, an agent's or a BMC's message, a NetBox user's field, a
 * certificate's subject, a value from an event log — made safe for where it goes. The one place this is done:
 *  - `mdCode` for NetBox journal entries, which NetBox renders as Markdown: a code span, so the text cannot
 *    become a link, an image, a heading or HTML there (clipped, one line, no backticks);
 *  - `safeLine` for logs read on terminals and for human CLI output: control characters (C0, DEL, C1, so no
 *    ANSI/OSC escape sequences and no fake rows from CR/LF) and the invisible Unicode format characters used to
 *    disguise text (bidirectional overrides, zero-width characters) are shown as `\xNN` / `\u{NNNN}` escapes.
 * Pure; no I/O.
 */

/** Characters shown escaped by `safeLine`: C0 controls, DEL, C1 controls, and Unicode format characters that reorder or hide text. */
const UNSAFE = /[\u0000-\u001f\u007f-\u009f\u00ad\u061c\u180e\u200b-\u200f\u2028-\u202e\u2060-\u2064\u2066-\u206f\ufeff\ufff9-\ufffb]/gu;

function escapeChar(ch: string): string {
  const cp = ch.codePointAt(0) ?? 0;
  if (ch === "\n") return "\\n";
  if (ch === "\r") return "\\r";
  if (ch === "\t") return "\\t";
  return cp <= 0xff ? `\\x${cp.toString(16).padStart(2, "0")}` : `\\u{${cp.toString(16)}}`;
}

function clip(s: string, max: number): string {
  const chars = [...s];
  return chars.length > max ? `${chars.slice(0, max).join("")}…` : s;
}

/** One line of untrusted text for a terminal or a log: every control/format character escaped, clipped to `max` characters. */
export function safeLine(s: string, max = 500): string {
  return clip(s, max).replace(UNSAFE, escapeChar);
}

/**
 * Untrusted text as a Markdown code span for a NetBox journal entry: one line (backticks, CR/LF and tabs become
 * spaces, other control characters are escaped), clipped to `max` characters. Inside a code span Markdown
 * renders nothing: no link, image, emphasis, heading or HTML.
 */
export function mdCode(s: string, max = 500): string {
  const one = s.replace(/[`\r\n\t]+/g, " ").trim();
  return `\`${safeLine(one, max)}\``;
}
