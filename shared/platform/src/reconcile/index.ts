/** The `reconcile` entry point: the one sync engine (list, key, diff, apply in batches, per-item outcomes). */
export * from "./engine.js";
