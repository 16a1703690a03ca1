package format

import (
	"bytes"
	"io"
	"time"

	"github.com/go-json-experiment/json/jsontext"
)

// ManifestHead is what a list of versions needs of a manifest: its fields but the files,
// which are counted.
type ManifestHead struct {
	Version  uint64
	Created  time.Time
	Previous uint64
	Files    int
	Stats    ManifestStats
	Indexes  []string
}

// DecodeManifestHead reads the head of manifest JSON as encoding/json.Unmarshal reads it into
// a struct of the head's fields whose files are a list of values it skips (store's
// manifestSummary), without decoding the files: their values are checked as JSON and counted.
// Like decodeManifestFast it covers what the writer writes up to whitespace, key order and
// escapes, and returns an error for anything else (an unknown key, which Unmarshal ignores,
// too): the caller then asks encoding/json.
func DecodeManifestHead(js []byte) (ManifestHead, error) {
	md := manifestDecoder{d: jsontext.NewDecoder(bytes.NewBuffer(js), jsontext.AllowDuplicateNames(true))}
	var h ManifestHead
	err := md.object(func(key []byte) (bit uint32, err error) {
		switch string(key) {
		case "version":
			bit = 1 << 0
			h.Version, err = md.uint(64)
		case "created":
			bit = 1 << 1
			var raw jsontext.Value
			if raw, err = md.value('"'); err == nil {
				err = h.Created.UnmarshalJSON(raw)
			}
		case "previous":
			bit = 1 << 2
			h.Previous, err = md.uint(64)
		case "dirs":
			bit = 1 << 3
			err = md.d.SkipValue() // not a field of the head: Unmarshal skips any value
		case "files":
			bit = 1 << 4
			_, err = md.array(func() error {
				h.Files++
				return md.d.SkipValue()
			})
		case "stats":
			bit = 1 << 5
			err = md.stats(&h.Stats)
		case "indexes":
			bit = 1 << 6
			err = md.indexes(&h.Indexes)
		default:
			err = errNotCanonical
		}
		return bit, err
	})
	if err != nil {
		return ManifestHead{}, err
	}
	if _, err := md.d.ReadToken(); err != io.EOF {
		return ManifestHead{}, errNotCanonical
	}
	return h, nil
}
