// advread reads the Talos ADV from the META partition of a disk image with Talos's own ADV code
// (github.com/siderolabs/go-adv, the library Talos's internal/pkg/meta was moved to) and prints JSON.
//
//	advread [--sector-size N] [--offset BYTES --size BYTES] IMAGE
//
// It reads the ADV as Talos does (talos.NewADV over the partition: copy 1, else copy 2) and also
// checks each 256 KiB copy on its own, so a test can tell that both copies are valid.
package main

import (
	"encoding/hex"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"unicode/utf8"

	"github.com/siderolabs/go-adv/adv/talos"

	"fleetd/tests/go/talos/internal/image"
)

type tagValue struct {
	Hex  string `json:"hex"`
	Text string `json:"text,omitempty"`
}

type copyStatus struct {
	Valid bool                `json:"valid"`
	Error string              `json:"error,omitempty"`
	Tags  map[string]tagValue `json:"tags,omitempty"`
}

type output struct {
	Meta    *image.Meta         `json:"meta"`
	Tags    map[string]tagValue `json:"tags"`
	ReadErr string              `json:"readError,omitempty"`
	Copies  []copyStatus        `json:"copies"`
}

func tags(a *talos.ADV) map[string]tagValue {
	out := map[string]tagValue{}

	for _, t := range a.ListTags() {
		v, _ := a.ReadTagBytes(t)
		tv := tagValue{Hex: hex.EncodeToString(v)}

		if utf8.Valid(v) {
			tv.Text = string(v)
		}

		out[fmt.Sprintf("0x%02x", t)] = tv
	}

	return out
}

func run() error {
	sectorSize := flag.Uint("sector-size", 0, "GPT sector size (0: try 512, then 4096)")
	offset := flag.Int64("offset", -1, "byte offset of META (skips the GPT)")
	size := flag.Int64("size", 1048576, "byte size of META when --offset is given")
	flag.Parse()

	if flag.NArg() != 1 {
		return fmt.Errorf("usage: advread [--sector-size N] [--offset BYTES] IMAGE")
	}

	f, err := os.Open(flag.Arg(0))
	if err != nil {
		return err
	}
	defer f.Close() //nolint:errcheck

	var meta *image.Meta
	if *offset >= 0 {
		meta = &image.Meta{Name: image.MetaLabel, Offset: *offset, Size: *size}
	} else if meta, err = image.FindMeta(f, *sectorSize); err != nil {
		return err
	}

	part := io.NewSectionReader(f, meta.Offset, meta.Size)
	out := output{Meta: meta, Tags: map[string]tagValue{}}

	// As Talos's meta.Reload does: a non-nil ADV with an error is "missing ADV", used as is.
	adv, err := talos.NewADV(part)
	if err != nil {
		out.ReadErr = err.Error()
	}

	if adv != nil {
		out.Tags = tags(adv)
	}

	for i := range 2 {
		buf := make([]byte, talos.Length)

		if _, err := f.ReadAt(buf, meta.Offset+int64(i)*talos.Length); err != nil {
			out.Copies = append(out.Copies, copyStatus{Error: err.Error()})

			continue
		}

		one := &talos.ADV{Tags: map[talos.Tag]talos.Value{}}
		if err := one.Unmarshal(buf); err != nil {
			out.Copies = append(out.Copies, copyStatus{Error: err.Error()})

			continue
		}

		out.Copies = append(out.Copies, copyStatus{Valid: true, Tags: tags(one)})
	}

	enc := json.NewEncoder(os.Stdout)
	enc.SetIndent("", "  ")

	return enc.Encode(out)
}

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "advread:", err)
		os.Exit(1)
	}
}
