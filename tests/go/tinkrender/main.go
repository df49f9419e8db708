// tinkrender renders a Tinkerbell Template's spec.data the way tink-controller v0.25.0 does
// (tink/controller/internal/workflow/template_funcs.go): Go text/template with missingkey=error, Sprig's
// hermetic text functions (so `replace`, `b64enc`, ... work and `env` does not), output capped at 256 KiB.
// The controller's own extra functions (formatPartition, netmaskToPrefixLength, toYaml, fromYaml) are not
// loaded; fleetd's Templates use none of them.
//
//	echo '{"template": "...", "data": {...}}' | go run .
//
// Prints the rendered text, or the error on stderr with exit code 1.
package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"text/template"

	"github.com/Masterminds/sprig/v3"
)

const maxOutput = 256 << 10

func main() {
	var in struct {
		Template string         `json:"template"`
		Data     map[string]any `json:"data"`
	}
	raw, err := io.ReadAll(io.LimitReader(os.Stdin, 4<<20))
	if err == nil {
		err = json.Unmarshal(raw, &in)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "tinkrender: bad input:", err)
		os.Exit(2)
	}
	t, err := template.New("template").Option("missingkey=error").Funcs(sprig.HermeticTxtFuncMap()).Parse(in.Template)
	if err != nil {
		fmt.Fprintln(os.Stderr, "tinkrender: parse:", err)
		os.Exit(1)
	}
	var out bytes.Buffer
	if err := t.Execute(&out, in.Data); err != nil {
		fmt.Fprintln(os.Stderr, "tinkrender: execute:", err)
		os.Exit(1)
	}
	if out.Len() > maxOutput {
		fmt.Fprintf(os.Stderr, "tinkrender: output is %d bytes, over the controller's %d\n", out.Len(), maxOutput)
		os.Exit(1)
	}
	os.Stdout.Write(out.Bytes())
}
