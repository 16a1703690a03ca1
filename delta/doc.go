// Package delta owns the byte-level formats of model weights: safetensors parsing and writing,
// the bytewise diff of two tensors at their element width (behind DiffBackend, so an
// accelerated backend can stand beside the CPU reference), the sparse delta codec the store
// persists, and the patch formats served to engines (the one-file sparse patch and the
// slime-compatible delta checkpoint), with in-place apply.
//
// It knows nothing of files on disk or FUSE: everything works on byte slices, io.ReaderAt and
// io.WriterAt. Functions are safe for concurrent use unless a type's comment says otherwise;
// no state lives in package variables.
package delta
