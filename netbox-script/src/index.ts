export { startHandler, type Handler, type HandlerOptions } from "./handler.js";
export { loadHandlerConfig, toHandlerConfig, type HandlerConfig } from "./config.js";
export type { RecordedIntent } from "./intents.js";
export type { DecisionEvent, StageMarks } from "./worker.js";
export type { RetireFn, RetireRequest, EffectOutcome } from "./effects.js";
