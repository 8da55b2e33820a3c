package testcluster

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
)

// SaveState writes v, a cluster's description, as JSON to file in dir,
// for a later LoadState in another process; pkg prefixes the errors.
func SaveState(pkg, dir, file string, v any) error {
	data, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return fmt.Errorf("%s: %w", pkg, err)
	}
	if err := os.WriteFile(filepath.Join(dir, file), append(data, '\n'), 0o600); err != nil {
		return fmt.Errorf("%s: %w", pkg, err)
	}
	return nil
}

// LoadState reads the description SaveState wrote in dir into v, and
// checks that the cluster it describes lives in dir (dirOf gives its
// directory once read): Down removes that directory, so it must be the one
// the description is in. It returns the description's path.
func LoadState(pkg, dir, file string, v any, dirOf func() string) (string, error) {
	name := filepath.Join(dir, file)
	data, err := os.ReadFile(name)
	if err != nil {
		return name, fmt.Errorf("%s: no cluster in %s: %w", pkg, dir, err)
	}
	if err := json.Unmarshal(data, v); err != nil {
		return name, fmt.Errorf("%s: %s: %w", pkg, name, err)
	}
	abs, err := filepath.Abs(dir)
	if err == nil {
		abs, err = filepath.EvalSymlinks(abs)
	}
	if d := dirOf(); err != nil || d == "" || abs != d {
		return name, fmt.Errorf("%s: %s describes a cluster in %q, not in %s", pkg, name, d, dir)
	}
	return name, nil
}

// WriteScript writes an executable job script (mode 0755) named name into
// dir and returns its path; name must be a plain file name. pkg prefixes
// the errors.
func WriteScript(pkg, dir, name, body string) (string, error) {
	if name == "" || name != filepath.Base(name) || name == "." || name == ".." {
		return "", fmt.Errorf("%s: script name %q: want a file name without a directory", pkg, name)
	}
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, []byte(body), 0o755); err != nil {
		return "", fmt.Errorf("%s: %w", pkg, err)
	}
	return p, nil
}
