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

/**
 * What can make Markdown render more than text in the middle of a line: links and images (`[`, `]`; `(` and `!`
 * only matter next to a bracket), HTML, autolinks and entities (`<`, `>`, `&`), emphasis (`*`; Python-Markdown,
 * which NetBox uses, does not emphasise intraword `_`), and the backslash itself (so no escape can be undone).
 */
const MD_SPECIAL = /[\\*[\]<>&]/g;

/**
 * Journal text in which some parts are untrusted and not wrapped in a code span (a summary built around a
 * machine's claim, a check's detail quoting evidence): every Markdown special character outside code spans is
 * backslash-escaped and newlines become spaces (so no heading, list or table can start), and nothing renders
 * as a link, image or HTML. Code spans
 * (from `mdCode`, or any balanced backtick run — inside one Markdown renders nothing) are kept; a lone backtick
 * is escaped. Control characters are escaped as in `safeLine`.
 */
export function mdText(s: string, max = 2000): string {
  const one = safeLine(s.replace(/[\r\n]+/g, " "), max);
  let out = "";
  let i = 0;
  while (i < one.length) {
    const tick = one.indexOf("`", i);
    if (tick < 0) {
      out += one.slice(i).replace(MD_SPECIAL, "\\$&");
      break;
    }
    out += one.slice(i, tick).replace(MD_SPECIAL, "\\$&");
    let run = tick;
    while (one[run] === "`") run++;
    const fence = one.slice(tick, run);
    const close = findFence(one, run, fence);
    if (close < 0) {
      out += fence.replace(/`/g, "\\`");
      i = run;
    } else {
      out += one.slice(tick, close + fence.length);
      i = close + fence.length;
    }
  }
  return out;
}

/** The index of the next backtick run exactly as long as `fence` at or after `from`, or -1. */
function findFence(s: string, from: number, fence: string): number {
  let i = s.indexOf(fence, from);
  while (i >= 0) {
    let end = i;
    while (s[end] === "`") end++;
    if (end - i === fence.length) return i;
    i = s.indexOf(fence, end);
  }
  return -1;
}
