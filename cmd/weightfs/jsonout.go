package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/weightfs/weightfs/gpu"
	"github.com/weightfs/weightfs/store"
)

// The --json outputs of log, diff, verify and gpus: one JSON object on stdout, the shapes
// below, documented in docs/cli.md. Numbers are exact (bytes, elements), never rounded or
// formatted; the text output's percentages and units are derived from the same numbers. Fields
// are only ever added, never renamed or removed.

// writeJSON writes v as indented JSON and a newline.
func writeJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

// logJSON is `weightfs log --json`.
type logJSON struct {
	Versions []versionJSON `json:"versions"`
	Total    struct {
		LogicalBytes int64 `json:"logical_bytes"`
		StoredBytes  int64 `json:"stored_bytes"`
		// DiskBytes is the size of every object file: the sum of the versions' disk_bytes
		// and of UnreferencedBytes.
		DiskBytes         int64 `json:"disk_bytes"`
		UnreferencedBytes int64 `json:"unreferenced_bytes"`
	} `json:"total"`
	// Damaged lists the versions whose manifest cannot be read (not in versions).
	Damaged []uint64 `json:"damaged"`
}

type versionJSON struct {
	Version         uint64    `json:"version"`
	Name            string    `json:"name"` // weight_v000043
	Created         time.Time `json:"created"`
	Files           int       `json:"files"`
	LogicalBytes    int64     `json:"logical_bytes"`
	StoredBytes     int64     `json:"stored_bytes"`
	Anchor          bool      `json:"anchor"`
	Previous        uint64    `json:"previous"` // 0 for an anchor
	ChangedElements int64     `json:"changed_elements"`
	TotalElements   int64     `json:"total_elements"`
	// DiskBytes are the stored bytes of the objects the version needs that no older version
	// needs (store.Usage): what it holds on disk now, unlike StoredBytes (what its commit
	// added).
	DiskBytes int64 `json:"disk_bytes"`
}

func newVersionJSON(v store.VersionInfo) versionJSON {
	return versionJSON{Version: v.Number, Name: versionName(v.Number), Created: v.Created.UTC(), Files: v.Files,
		LogicalBytes: v.LogicalBytes, StoredBytes: v.StoredBytes, Anchor: v.Anchor, Previous: v.PreviousNumber,
		ChangedElements: v.ChangedElems, TotalElements: v.TotalElems}
}

// diffJSON is `weightfs diff --json`.
type diffJSON struct {
	A       uint64       `json:"a"`
	B       uint64       `json:"b"`
	Tensors []tensorJSON `json:"tensors"`
	// Total counts the elements of tensors (rows of whole files count bytes and stay out).
	Total struct {
		Changed  int64 `json:"changed"`
		Elements int64 `json:"elements"`
	} `json:"total"`
}

type tensorJSON struct {
	File     string  `json:"file"`
	Tensor   string  `json:"tensor"` // empty for a file that is not safetensors
	DType    string  `json:"dtype"`
	Shape    []int64 `json:"shape"`
	Elements int64   `json:"elements"`
	Changed  int64   `json:"changed"`
	Status   string  `json:"status"` // empty, or what the text output's FRACTION column says instead
}

// verifyJSON is `weightfs verify --json`.
type verifyJSON struct {
	OK       bool         `json:"ok"`
	Versions int          `json:"versions"`
	Objects  int          `json:"objects"`
	Bytes    int64        `json:"bytes"`
	Damaged  []damageJSON `json:"damaged"`
	// Quarantined says where --repair moved each damaged version and object.
	Quarantined []string `json:"quarantined"`
	// Lost lists the versions whose lost manifest --repair recorded as gone (nothing to move).
	Lost []uint64 `json:"lost,omitempty"`
	// Unreadable are the findings verify could not check (an I/O error): never damage, and
	// --repair acts on none of them.
	Unreadable []damageJSON `json:"unreadable,omitempty"`
	// Mended and Reanchored name the objects --repair wrote again from intact copies.
	Mended     []string `json:"mended,omitempty"`
	Reanchored []string `json:"reanchored,omitempty"`
	// DryRun: --repair --dry-run changed nothing; the lists say what it would do.
	DryRun bool `json:"dry_run,omitempty"`
	// Caches are the node-local caches verify checked (or says why not): never store damage.
	Caches []cacheJSON `json:"caches"`
	// Notes say what verify could not tell (store.VerifyReport.Notes): never damage.
	Notes []string `json:"notes,omitempty"`
	// PackDamaged are the damaged packs, pack indexes and records of packs (format 3);
	// OrphanPacks the packs no intact index names (not damage: --repair indexes them).
	PackDamaged []packDamageJSON `json:"pack_damaged,omitempty"`
	OrphanPacks []string         `json:"orphan_packs,omitempty"`
	// PackIndexes, MendedPacks and KeptRecords say what --repair did to packs: the index
	// records it wrote from the packs' own tables, the packs whose table it wrote again, and
	// where it copied the damaged records it left in their packs.
	PackIndexes []string `json:"pack_indexes_written,omitempty"`
	MendedPacks []string `json:"mended_packs,omitempty"`
	KeptRecords []string `json:"kept_records,omitempty"`
}

// packDamageJSON is one damaged pack, pack index or record of a pack.
type packDamageJSON struct {
	Index  string `json:"index,omitempty"`
	Pack   string `json:"pack,omitempty"`
	Object string `json:"object,omitempty"`
	findingJSON
}

