package delta

import (
	"encoding/hex"
	"encoding/json"
	"fmt"
	"math"
	"strconv"
	"strings"
)

// The one-file sparse patch (byte layout in docs/format.md Part III §2): a valid
// safetensors file holding, for every changed tensor NAME, NAME.indices (I32, or I64 when the
// tensor has 2^31 or more elements; ascending flat element indices) and NAME.values (the
// tensor's dtype: the new values), plus every changed non-safetensors file carried whole as a
// U8 tensor named WholeFilePrefix+path. Metadata keys follow TRL's PatchMetadata.

// Metadata keys and values of a patch.
const (
	PatchFormat  = "sparse_weight_patch" // value of "format"
	PatchVersion = "1"                   // value of "version"

	// WholeFilePrefix starts the tensor name of a file carried whole. Model tensor names never
	// contain ':', and a collision with an emitted name is refused when the patch is planned.
	WholeFilePrefix = "__file__:"
	// HeaderPrefix starts the tensor name of the new header of a sparsely patched safetensors
	// file whose header bytes changed but not their length nor its tensors' places (a
	// header-only change: metadata edited, keys reordered). The U8 tensor holds the result's
	// bytes [0, 8+N): the length and the JSON header with its padding.
	HeaderPrefix = "__header__:"

	metaFormat        = "format"
	metaVersion       = "version"
	metaSparse        = "sparse"
	metaEncoding      = "encoding" // TRL's index encoding; ours is always "raw"
	metaModelVersion  = "model_version"
	metaBaseVersion   = "base_version"
	metaNumChanged    = "num_changed_params"
	metaTotalChanged  = "total_changed_elements"
	metaTotalElements = "total_elements"
	metaSparsity      = "sparsity"
	metaChangedParams = "changed_params"
	metaFiles         = "files"
	metaWholeFiles    = "whole_files"
	metaHeaderFiles   = "header_files"   // optional: files in "files" patched sparsely with a new header
	metaBasePrefix    = "base_sha256:"   // + file path: SHA-256 (hex) of the file before
	metaResultPrefix  = "result_sha256:" // + file path: SHA-256 (hex) of the file after
	metaBaseXXH3      = "base_xxh3:"     // + file path: xxh3-128 (hex, canonical big-endian) before
	metaResultXXH3    = "result_xxh3:"   // + file path: xxh3-128 (hex, canonical big-endian) after
	metaParamsPrefix  = "params:"        // + file path: JSON {name: {"dtype", "elements"}}

	indicesSuffix = ".indices"
	valuesSuffix  = ".values"
	i64Threshold  = 1 << 31 // tensors with this many elements or more get I64 indices
)

// PatchTensor is one changed tensor of a patch.
type PatchTensor struct {
	File     string // the safetensors file (path in the version) holding the tensor
	Name     string
	DType    DType
	Elements int64 // elements of the whole tensor
	Changed  int64 // changed elements carried by the patch, 1..Elements
	// ResultXXH3 is the xxh3-128 of the tensor's new raw bytes (the whole tensor, not only its
	// changes): the optional per-tensor digest of docs/format.md Part III §2, which lets an
	// engine that applies the patch to tensors in memory check each one. It is recorded for
	// every tensor of a file whose HasXXH3 is set, so a writer that sets HasXXH3 sets it too
	// (a size-only plan may leave it zero: the hex has one length whatever the value).
	ResultXXH3 [16]byte
	// Shape is the tensor's full shape, recorded when not nil (the optional shape extension:
	// TRL's format gives only the element count, engines that map checkpoint coordinates need
	// the shape). A scalar's shape is an empty, non-nil slice.
	Shape []int64
}

// IndexDType is the dtype of the tensor's .indices entry.
func (t PatchTensor) IndexDType() DType {
	if t.Elements >= i64Threshold {
		return DTypeI64
	}
	return DTypeI32
}

