/**
 * The NetBox custom fields and choice sets fleetd owns on dcim.device, declared once: `netbox setup` creates
 * them, `inventory apply` writes the inventory ones, the handler and attestation read and write the rest.
 */
export const DESIRED_ACTIONS = ["provision", "attest", "wipe"] as const;
export type DesiredAction = (typeof DESIRED_ACTIONS)[number];

export interface ChoiceSetDef {
  name: string;
  description: string;
  choices: [value: string, label: string][];
}

export const CHOICE_SETS = {
  desiredAction: {
    name: "fleetd desired action",
    description: "Actions an operator can request from fleetd",
    choices: [["provision", "Provision"], ["attest", "Attest"], ["wipe", "Wipe"]],
  },
  verdict: {
    name: "fleetd attestation verdict",
    description: "Result of the last TPM attestation",
    choices: [["pass", "Pass"], ["fail", "Fail"]],
  },
  tpm: {
    name: "fleetd TPM version",
    description: "TPM family declared in the nodes file",
    choices: [["2.0", "TPM 2.0"], ["1.2", "TPM 1.2"], ["none", "No TPM"]],
  },
} satisfies Record<string, ChoiceSetDef>;

export interface CustomFieldDef {
  name: string;
  label: string;
  type: "text" | "longtext" | "datetime" | "json" | "select";
  choiceSet?: keyof typeof CHOICE_SETS;
  /** "yes": operators edit it in the UI; "no": shown, written only by fleetd (API). */
  uiEditable: "yes" | "no";
  description: string;
  weight: number;
  /** The objects it is on (default: dcim.device). */
  objectTypes?: readonly string[];
  /** Shown in the UI? (default: always when UI-editable, else if set). */
  uiVisible?: "always" | "if-set" | "hidden";
}

export const FLEETD_GROUP = "fleetd";

/** Every custom field fleetd uses, grouped under "fleetd"; on dcim.device unless it says otherwise. */
export const CUSTOM_FIELDS: readonly CustomFieldDef[] = [
  { name: "desired_action", label: "Desired action", type: "select", choiceSet: "desiredAction", uiEditable: "yes", weight: 100,
    description: "Set to request provision, attest or wipe; fleetd clears it when it takes the request" },
  { name: "attestation_verdict", label: "Attestation verdict", type: "select", choiceSet: "verdict", uiEditable: "no", weight: 110,
    description: "Verdict of the last attestation (written by fleetd)" },
  { name: "attested_at", label: "Last attestation", type: "datetime", uiEditable: "no", weight: 120, description: "Time of the last attestation" },
  { name: "ek_bindings", label: "EK bindings", type: "json", uiEditable: "no", weight: 130,
    description: "Approved EK bindings from the nodes file; accepted only when written by the inventory apply account" },
  { name: "ldevid_serial", label: "LDevID serial", type: "text", uiEditable: "no", weight: 140, description: "Serial number of the current LDevID certificate" },
  { name: "ldevid_expiry", label: "LDevID expiry", type: "datetime", uiEditable: "no", weight: 150, description: "Expiry of the current LDevID certificate" },
  { name: "ldevid_cn", label: "LDevID subject", type: "text", uiEditable: "no", weight: 155,
    description: "Subject CN of the current LDevID certificate (<node>.g<generation>): the SPIRE node entry's tpm_devid:subject:cn selector; trusted only when the change log shows the attestation account wrote it" },
  { name: "runtime_verdict", label: "Runtime verdict", type: "select", choiceSet: "verdict", uiEditable: "no", weight: 156,
    description: "Verdict of the last runtime attestation of the installed OS (LAK-signed quote judged by the node class's profile); fail on a worker means quarantined" },
  { name: "runtime_attested_at", label: "Last runtime attestation", type: "datetime", uiEditable: "no", weight: 157, description: "Time of the last runtime attestation" },
  { name: "runtime_passed_at", label: "Last runtime pass", type: "datetime", uiEditable: "no", weight: 158, description: "Time of the last passing runtime attestation" },
  { name: "attested_serial", label: "Attested serial", type: "text", uiEditable: "no", weight: 160, description: "Serial number the machine reported with TPM evidence" },
  { name: "boot_mac", label: "Proven boot MAC", type: "text", uiEditable: "no", weight: 165,
    description: "MAC of the interface the machine booted from, proven by passing TPM evidence; trusted only when the change log shows the attestation account wrote it" },
  { name: "attested_uuid", label: "Attested UUID", type: "text", uiEditable: "no", weight: 167,
    description: "SMBIOS UUID recorded at the machine's first passing attestation and required from then on; trusted only when the change log shows the attestation account wrote it" },
  { name: "attested_port", label: "Attested switch port", type: "text", uiEditable: "no", weight: 170, description: "Switch port (device/port) the machine reported via LLDP" },
  { name: "node_class", label: "Node class", type: "text", uiEditable: "no", weight: 200, description: "Policy profile (nodes file)" },
  { name: "tpm_version", label: "TPM", type: "select", choiceSet: "tpm", uiEditable: "no", weight: 210, description: "TPM family (nodes file)" },
  { name: "install_disk", label: "Install disk", type: "text", uiEditable: "no", weight: 220, description: "Talos install disk (nodes file)" },
  { name: "network_gateway", label: "Gateway", type: "text", uiEditable: "no", weight: 230, description: "IPv4 gateway (nodes file)" },
  { name: "bmc", label: "BMC", type: "json", uiEditable: "no", weight: 240, description: "BMC type, address and credentials reference (nodes file)" },
  { name: "switch_port_check", label: "Switch-port check", type: "text", uiEditable: "no", weight: 250,
    description: "required (default) or waived: whether secrets are released without a cable recorded in NetBox (nodes file)" },
  { name: "fleetd_key", label: "fleetd key", type: "text", uiEditable: "no", uiVisible: "hidden", weight: 900, objectTypes: ["extras.journalentry"],
    description: "fleetd's idempotency key for this entry: a write retried after an unknown outcome finds it and is not doubled" },
];

/** Custom fields `inventory apply` writes (from the nodes file). */
export const INVENTORY_FIELDS = ["node_class", "tpm_version", "install_disk", "network_gateway", "bmc", "ek_bindings", "switch_port_check"] as const;
