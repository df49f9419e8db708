/**
 * The subset of SPIRE's server API fleetd speaks, declared once as a protobuf.js JSON namespace (loaded with
 * @grpc/proto-loader's `fromJSON`; no .proto file ships). Written from the field numbers of spiffe/spire-api-sdk
 * (`proto/spire/api/types/{spiffeid,selector,status,entry,agent}.proto`, `proto/spire/api/server/entry/v1/entry.proto`,
 * `proto/spire/api/server/agent/v1/agent.proto`; compatible with SPIRE 1.13) and of gRPC's health protocol
 * (`grpc.health.v1`). On the wire only package, service and method names and field numbers and types count;
 * fields left out are skipped when decoding and never sent.
 *
 * Left out on purpose: `Entry.additional_attributes` (16, proto3 `optional`) and its mask bit. Because of it
 * every BatchUpdateEntry carries an explicit `input_mask`: with none, SPIRE overwrites every field, and a field
 * this subset does not know would be zeroed.
 */
import * as protoLoader from "@grpc/proto-loader";

type Namespace = Parameters<typeof protoLoader.fromJSON>[0];
type Fields = Record<string, { type: string; id: number; rule?: "repeated" }>;

const msg = (fields: Fields, nested?: Namespace["nested"]) => ({ fields, ...(nested ? { nested } : {}) });
const repeated = (type: string, id: number) => ({ type, id, rule: "repeated" as const });
/** A unary RPC (or a server stream); `comment` only satisfies protobuf.js's IMethod typing. */
const rpc = (requestType: string, responseType: string, responseStream = false) => ({ requestType, responseType, ...(responseStream ? { responseStream } : {}), comment: "" });

/** The fields of `types.Entry` this subset knows (entry.proto), by name and number. */
const ENTRY_FIELDS: Fields = {
  id: { type: "string", id: 1 },
  spiffe_id: { type: "SPIFFEID", id: 2 },
  parent_id: { type: "SPIFFEID", id: 3 },
  selectors: repeated("Selector", 4),
  x509_svid_ttl: { type: "int32", id: 5 },
  federates_with: repeated("string", 6),
  admin: { type: "bool", id: 7 },
  downstream: { type: "bool", id: 8 },
  expires_at: { type: "int64", id: 9 },
  dns_names: repeated("string", 10),
  revision_number: { type: "int64", id: 11 },
  store_svid: { type: "bool", id: 12 },
  jwt_svid_ttl: { type: "int32", id: 13 },
  hint: { type: "string", id: 14 },
  created_at: { type: "int64", id: 15 },
};

/** `types.EntryMask`: a bool per Entry field, same numbers, no `id`. */
const ENTRY_MASK_FIELDS: Fields = Object.fromEntries(
  Object.entries(ENTRY_FIELDS)
    .filter(([name]) => name !== "id")
    .map(([name, f]) => [name, { type: "bool", id: f.id }]),
);

/** Filter of ListEntries and CountEntries (entry.proto; by_federates_with = 4 left out). */
const ENTRY_FILTER = msg({
  by_spiffe_id: { type: "spire.api.types.SPIFFEID", id: 1 },
  by_parent_id: { type: "spire.api.types.SPIFFEID", id: 2 },
  by_selectors: { type: "spire.api.types.SelectorMatch", id: 3 },
  by_hint: { type: "google.protobuf.StringValue", id: 5 },
  by_downstream: { type: "google.protobuf.BoolValue", id: 6 },
});

/** Filter of ListAgents and CountAgents (agent.proto). */
const AGENT_FILTER = msg({
  by_attestation_type: { type: "string", id: 1 },
  by_selector_match: { type: "spire.api.types.SelectorMatch", id: 2 },
  by_banned: { type: "google.protobuf.BoolValue", id: 3 },
  by_can_reattest: { type: "google.protobuf.BoolValue", id: 4 },
  by_expires_before: { type: "string", id: 5 },
});