// PatchFile is one source file the patch changes.
type PatchFile struct {
	Name string // slash-separated path relative to the version root
	// BaseSHA256 is the file before the patch; the zero value means the file is new (only
	// possible for a file carried whole).
	BaseSHA256   [32]byte
	ResultSHA256 [32]byte
	// BaseXXH3 and ResultXXH3 are the xxh3-128 of the file before and after (seed 0, canonical
	// big-endian, as zeebo/xxh3's Uint128.Bytes and Python's xxh3_128_digest give it). They let
	// apply check a gigabyte file at memory speed, where SHA-256 costs 0.5 s or more. HasXXH3 is
	// false when the patch does not record them (patches written before they were added); a
	// new file (zero BaseSHA256) has no BaseXXH3 either.
	BaseXXH3   [16]byte
	ResultXXH3 [16]byte
	HasXXH3    bool
	// XXH3Only says the patch records the file's xxh3-128 digests and no SHA-256
	// (BaseSHA256 and ResultSHA256 are zero): what a trainer may write into a mount's
	// patches/ to save a SHA-256 pass over its checkpoint (docs/format.md Part III §2). The
	// store computes the file's SHA-256 itself; apply checks the xxh3-128. It needs HasXXH3.
	XXH3Only bool
	// Whole carries the file's new bytes as one U8 tensor (a non-safetensors file, or a
	// safetensors file whose header changed); WholeSize is their length.
	Whole     bool
	WholeSize int64
	// NewHeader, when set, is the result's header bytes [0, 8+N) of a file patched sparsely
	// whose header changed in place (same length, same tensors at the same offsets): the
	// apply writes them with the changed elements. Carried as the U8 tensor HeaderPrefix+Name
	// and listed in "header_files".
	NewHeader []byte
}

// New reports whether the file is new in the result: the patch names no base of it (no
// base_sha256, and no base_xxh3 where it records xxh3-128 only).
func (f PatchFile) New() bool {
	if f.XXH3Only {
		return f.BaseXXH3 == [16]byte{}
	}
	return f.BaseSHA256 == [32]byte{}
}

// PatchPlan describes a patch before its data is written.
type PatchPlan struct {
	ModelVersion  uint64
	BaseVersion   uint64
	TotalElements int64         // elements of every tensor of the result version, changed or not
	Files         []PatchFile   // changed files; whole files' data follows the tensors, in this order
	Tensors       []PatchTensor // changed tensors, in the order their data is written
}

// TotalChanged is the sum of the tensors' changed elements.
func (p *PatchPlan) TotalChanged() int64 {
	var n int64
	for _, t := range p.Tensors {
		n += t.Changed
	}
	return n
}

// file returns the plan entry of the file called name.
func (p *PatchPlan) file(name string) (PatchFile, bool) {
	for _, f := range p.Files {
		if f.Name == name {
			return f, true
		}
	}
	return PatchFile{}, false
}

