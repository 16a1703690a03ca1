package store

import "fmt"

// checkFormatFile compares the store's format file (as Open read it) with the delta sections
// Verify found, sections2 being the objects whose section is of body version 2. Only format 2
// allows such sections (format.go): a format file of format 1 over them (one restored from an
// older copy of the store) is damage of that file, not of the objects, which this program
// reads either way. A program that reads only format 1 would open the store and take those
// sections for damage (its reads would fail, its `verify --repair` would quarantine the
// objects); this program's writer rewrites the file as format 2 when it opens the store
// (upgradeFormat), which is what `weightfs verify --repair` does first. ok is false when
// the file is damage, d says why.
func (c *checker) checkFormatFile(sections2 []ID) (d Damage, ok bool) {
	s := c.st
	if s.format >= 2 || len(sections2) == 0 {
		return Damage{}, true
	}
	return Damage{Path: formatFileName, Err: fmt.Errorf(
		"store format %d, but %d objects hold delta sections of body version 2, which only format 2 allows (the first: %s): "+
			"a program that reads only format %d would take them for damage; the objects are intact, "+
			"the format file is older than they are (the store's writer rewrites it as format 2 when it opens the store: weightfs verify --repair): %w",
		s.format, len(sections2), sections2[0], s.format, ErrCorrupt)}, false
}
