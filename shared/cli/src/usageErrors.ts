/**
 * The error classes that mean the operator's input is wrong (exit 2, `EXIT.usage`) when a `fleetd` command throws
 * one: the site configuration, the nodes file, a profile or authority directory, an evidence file, NetBox's
 * answer to a request the configuration or the file made it send (a wrong token, fields not set up, a 4xx), the
 * state file. Outages among them (NetBox 5xx or unreachable) are 5 (`exitCodeOf` looks at outages first); any
 * other error is unexpected: 4. Loaded by main.ts only when a command failed.
 */
import type { ErrorClass } from "@fleetd/platform/cmd";
import { ParseError } from "@fleetd/verify/codec";
import { CertificateError } from "@fleetd/verify/x509";
import { PcrFileError } from "@fleetd/verify/eventlog";
import { AuthorityConfigError, ProfileError } from "@fleetd/verify/policy";
import { ConfigError, NodesFileError } from "@fleetd/platform/fleet";
import { InventoryError } from "@fleetd/platform/inventory";
import { NetBoxError, SetupError } from "@fleetd/platform/netbox";
import { StateFileError } from "@fleetd/platform/state";

export const USAGE_ERRORS: readonly ErrorClass[] = [
  ConfigError,
  NodesFileError,
  InventoryError,
  SetupError,
  NetBoxError,
  ProfileError,
  AuthorityConfigError,
  PcrFileError,
  CertificateError,
  ParseError,
  StateFileError,
];
