package policies

import (
	"log/slog"
	"os"
	"sync"
	"testing"
	"time"
)

// halfWrittenYAML is a config whose last line, "per: 1m", makes the limit 10
// a minute; its first half is valid YAML too, and without "per" the limit is
// 10 a second.
const (
	firstHalfYAML = `
routes:
  - name: default
    upstream: builtin:echo
    policies: [per-ip]
policies:
  per-ip:
    key: ip
    rate: 10
`
	secondHalfYAML = "    per: 1m\n"
)

// TestWatchInPlaceEditInTwoWrites is the common unsafe edit: the file
// rewritten in place in two writes some time apart. The second write is made
// from the watcher's own event hook, on the first attempt that finds the
// first half whole, so it lands after the watcher has seen the first half
// and before it may act on it, whatever the machine's load. The first half
// must never be applied; the whole file must be.
func TestWatchInPlaceEditInTwoWrites(t *testing.T) {
	path := newConfigFile(t, configWithRate("5"))
	snap, err := Load(path, Options{})
	if err != nil {
		t.Fatal(err)
	}
	cur := NewCurrent(snap)
	f, err := os.OpenFile(path, os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()

	var (
		mu            sync.Mutex
		secondWritten bool
		applied       []*Snapshot
		writeErr      error
	)
	done := make(chan struct{})
	w, err := NewWatcher(WatcherConfig{
		Loader:   Loader{Path: path},
		Current:  cur,
		Debounce: 10 * time.Millisecond,
		Settle:   300 * time.Millisecond,
		Logger:   slog.New(slog.NewTextHandler(&lockedBuffer{}, nil)),
		OnEvent: func(ev ReloadEvent) {
			mu.Lock()
			defer mu.Unlock()
			if ev.Snapshot != nil {
				applied = append(applied, ev.Snapshot)
			}
			if !secondWritten {
				// Only once the first half is all there: on a slow machine
				// an attempt can also fall between the truncation and the
				// first write, and see an empty file.
				if b, err := os.ReadFile(path); err != nil || string(b) != firstHalfYAML {
					return
				}
				secondWritten = true
				_, writeErr = f.WriteString(secondHalfYAML)
				return
			}
			if ev.Snapshot != nil {
				close(done)
			}
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	h := &harness{path: path, cur: cur, w: w}
	h.run(t)

	// The first write: truncate and write the first half, as an editor
	// that saves in place does.
	if err := f.Truncate(0); err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteString(firstHalfYAML); err != nil {
		t.Fatal(err)
	}
	select {
	case <-done:
	case <-time.After(waitLimit):
		t.Fatalf("the whole file was not applied within %v", waitLimit)
	}
	mu.Lock()
	defer mu.Unlock()
	if writeErr != nil {
		t.Fatal(writeErr)
	}
	for i, s := range applied {
		if l := s.Policies["per-ip"].Limit; l.Period != time.Minute {
			t.Errorf("reload %d applied per-ip at %d per %v: the first half of the file, want only the whole file (10 per 1m)", i+1, l.Rate, l.Period)
		}
	}
	if got := cur.Load().Policies["per-ip"].Limit; got.Rate != 10 || got.Period != time.Minute {
		t.Errorf("in force: got %d per %v, want 10 per 1m", got.Rate, got.Period)
	}
}
