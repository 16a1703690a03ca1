package delta

import "fmt"

// ParseDelta validates the framing of an encoded delta body and describes it, as OpenDelta
// does without indexing its blocks: magic, version (ErrUnsupportedVersion if unknown), header
// fields and the block table (ErrMalformed). The fuzzers hold OpenDelta and ApplyDelta to it.
func ParseDelta(body []byte) (DeltaInfo, error) {
	l, err := parseLayout(body)
	if err != nil {
		return DeltaInfo{}, fmt.Errorf("parse sparse delta: %w", err)
	}
	return l.DeltaInfo, nil
}