const batchResult = (second: { type: string; id: number }, name: string) => msg({ results: repeated("Result", 1) }, { Result: msg({ status: { type: "spire.api.types.Status", id: 1 }, [name]: second }) });

export const SPIRE_SERVER_API: Namespace = {
  nested: {
    google: {
      nested: {
        protobuf: {
          nested: {
            StringValue: msg({ value: { type: "string", id: 1 } }),
            BoolValue: msg({ value: { type: "bool", id: 1 } }),
            Empty: msg({}),
          },
        },
      },
    },
    grpc: {
      nested: {
        health: {
          nested: {
            v1: {
              nested: {
                HealthCheckRequest: msg({ service: { type: "string", id: 1 } }),
                HealthCheckResponse: msg({ status: { type: "ServingStatus", id: 1 } }, { ServingStatus: { values: { UNKNOWN: 0, SERVING: 1, NOT_SERVING: 2, SERVICE_UNKNOWN: 3 } } }),
                Health: { methods: { Check: rpc("HealthCheckRequest", "HealthCheckResponse") } },
              },
            },
          },
        },
      },
    },
    spire: {
      nested: {
        api: {
          nested: {
            types: {
              nested: {
                SPIFFEID: msg({ trust_domain: { type: "string", id: 1 }, path: { type: "string", id: 2 } }),
                Selector: msg({ type: { type: "string", id: 1 }, value: { type: "string", id: 2 } }),
                SelectorMatch: msg(
                  { selectors: repeated("Selector", 1), match: { type: "MatchBehavior", id: 2 } },
                  { MatchBehavior: { values: { MATCH_EXACT: 0, MATCH_SUBSET: 1, MATCH_SUPERSET: 2, MATCH_ANY: 3 } } },
                ),
                Status: msg({ code: { type: "int32", id: 1 }, message: { type: "string", id: 2 } }),
                Entry: msg(ENTRY_FIELDS),
                EntryMask: msg(ENTRY_MASK_FIELDS),
                Agent: msg({
                  id: { type: "SPIFFEID", id: 1 },
                  attestation_type: { type: "string", id: 2 },
                  x509svid_serial_number: { type: "string", id: 3 },
                  x509svid_expires_at: { type: "int64", id: 4 },
                  selectors: repeated("Selector", 5),
                  banned: { type: "bool", id: 6 },
                  can_reattest: { type: "bool", id: 7 },
                  agent_version: { type: "string", id: 8 },
                }),
              },
            },
            server: {
              nested: {
                entry: {
                  nested: {
                    v1: {
                      nested: {
                        CountEntriesRequest: msg({ filter: { type: "Filter", id: 1 } }, { Filter: ENTRY_FILTER }),
                        CountEntriesResponse: msg({ count: { type: "int32", id: 1 } }),
                        ListEntriesRequest: msg(
                          {
                            filter: { type: "Filter", id: 1 },
                            output_mask: { type: "spire.api.types.EntryMask", id: 2 },
                            page_size: { type: "int32", id: 3 },
                            page_token: { type: "string", id: 4 },
                          },
                          { Filter: ENTRY_FILTER },
                        ),
                        ListEntriesResponse: msg({ entries: repeated("spire.api.types.Entry", 1), next_page_token: { type: "string", id: 2 } }),
                        BatchCreateEntryRequest: msg({ entries: repeated("spire.api.types.Entry", 1), output_mask: { type: "spire.api.types.EntryMask", id: 2 } }),
                        BatchCreateEntryResponse: batchResult({ type: "spire.api.types.Entry", id: 2 }, "entry"),
                        BatchUpdateEntryRequest: msg({
                          entries: repeated("spire.api.types.Entry", 1),
                          input_mask: { type: "spire.api.types.EntryMask", id: 2 },
                          output_mask: { type: "spire.api.types.EntryMask", id: 3 },
                        }),
                        BatchUpdateEntryResponse: batchResult({ type: "spire.api.types.Entry", id: 2 }, "entry"),
                        BatchDeleteEntryRequest: msg({ ids: repeated("string", 1) }),
                        BatchDeleteEntryResponse: batchResult({ type: "string", id: 2 }, "id"),
                        Entry: {
                          methods: {
                            CountEntries: rpc("CountEntriesRequest", "CountEntriesResponse"),
                            ListEntries: rpc("ListEntriesRequest", "ListEntriesResponse"),
                            BatchCreateEntry: rpc("BatchCreateEntryRequest", "BatchCreateEntryResponse"),
                            BatchUpdateEntry: rpc("BatchUpdateEntryRequest", "BatchUpdateEntryResponse"),
                            BatchDeleteEntry: rpc("BatchDeleteEntryRequest", "BatchDeleteEntryResponse"),
                          },
                        },
                      },
                    },
                  },
                },
                agent: {
                  nested: {
                    v1: {
                      nested: {
                        ListAgentsRequest: msg(
                          { filter: { type: "Filter", id: 1 }, page_size: { type: "int32", id: 3 }, page_token: { type: "string", id: 4 } },
                          { Filter: AGENT_FILTER },
                        ),
                        ListAgentsResponse: msg({ agents: repeated("spire.api.types.Agent", 1), next_page_token: { type: "string", id: 2 } }),
                        BanAgentRequest: msg({ id: { type: "spire.api.types.SPIFFEID", id: 1 } }),
                        DeleteAgentRequest: msg({ id: { type: "spire.api.types.SPIFFEID", id: 1 } }),
                        Agent: {
                          methods: {
                            ListAgents: rpc("ListAgentsRequest", "ListAgentsResponse"),
                            BanAgent: rpc("BanAgentRequest", "google.protobuf.Empty"),
                            DeleteAgent: rpc("DeleteAgentRequest", "google.protobuf.Empty"),
                          },
                        },
                      },
                    },
                  },
                },
              },
            },
          },
        },
      },
    },
  },
};

