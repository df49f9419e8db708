// mkimage creates a disk image file with a GPT written by go-blockdevice/v2 (the partitioning library
// Talos's installer and imager use), laid out like a Talos system disk: EFI, BIOS, BOOT, META, STATE.
//
//	mkimage [--sector-size 512|4096] [--size-mib 16] [--part NAME:KiB[:TYPE-GUID]]... IMAGE
//
// GUIDs are fixed so the same arguments give the same bytes.
package main

import (
	"crypto/sha256"
	"flag"
	"fmt"
	"os"
	"strconv"
	"strings"

	"github.com/google/uuid"
	"github.com/siderolabs/go-blockdevice/v2/partitioning/gpt"
)

const (
	typeEFI   = "C12A7328-F81F-11D2-BA4B-00A0C93EC93B"
	typeBIOS  = "21686148-6449-6E6F-744E-656564454649"
	typeLinux = "0FC63DAF-8483-4772-8E79-3D69D8477DE4" // LinuxFilesystemData, Talos's META type
)

type part struct {
	name     string
	sizeKiB  uint64
	typeGUID uuid.UUID
}

type parts []part

func (p *parts) String() string { return fmt.Sprint(*p) }

func (p *parts) Set(s string) error {
	fields := strings.Split(s, ":")
	if len(fields) < 2 || len(fields) > 3 {
		return fmt.Errorf("%q: want NAME:KiB[:TYPE-GUID]", s)
	}

	size, err := strconv.ParseUint(fields[1], 10, 64)
	if err != nil {
		return err
	}

	typ := uuid.MustParse(typeLinux)
	if len(fields) == 3 {
		if typ, err = uuid.Parse(fields[2]); err != nil {
			return err
		}
	}

	*p = append(*p, part{name: fields[0], sizeKiB: size, typeGUID: typ})

	return nil
}

func fixedUUID(seed string) uuid.UUID {
	h := sha256.Sum256([]byte("fleetd/mkimage/" + seed))

	u, _ := uuid.FromBytes(h[:16])
	u[6] = (u[6] & 0x0f) | 0x40 // version 4
	u[8] = (u[8] & 0x3f) | 0x80 // RFC 4122 variant

	return u
}

func run() error {
	sectorSize := flag.Uint("sector-size", 512, "logical sector size of the image")
	sizeMiB := flag.Uint64("size-mib", 16, "image size in MiB")

	var layout parts

	flag.Var(&layout, "part", "NAME:KiB[:TYPE-GUID], repeatable (default: a Talos system disk layout)")
	flag.Parse()

	if flag.NArg() != 1 {
		return fmt.Errorf("usage: mkimage [--sector-size N] [--size-mib N] [--part NAME:KiB[:TYPE]]... IMAGE")
	}

	if len(layout) == 0 {
		layout = parts{
			{"EFI", 2048, uuid.MustParse(typeEFI)},
			{"BIOS", 1024, uuid.MustParse(typeBIOS)},
			{"BOOT", 2048, uuid.MustParse(typeLinux)},
			{"META", 1024, uuid.MustParse(typeLinux)},
			{"STATE", 2048, uuid.MustParse(typeLinux)},
		}
	}

	f, err := os.OpenFile(flag.Arg(0), os.O_RDWR|os.O_CREATE|os.O_TRUNC, 0o644)
	if err != nil {
		return err
	}
	defer f.Close() //nolint:errcheck

	if err = f.Truncate(int64(*sizeMiB) << 20); err != nil {
		return err
	}

	dev, err := gpt.DeviceFromFile(f, gpt.WithFileSectorSize(*sectorSize))
	if err != nil {
		return err
	}

	table, err := gpt.New(dev, gpt.WithDiskGUID(fixedUUID("disk")))
	if err != nil {
		return err
	}

	for _, p := range layout {
		if _, _, err := table.AllocatePartition(p.sizeKiB*1024, p.name, p.typeGUID, gpt.WithUniqueGUID(fixedUUID(p.name))); err != nil {
			return fmt.Errorf("partition %s: %w", p.name, err)
		}
	}

	return table.Write()
}

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "mkimage:", err)
		os.Exit(1)
	}
}
