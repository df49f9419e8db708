/** ConfigRenderer over fleetd's Talos worker config renderer (site settings are configuration). */
import { renderWorkerConfig } from "../../../talos/config/renderWorker.js";
import type { TalosSiteConfig } from "../../../talos/config/schemas.js";
import type { ConfigRenderer, NodeRecord } from "../deps.js";

export class TalosRenderer implements ConfigRenderer {
  constructor(
    private readonly site: TalosSiteConfig,
    private readonly tokenTtlMs: number,
    private readonly now: () => Date,
  ) {}

  async render(node: NodeRecord, input: Parameters<ConfigRenderer["render"]>[1]): ReturnType<ConfigRenderer["render"]> {
    if (node.role !== "worker") throw new Error(`node ${node.name} is a ${node.role}; fleetd renders worker configs only`);
    const r = renderWorkerConfig(this.site, {
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
