package delta

import (
	"encoding/hex"
	"fmt"
	"strconv"
)

// The metadata of a one-file patch (docs/format.md Part III §2): its format key, its
// strings and numbers, and each file's SHA-256 and xxh3-128 digests.

// checkPatchFormat checks the metadata that says which format a patch is in: a sparse weight
// patch of PatchVersion with raw (the default when absent) or leb128_gaps indices, and returns
// the index encoding.
func checkPatchFormat(meta map[string]string) (string, error) {
	format, ok := meta[metaFormat]
	if !ok {
		return "", malformedPatch("metadata has no %q: not a sparse weight patch", metaFormat)
	}
	if format != PatchFormat {
		return "", fmt.Errorf("%w: patch format %q (want %q)", ErrUnsupportedVersion, format, PatchFormat)
	}
	if v, err := metaString(meta, metaVersion); err != nil {
		return "", err
	} else if v != PatchVersion {
		return "", fmt.Errorf("%w: patch version %q (want %q)", ErrUnsupportedVersion, v, PatchVersion)
	}
	enc, ok := meta[metaEncoding]
	if !ok {
		enc = EncodingRaw
	}
	if enc != EncodingRaw && enc != EncodingGaps {
		return "", fmt.Errorf("%w: patch index encoding %q (want %q or %q)", ErrUnsupportedVersion, enc, EncodingRaw, EncodingGaps)
	}
	if v, err := metaString(meta, metaSparse); err != nil {
		return "", err
	} else if v != "True" {
		return "", malformedPatch("%q is %q, want \"True\"", metaSparse, v)
	}
	return enc, nil
}

// metaString is the metadata's value for key, which must be there.
func metaString(meta map[string]string, key string) (string, error) {
	v, ok := meta[key]
	if !ok {
		return "", malformedPatch("metadata has no %q", key)
	}
	return v, nil
}

func metaUint(meta map[string]string, key string) (uint64, error) {
	v, ok := meta[key]
	if !ok {
		return 0, malformedPatch("metadata has no %q", key)
	}
	n, err := strconv.ParseUint(v, 10, 64)
	if err != nil {
		return 0, malformedPatch("%q is %q, not a non-negative integer", key, v)
	}
	return n, nil
}

func parseSHA256(meta map[string]string, key string) (sum [32]byte, ok bool, err error) {
	ok, err = parseDigest(meta, key, sum[:], "SHA-256")
	return sum, ok, err
}

func parseXXH3(meta map[string]string, key string) (sum [16]byte, ok bool, err error) {
	ok, err = parseDigest(meta, key, sum[:], "xxh3-128")
	return sum, ok, err
}

// parseDigest decodes the lowercase hex digest under key into dst (whose length is the
// digest's); ok is false when the key is absent.
func parseDigest(meta map[string]string, key string, dst []byte, what string) (ok bool, err error) {
	v, ok := meta[key]
	if !ok {
		return false, nil
	}
	b, err := hex.DecodeString(v)
	if err != nil || len(b) != len(dst) || hex.EncodeToString(b) != v {
		return false, malformedPatch("%q is %q, not a lowercase hex %s", key, v, what)
	}
	copy(dst, b)
	return true, nil
}

// readDigests fills f's digests from the per-file keys. Each kind (SHA-256, xxh3-128) is
// recorded for the result, and for the base exactly when the file has one, or not at all; at
// least one kind is (a patch weightfs writes records both, a patch written into a mount may
// record xxh3-128 only: XXH3Only). A file patched by tensor has a base.
func (p *Patch) readDigests(f *PatchFile) error {
	meta := p.Header.Metadata
	name := f.Name
	base, hasBase, err := parseSHA256(meta, metaBasePrefix+name)
	if err != nil {
		return err
	}
	result, hasResult, err := parseSHA256(meta, metaResultPrefix+name)
	if err != nil {
		return err
	}
	baseX, hasBaseX, err := parseXXH3(meta, metaBaseXXH3+name)
	if err != nil {
		return err
	}
	resultX, hasResultX, err := parseXXH3(meta, metaResultXXH3+name)
	if err != nil {
		return err
	}
	hasAnyBase := hasBase || hasBaseX
	switch {
	case !hasResult && !hasResultX:
		return malformedPatch("file %q lacks its %q (or its %q)", name, metaResultPrefix+name, metaResultXXH3+name)
	case hasBase && !hasResult:
		return malformedPatch("file %q has %q without %q", name, metaBasePrefix+name, metaResultPrefix+name)
	case hasBaseX && !hasResultX:
		return malformedPatch("file %q has %q without %q", name, metaBaseXXH3+name, metaResultXXH3+name)
	case hasResult && hasAnyBase && !hasBase:
		return malformedPatch("file %q lacks its %q: its %q names a base (an xxh3 base hash without a SHA-256 one)",
			name, metaBasePrefix+name, metaBaseXXH3+name)
	case hasResultX && hasAnyBase && !hasBaseX:
		return malformedPatch("file %q has %q without %q", name, metaResultXXH3+name, metaBaseXXH3+name)
	case !hasAnyBase && !f.Whole:
		return malformedPatch("file %q lacks its %q or %q", name, metaBasePrefix+name, metaBaseXXH3+name)
	}
	f.BaseSHA256, f.ResultSHA256 = base, result
	f.BaseXXH3, f.ResultXXH3, f.HasXXH3 = baseX, resultX, hasResultX
	f.XXH3Only = !hasResult
	return nil
}