/**
 * The SPIFFE Workload API's X.509 part (spiffe/go-spiffe `proto/spiffe/workload/workload.proto`: no package, service
 * `SpiffeWorkloadAPI`). Every call carries the metadata `workload.spiffe.io: true`.
 */
export const WORKLOAD_API: Namespace = {
  nested: {
    X509SVIDRequest: msg({}),
    X509SVIDResponse: msg({ svids: repeated("X509SVID", 1) }),
    X509SVID: msg({
      spiffe_id: { type: "string", id: 1 },
      x509_svid: { type: "bytes", id: 2 },
      x509_svid_key: { type: "bytes", id: 3 },
      bundle: { type: "bytes", id: 4 },
      hint: { type: "string", id: 5 },
    }),
    SpiffeWorkloadAPI: { methods: { FetchX509SVID: rpc("X509SVIDRequest", "X509SVIDResponse", true) } },
  },
};

/**
 * How decoded messages look: field names as in the .proto (snake_case), int64 as decimal strings, enums by
 * name, bytes as Buffers, and every field present (absent messages as null, absent lists as []), so the zod
 * schemas of `wire.ts` see one shape.
 */
export const LOADER_OPTIONS: protoLoader.Options = { keepCase: true, longs: String, enums: String, bytes: Buffer, defaults: true, arrays: true, oneofs: true };

let server: protoLoader.PackageDefinition | undefined;
let workload: protoLoader.PackageDefinition | undefined;

export function serverApi(): protoLoader.PackageDefinition {
  return (server ??= protoLoader.fromJSON(SPIRE_SERVER_API, LOADER_OPTIONS));
}

export function workloadApi(): protoLoader.PackageDefinition {
  return (workload ??= protoLoader.fromJSON(WORKLOAD_API, LOADER_OPTIONS));
}
