/** Node retirement (NetBox status `decommissioning`): see retireNode.ts. */
export { retireNode, RETIREMENT_STEPS, type RetireOptions } from "./retireNode.js";
export { runRetirementPass, type RetirementReport, type RetirementStatus, type StepReport } from "./runner.js";
export { configMapProgress, progressConfigMapName, PROGRESS_LABELS } from "./progressConfigMap.js";
export { ProgressConflict, type ProgressRecord, type RetirementProgress } from "./progress.js";
export { netboxRetirementInventory, RETIRED_FACTS } from "./netboxOffline.js";
export { DEFAULT_OPTIONS, STEP_NAMES, type RetirementDeps, type RetirementInventory, type RetirementOptions, type RetirementPlatform, type Step, type StepName, type StepResult } from "./types.js";
