/**
 * Is a presented EK public area one of the EK templates? Every field must equal the template's except
 * `unique` (the key itself); the first differing field is named with both values.
 */
import { algName, objectAttributeNames } from "../tcg/constants.js";
import type { TPMT_PUBLIC } from "../tpm/structures.js";
import { EK_TEMPLATES, type EkTemplate } from "./templates.js";

export type TemplateComparison =
  | { ok: true; template: EkTemplate }
  | { ok: false; template: EkTemplate; field: string; expected: string; actual: string; detail: string };

const ALG_FIELDS = new Set(["type", "nameAlg", "algorithm", "mode", "scheme", "hashAlg"]);

function show(path: string, v: unknown): string {
  const last = path.split(".").pop() ?? "";
  if (v instanceof Uint8Array) return v.length === 0 ? "(empty)" : Buffer.from(v).toString("hex");
  if (typeof v === "number") {
    if (last === "objectAttributes") return `0x${v.toString(16).padStart(8, "0")} (${objectAttributeNames(v).join("|") || "none"})`;
    if (ALG_FIELDS.has(last)) return algName(v) === `0x${v.toString(16).padStart(4, "0")}` ? algName(v) : `${algName(v)} (0x${v.toString(16).padStart(4, "0")})`;
    if (last === "curveID") return `0x${v.toString(16).padStart(4, "0")}`;
    return String(v);
  }
  return String(v);
}

/** Leaves of a decoded structure as [path, value], in declaration order. */
function leaves(v: unknown, path: string, out: [string, unknown][]): void {
  if (v instanceof Uint8Array || typeof v !== "object" || v === null) {
    out.push([path, v]);
    return;
  }
  for (const [k, x] of Object.entries(v)) leaves(x, path ? `${path}.${k}` : k, out);
}

interface Difference {
  field: string;
  expected: string;
  actual: string;
}

/** Every field (other than `unique`) where `pub` differs from the template, in declaration order. */
export function templateDifferences(pub: TPMT_PUBLIC, template: EkTemplate): Difference[] {
  const { unique: _a, ...got } = pub;
  const { unique: _b, ...want } = template.public;
  const g: [string, unknown][] = [];
  const w: [string, unknown][] = [];
  leaves(got, "", g);
  leaves(want, "", w);
  const gm = new Map(g);
  const wm = new Map(w);
  const out: Difference[] = [];
  for (const [path, expected] of w) {
    const actual = gm.get(path);
    const same =
      expected instanceof Uint8Array && actual instanceof Uint8Array
        ? Buffer.from(expected).equals(Buffer.from(actual))
        : expected === actual;
    if (!same) out.push({ field: path, expected: show(path, expected), actual: gm.has(path) ? show(path, actual) : "(absent)" });
  }
  for (const [path, actual] of g) if (!wm.has(path)) out.push({ field: path, expected: "(absent)", actual: show(path, actual) });
  return out;
}

export function compareToTemplate(pub: TPMT_PUBLIC, template: EkTemplate): TemplateComparison {
  const [d] = templateDifferences(pub, template);
  if (!d) return { ok: true, template };
  return { ok: false, template, ...d, detail: `${d.field}: template ${template.id} has ${d.expected}, the EK has ${d.actual}` };
}

/**
 * Which EK template does `pub` follow? Returns the matching comparison, or — if none matches — the
 * comparison with the closest template of the same key type (fewest differing fields, then same size).
 */
export function identifyEkTemplate(pub: TPMT_PUBLIC, templates: readonly EkTemplate[] = EK_TEMPLATES): TemplateComparison {
  const ranked = templates
    .map((t) => ({ t, n: templateDifferences(pub, t).length, type: t.public.type === pub.type ? 0 : 1, size: sizeMatch(pub, t) }))
    .sort((a, b) => a.type - b.type || a.n - b.n || b.size - a.size);
  const best = ranked[0];
  if (!best) throw new Error("no EK templates to compare with");
  return compareToTemplate(pub, best.t);
}

/** Prefer templates of the same key size/curve. */
function sizeMatch(pub: TPMT_PUBLIC, template: EkTemplate): number {
  const t = template.public.parameters;
  const p = pub.parameters;
  if (t.kind === "rsa" && p.kind === "rsa") return t.keyBits === p.keyBits ? 1 : 0;
  if (t.kind === "ecc" && p.kind === "ecc") return t.curveID === p.curveID ? 1 : 0;
  return 0;
}
