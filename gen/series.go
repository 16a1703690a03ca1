package gen

import (
	"fmt"
	"os"
	"path/filepath"
	"time"
)

// MaxVersion is the largest version number a six-digit directory name can hold.
const MaxVersion = 999_999

// VersionDirName is the directory name of version v on a weightfs mount: weight_v000042.
func VersionDirName(v int) string { return fmt.Sprintf("weight_v%06d", v) }

// SeriesOptions describes a run of consecutive versions, as a trainer saves them.
type SeriesOptions struct {
	Config Config
	// Out is the directory the version directories are created in (a weightfs mount, or any
	// directory).
	Out string
	// Start is the first version number; version v is the model after v-1 steps, so a series
	// started at 6 continues one that ended at 5 with the same bytes.
	Start int
	// Versions is how many versions to write: Start, Start+1, ...
	Versions int
	// Done creates an empty DONE file in each version directory after all of its files are
	// closed: the way a trainer seals a version on a weightfs mount.
	Done bool
	// Stream writes each version with StreamCheckpoint instead of an in-memory Model: memory
	// stays at a few MiB, but version v costs v-1 steps of compute instead of one.
	Stream bool
}

// VersionReport says what was written for one version.
type VersionReport struct {
	Version  int
	Dir      string
	Bytes    int64 // bytes of all files written
	Duration time.Duration
}

// WriteSeries writes the versions of opts one after another, calling report (if not nil)
// after each; an error from report stops the series and is returned.
func WriteSeries(opts SeriesOptions, report func(VersionReport) error) error {
	if err := opts.Config.validate(); err != nil {
		return err
	}
	last := opts.Start + opts.Versions - 1
	if opts.Start < 1 || opts.Versions < 1 || last > MaxVersion {
		return fmt.Errorf("%w: versions %d to %d (versions run from 1 to %d)", ErrBadVersion, opts.Start, last, MaxVersion)
	}
	var model *Model
	if !opts.Stream {
		var err error
		if model, err = New(opts.Config); err != nil {
			return err
		}
		for model.Steps() < opts.Start-1 {
			model.Step()
		}
	}
	for v := opts.Start; v <= last; v++ {
		dir := filepath.Join(opts.Out, VersionDirName(v))
		began := time.Now()
		var n int64
		var err error
		if model != nil {
			if v > opts.Start {
				model.Step()
			}
			n, err = writeCheckpoint(dir, model.cfg, model.lay, model.source())
		} else {
			n, err = streamCheckpoint(opts.Config, v-1, dir)
		}
		if err == nil && opts.Done {
			err = writeDone(dir)
		}
		if err != nil {
			return fmt.Errorf("version %d: %w", v, err)
		}
		if report != nil {
			if err := report(VersionReport{Version: v, Dir: dir, Bytes: n, Duration: time.Since(began)}); err != nil {
				return err
			}
		}
	}
	return nil
}

// WriteVersion writes version v of cfg straight into dir with StreamCheckpoint (and DONE
// after it when done is set).
func WriteVersion(cfg Config, v int, dir string, done bool) (VersionReport, error) {
	if err := cfg.validate(); err != nil {
		return VersionReport{}, err
	}
	if v < 1 || v > MaxVersion {
		return VersionReport{}, fmt.Errorf("%w: %d (versions run from 1 to %d)", ErrBadVersion, v, MaxVersion)
	}
	began := time.Now()
	n, err := streamCheckpoint(cfg, v-1, dir)
	if err == nil && done {
		err = writeDone(dir)
	}
	if err != nil {
		return VersionReport{}, fmt.Errorf("version %d: %w", v, err)
	}
	return VersionReport{Version: v, Dir: dir, Bytes: n, Duration: time.Since(began)}, nil
}

// writeDone seals a version directory: an empty DONE, created last. On a weightfs mount its
// close returns only when the version is durable, and reports the failure if it is not, so
// the close's error is the result.
func writeDone(dir string) error {
	f, err := os.Create(filepath.Join(dir, "DONE"))
	if err != nil {
		return fmt.Errorf("create DONE: %w", err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("close DONE (seal the version): %w", err)
	}
	return nil
}
