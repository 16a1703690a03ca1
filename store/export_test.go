package store

import "time"

// SetClock fixes the clock of s's manifests' creation times, for tests outside the package
// (store_test) that pin stored bytes.
func SetClock(s *Store, now func() time.Time) { s.now = now }
