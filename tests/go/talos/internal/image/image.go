// Package image opens a disk image (or a block device) and locates the Talos META partition the way
// Talos does: github.com/siderolabs/go-blockdevice/v2's GPT reader (the library Talos itself uses),
// then the partition named META.
package image

import (
	"errors"
	"fmt"
	"os"

	"github.com/siderolabs/go-blockdevice/v2/partitioning/gpt"
)

// MetaLabel is constants.MetaPartitionLabel in Talos.
const MetaLabel = "META"

// Meta describes where META is on the image.
type Meta struct {
	SectorSize uint   `json:"sectorSize"`
	Index      int    `json:"index"` // 1-based partition number
	Name       string `json:"name"`
	TypeGUID   string `json:"typeGUID"`
	FirstLBA   uint64 `json:"firstLBA"`
	LastLBA    uint64 `json:"lastLBA"`
	Offset     int64  `json:"offset"`
	Size       int64  `json:"size"`
}

// FindMeta reads the GPT with sector size `sectorSize` (0: try 512 then 4096) and returns META.
func FindMeta(f *os.File, sectorSize uint) (*Meta, error) {
	sizes := []uint{512, 4096}
	if sectorSize != 0 {
		sizes = []uint{sectorSize}
	}

	var errs []error

	for _, ss := range sizes {
		dev, err := gpt.DeviceFromFile(f, gpt.WithFileSectorSize(ss))
		if err != nil {
			return nil, err
		}

		table, err := gpt.Read(dev)
		if err != nil {
			errs = append(errs, fmt.Errorf("sector size %d: %w", ss, err))

			continue
		}

		var found *Meta

		for i, p := range table.Partitions() {
			if p == nil || p.Name != MetaLabel {
				continue
			}

			if found != nil {
				return nil, fmt.Errorf("more than one partition named %s", MetaLabel)
			}

			found = &Meta{
				SectorSize: ss,
				Index:      i + 1,
				Name:       p.Name,
				TypeGUID:   p.TypeGUID.String(),
				FirstLBA:   p.FirstLBA,
				LastLBA:    p.LastLBA,
				Offset:     int64(p.FirstLBA) * int64(ss),
				Size:       int64(p.LastLBA-p.FirstLBA+1) * int64(ss),
			}
		}

		if found == nil {
			return nil, fmt.Errorf("sector size %d: no partition named %s", ss, MetaLabel)
		}

		return found, nil
	}

	return nil, errors.Join(errs...)
}