// validate checks that the plan describes a patch that can be written and read back.
func (p *PatchPlan) validate() error {
	files := make(map[string]PatchFile, len(p.Files))
	for _, f := range p.Files {
		if f.Name == "" {
			return fmt.Errorf("patch plan: a file has an empty name")
		}
		if _, dup := files[f.Name]; dup {
			return fmt.Errorf("patch plan: file %q listed twice", f.Name)
		}
		if !f.Whole && f.New() {
			return fmt.Errorf("patch plan: file %q is patched sparsely but has no base hash", f.Name)
		}
		if f.XXH3Only && (!f.HasXXH3 || f.BaseSHA256 != [32]byte{} || f.ResultSHA256 != [32]byte{}) {
			return fmt.Errorf("patch plan: file %q records xxh3-128 only but has no xxh3-128 or a SHA-256", f.Name)
		}
		if f.Whole && f.WholeSize < 0 {
			return fmt.Errorf("patch plan: file %q has negative size %d", f.Name, f.WholeSize)
		}
		if f.NewHeader != nil && (f.Whole || len(f.NewHeader) < 8) {
			return fmt.Errorf("patch plan: file %q has a new header of %d bytes but is carried whole or the header is too short", f.Name, len(f.NewHeader))
		}
		files[f.Name] = f
	}
	perFile := make(map[string]int)
	var changed int64
	for _, t := range p.Tensors {
		f, ok := files[t.File]
		switch {
		case !ok:
			return fmt.Errorf("patch plan: tensor %q is in file %q, which the plan does not list", t.Name, t.File)
		case f.Whole:
			return fmt.Errorf("patch plan: tensor %q is in file %q, which is carried whole", t.Name, t.File)
		case t.DType.Size() == 0:
			return fmt.Errorf("patch plan: tensor %q has unknown dtype %q", t.Name, t.DType)
		case t.Changed < 1 || t.Changed > t.Elements:
			return fmt.Errorf("patch plan: tensor %q has %d changed of %d elements", t.Name, t.Changed, t.Elements)
		case t.Changed > math.MaxInt64/8:
			return fmt.Errorf("patch plan: tensor %q: %d changes overflow the data section", t.Name, t.Changed)
		}
		if t.Shape != nil {
			if err := checkShape(t.Shape, t.Elements); err != nil {
				return fmt.Errorf("patch plan: tensor %q: %w", t.Name, err)
			}
		}
		perFile[t.File]++
		changed += t.Changed
		if changed < 0 {
			return fmt.Errorf("patch plan: total changed elements overflow int64")
		}
	}
	for _, f := range p.Files {
		if !f.Whole && f.NewHeader == nil && perFile[f.Name] == 0 {
			return fmt.Errorf("patch plan: file %q is patched sparsely but has no changed tensor", f.Name)
		}
	}
	if p.TotalElements < changed {
		return fmt.Errorf("patch plan: total elements %d is below the %d changed elements", p.TotalElements, changed)
	}
	return nil
}

// layout returns the patch's safetensors entries, in data order: per tensor its indices and
// values, then the whole files. EncodeHeader refuses duplicate names, so a collision between
// an emitted name and another (say a tensor literally called "x.indices") is an error.
func (p *PatchPlan) layout() []Tensor {
	out := make([]Tensor, 0, 2*len(p.Tensors)+len(p.Files))
	for _, t := range p.Tensors {
		out = append(out,
			Tensor{Name: t.Name + indicesSuffix, DType: t.IndexDType(), Shape: []int64{t.Changed}},
			Tensor{Name: t.Name + valuesSuffix, DType: t.DType, Shape: []int64{t.Changed}})
	}
	for _, f := range p.Files {
		if f.Whole {
			out = append(out, Tensor{Name: WholeFilePrefix + f.Name, DType: DTypeU8, Shape: []int64{f.WholeSize}})
		}
	}
	for _, f := range p.Files {
		if f.NewHeader != nil {
			out = append(out, Tensor{Name: HeaderPrefix + f.Name, DType: DTypeU8, Shape: []int64{int64(len(f.NewHeader))}})
		}
	}
	return out
}

// patchParam is the per-tensor entry of the params:FILE metadata. XXH3 and Shape are the
// optional extension (patch_tensorinfo.go); readers that predate it ignore them.
type patchParam struct {
	DType    DType    `json:"dtype"`
	Elements int64    `json:"elements"`
	Shape    *[]int64 `json:"shape,omitempty"`
	XXH3     string   `json:"xxh3,omitempty"`
}

