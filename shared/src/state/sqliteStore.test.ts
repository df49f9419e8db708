import { mkdtempSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { storeContract } from "./contract.js";
import { SqliteAttestationStore } from "./sqliteStore.js";

storeContract("sqlite (file)", async () => new SqliteAttestationStore(join(mkdtempSync(join(tmpdir(), "fleetd-store-")), "state.db")));
storeContract("sqlite (memory)", async () => new SqliteAttestationStore(":memory:"));
