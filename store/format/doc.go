// Package format owns the bytes of a weightfs store: every magic, version number, record and
// codec the store writes, and the checks a reader applies to those bytes before it trusts
// them (docs/format.md Part I has them byte by byte). It does not own what a store does with
// the bytes: no I/O, no caches, no state, no policy of when to write what; that is package
// store (and store/s3 for the change hint), which calls these codecs and keeps the files.
//
// It holds the format file (storefile.go: STORE/weightfs-store, the store format versions),
// the object file codec (object.go: header, chunk table), the manifest codec (manifest.go:
// the manifest's types, encode, decode and validation, the bounds of version numbers and
// names, the path check; manifest_encode.go, manifest_decode.go and manifest_head.go (the
// head a version list reads): its JSON without reflection, encoding/json kept as the
// reference) and manifests' names (layout.go), readers' pins (pin.go), the change
// hint of an S3 store (hint.go), the gc record (gcrecord.go), a writer group's records
// (group.go: part records, open markers, refusal records and their names), the records of
// the node-local index (index.go: values sealed with a CRC-32C, the object record), object
// identities (id.go), the CRC-32C of every trailer (crc.go) and the sentinel errors the
// codecs wrap (errors.go), which package store re-exports under the same names so that
// errors.Is holds whichever package a caller tests against. Package store/pack is the pack
// half of the format (pack files and pack indexes) and stays its own package. What package
// store still encodes itself is JSON of its own types in its cache directory (version
// summaries, the materialized copy's state and sums, the renders' lists): node-local caches,
// not the store's format.
//
// Every codec refuses what it does not know (an unknown magic or version) rather than read
// it "best effort", and its error messages name what failed; tests and operators rely on
// them, so they change only with the format. Each codec's byte-level tests, worked examples
// that need no store, and fuzz tests are beside it in this package; the tests that need a
// store (a gc writing the gc record's example, the documents' worked examples made by a
// commit) stay in package store.
//
// It imports only the standard library, delta (element types), store/pack and
// internal/jsonrecord, never store.
package format
