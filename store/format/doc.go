// Package format owns the bytes of a weightfs store: every magic, version number, record and
// codec the store writes, and the checks a reader applies to those bytes before it trusts
// them (docs/format.md Part I has them byte by byte). It does not own what a store does with
// the bytes: no I/O, no caches, no state, no policy of when to write what; that is package
// store, which calls these codecs and keeps the files.
//
// It holds so far the format file (storefile.go: STORE/weightfs-store, the store format
// versions), the object file codec (object.go: header, chunk table), the manifest codec
// (manifest.go: the manifest's types, encode, decode and validation, the bounds of version
// numbers and names, the path check; manifest_encode.go and manifest_decode.go: its JSON
// without reflection, encoding/json kept as the reference), the gc record (gcrecord.go), object identities (id.go),
// the CRC-32C of every trailer (crc.go) and the sentinel errors the codecs wrap (errors.go),
// which package store re-exports under the same names so that errors.Is holds whichever
// package a caller tests against. Package store/pack is the pack half of the format (pack files and pack indexes)
// and stays its own package; the other records of the store (pins, the change hint, writer
// groups' records, the index's records) are still coded in package store.
//
// Every codec refuses what it does not know (an unknown magic or version) rather than read
// it "best effort", and its error messages name what failed; tests and operators rely on
// them, so they change only with the format.
package format
