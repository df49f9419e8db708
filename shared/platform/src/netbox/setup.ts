/**
 * `fleetd netbox setup`: makes NetBox ready for fleetd, idempotently — the choice sets and custom fields of
 * fields.ts, the signed webhook to netbox-script, event rules that fire only on relevant changes, and custom
 * links that open NetBox's own device edit form with the action prefilled (authentication stays in NetBox).
 */
import type { SiteConfig } from "../fleet/siteConfig.js";
import { listAll, must, type NetBox } from "./client.js";
import { CHOICE_SETS, CUSTOM_FIELDS, FLEETD_GROUP, DESIRED_ACTIONS, type CustomFieldDef } from "./fields.js";
import { syncKind, type Change } from "./sync.js";
import { CodedError } from "../fleet/codedError.js";

export const WEBHOOK_NAME = "fleetd";
export const EVENT_RULES = { desiredAction: "fleetd: desired action set", decommissioning: "fleetd: status decommissioning", spireNodes: "fleetd: SPIRE node list inputs" } as const;

/**
 * Conditions (NetBox 4.7 event-rule syntax). The first test reads the REST data (short-circuits when the
 * field was cleared, so fleetd's own clear never fires); `changed` compares the pre/post snapshots.
 */
export const DESIRED_ACTION_CONDITIONS = {
  and: [
    { attr: "custom_fields.desired_action", value: null, negate: true },
    { attr: "custom_fields.desired_action", op: "changed" },
  ],
};
export const DECOMMISSIONING_CONDITIONS = {
  and: [
    { attr: "status.value", value: "decommissioning" },
    { attr: "status", op: "changed" },
  ],
};

/**
 * What SPIRE's node list (spire-nodes.json) is rendered from: a device's status, name, runtime verdict and
 * current LDevID CN. Any change of one of them is delivered, so netbox-script republishes the list at once (a
 * decommissioning or quarantined node loses its SPIRE entry within seconds, not at the next reconcile pass).
 */
export const SPIRE_NODE_LIST_CONDITIONS = {
  or: [
    { attr: "status", op: "changed" },
    { attr: "name", op: "changed" },
    { attr: "custom_fields.runtime_verdict", op: "changed" },
    { attr: "custom_fields.ldevid_cn", op: "changed" },
  ],
};

export function customLinkUrl(action: string): string {
  return `{{ object.get_absolute_url() }}edit/?cf_desired_action=${action}&return_url={{ object.get_absolute_url() }}`;
}

export const SETUP_ERROR_CODES = ["setup-no-webhook-config", "setup-field-type-conflict"] as const;

export class SetupError extends CodedError<(typeof SETUP_ERROR_CODES)[number]> {
  override readonly name = "SetupError";
}

interface Obj {
  id: number;
  name: string;
}

function cfBody(d: CustomFieldDef, choiceSetId: number | undefined): Record<string, unknown> {
  return {
    name: d.name,
    label: d.label,
    type: d.type,
    object_types: [...(d.objectTypes ?? ["dcim.device"])],
    group_name: FLEETD_GROUP,
    description: d.description,
    required: false,
    filter_logic: "exact",
    ui_visible: d.uiVisible ?? (d.uiEditable === "yes" ? "always" : "if-set"),
    ui_editable: d.uiEditable,
    is_cloneable: false,
    weight: d.weight,
    ...(d.choiceSet ? { choice_set: choiceSetId ?? 0 } : {}),
  };
}

