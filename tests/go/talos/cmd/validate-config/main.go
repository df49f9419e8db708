// validate-config loads a Talos machine config with pkg/machinery's configloader (strict decoding, as
// Talos does when it fetches talos.config=) and validates it in metal mode, as `talosctl validate
// --mode metal` does. It prints JSON {valid, errors, warnings} and exits 1 when the config is invalid.
//
// --type worker|controlplane adds the machine type's own requirements: the config must be of that type, and
// a controlplane config must carry every cluster secret a control plane runs on, checked by Talos's own
// secrets bundle code (secrets.NewBundleFromConfig + Bundle.Validate: cluster id and secret, trustd and
// bootstrap tokens, one encryption secret, the Talos API, Kubernetes, aggregator and etcd CAs with keys that
// parse, the service-account key). --secrets FILE also loads a `talosctl gen secrets` bundle with Talos's
// secrets.LoadBundle, validates it, and requires the controlplane config to carry exactly its secrets (the
// bootstrap token excepted: fleetd renders a per-node one). Errors name fields, never secret values.
//
// --write-files ROOT (the lab OS, tests/scripts/vm/labos-init.sh): once the config is valid, writes its
// machine.files under ROOT as Talos's machined does at boot for op "create" (cfg.Machine().Files(): the path must
// be under /var and must not exist yet; the parent directories are made; the content is written as it is, with
// the file's permissions). Other ops are refused (fleetd's configs carry only "create"). It prints each path and
// size in the JSON ("files"), never the content.
//
//	validate-config [--strict] [--dump] [--type worker|controlplane] [--secrets FILE] [--write-files ROOT] FILE
package main

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/hashicorp/go-multierror"
	"github.com/siderolabs/talos/pkg/machinery/config"
	"github.com/siderolabs/talos/pkg/machinery/config/configloader"
	"github.com/siderolabs/talos/pkg/machinery/config/encoder"
	"github.com/siderolabs/talos/pkg/machinery/config/generate/secrets"
	"github.com/siderolabs/talos/pkg/machinery/config/machine"
	"github.com/siderolabs/talos/pkg/machinery/config/validation"
)

// metal is Talos's runtime.ModeMetal as seen by validation (internal/app/machined/pkg/runtime/mode.go
// is internal, so the mode is declared here the same way).
type metal struct{}

func (metal) String() string        { return "metal" }
func (metal) RequiresInstall() bool { return true }
func (metal) InContainer() bool     { return false }

type result struct {
	Valid    bool     `json:"valid"`
	Stage    string   `json:"stage,omitempty"`
	Errors   []string `json:"errors"`
	Warnings []string `json:"warnings"`
	// Canonical is the config as Talos re-encodes what it loaded (with --dump): what Talos understood.
	Canonical string `json:"canonical,omitempty"`
	// Files are the machine.files written (--write-files): path, size and mode, never the content.
	Files []writtenFile `json:"files,omitempty"`
}

type writtenFile struct {
	Path  string `json:"path"`
	Bytes int    `json:"bytes"`
	Mode  string `json:"mode"`
}

// writeFiles writes cfg's machine.files (op create) under root, as Talos's machined does at boot.
func writeFiles(cfg config.Config, root string) ([]writtenFile, error) {
	out := []writtenFile{}

	files, err := cfg.Machine().Files()
	if err != nil {
		return out, err
	}

	for _, f := range files {
		p := filepath.Clean(f.Path())
		if f.Op() != "create" {
			return out, fmt.Errorf("machine.files %s: op %q (the lab writes op create only)", p, f.Op())
		}

		if !filepath.IsAbs(p) || !(p == "/var" || strings.HasPrefix(p, "/var/")) {
			return out, fmt.Errorf("machine.files %s: create is allowed under /var only", p)
		}

		dst := filepath.Join(root, p)
		if _, err := os.Lstat(dst); err == nil {
			return out, fmt.Errorf("machine.files %s: file must not exist", p)
		}

		if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
			return out, err
		}

		perm := f.Permissions().Perm()
		if err := os.WriteFile(dst, []byte(f.Content()), perm); err != nil {
			return out, err
		}

		if err := os.Chmod(dst, perm); err != nil { // WriteFile's mode is filtered by the umask
			return out, err
		}

		out = append(out, writtenFile{Path: p, Bytes: len(f.Content()), Mode: fmt.Sprintf("%04o", perm)})
	}

	return out, nil
}

func flatten(err error) []string {
	var merr *multierror.Error
	if errors.As(err, &merr) {
		out := []string{}
		for _, e := range merr.Errors {
			out = append(out, flatten(e)...)
		}

		return out
	}

	return []string{err.Error()}
}

// typeErrors are the requirements of the machine type asked for, beyond Validate's.
func typeErrors(cfg config.Config, want machine.Type, bundlePath string) []string {
	if got := cfg.Machine().Type(); got != want {
		return []string{fmt.Sprintf("machine type is %q, want %q (.machine.type)", got, want)}
	}

	if want != machine.TypeControlPlane {
		return nil
	}

	out := []string{}

	fromConfig := secrets.NewBundleFromConfig(secrets.NewClock(), cfg)
	configErr := fromConfig.Validate()

	for _, e := range flattenOrNone(configErr) {
		out = append(out, "controlplane secrets: "+e)
	}

	if bundlePath == "" {
		return out
	}

	bundle, err := secrets.LoadBundle(bundlePath)
	if err != nil {
		// the YAML decoder's message may quote the file: name the file only
		return append(out, "secrets bundle: Talos cannot load "+bundlePath)
	}

	if err := bundle.Validate(); err != nil {
		for _, e := range flatten(err) {
			out = append(out, "secrets bundle: "+e)
		}

		return out
	}

	if configErr != nil {
		return out // some of the config's secrets are missing: nothing to compare
	}

	return append(out, bundleMismatches(fromConfig, bundle)...)
}

