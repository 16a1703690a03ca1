package delta

import (
	"encoding/json"
	"fmt"
	"slices"
)

// Header-only changes (docs/format.md Part III §2): a safetensors file whose header bytes
// changed, but not their length nor any tensor's name, dtype, shape or place, is patched
// sparsely and carries its new header as the U8 tensor HeaderPrefix+path, listed in the
// optional "header_files". BuildPatchWith finds them (patch_build.go), apply writes the header with
// the changed elements (patch_apply.go).

// readHeaderFiles reads the optional "header_files" list and each listed file's new header
// (the U8 tensor HeaderPrefix+path: small, read now), and returns how many there are.
func (p *Patch) readHeaderFiles() (int, error) {
	js, ok := p.Header.Metadata[metaHeaderFiles]
	if !ok {
		return 0, nil
	}
	var names []string
	if err := json.Unmarshal([]byte(js), &names); err != nil {
		return 0, malformedPatch("%q is not a JSON list of strings: %v", metaHeaderFiles, err)
	}
	for _, name := range names {
		i := slices.IndexFunc(p.Plan.Files, func(f PatchFile) bool { return f.Name == name })
		if i < 0 || p.Plan.Files[i].Whole || p.Plan.Files[i].NewHeader != nil {
			return 0, malformedPatch("header file %q is not a file patched sparsely, or is listed twice", name)
		}
		t, ok := p.entries[HeaderPrefix+name]
		if !ok || t.DType != DTypeU8 || len(t.Shape) != 1 || t.Shape[0] < 8 || t.Shape[0] > 8+MaxHeaderLen {
			return 0, malformedPatch("header file %q has no 1-D U8 tensor %q of 8 to 8+%d bytes", name, HeaderPrefix+name, MaxHeaderLen)
		}
		b := make([]byte, t.Shape[0])
		if err := readFull(p.r, b, p.Header.DataStart()+t.Begin); err != nil {
			return 0, fmt.Errorf("patch: read new header of %q: %w", name, err)
		}
		p.Plan.Files[i].NewHeader = b
	}
	return len(names), nil
}
