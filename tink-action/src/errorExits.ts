/**
 * How the action's commands' errors map onto fleetd's one exit-code table (`EXIT`, @fleetd/platform/cmd): the
 * TPM's and the server connection's failures are 5 (unavailable), the action's configuration and local input
 * (environment, sysfs claims, event log) 2 (usage); anything else is unexpected, 4. `attest` reads its errors
 * itself with the same lists; cli.ts reads what a command let through.
 */
import type { ErrorClass, ErrorExits } from "@fleetd/platform/cmd";
import { ParseError } from "@fleetd/verify/codec";
import { TpmClientError, TpmError, TpmTransportError } from "@fleetd/platform/tpmclient";
import { Tpm12AuthError, Tpm12Error, TpmFamilyError } from "@fleetd/platform/tpm12client";
import { ClaimsError } from "./claims.js";
import { ActionConfigError } from "./config.js";
import { EventLogError } from "./eventLog.js";
import { ServerTransportError } from "./serverTransport.js";

/** TPM (device, response codes, family detection) and transport (network, TLS, a malformed answer) failures. */
export const TRANSPORT_ERRORS: readonly ErrorClass[] = [Tpm12Error, Tpm12AuthError, TpmFamilyError, TpmError, TpmTransportError, TpmClientError, ServerTransportError, ParseError];

export const ACTION_ERROR_EXITS: ErrorExits = { usage: [ActionConfigError, ClaimsError, EventLogError], unavailable: TRANSPORT_ERRORS };

export const isTransport = (e: unknown): boolean => TRANSPORT_ERRORS.some((c) => e instanceof c);