// metadata returns the __metadata__ of the patch.
func (p *PatchPlan) metadata() (map[string]string, error) {
	changed := p.TotalChanged()
	names := make([]string, 0, len(p.Tensors))
	params := make(map[string]map[string]patchParam)
	for _, t := range p.Tensors {
		names = append(names, t.Name)
		if params[t.File] == nil {
			params[t.File] = make(map[string]patchParam)
		}
		params[t.File][t.Name] = patchParam{DType: t.DType, Elements: t.Elements}
	}
	p.addTensorInfo(params)
	files := make([]string, 0, len(p.Files))
	whole, headers := []string{}, []string{}
	meta := map[string]string{
		metaFormat:        PatchFormat,
		metaVersion:       PatchVersion,
		metaSparse:        "True",
		metaEncoding:      "raw",
		metaModelVersion:  strconv.FormatUint(p.ModelVersion, 10),
		metaBaseVersion:   strconv.FormatUint(p.BaseVersion, 10),
		metaNumChanged:    strconv.Itoa(len(p.Tensors)),
		metaTotalChanged:  strconv.FormatInt(changed, 10),
		metaTotalElements: strconv.FormatInt(p.TotalElements, 10),
		metaSparsity:      pythonFloat(sparsity(changed, p.TotalElements)),
	}
	for _, f := range p.Files {
		files = append(files, f.Name)
		if !f.XXH3Only {
			if !f.New() {
				meta[metaBasePrefix+f.Name] = hex.EncodeToString(f.BaseSHA256[:])
			}
			meta[metaResultPrefix+f.Name] = hex.EncodeToString(f.ResultSHA256[:])
		}
		if f.HasXXH3 {
			if !f.New() {
				meta[metaBaseXXH3+f.Name] = hex.EncodeToString(f.BaseXXH3[:])
			}
			meta[metaResultXXH3+f.Name] = hex.EncodeToString(f.ResultXXH3[:])
		}
		if f.Whole {
			whole = append(whole, f.Name)
			continue
		}
		if f.NewHeader != nil {
			headers = append(headers, f.Name)
		}
		if params[f.Name] == nil {
			params[f.Name] = map[string]patchParam{} // a header-only change: "{}"
		}
		js, err := marshalJSON(params[f.Name])
		if err != nil {
			return nil, err
		}
		meta[metaParamsPrefix+f.Name] = js
	}
	lists := map[string][]string{metaChangedParams: names, metaFiles: files, metaWholeFiles: whole}
	if len(headers) > 0 { // absent otherwise: patches without header changes keep their bytes
		lists[metaHeaderFiles] = headers
	}
	for key, list := range lists {
		js, err := marshalJSON(list)
		if err != nil {
			return nil, err
		}
		meta[key] = js
	}
	return meta, nil
}

// sparsity is TRL's 1 - changed/max(total, 1).
func sparsity(changed, total int64) float64 {
	return 1 - float64(changed)/float64(max(total, 1))
}

// pythonFloat formats v as Python's str(float) does for values in [0, 1] ("1.0", "0.25",
// "1e-05"), so TRL-written and weightfs-written metadata look alike.
func pythonFloat(v float64) string {
	s := strconv.FormatFloat(v, 'g', -1, 64)
	if !strings.ContainsAny(s, ".eEnN") {
		s += ".0"
	}
	return s
}

// marshalJSON encodes v compactly without HTML escaping, refusing invalid UTF-8.
func marshalJSON(v any) (string, error) {
	var b strings.Builder
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return "", fmt.Errorf("encode patch metadata: %w", err)
	}
	return strings.TrimSuffix(b.String(), "\n"), nil
}

// EncodePatchHeader returns the safetensors header of the patch described by plan and the
// total size of the patch file in bytes.
func EncodePatchHeader(plan PatchPlan) (header []byte, size int64, err error) {
	header, entries, err := encodePatchHeader(plan)
	if err != nil {
		return nil, 0, err
	}
	size = int64(len(header))
	if n := len(entries); n > 0 {
		size += entries[n-1].End
	}
	return header, size, nil
}

// encodePatchHeader also returns the entries with their data offsets.
func encodePatchHeader(plan PatchPlan) ([]byte, []Tensor, error) {
	if err := plan.validate(); err != nil {
		return nil, nil, err
	}
	meta, err := plan.metadata()
	if err != nil {
		return nil, nil, err
	}
	entries := plan.layout()
	header, err := EncodeHeader(meta, entries)
	if err != nil {
		return nil, nil, fmt.Errorf("patch header: %w", err)
	}
	return header, entries, nil
}
