// advwrite sets META keys in a disk image the way Talos does (internal/pkg/meta: Reload, SetTag,
// Flush), with Talos's own ADV code (github.com/siderolabs/go-adv). Tests use it to make a starting
// state that Talos made, e.g. key 0x11 = "dual-boot" as the imager writes it.
//
//	advwrite [--sector-size N] IMAGE 0x11=dual-boot [0x0a=...]
package main

import (
	"flag"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"

	"github.com/siderolabs/go-adv/adv/syslinux"
	"github.com/siderolabs/go-adv/adv/talos"

	"fleetd/tests/go/talos/internal/image"
)

func run() error {
	sectorSize := flag.Uint("sector-size", 0, "GPT sector size (0: try 512, then 4096)")
	flag.Parse()

	if flag.NArg() < 2 {
		return fmt.Errorf("usage: advwrite [--sector-size N] IMAGE KEY=VALUE...")
	}

	f, err := os.OpenFile(flag.Arg(0), os.O_RDWR, 0)
	if err != nil {
		return err
	}
	defer f.Close() //nolint:errcheck

	meta, err := image.FindMeta(f, *sectorSize)
	if err != nil {
		return err
	}

	part := io.NewSectionReader(f, meta.Offset, meta.Size)

	// Reload: an ADV that fails to parse is treated as empty, exactly as Talos does.
	adv, err := talos.NewADV(part)
	if adv == nil {
		return err
	}

	legacy, err := syslinux.NewADV(part)
	if err != nil {
		return err
	}

	for _, kv := range flag.Args()[1:] {
		k, v, ok := strings.Cut(kv, "=")
		if !ok {
			return fmt.Errorf("%q: want KEY=VALUE", kv)
		}

		// the key syntax of `talosctl meta write` and the installer's --meta
		t, err := strconv.ParseUint(k, 0, 8)
		if err != nil {
			return fmt.Errorf("key %q: %w", k, err)
		}

		if !adv.SetTag(uint8(t), v) {
			return fmt.Errorf("key %s: META is full", k)
		}
	}

	// Flush
	serialized, err := adv.Bytes()
	if err != nil {
		return err
	}

	if _, err = f.WriteAt(serialized, meta.Offset); err != nil {
		return err
	}

	serialized, err = legacy.Bytes()
	if err != nil {
		return err
	}

	if _, err = f.WriteAt(serialized, meta.Offset+meta.Size-int64(len(serialized))); err != nil {
		return err
	}

	return f.Sync()
}

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "advwrite:", err)
		os.Exit(1)
	}
}
