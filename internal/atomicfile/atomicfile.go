// Package atomicfile writes a file whole or not at all: into a temporary
// file beside it, renamed over it once complete, so that a reader sees
// the old content or the new one, never a part.
package atomicfile

import (
	"os"
	"path/filepath"
)

// Options says how Write writes.
type Options struct {
	// Mode is the file's permission bits; 0 is 0600 (the user's alone).
	Mode os.FileMode
	// Sync flushes the content to the disk before the rename, for a file
	// that must survive a crash (a job's record), at some milliseconds'
	// cost.
	Sync bool
}

// Write writes b as path. The temporary file is a dot file named after
// path, removed if anything fails.
func Write(path string, b []byte, o Options) error {
	tmp, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".*")
	if err != nil {
		return err
	}
	_, err = tmp.Write(b)
	if err == nil && o.Mode != 0 && o.Mode != 0o600 {
		err = tmp.Chmod(o.Mode)
	}
	if err == nil && o.Sync {
		err = tmp.Sync()
	}
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp.Name(), path)
	}
	if err != nil {
		os.Remove(tmp.Name())
	}
	return err
}
