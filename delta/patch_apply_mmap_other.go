//go:build !linux

package delta

// Other platforms write with WriteAt (writeRuns): mapTarget always declines.

func mapTarget(ApplyTarget, int64) (*fileMapping, error) { return nil, errNoMapping }
func (m *fileMapping) unmap() error                      { return nil }
