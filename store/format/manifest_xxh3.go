package format

import (
	"encoding/hex"
	"fmt"

	"github.com/zeebo/xxh3"
)

// XXH3 is the xxh3-128 (seed 0) of a tensor's raw bytes, in canonical (big-endian) byte
// order: the digest a manifest of format ManifestTensorDigests keeps beside each tensor's
// object id, so that a reader checks a rebuilt tensor at memory speed rather than by SHA-256
// (docs/format.md (Part I) §4). The zero value means none is recorded.
type XXH3 [16]byte

// XXH3Of returns the xxh3-128 of b.
func XXH3Of(b []byte) XXH3 { return XXH3(xxh3.Hash128(b).Bytes()) }

// XXH3FromSum is the digest of a finished xxh3.Hasher128's Sum128.
func XXH3FromSum(u xxh3.Uint128) XXH3 { return XXH3(u.Bytes()) }

// IsZero reports whether no digest is recorded.
func (x XXH3) IsZero() bool { return x == XXH3{} }

// String is the spelling of manifests: 32 lowercase hex digits.
func (x XXH3) String() string { return hex.EncodeToString(x[:]) }

// MarshalText spells x in hex (for JSON manifests).
func (x XXH3) MarshalText() ([]byte, error) {
	out := make([]byte, hex.EncodedLen(len(x)))
	hex.Encode(out, x[:])
	return out, nil
}

// UnmarshalText parses 32 lowercase hex digits; anything else is refused (a manifest holding
// it is refused as damaged).
func (x *XXH3) UnmarshalText(text []byte) error {
	if len(text) != 2*len(x) {
		return fmt.Errorf("xxh3 %q: want %d hex digits, got %d", text, 2*len(x), len(text))
	}
	var v XXH3
	for i := range v {
		hi, lo := lowerHex[text[2*i]], lowerHex[text[2*i+1]]
		if (hi|lo)&0xf0 != 0 {
			return fmt.Errorf("xxh3 %q: not lowercase hex", text)
		}
		v[i] = hi<<4 | lo
	}
	*x = v
	return nil
}