// bundleMismatches names each secret of the config that is not the bundle's (the bootstrap token is per node).
func bundleMismatches(c, b *secrets.Bundle) []string {
	out := []string{}
	same := func(name, x, y string) {
		if x != y {
			out = append(out, "config and secrets bundle differ: "+name)
		}
	}
	pair := func(name string, x, y []byte) { same(name, string(x), string(y)) }

	same("cluster.id", c.Cluster.ID, b.Cluster.ID)
	same("cluster.secret", c.Cluster.Secret, b.Cluster.Secret)
	same("trustdinfo.token", c.TrustdInfo.Token, b.TrustdInfo.Token)
	same("secrets.secretboxencryptionsecret", c.Secrets.SecretboxEncryptionSecret, b.Secrets.SecretboxEncryptionSecret)
	same("secrets.aescbcencryptionsecret", c.Secrets.AESCBCEncryptionSecret, b.Secrets.AESCBCEncryptionSecret)
	pair("certs.os.crt", c.Certs.OS.Crt, b.Certs.OS.Crt)
	pair("certs.os.key", c.Certs.OS.Key, b.Certs.OS.Key)
	pair("certs.k8s.crt", c.Certs.K8s.Crt, b.Certs.K8s.Crt)
	pair("certs.k8s.key", c.Certs.K8s.Key, b.Certs.K8s.Key)
	pair("certs.k8saggregator.crt", c.Certs.K8sAggregator.Crt, b.Certs.K8sAggregator.Crt)
	pair("certs.k8saggregator.key", c.Certs.K8sAggregator.Key, b.Certs.K8sAggregator.Key)
	pair("certs.etcd.crt", c.Certs.Etcd.Crt, b.Certs.Etcd.Crt)
	pair("certs.etcd.key", c.Certs.Etcd.Key, b.Certs.Etcd.Key)
	pair("certs.k8sserviceaccount.key", c.Certs.K8sServiceAccount.Key, b.Certs.K8sServiceAccount.Key)

	return out
}

func flattenOrNone(err error) []string {
	if err == nil {
		return nil
	}

	return flatten(err)
}

func main() {
	strict := flag.Bool("strict", false, "treat warnings as errors")
	dump := flag.Bool("dump", false, "also print the loaded config as Talos re-encodes it")
	typeName := flag.String("type", "", "also check the requirements of this machine type: worker or controlplane")
	bundlePath := flag.String("secrets", "", "with --type controlplane: the secrets bundle the config must carry")
	writeRoot := flag.String("write-files", "", "once the config is valid, write its machine.files under this root as Talos does")
	flag.Parse()

	if flag.NArg() != 1 {
		fmt.Fprintln(os.Stderr, "usage: validate-config [--strict] [--dump] [--type worker|controlplane] [--secrets FILE] [--write-files ROOT] FILE")
		os.Exit(2)
	}

	var wantType machine.Type

	if *typeName != "" {
		t, err := machine.ParseType(*typeName)
		if err != nil || (t != machine.TypeWorker && t != machine.TypeControlPlane) {
			fmt.Fprintln(os.Stderr, "validate-config: --type must be worker or controlplane")
			os.Exit(2)
		}

		wantType = t
	}

	if *bundlePath != "" && wantType != machine.TypeControlPlane {
		fmt.Fprintln(os.Stderr, "validate-config: --secrets needs --type controlplane")
		os.Exit(2)
	}

	res := result{Errors: []string{}, Warnings: []string{}}

	b, err := os.ReadFile(flag.Arg(0))
	if err != nil {
		fmt.Fprintln(os.Stderr, "validate-config:", err)
		os.Exit(2)
	}

	cfg, err := configloader.NewFromBytes(b)
	if err != nil {
		res.Stage = "load"
		res.Errors = flatten(err)
	} else {
		opts := []validation.Option{validation.WithLocal()}
		if *strict {
			opts = append(opts, validation.WithStrict())
		}

		warnings, err := cfg.Validate(metal{}, opts...)
		if warnings != nil {
			res.Warnings = warnings
		}

		if err != nil {
			res.Stage = "validate"
			res.Errors = flatten(err)
		}

		if *typeName != "" {
			if errs := typeErrors(cfg, wantType, *bundlePath); len(errs) > 0 {
				if res.Stage == "" {
					res.Stage = "type"
				}

				res.Errors = append(res.Errors, errs...)
			}
		}

		if *dump {
			canonical, err := cfg.EncodeString(encoder.WithComments(encoder.CommentsDisabled))
			if err != nil {
				res.Errors = append(res.Errors, "encode: "+err.Error())
			}

			res.Canonical = canonical
		}

		if !cfg.CompleteForBoot() {
			res.Stage = "complete"
			res.Errors = append(res.Errors, "not complete for boot (no v1alpha1 document): Talos would treat it as partial")
		}
	}

	res.Valid = len(res.Errors) == 0

	if res.Valid && *writeRoot != "" {
		files, err := writeFiles(cfg, *writeRoot)
		res.Files = files

		if err != nil {
			res.Stage = "write-files"
			res.Errors = append(res.Errors, err.Error())
			res.Valid = false
		}
	}

	enc := json.NewEncoder(os.Stdout)
	enc.SetIndent("", "  ")
	_ = enc.Encode(res)

	if !res.Valid {
		os.Exit(1)
	}
}
