/**
 * The `kubernetes.management.tinkerbell` section of the site configuration: what fleetd's Templates run and
 * where the action reports. Every image must be pinned by digest (the design trusts the Template to deliver the
 * image whose digest it pins); the server's CA is pinned by the action.
 */
import { z } from "zod";

/** `registry/path[:tag]@sha256:<64 hex>`: a tag alone can be moved; a digest cannot. */
export const PINNED_IMAGE = /^[a-z0-9]+([._-][a-z0-9]+)*(:[0-9]+)?(\/[a-z0-9]+([._-][a-z0-9]+)*)*(:[A-Za-z0-9_][A-Za-z0-9_.-]{0,127})?@sha256:[0-9a-f]{64}$/;
export const PinnedImage = z.string().regex(PINNED_IMAGE, "must be an image reference pinned by digest (…@sha256:<64 lowercase hex>)");

/** An absolute host path usable in a bind mount (`HOST:CONTAINER[:ro]`): no ':' or ',', no '..' segment. */
const HostPath = z
  .string()
  .regex(/^\/[A-Za-z0-9._/+@-]{0,200}$/, "must be an absolute path (letters, digits, . _ / + @ -)")
  .refine((p) => !p.split("/").includes(".."), "must not contain '..'");

export const TinkerbellSiteConfig = z
  .strictObject({
    /** The attestation API the action calls (talos-config-server), and its CA (PEM file) the action pins. */
    server: z.strictObject({
      url: z.string().url().refine((u) => /^https?:\/\//.test(u), "must be an http(s) URL"),
      caFile: z.string().min(1).optional(),
      /** Plain http:// only in the lab (the action then needs FLEETD_ALLOW_HTTP=lab). */
      lab: z.boolean().default(false),
    }),
    images: z.strictObject({
      /** fleetd-tink-action (tink-action/Containerfile, built by `pnpm -s images`). */
      action: PinnedImage,
      /** An image with wipefs/blkdiscard/dd (e.g. debian:bookworm-slim). */
      wipe: PinnedImage,
      /** quay.io/tinkerbell/actions/image2disk. */
      image2disk: PinnedImage,
    }),
    /**
     * The Talos metal image image2disk streams (Image Factory URL whose schematic sets talos.config=…). Plain
     * http:// only with server.lab: true (the lab serves its OS image on loopback; install-talos then runs in the
     * host's network namespace, the only one where the host's loopback is reachable).
     */
    talosImageUrl: z.string().url().refine((u) => /^https?:\/\/.+\.raw\.(xz|zst|gz)$/.test(u), "must be an http(s) URL of a compressed raw image (.raw.xz, .raw.zst or .raw.gz)"),
    /**
     * The host directory the Template's task mounts at /worker in every action: the attest action leaves the
     * install code there (FLEETD_OUT=/worker/fleetd) for write-meta. HookOS: /worker (its tmpfs). A lab that runs
     * tink-agent on a shared host gives each machine its own directory. Bind-mount syntax: no ':' or ',' in it.
     */
    workerDir: HostPath.default("/worker"),
    /**
     * How the TPM actions (fleetd-attest, fleetd-clear-tpm) reach the machine's TPM: `device` — the kernel's TPM
     * resource manager, as in HookOS (the action container is privileged and sees /dev); `unix-socket` — the lab
     * transport: a swtpm on the host serving `--server type=unixio,path=<hostDir>/<socket>`, whose directory the
     * Template mounts into those two actions only, at /run/fleetd-tpm (FLEETD_TPM=unix:/run/fleetd-tpm/<socket>).
     * `unix-socket` needs server.lab: true (a production machine's TPM is a device).
     */
    tpm: z
      .discriminatedUnion("kind", [
        z.strictObject({ kind: z.literal("device"), path: HostPath.default("/dev/tpmrm0") }),
        z.strictObject({ kind: z.literal("unix-socket"), hostDir: HostPath, socket: z.string().regex(/^[A-Za-z0-9._-]{1,64}$/, "a file name (letters, digits, . _ -)").refine((s) => s !== "." && s !== "..", "a file name") }),
      ])
      .default({ kind: "device", path: "/dev/tpmrm0" }),
    /**
     * Lab only (server.lab): the machine the attest action describes is a lab machine whose sysfs/procfs (DMI
     * serial and UUID, NICs, default route, the TCG event log at sys/kernel/security/tpm0/…) is a directory on the
     * host, not the container's own view of the host (the lab's agents share one host). The Template mounts
     * `root` read-only into fleetd-attest at /run/fleetd-machine (FLEETD_ROOT); `bootInterface`
     * (FLEETD_BOOT_INTERFACE) is the host interface its LLDP is read on (the lab's switch port, a veth), `lldp`
     * off when the lab has no switch port (then the server's switch-port gate refuses unless the node waives it).
     */
    labMachine: z
      .strictObject({
        root: HostPath,
        bootInterface: z.string().regex(/^[A-Za-z0-9_.:@-]{1,15}$/, "must be a network interface name").optional(),
        lldp: z.enum(["lldpd", "off"]).default("lldpd"),
      })
      .optional(),
    /**
     * Rufio Machine `connection.insecureTLS` (required by the CRD). Rufio v0.25.0 does not read it and bmclib's
     * default HTTP client does not verify BMC certificates, so `false` protects nothing with that release; it is
     * written as the site says.
     */
    bmcInsecureTLS: z.boolean().default(true),
    /** Site-wide BMC provider settings written into every Machine of that type (Rufio providerOptions). */
    bmc: z
      .strictObject({
        redfish: z
          .strictObject({
            /** The Redfish port, when not 443. */
            port: z.number().int().min(1).max(65535).optional(),
            /** HTTP basic auth instead of a Redfish session. */
            useBasicAuth: z.boolean().default(false),
            /** The system to manage when one endpoint serves several. */
            systemName: z.string().min(1).max(200).optional(),
          })
          .prefault({}),
        amt: z.strictObject({ scheme: z.enum(["http", "https"]).default("http") }).prefault({}),
      })
      .prefault({}),
    /**
     * Retirement's wipe Workflow also clears the TPM's owner hierarchy (tink-action `clear-tpm`, TPM2_Clear with
     * the lockout hierarchy), so the old LDevID/LAK blobs die with it. Off unless the site allows it: it needs an
     * empty lockout authorization, and a TPM an OS took ownership of refuses (the action then fails the Workflow).
     */
    clearTpmOnRetire: z.boolean().default(false),
    /**
     * TPM 1.2 machines (intake and wipe only): where the attest action finds the TPM owner secret that
     * TPM_MakeIdentity and TPM_ActivateIdentity need — `well-known` (the TCG well-known secret, 20 zero bytes) or
     * `file:/path` inside the action (a Secret the site mounts; 40 hex digits or 20 bytes). The site owns its TPM 1.2
     * machines' owner secret (it took ownership when it enrolled them); fleetd never takes ownership and never logs
     * the secret. Unset: a TPM 1.2 machine's attest action stops with a configuration error, nothing else runs.
     */
    tpm12OwnerAuth: z.string().regex(/^(well-known|file:\/\S+)$/, 'must be "well-known" or file:/absolute/path').optional(),
    /**
     * How often a Workflow whose boot Job failed (or could not be set up) before any action ran is started again
     * (no action ran, so nothing was done to the disk; Tinkerbell v0.25.0 also fails boot Jobs by itself now and then).
     */
    bootRetries: z.number().int().min(0).max(10).default(3),
    /** Auto-enrollment of unknown agents into the intake Template (WorkflowRuleSet); off unless asked. */
    intake: z
      .strictObject({
        enabled: z.boolean().default(false),
        /** Quamina patterns over the agent's attributes, OR-ed; default: any agent with a MAC. */
        rules: z.array(z.string().min(2)).min(1).default(['{"networkInterfaces":{"mac":[{"wildcard":"*"}]}}']),
      })
      .prefault({}),
    /** Action timeouts (seconds); an action with 0 times out at once (tinkerbell.md §3). */
    timeouts: z
      .strictObject({
        attest: z.number().int().min(60).max(7200).default(1200),
        wipe: z.number().int().min(60).max(7200).default(900),
        install: z.number().int().min(60).max(7200).default(1800),
        writeMeta: z.number().int().min(30).max(3600).default(300),
        /** Retirement's whole-disk wipe (zeroing a disk that cannot discard takes hours). */
        wholeDiskWipe: z.number().int().min(60).max(86_400).default(18_000),
        clearTpm: z.number().int().min(30).max(3600).default(120),
        global: z.number().int().min(300).max(86_400).default(5400),
      })
      .prefault({}),
  })
  .superRefine((c, ctx) => {
    const https = c.server.url.startsWith("https://");
    if (https && !c.server.caFile) ctx.addIssue({ code: "custom", path: ["server", "caFile"], message: "required for an https server: the action pins this CA" });
    if (!https && !c.server.lab) ctx.addIssue({ code: "custom", path: ["server", "url"], message: "plain http:// only with server.lab: true (the install code crosses the network in clear)" });
    if (c.talosImageUrl.startsWith("http://") && !c.server.lab) ctx.addIssue({ code: "custom", path: ["talosImageUrl"], message: "plain http:// only with server.lab: true (the OS image must come over TLS)" });
    if (c.tpm.kind === "unix-socket" && !c.server.lab) ctx.addIssue({ code: "custom", path: ["tpm", "kind"], message: "unix-socket (a swtpm) only with server.lab: true" });
    if (c.labMachine && !c.server.lab) ctx.addIssue({ code: "custom", path: ["labMachine"], message: "only with server.lab: true (a production machine's claims are its own sysfs)" });
  });
export type TinkerbellSiteConfig = z.infer<typeof TinkerbellSiteConfig>;
