package policies

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// loadWithin runs Load in its own goroutine so that a Load that blocks (the
// bug this guards against) fails the test instead of hanging it.
func loadWithin(t *testing.T, path string) error {
	t.Helper()
	done := make(chan error, 1)
	go func() {
		_, err := Load(path, Options{})
		done <- err
	}()
	select {
	case err := <-done:
		return err
	case <-time.After(5 * time.Second):
		t.Fatalf("Load(%s) did not return within 5s", path)
		return nil
	}
}

// nonRegularConfigs returns the paths a config file can be replaced with
// that must be refused without reading: a FIFO (open(2) blocks until a
// writer comes), a symlink to /dev/zero (endless), a directory, and a file
// just over the size bound. want is the end of each error.
func nonRegularConfigs(t *testing.T) []struct{ name, path, want string } {
	t.Helper()
	dir := t.TempDir()
	fifo, zero := specialFiles(t, dir, ".yaml")
	big := filepath.Join(dir, "big.yaml")
	// Valid YAML all the way (a comment), so only the size can refuse it.
	if err := os.WriteFile(big, []byte("#"+strings.Repeat("x", MaxConfigBytes)+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	return []struct{ name, path, want string }{
		{"fifo", fifo, fifo + ": is a named pipe, not a regular file"},
		{"symlink to /dev/zero", zero, zero + ": is a device, not a regular file"},
		{"directory", dir, dir + ": is a directory, not a regular file"},
		{"over the size bound", big, big + ": is larger than 4 MiB, the bound on a config file"},
	}
}

// specialFiles makes a FIFO and a symlink to /dev/zero in dir, named
// fifo<ext> and zero<ext>: what a path can be replaced with that must be
// refused without reading.
func specialFiles(t *testing.T, dir, ext string) (fifo, zero string) {
	t.Helper()
	fifo = filepath.Join(dir, "fifo"+ext)
	if err := syscall.Mkfifo(fifo, 0o644); err != nil {
		t.Fatal(err)
	}
	zero = filepath.Join(dir, "zero"+ext)
	if err := os.Symlink("/dev/zero", zero); err != nil {
		t.Fatal(err)
	}
	return fifo, zero
}

func TestLoadRefusesWhatIsNotAConfigFile(t *testing.T) {
	for _, tt := range nonRegularConfigs(t) {
		t.Run(tt.name, func(t *testing.T) {
			err := loadWithin(t, tt.path)
			if want := "loading config: " + tt.want; err == nil || err.Error() != want {
				t.Errorf("got %v, want %q", err, want)
			}
		})
	}
}

func TestLoadAtTheSizeBound(t *testing.T) {
	yaml := minimalYAML + "#"
	yaml += strings.Repeat("x", MaxConfigBytes-len(yaml)-1) + "\n"
	path := newConfigFile(t, yaml)
	// A regular file cannot block a read: no hang guard here, whose bound
	// a 4 MiB parse under -race on a busy machine can pass.
	if _, err := Load(path, Options{}); err != nil {
		t.Errorf("a file of exactly %d bytes: got %v, want it loaded", MaxConfigBytes, err)
	}
}

// TestReloadRefusesWhatIsNotAConfigFile: the config path replaced by one of
// them fails the reload at once and keeps the old snapshot, through Reload
// (SIGHUP) and through the watcher, which then stops when asked.
func TestReloadRefusesWhatIsNotAConfigFile(t *testing.T) {
	for _, tt := range nonRegularConfigs(t) {
		t.Run(tt.name, func(t *testing.T) {
			h := newHarness(t, newConfigFile(t, configWithRate("10")), 10*time.Millisecond)
			old := h.cur.Load()
			h.run(t)
			if err := os.Remove(h.path); err != nil {
				t.Fatal(err)
			}
			if err := os.Symlink(tt.path, h.path); err != nil {
				t.Fatal(err)
			}
			want := "reloading config: " + strings.Replace(tt.want, tt.path, h.path, 1)
			done := make(chan error, 1)
			go func() { done <- h.w.Reload() }()
			select {
			case err := <-done:
				if err == nil || err.Error() != want {
					t.Errorf("Reload: got %v, want %q", err, want)
				}
			case <-time.After(5 * time.Second):
				t.Fatalf("Reload did not return within 5s")
			}
			if h.cur.Load() != old {
				t.Errorf("snapshot replaced; want the old one kept")
			}
			// The watcher's own attempt (the symlink made events) fails the
			// same way; the harness's cleanup then checks that Run returns.
			for {
				ev := h.next(t)
				if ev.Err != nil && ev.Err.Error() == want {
					break
				}
			}
		})
	}
}
