package store

import (
	"bytes"
	"fmt"
	"io/fs"

	"github.com/zeebo/xxh3"

	"github.com/weightfs/weightfs/store/format"
)

// Manifest files, versions/vNNNNNN: their bytes, types, encoding, decoding and validation are
// package store/format's (format/manifest.go; docs/format.md (Part I) has them byte by byte).
// These names keep the rest of the package as it was.
const (
	manifestFormatVersion = format.ManifestFormatVersion
	manifestLongPaths     = format.ManifestLongPaths
	manifestIndexes       = format.ManifestIndexes
	manifestTensorDigests = format.ManifestTensorDigests
	maxManifestLen        = format.MaxManifestLen
)

// Bounds of what a version may hold (docs/format.md (Part I) §4; format.MaxVersion and
// format.MaxNameLen say why).
const (
	// MaxVersion is the largest version number.
	MaxVersion = format.MaxVersion
	// MaxNameLen is the longest element of a path, in bytes (the kernel's NAME_MAX).
	MaxNameLen = format.MaxNameLen
)

// File kinds of a manifest.
const (
	kindSafetensors = format.KindSafetensors
	kindBlob        = format.KindBlob
)

type (
	manifest       = format.Manifest
	manifestDir    = format.ManifestDir
	manifestFile   = format.ManifestFile
	manifestTensor = format.ManifestTensor
	manifestStats  = format.ManifestStats
	// xxh3Digest is a tensor's xxh3-128 as its manifest keeps it (format.XXH3).
	xxh3Digest = format.XXH3
)

// xxh3Sum is the digest of a finished xxh3 hasher's Sum128.
func xxh3Sum(u xxh3.Uint128) xxh3Digest { return format.XXH3FromSum(u) }

func checkVersionNumber(v uint64) error { return format.CheckVersionNumber(v) }

func encodeManifest(m *manifest) ([]byte, error) { return format.EncodeManifest(m) }

func decodeManifest(b []byte) (*manifest, error) { return format.DecodeManifest(b) }

func manifestBody(b []byte) ([]byte, error) { return format.ManifestBody(b) }

func checkPath(p string) error { return format.CheckPath(p) }

// encodeManifestChecked is encodeManifest for a seal: the bytes are read back with the
// reader's own checks (decodeManifest) and must encode to themselves again, so that a
// version is never sealed that readers would refuse (a manifest over maxManifestLen) or read
// otherwise than it was written. What is read back is usually m itself (sameManifest, a
// comparison of the values that never holds for values that encode otherwise), which then
// encodes to the same bytes without a second encoding; otherwise it is encoded again and
// compared byte by byte. It costs a decode of the manifest and a comparison: ~0.1% of a
// seal's work for a model of a few hundred tensors, ~1% for one of 3,000 (docs/benchmarks.md).
// limit is the length of JSON the seal accepts: maxManifestLen (ingester.manifestLimit, which a
// test lowers to reach the refusal with a small version).
func encodeManifestChecked(m *manifest, limit uint64) ([]byte, error) {
	data, err := encodeManifest(m)
	if err != nil {
		return nil, err
	}
	if n := uint64(len(data) - format.ManifestHeadLen - 4); n > limit {
		return nil, fmt.Errorf("version %d: its manifest would be %d bytes of JSON, more than the %d readers accept (too many files or tensors): %w",
			m.Version, n, limit, ErrManifestTooLarge)
	}
	back, err := decodeManifest(data)
	if err != nil {
		return nil, fmt.Errorf("version %d: its manifest would not read back: %w", m.Version, err)
	}
	if sameManifest(back, m) {
		return data, nil
	}
	again, err := encodeManifest(back)
	if err != nil || !bytes.Equal(again, data) {
		return nil, fmt.Errorf("version %d: its manifest reads back as another manifest (%v): %w", m.Version, err, ErrCorrupt)
	}
	return data, nil
}

// fileMode turns stored permission bits into a FileMode.
func fileMode(bits uint32) fs.FileMode { return fs.FileMode(bits) & fs.ModePerm }

// xxh3Of is the xxh3-128 of b.
func xxh3Of(b []byte) xxh3Digest { return format.XXH3Of(b) }
