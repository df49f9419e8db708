/** ConfigRenderer over fleetd's Talos config renderers, by the node's role (site settings are configuration). */
import { renderNodeConfig } from "../../../talos/config/renderNode.js";
import type { TalosSiteConfig } from "../../../talos/config/schemas.js";
import type { Node } from "../../../fleet/node.js";
import type { ConfigRenderer } from "../../../fleet/ports.js";

export class TalosRenderer implements ConfigRenderer {
  constructor(
    private readonly site: TalosSiteConfig,
    private readonly tokenTtlMs: number,
    private readonly now: () => Date,
  ) {}

  async render(node: Node, input: Parameters<ConfigRenderer["render"]>[1]): ReturnType<ConfigRenderer["render"]> {
    // The role is trusted here: checkGates refused the session unless the apply account wrote it (a control
    // plane's config carries the cluster's CA keys).
    const r = renderNodeConfig(this.site, node.role, {
      name: node.name,
      link: { mac: input.mac },
      address: node.address,
      gateway: node.gateway,
      installDisk: node.installDisk,
      seed: {
        ldevidCertChainPem: input.chainPem,
        ldevidPublic: input.ldevidPublic,
        ldevidPrivate: input.ldevidPrivate,
        lakPublic: input.lakPublic,
        lakPrivate: input.lakPrivate,
        lakCertPem: input.lakCertPem,
      },
    });
    return {
      config: r.yaml,
      bootstrapTokenId: r.bootstrapToken.id,
      bootstrapToken: { id: r.bootstrapToken.id, secret: r.bootstrapToken.secret },
      tokenExpiresAt: new Date(this.now().getTime() + this.tokenTtlMs),
    };
  }
}
