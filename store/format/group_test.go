package format

import (
	"bytes"
	"errors"
	"slices"
	"testing"
)

// TestRefusalRecordBytes: the framing of a refusal record is checked as a part's, and an
// unknown format version is refused as unsupported.
func TestRefusalRecordBytes(t *testing.T) {
	rec := &RefusalRecord{Group: "g", Version: 3, Ranks: 2, Kind: RefusedConflict, Blamed: []int{0, 1}, Reason: "r", Writer: "w"}
	b, err := EncodeRefusal(rec)
	if err != nil {
		t.Fatal(err)
	}
	key := RecordKey{"g", 3, -1, RecordRefused}
	if got, err := DecodeRefusal(b, key); err != nil || got.Reason != "r" || !slices.Equal(got.Blamed, []int{0, 1}) {
		t.Fatalf("decode: %+v, %v", got, err)
	}
	if !bytes.HasPrefix(b, []byte("WFSR\x01\x00\x00\x00")) {
		t.Fatalf("head % x", b[:8])
	}
	v2 := bytes.Clone(b)
	v2[4] = 2
	if _, err := DecodeRefusal(v2, key); !errors.Is(err, ErrUnsupportedVersion) {
		t.Fatalf("format version 2: %v", err)
	}
	bad := bytes.Clone(b)
	bad[20] ^= 1
	if _, err := DecodeRefusal(bad, key); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("flipped byte: %v", err)
	}
	if _, err := DecodeRefusal(b, RecordKey{"g", 4, -1, RecordRefused}); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("under another version's name: %v", err)
	}
	if k, ok := ParseRecordName("g/v000003/refused"); !ok || k != key {
		t.Fatalf("parse refused name: %v %v", k, ok)
	}
}

// TestRecordNames: the names of a group's records parse back to what made them, and names
// that are not a record's (temporary files, another rank spelling, a bad group name, a
// version out of range) are not taken for one.
func TestRecordNames(t *testing.T) {
	for _, k := range []RecordKey{{"train", 2, 1, RecordPart}, {"a.b_c-9", 1000000, 4095, RecordOpen}, {"g", 3, -1, RecordRefused}} {
		name := RecordName(k.Group, k.Version, k.Rank, k.Kind)
		if got, ok := ParseRecordName(name); !ok || got != k {
			t.Errorf("%s parses to %+v, %v; want %+v", name, got, ok, k)
		}
	}
	if got := RecordName("train", 2, 1, RecordPart); got != "train/v000002/rank-1.part" {
		t.Errorf("RecordName = %s", got)
	}
	for _, name := range []string{"train/v000002/rank-01.part", "train/v000002/rank-1.tmp", "train/v000002/rank-4096.part",
		"train/v2/rank-1.part", "-x/v000002/rank-1.part", "train/v000002/rank-1.part/x", "train/v000000/refused",
		"train/v000002/rank--1.open", "train/v000002/rank-1"} {
		if k, ok := ParseRecordName(name); ok {
			t.Errorf("%s parses to %+v", name, k)
		}
	}
}

// FuzzDecodePart: no input makes the part record decoder panic, and whatever it accepts
// encodes back to a record it accepts again.
func FuzzDecodePart(f *testing.F) {
	key, _ := ParseRecordName("g/v000002/rank-1.part")
	rec := &PartRecord{Group: "g", Version: 2, Rank: 1, Ranks: 2, Base: 1, Writer: "h pid 1", Dirs: []ManifestDir{},
		Files:   []ManifestFile{{Path: "a.json", Mode: 0o644, Size: 2, Kind: KindBlob, ID: ID{1}, SHA256: ID{1}}},
		Objects: []PartObject{{ID: ID{1}, Size: 40}}}
	good, err := EncodePart(rec)
	if err != nil {
		f.Fatal(err)
	}
	f.Add(good)
	f.Add(good[:20])
	f.Add([]byte("WFSP"))
	f.Fuzz(func(t *testing.T, b []byte) {
		got, err := DecodePart(b, key)
		if err != nil {
			return
		}
		again, err := EncodePart(got)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := DecodePart(again, key); err != nil {
			t.Fatalf("an accepted record does not read back: %v", err)
		}
	})
}

// FuzzDecodeRefusal: no input makes the refusal record decoder panic, and whatever it
// accepts encodes back to a record it accepts again.
func FuzzDecodeRefusal(f *testing.F) {
	key := RecordKey{"g", 3, -1, RecordRefused}
	good, err := EncodeRefusal(&RefusalRecord{Group: "g", Version: 3, Ranks: 2, Kind: RefusedMismatch, Blamed: []int{1}, Reason: "r", Writer: "h pid 1"})
	if err != nil {
		f.Fatal(err)
	}
	f.Add(good)
	f.Add(good[:20])
	f.Add([]byte("WFSR"))
	f.Fuzz(func(t *testing.T, b []byte) {
		got, err := DecodeRefusal(b, key)
		if err != nil {
			return
		}
		again, err := EncodeRefusal(got)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := DecodeRefusal(again, key); err != nil {
			t.Fatalf("an accepted record does not read back: %v", err)
		}
	})
}

// FuzzParseRecordName: whatever name parses is the name its key makes.
func FuzzParseRecordName(f *testing.F) {
	for _, s := range []string{"g/v000002/rank-1.part", "g/v000003/refused", "g/v1000000/rank-4095.open", "g/v000002/rank-01.part"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, name string) {
		k, ok := ParseRecordName(name)
		if !ok {
			return
		}
		if back := RecordName(k.Group, k.Version, k.Rank, k.Kind); back != name {
			t.Fatalf("%q parses to %+v, which names %q", name, k, back)
		}
	})
}
