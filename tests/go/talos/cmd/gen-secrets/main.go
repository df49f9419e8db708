// gen-secrets writes a new Talos secrets bundle to FILE (mode 0600), as `talosctl gen secrets -o FILE` does:
// secrets.NewBundle at this machinery's current version contract, YAML-encoded. The tests use it to check that
// fleetd reads a bundle exactly as Talos writes it (Ed25519 Talos API CA, ECDSA Kubernetes CAs, secretbox).
//
//	gen-secrets FILE
package main

import (
	"fmt"
	"os"

	"go.yaml.in/yaml/v4"

	"github.com/siderolabs/talos/pkg/machinery/config"
	"github.com/siderolabs/talos/pkg/machinery/config/generate/secrets"
)

func main() {
	if len(os.Args) != 2 {
		fmt.Fprintln(os.Stderr, "usage: gen-secrets FILE")
		os.Exit(2)
	}

	bundle, err := secrets.NewBundle(secrets.NewClock(), config.TalosVersionCurrent)
	if err != nil {
		fmt.Fprintln(os.Stderr, "gen-secrets:", err)
		os.Exit(1)
	}

	f, err := os.OpenFile(os.Args[1], os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		fmt.Fprintln(os.Stderr, "gen-secrets:", err)
		os.Exit(1)
	}

	if err = yaml.NewEncoder(f).Encode(bundle); err == nil {
		err = f.Close()
	}

	if err != nil {
		fmt.Fprintln(os.Stderr, "gen-secrets:", err)
		os.Exit(1)
	}
}
