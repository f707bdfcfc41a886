package certtest

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"
)

// SecretDir is a directory laid out as Kubernetes mounts a Secret: each
// file a symlink through "..data", itself a symlink to a timestamped
// directory, so that an update is one rename of "..data".
type SecretDir struct {
	Dir string
	gen int
}

// Write publishes files (name → content) as the Secret's new version.
func (s *SecretDir) Write(t testing.TB, files map[string][]byte) {
	t.Helper()
	s.gen++
	version := fmt.Sprintf("..v%d", s.gen)
	if err := os.Mkdir(filepath.Join(s.Dir, version), 0o755); err != nil {
		t.Fatal(err)
	}
	for name, data := range files {
		if err := os.WriteFile(filepath.Join(s.Dir, version, name), data, 0o600); err != nil {
			t.Fatal(err)
		}
		link := filepath.Join(s.Dir, name)
		if _, err := os.Lstat(link); os.IsNotExist(err) {
			if err := os.Symlink(filepath.Join("..data", name), link); err != nil {
				t.Fatal(err)
			}
		}
	}
	tmp := filepath.Join(s.Dir, "..data_tmp")
	if err := os.Symlink(version, tmp); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, filepath.Join(s.Dir, "..data")); err != nil {
		t.Fatal(err)
	}
}
