// validate-config loads a Talos machine config with pkg/machinery's configloader (strict decoding, as
// Talos does when it fetches talos.config=) and validates it in metal mode, as `talosctl validate
// --mode metal` does. It prints JSON {valid, errors, warnings} and exits 1 when the config is invalid.
//
//	validate-config [--strict] [--dump] FILE
package main

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"

	"github.com/hashicorp/go-multierror"
	"github.com/siderolabs/talos/pkg/machinery/config/configloader"
	"github.com/siderolabs/talos/pkg/machinery/config/encoder"
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

func main() {
	strict := flag.Bool("strict", false, "treat warnings as errors")
	dump := flag.Bool("dump", false, "also print the loaded config as Talos re-encodes it")
	flag.Parse()

	if flag.NArg() != 1 {
		fmt.Fprintln(os.Stderr, "usage: validate-config [--strict] [--dump] FILE")
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

	enc := json.NewEncoder(os.Stdout)
	enc.SetIndent("", "  ")
	_ = enc.Encode(res)

	if !res.Valid {
		os.Exit(1)
	}
}