export async function netboxSetup(nb: NetBox, cfg: SiteConfig, dryRun: boolean): Promise<Change[]> {
  const { api } = nb;
  if (!cfg.webhook) throw new SetupError("setup-no-webhook-config", "the configuration has no webhook section (url, secret): netbox-script cannot be reached");
  const changes: Change[] = [];

  // 1. choice sets
  const cs = await syncKind<Obj, Record<string, unknown> & { name: string }>(
    {
      what: "extras.customfieldchoiceset",
      list: () => listAll(api.GET("/api/extras/custom-field-choice-sets/", { params: { query: { limit: 1000 } } }), "list choice sets", nb),
      keyOf: (e) => e.name,
      keyOfDesired: (b) => b.name,
      create: async (b) => (await must(api.POST("/api/extras/custom-field-choice-sets/", { body: b as never }), `create choice set ${b.name}`)).data,
      update: async (id, p) => (await must(api.PATCH("/api/extras/custom-field-choice-sets/{id}/", { params: { path: { id } }, body: p as never }), `update choice set ${id}`)).data,
    },
    Object.values(CHOICE_SETS).map((c) => ({ name: c.name, description: c.description, extra_choices: c.choices, order_alphabetically: false })),
    dryRun,
  );
  changes.push(...cs.changes);
  const choiceSetId = (key: keyof typeof CHOICE_SETS): number | undefined => cs.byKey.get(CHOICE_SETS[key].name)?.id;

  // 2. custom fields (a field of the same name but another type is an error: NetBox cannot change a type)
  const existingFields = await listAll(api.GET("/api/extras/custom-fields/", { params: { query: { limit: 1000 } } }), "list custom fields", nb);
  for (const d of CUSTOM_FIELDS) {
    const e = existingFields.find((f) => f.name === d.name);
    const t = e ? (e.type as unknown as { value?: string }).value ?? (e.type as unknown as string) : undefined;
    if (e && t !== d.type) throw new SetupError("setup-field-type-conflict", `custom field ${d.name} exists with type ${t}, fleetd needs ${d.type}: rename or delete it`);
  }
  const cf = await syncKind<Obj, Record<string, unknown> & { name: string }>(
    {
      what: "extras.customfield",
      list: async () => existingFields,
      keyOf: (e) => e.name,
      keyOfDesired: (b) => b.name,
      create: async (b) => (await must(api.POST("/api/extras/custom-fields/", { body: b as never }), `create custom field ${b.name}`)).data,
      update: async (id, p) => (await must(api.PATCH("/api/extras/custom-fields/{id}/", { params: { path: { id } }, body: p as never }), `update custom field ${id}`)).data,
      unordered: ["object_types"],
      createOnly: ["type"],
    },
    CUSTOM_FIELDS.map((d) => cfBody(d, d.choiceSet ? choiceSetId(d.choiceSet) : undefined)) as (Record<string, unknown> & { name: string })[],
    dryRun,
  );
  changes.push(...cf.changes);

  // 3. the webhook
  const wh = await syncKind<Obj, Record<string, unknown> & { name: string }>(
    {
      what: "extras.webhook",
      list: () => listAll(api.GET("/api/extras/webhooks/", { params: { query: { limit: 1000 } } }), "list webhooks", nb),
      keyOf: (e) => e.name,
      keyOfDesired: (b) => b.name,
      create: async (b) => (await must(api.POST("/api/extras/webhooks/", { body: b as never }), "create webhook")).data,
      update: async (id, p) => (await must(api.PATCH("/api/extras/webhooks/{id}/", { params: { path: { id } }, body: p as never }), "update webhook")).data,
    },
    [{
      name: WEBHOOK_NAME,
      description: "fleetd netbox-script: device actions and decommissioning (signed, X-Hook-Signature)",
      payload_url: cfg.webhook.url,
      http_method: "POST",
      http_content_type: "application/json",
      additional_headers: "",
      body_template: "",
      secret: cfg.webhook.secret,
      ssl_verification: true,
      timeout: 10,
    }],
    dryRun,
  );
  changes.push(...wh.changes);
  const webhookId = wh.byKey.get(WEBHOOK_NAME)?.id ?? 0;

  // 4. event rules
  const rule = (name: string, conditions: unknown, description: string): Record<string, unknown> & { name: string } => ({
    name,
    description,
    object_types: ["dcim.device"],
    event_types: ["object_updated"],
    enabled: true,
    conditions,
    action_type: "webhook",
    action_object_type: "extras.webhook",
    action_object_id: webhookId,
  });
  const er = await syncKind<Obj, Record<string, unknown> & { name: string }>(
    {
      what: "extras.eventrule",
      list: () => listAll(api.GET("/api/extras/event-rules/", { params: { query: { limit: 1000 } } }), "list event rules", nb),
      keyOf: (e) => e.name,
      keyOfDesired: (b) => b.name,
      create: async (b) => (await must(api.POST("/api/extras/event-rules/", { body: b as never }), `create event rule ${b.name}`)).data,
      update: async (id, p) => (await must(api.PATCH("/api/extras/event-rules/{id}/", { params: { path: { id } }, body: p as never }), `update event rule ${id}`)).data,
      unordered: ["object_types", "event_types"],
    },
    [
      rule(EVENT_RULES.desiredAction, DESIRED_ACTION_CONDITIONS, "desired_action was set on a device"),
      rule(EVENT_RULES.decommissioning, DECOMMISSIONING_CONDITIONS, "a device's status changed to decommissioning"),
      rule(EVENT_RULES.spireNodes, SPIRE_NODE_LIST_CONDITIONS, "a device's status, name, runtime verdict or LDevID CN changed (SPIRE node list)"),
    ],
    dryRun,
  );
  changes.push(...er.changes);

  // 5. custom links: NetBox's own edit form, action prefilled (two clicks; no state-changing GET in fleetd)
  const cl = await syncKind<Obj, Record<string, unknown> & { name: string }>(
    {
      what: "extras.customlink",
      list: () => listAll(api.GET("/api/extras/custom-links/", { params: { query: { limit: 1000 } } }), "list custom links", nb),
      keyOf: (e) => e.name,
      keyOfDesired: (b) => b.name,
      create: async (b) => (await must(api.POST("/api/extras/custom-links/", { body: b as never }), `create custom link ${b.name}`)).data,
      update: async (id, p) => (await must(api.PATCH("/api/extras/custom-links/{id}/", { params: { path: { id } }, body: p as never }), `update custom link ${id}`)).data,
      unordered: ["object_types"],
    },
    DESIRED_ACTIONS.map((a, i) => ({
      name: `fleetd: ${a}`,
      object_types: ["dcim.device"],
      enabled: true,
      link_text: a === "wipe" ? "Wipe…" : `${a[0]?.toUpperCase()}${a.slice(1)}…`,
      link_url: customLinkUrl(a),
      weight: 100 + i,
      group_name: "fleetd",
      button_class: a === "wipe" ? "red" : "blue",
      new_window: false,
    })),
    dryRun,
  );
  changes.push(...cl.changes);
  return changes;
}

/** The custom fields fleetd needs that NetBox lacks, each on its object type (inventory apply, the handler and the server refuse to start without them). */
export async function missingCustomFields(nb: NetBox, names: readonly string[]): Promise<string[]> {
  const fields = await listAll(nb.api.GET("/api/extras/custom-fields/", { params: { query: { limit: 1000 } } }), "list custom fields", nb);
  const on = (name: string) => CUSTOM_FIELDS.find((d) => d.name === name)?.objectTypes ?? ["dcim.device"];
  return names.filter((n) => !fields.some((f) => f.name === n && on(n).every((t) => (f.object_types ?? []).includes(t))));
}
