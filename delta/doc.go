// Package delta owns the byte-level formats of model weights: safetensors parsing and writing,
// the bytewise diff of two tensors at their element width (behind DiffBackend, so an
// accelerated backend can stand beside the CPU reference), the sparse delta codec the store
// persists, and the patch formats served to engines (the one-file sparse patch and the
// slime-compatible delta checkpoint), with in-place apply.
//
// It knows nothing of FUSE or of the store. The codecs and the patch reader and writer do no
// file I/O: they work on byte slices, io.ReaderAt and io.WriterAt (ApplyPatchWith maps a
// target that has a file descriptor, patch_apply_mmap_linux.go). Only the apply of a patch to
// files on disk opens, locks and journals files by name: ApplyPatchFileWith and its journal file
// (patch_apply_file.go, patch_apply_lock.go), and ApplyPatchDir with its state file and lock
// (patch_apply_dir.go, patch_apply_dir_files.go). Functions are safe for concurrent use unless
// a type's comment says otherwise; no state lives in package variables but pools of scratch
// encoders and decoders.
//
// A safetensors header is read by a hand-written scanner for the shape writers produce
// (safetensors_fast.go); whatever it is not sure of goes to the token walk that defines what
// is accepted (safetensors_json.go), so both accept and refuse the same headers.
package delta
