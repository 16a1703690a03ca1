package format

import (
	"encoding/hex"
	"encoding/json"
	"strconv"
)

// The manifest's JSON is written without reflection, field by field in the order and with
// the omissions of the struct tags of Manifest and its parts, which encoding/json follows:
// the bytes are encoding/json's (TestStoredBytesPinned pins them; TestManifestCodecsAgree
// and FuzzManifestDecoders compare the two encoders). A string that holds a byte encoding/json
// escapes (a control character, '"', '\\', '<', '>', '&', or any non-ASCII byte, among which
// invalid UTF-8 and U+2028/U+2029) is written by encoding/json itself, the reference, so the
// rules of its escaping are not copied here; every other string is written as it is.

// appendManifestJSON appends the JSON of m to b as encoding/json.Marshal writes it. Its only
// error is a created time that JSON cannot hold (a year outside [0, 9999]).
func appendManifestJSON(b []byte, m *Manifest) ([]byte, error) {
	created, err := m.Created.MarshalJSON()
	if err != nil {
		return nil, err
	}
	b = append(b, `{"version":`...)
	b = strconv.AppendUint(b, m.Version, 10)
	b = append(b, `,"created":`...)
	b = append(b, created...)
	if m.Previous != 0 {
		b = append(b, `,"previous":`...)
		b = strconv.AppendUint(b, m.Previous, 10)
	}
	b = append(b, `,"dirs":`...)
	if m.Dirs == nil {
		b = append(b, "null"...)
	} else {
		b = append(b, '[')
		for i := range m.Dirs {
			if i > 0 {
				b = append(b, ',')
			}
			b = append(b, `{"path":`...)
			b = appendJSONString(b, m.Dirs[i].Path)
			b = append(b, `,"mode":`...)
			b = strconv.AppendUint(b, uint64(m.Dirs[i].Mode), 10)
			b = append(b, '}')
		}
		b = append(b, ']')
	}
	b = append(b, `,"files":`...)
	if m.Files == nil {
		b = append(b, "null"...)
	} else {
		b = append(b, '[')
		for i := range m.Files {
			if i > 0 {
				b = append(b, ',')
			}
			b = appendFileJSON(b, &m.Files[i])
		}
		b = append(b, ']')
	}
	s := &m.Stats
	b = append(b, `,"stats":{"logical_bytes":`...)
	b = strconv.AppendInt(b, s.LogicalBytes, 10)
	b = append(b, `,"new_objects":`...)
	b = strconv.AppendInt(b, s.NewObjects, 10)
	b = append(b, `,"new_object_bytes":`...)
	b = strconv.AppendInt(b, s.NewObjectBytes, 10)
	b = append(b, `,"changed_elements":`...)
	b = strconv.AppendInt(b, s.ChangedElems, 10)
	b = append(b, `,"total_elements":`...)
	b = strconv.AppendInt(b, s.TotalElems, 10)
	b = append(b, '}')
	if len(m.Indexes) > 0 {
		b = append(b, `,"indexes":[`...)
		for i, n := range m.Indexes {
			if i > 0 {
				b = append(b, ',')
			}
			b = appendJSONString(b, n)
		}
		b = append(b, ']')
	}
	return append(b, '}'), nil
}

func appendFileJSON(b []byte, f *ManifestFile) []byte {
	b = append(b, `{"path":`...)
	b = appendJSONString(b, f.Path)
	b = append(b, `,"mode":`...)
	b = strconv.AppendUint(b, uint64(f.Mode), 10)
	b = append(b, `,"size":`...)
	b = strconv.AppendInt(b, f.Size, 10)
	b = append(b, `,"sha256":`...)
	b = appendJSONID(b, &f.SHA256)
	b = append(b, `,"kind":`...)
	b = appendJSONString(b, f.Kind)
	if !f.ID.IsZero() {
		b = append(b, `,"id":`...)
		b = appendJSONID(b, &f.ID)
	}
	if !f.Header.IsZero() {
		b = append(b, `,"header":`...)
		b = appendJSONID(b, &f.Header)
	}
	if f.HeaderLen != 0 {
		b = append(b, `,"header_len":`...)
		b = strconv.AppendInt(b, f.HeaderLen, 10)
	}
	if len(f.Tensors) > 0 {
		b = append(b, `,"tensors":[`...)
		for i := range f.Tensors {
			if i > 0 {
				b = append(b, ',')
			}
			b = appendTensorJSON(b, &f.Tensors[i])
		}
		b = append(b, ']')
	}
	return append(b, '}')
}

func appendTensorJSON(b []byte, t *ManifestTensor) []byte {
	b = append(b, `{"name":`...)
	b = appendJSONString(b, t.Name)
	b = append(b, `,"dtype":`...)
	b = appendJSONString(b, string(t.DType))
	b = append(b, `,"shape":`...)
	if t.Shape == nil {
		b = append(b, "null"...)
	} else {
		b = append(b, '[')
		for i, d := range t.Shape {
			if i > 0 {
				b = append(b, ',')
			}
			b = strconv.AppendInt(b, d, 10)
		}
		b = append(b, ']')
	}
	b = append(b, `,"begin":`...)
	b = strconv.AppendInt(b, t.Begin, 10)
	b = append(b, `,"end":`...)
	b = strconv.AppendInt(b, t.End, 10)
	b = append(b, `,"id":`...)
	b = appendJSONID(b, &t.ID)
	if !t.Base.IsZero() {
		b = append(b, `,"base":`...)
		b = appendJSONID(b, &t.Base)
	}
	b = append(b, `,"changed":`...)
	b = strconv.AppendInt(b, t.Changed, 10)
	if !t.XXH3.IsZero() {
		b = append(b, `,"xxh3":"`...)
		b = hex.AppendEncode(b, t.XXH3[:])
		b = append(b, '"')
	}
	return append(b, '}')
}

// appendJSONID appends id as ID.MarshalText spells it, quoted.
func appendJSONID(b []byte, id *ID) []byte {
	b = append(b, '"')
	b = hex.AppendEncode(b, id[:])
	return append(b, '"')
}

// appendJSONString appends s quoted as encoding/json writes it.
func appendJSONString(b []byte, s string) []byte {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c >= 0x80 || c == '"' || c == '\\' || c == '<' || c == '>' || c == '&' {
			q, _ := json.Marshal(s) // a string always encodes
			return append(b, q...)
		}
	}
	b = append(b, '"')
	b = append(b, s...)
	return append(b, '"')
}

// manifestJSONLen is a bound, usually close, of the length of m's JSON, for the buffer it
// is written into.
func manifestJSONLen(m *Manifest) int {
	n := 512 + len(m.Indexes)*64 + len(m.Dirs)*64
	for i := range m.Files {
		f := &m.Files[i]
		n += 320 + len(f.Path)
		for j := range f.Tensors {
			t := &f.Tensors[j]
			n += 370 + len(t.Name) + 20*len(t.Shape)
		}
	}
	return n
}
