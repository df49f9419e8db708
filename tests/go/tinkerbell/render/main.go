// render renders a Tinkerbell Template's spec.data the way the tink controller does: Go text/template with
// missingkey=error over the render data, output capped at 256 KiB (tinkerbell.md §1.2). Sprig's functions are
// not loaded, so a Template that needs them fails here; fleetd's example uses none.
//
//	echo '{"template": "...", "data": {...}}' | go run ./render
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
		fmt.Fprintln(os.Stderr, "render: bad input:", err)
		os.Exit(2)
	}
	t, err := template.New("template").Option("missingkey=error").Parse(in.Template)
	if err != nil {
		fmt.Fprintln(os.Stderr, "render: parse:", err)
		os.Exit(1)
	}
	var out bytes.Buffer
	if err := t.Execute(&out, in.Data); err != nil {
		fmt.Fprintln(os.Stderr, "render: execute:", err)
		os.Exit(1)
	}
	if out.Len() > maxOutput {
		fmt.Fprintf(os.Stderr, "render: output is %d bytes, over the controller's %d\n", out.Len(), maxOutput)
		os.Exit(1)
	}
	os.Stdout.Write(out.Bytes())
}