// findingJSON ends each finding of verify (damageJSON, packDamageJSON): embedded last, its
// fields are the object's last.
type findingJSON struct {
	Error string `json:"error"`
	Text  string `json:"text"` // the line the text output prints after DAMAGED
}

type cacheJSON struct {
	Name    string `json:"name"` // "materialized copy" or "render cache"
	Path    string `json:"path"`
	Checked bool   `json:"checked"`
	Damaged bool   `json:"damaged"` // found damaged, and dropped: rebuilt when next needed
	Note    string `json:"note"`
}

type damageJSON struct {
	Version uint64 `json:"version,omitempty"`
	Object  string `json:"object,omitempty"`
	Path    string `json:"path,omitempty"`
	findingJSON
}

func newDamageJSON(d store.Damage) damageJSON {
	j := damageJSON{Version: d.Version, Path: d.Path, findingJSON: findingJSON{Text: d.String()}}
	if d.Object != (store.ID{}) {
		j.Object = d.Object.String()
	}
	if d.Err != nil {
		j.Error = d.Err.Error()
	}
	return j
}

// gpusJSON is `weightfs gpus --json`.
type gpusJSON struct {
	// GPUSupport is false in a binary built without cgo (make static).
	GPUSupport bool       `json:"gpu_support"`
	NVML       nvmlJSON   `json:"nvml"`
	OpenCL     openCLJSON `json:"opencl"`
	Auto       struct {
		Backend string `json:"backend"` // "cpu" or "gpu"
		Device  string `json:"device"`
		Reason  string `json:"reason"`
	} `json:"auto"`
	GPUMode      string `json:"gpu_mode"`
	ChunkBytes   int    `json:"chunk_bytes"`
	MemoryNeeded uint64 `json:"memory_needed"`
}

// libraryJSON begins the report of a GPU library (nvmlJSON, openCLJSON): embedded first, its
// fields are the object's first.
type libraryJSON struct {
	Library string `json:"library"`
	Loaded  bool   `json:"loaded"`
	Reason  string `json:"reason"`
}

type nvmlJSON struct {
	libraryJSON
	DriverVersion string    `json:"driver_version"`
	NVMLVersion   string    `json:"nvml_version"`
	List          []gpuJSON `json:"gpus"`
	Problems      []string  `json:"problems"`
}

type gpuJSON struct {
	Index       int    `json:"index"`
	Name        string `json:"name"`
	UUID        string `json:"uuid"`
	PCI         string `json:"pci"`
	TotalMemory uint64 `json:"total_memory"`
	FreeMemory  uint64 `json:"free_memory"`
	// Utilization is null where the device does not report it.
	Utilization *utilizationJSON `json:"utilization"`
}

type utilizationJSON struct {
	GPU    uint32 `json:"gpu"`
	Memory uint32 `json:"memory"`
}

type openCLJSON struct {
	libraryJSON
	Devices  []deviceJSON `json:"devices"`
	Problems []string     `json:"problems"`
}

type deviceJSON struct {
	Platform      string `json:"platform"`
	Name          string `json:"name"`
	Vendor        string `json:"vendor"`
	Type          string `json:"type"`
	Version       string `json:"version"`
	DriverVersion string `json:"driver_version"`
	ComputeUnits  uint32 `json:"compute_units"`
	GlobalMemory  uint64 `json:"global_memory"`
	PCI           string `json:"pci"` // empty when the device does not say
}

func newGPUsJSON(r gpu.Report) gpusJSON {
	j := gpusJSON{GPUSupport: !errors.Is(r.Auto.Err, gpu.ErrNoGPUSupport), GPUMode: r.GPUMode,
		ChunkBytes: r.ChunkBytes, MemoryNeeded: r.MemoryNeeded}
	j.Auto.Backend, j.Auto.Device, j.Auto.Reason = r.Auto.Backend, r.Auto.Device, r.Auto.Reason
	n := r.NVML
	j.NVML = nvmlJSON{libraryJSON: libraryJSON{n.Library, n.Loaded, n.Reason}, DriverVersion: n.DriverVersion,
		NVMLVersion: n.NVMLVersion, List: []gpuJSON{}, Problems: nonNil(n.Problems)}
	for _, g := range n.GPUs {
		gj := gpuJSON{Index: g.Index, Name: g.Name, UUID: g.UUID, PCI: g.PCI.String(), TotalMemory: g.TotalMemory, FreeMemory: g.FreeMemory}
		if g.UtilizationKnown {
			gj.Utilization = &utilizationJSON{g.GPUUtilization, g.MemoryUtilization}
		}
		j.NVML.List = append(j.NVML.List, gj)
	}
	c := r.OpenCL
	j.OpenCL = openCLJSON{libraryJSON: libraryJSON{c.Library, c.Loaded, c.Reason}, Devices: []deviceJSON{}, Problems: nonNil(c.Problems)}
	for _, d := range c.Devices {
		dj := deviceJSON{Platform: d.Platform, Name: d.Name, Vendor: d.Vendor, Type: d.Type, Version: d.Version,
			DriverVersion: d.DriverVersion, ComputeUnits: d.ComputeUnits, GlobalMemory: d.GlobalMemory}
		if d.PCIKnown {
			dj.PCI = d.PCI.String()
		}
		j.OpenCL.Devices = append(j.OpenCL.Devices, dj)
	}
	return j
}

// nonNil makes an absent list an empty JSON array, not null: a consumer can always iterate.
func nonNil[T any](s []T) []T {
	if s == nil {
		return []T{}
	}
	return s
}

func versionName(v uint64) string { return fmt.Sprintf("weight_v%06d", v) }
