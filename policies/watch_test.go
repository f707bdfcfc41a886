package policies

import (
	"bytes"
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	// Run must close its fsnotify watcher (and so its goroutine) when its
	// context ends.
	goleak.VerifyTestMain(m)
}

const waitLimit = 10 * time.Second

func configWithRate(rate string) string {
	return strings.Replace(minimalYAML, "rate: 10", "rate: "+rate, 1)
}

// lockedBuffer collects log output written by the watcher's goroutine.
type lockedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

type harness struct {
	path    string
	cur     *Current
	w       *Watcher
	events  chan ReloadEvent // from OnEvent
	reloads chan reloadCall  // from OnReload
	logs    *lockedBuffer
}

type reloadCall struct {
	snap *Snapshot
	err  error
}

// harnessSettle is the settle time of the harness's watchers: short, because
// these tests replace the file whole (by rename) or test other things;
// TestWatchInPlaceEditInTwoWrites tests the settle time.
const harnessSettle = 20 * time.Millisecond

// newHarness loads path and makes a watcher for it without running it.
func newHarness(t *testing.T, path string, debounce time.Duration) *harness {
	t.Helper()
	snap, err := Load(path, Options{})
	if err != nil {
		t.Fatalf("initial Load: %v", err)
	}
	h := &harness{
		path: path, cur: NewCurrent(snap), logs: &lockedBuffer{},
		events: make(chan ReloadEvent, 100), reloads: make(chan reloadCall, 100),
	}
	h.w, err = NewWatcher(WatcherConfig{
		Loader:   Loader{Path: path},
		Current:  h.cur,
		Debounce: debounce,
		Settle:   harnessSettle,
		Logger:   slog.New(slog.NewTextHandler(h.logs, &slog.HandlerOptions{Level: slog.LevelDebug})),
		OnReload: func(s *Snapshot, err error) { h.reloads <- reloadCall{s, err} },
		OnEvent:  func(ev ReloadEvent) { h.events <- ev },
	})
	if err != nil {
		t.Fatalf("NewWatcher: %v", err)
	}
	return h
}

// run starts Run and waits until the watch is in place; cleanup stops it and
// waits for it to return.
func (h *harness) run(t *testing.T) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- h.w.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("Run: got %v, want nil after cancel", err)
			}
		case <-time.After(waitLimit):
			t.Errorf("Run did not return after cancel")
		}
	})
	select {
	case <-h.w.Ready():
	case err := <-done:
		t.Fatalf("Run returned early: %v", err)
	case <-time.After(waitLimit):
		t.Fatalf("watcher not ready")
	}
}

// next returns the next attempt that was not deferred for settling.
func (h *harness) next(t *testing.T) ReloadEvent {
	t.Helper()
	deadline := time.After(waitLimit)
	for {
		select {
		case ev := <-h.events:
			if ev.Settling {
				continue
			}
			return ev
		case <-deadline:
			t.Fatalf("no reload event within %v", waitLimit)
			return ReloadEvent{}
		}
	}
}

// nextApplied waits for a successful reload. An editor's in-place write can
// be seen half done (an empty file), which fails and is retried when the
// write completes; that is the watcher working, so such failures are skipped.
func (h *harness) nextApplied(t *testing.T) ReloadEvent {
	t.Helper()
	for {
		ev := h.next(t)
		if ev.Snapshot != nil {
			return ev
		}
		if ev.Err != nil && !strings.Contains(ev.Err.Error(), "routes: at least one route is required") {
			t.Fatalf("reload failed: %v", ev.Err)
		}
	}
}

func rateOf(s *Snapshot) int64 { return s.Policies["per-ip"].Limit.Rate }

func writeFile(t *testing.T, path, content string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

// replaceFile writes content the way editors do: a temporary file renamed
// over the original.
func replaceFile(t *testing.T, path, content string) {
	t.Helper()
	tmp := path + ".tmp~"
	writeFile(t, tmp, content)
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
}

func newConfigFile(t *testing.T, content string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "gateway.yaml")
	writeFile(t, path, content)
	return path
}

func TestWatchGoodEditApplies(t *testing.T) {
	h := newHarness(t, newConfigFile(t, configWithRate("10")), 20*time.Millisecond)
	old := h.cur.Load()
	h.run(t)

	writeFile(t, h.path, configWithRate("20"))
	ev := h.nextApplied(t)
	if got := rateOf(h.cur.Load()); got != 20 {
		t.Errorf("rate after edit: got %d, want 20", got)
	}
	if ev.Snapshot != h.cur.Load() || ev.Previous != old {
		t.Errorf("event: got snapshot %p previous %p, want current %p previous %p", ev.Snapshot, ev.Previous, h.cur.Load(), old)
	}
	if st := h.w.Stats(); st.Reloads != 1 {
		t.Errorf("stats: got %+v, want 1 reload", st)
	}
}

func TestWatchBadEditKeepsOld(t *testing.T) {
	h := newHarness(t, newConfigFile(t, configWithRate("10")), 20*time.Millisecond)
	old := h.cur.Load()
	h.run(t)

	replaceFile(t, h.path, strings.Replace(configWithRate("10"), "rate: 10", "ratee: 10", 1))
	ev := h.next(t)
	want := h.path + `: policies.per-ip.ratee: unknown key (did you mean "rate"?)`
	if ev.Err == nil || ev.Snapshot != nil {
		t.Fatalf("event: got snapshot %v err %v, want a failure", ev.Snapshot, ev.Err)
	}
	if lines := FieldErrors(ev.Err); len(lines) == 0 || lines[0].Error() != want {
		t.Errorf("error: got %v, want %q", ev.Err, want)
	}
	if h.cur.Load() != old {
		t.Errorf("snapshot replaced after a failed reload; want the old one kept")
	}
	st := h.w.Stats()
	if st.Failures != 1 || st.Reloads != 0 || !strings.HasPrefix(st.LastError, want) {
		t.Errorf("stats: got %+v, want 1 failure with LastError %q", st, want)
	}
	if logs := h.logs.String(); !strings.Contains(logs, "config reload failed") || !strings.Contains(logs, "policies.per-ip.ratee") {
		t.Errorf("log: got %q, want the failure with its place", logs)
	}

	// Fixing the file recovers.
	replaceFile(t, h.path, configWithRate("30"))
	h.nextApplied(t)
	if got := rateOf(h.cur.Load()); got != 30 {
		t.Errorf("rate after fix: got %d, want 30", got)
	}
	if st := h.w.Stats(); st.Failures != 1 || st.Reloads != 1 {
		t.Errorf("stats: got %+v, want 1 failure and 1 reload", st)
	}
}

func TestWatchAtomicRename(t *testing.T) {
	h := newHarness(t, newConfigFile(t, configWithRate("10")), 20*time.Millisecond)
	h.run(t)
	replaceFile(t, h.path, configWithRate("40"))
	h.nextApplied(t)
	if got := rateOf(h.cur.Load()); got != 40 {
		t.Errorf("rate: got %d, want 40", got)
	}
	// The watch survives the rename: a second edit is seen too.
	replaceFile(t, h.path, configWithRate("41"))
	h.nextApplied(t)
	if got := rateOf(h.cur.Load()); got != 41 {
		t.Errorf("rate after second rename: got %d, want 41", got)
	}
}

func TestWatchKubernetesSymlinkSwap(t *testing.T) {
	// The layout of a ConfigMap volume: the file is a symlink through
	// "..data", itself a symlink to a timestamped directory; an update writes
	// a new directory and swaps "..data" with a rename.
	dir := t.TempDir()
	mkVersion := func(name, content string) {
		if err := os.Mkdir(filepath.Join(dir, name), 0o755); err != nil {
			t.Fatal(err)
		}
		writeFile(t, filepath.Join(dir, name, "gateway.yaml"), content)
	}
	mkVersion("..2026_01_01_00_00_00.1", configWithRate("10"))
	if err := os.Symlink("..2026_01_01_00_00_00.1", filepath.Join(dir, "..data")); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "gateway.yaml")
	if err := os.Symlink(filepath.Join("..data", "gateway.yaml"), path); err != nil {
		t.Fatal(err)
	}

	h := newHarness(t, path, 20*time.Millisecond)
	h.run(t)

	swap := func(version, content, previous string) {
		mkVersion(version, content)
		tmp := filepath.Join(dir, "..data_tmp")
		if err := os.Symlink(version, tmp); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(tmp, filepath.Join(dir, "..data")); err != nil {
			t.Fatal(err)
		}
		if err := os.RemoveAll(filepath.Join(dir, previous)); err != nil {
			t.Fatal(err)
		}
	}
	swap("..2026_01_01_00_01_00.2", configWithRate("50"), "..2026_01_01_00_00_00.1")
	h.nextApplied(t)
	if got := rateOf(h.cur.Load()); got != 50 {
		t.Errorf("rate after swap: got %d, want 50", got)
	}
	swap("..2026_01_01_00_02_00.3", configWithRate("60"), "..2026_01_01_00_01_00.2")
	h.nextApplied(t)
	if got := rateOf(h.cur.Load()); got != 60 {
		t.Errorf("rate after second swap: got %d, want 60", got)
	}
}

func TestWatchSymlinkToOtherDirectory(t *testing.T) {
	target := newConfigFile(t, configWithRate("10"))
	path := filepath.Join(t.TempDir(), "gateway.yaml")
	if err := os.Symlink(target, path); err != nil {
		t.Fatal(err)
	}
	h := newHarness(t, path, 20*time.Millisecond)
	h.run(t)
	replaceFile(t, target, configWithRate("70"))
	h.nextApplied(t)
	if got := rateOf(h.cur.Load()); got != 70 {
		t.Errorf("rate: got %d, want 70", got)
	}
}

func TestWatchUnchangedContentIsNotAReload(t *testing.T) {
	content := configWithRate("10")
	h := newHarness(t, newConfigFile(t, content), 20*time.Millisecond)
	old := h.cur.Load()
	h.run(t)

	replaceFile(t, h.path, content)
	ev := h.next(t)
	if !ev.Unchanged || ev.Snapshot != nil || ev.Err != nil {
		t.Errorf("event: got %+v, want unchanged", ev)
	}
	if st := h.w.Stats(); st.Reloads != 0 || st.Unchanged != 1 || st.Failures != 0 {
		t.Errorf("stats: got %+v, want 0 reloads, 1 unchanged", st)
	}
	if h.cur.Load() != old {
		t.Errorf("snapshot replaced by identical content")
	}
}

func TestWatchDebounceCoalesces(t *testing.T) {
	// A long quiet time makes the five quick writes one burst; the one reload
	// sees the last content.
	h := newHarness(t, newConfigFile(t, configWithRate("10")), 300*time.Millisecond)
	h.run(t)
	for rate := 11; rate <= 15; rate++ {
		replaceFile(t, h.path, configWithRate(strconv.Itoa(rate)))
	}
	ev := h.nextApplied(t)
	if got := rateOf(ev.Snapshot); got != 15 {
		t.Errorf("rate of first reload: got %d, want 15 (the last write)", got)
	}
	if st := h.w.Stats(); st.Reloads != 1 {
		t.Errorf("stats: got %+v, want exactly 1 reload", st)
	}
}

func TestWatchRestartSettingsWarn(t *testing.T) {
	h := newHarness(t, newConfigFile(t, configWithRate("10")), 20*time.Millisecond)
	h.run(t)
	replaceFile(t, h.path, configWithRate("20")+"server: {listen: '127.0.0.1:9999', trusted_proxies: [10.0.0.0/8]}\n")
	ev := h.nextApplied(t)
	if !slices.Equal(ev.RestartRequired, []string{"server.listen"}) {
		t.Errorf("restart required: got %q, want [server.listen]", ev.RestartRequired)
	}
	if got := rateOf(h.cur.Load()); got != 20 {
		t.Errorf("rate: got %d, want 20 (the rest of the change applies)", got)
	}
	if len(h.cur.Load().Identity.TrustedProxies) != 1 {
		t.Errorf("trusted proxies: got %v, want the new list applied", h.cur.Load().Identity.TrustedProxies)
	}
	if logs := h.logs.String(); !strings.Contains(logs, "need a restart") || !strings.Contains(logs, "server.listen") {
		t.Errorf("log: got %q, want a warning naming server.listen", logs)
	}
}

// TestReloadDirect is what SIGHUP does: no file watching, just Reload.
func TestReloadDirect(t *testing.T) {
	h := newHarness(t, newConfigFile(t, configWithRate("10")), 0)

	writeFile(t, h.path, configWithRate("25"))
	if err := h.w.Reload(); err != nil {
		t.Fatalf("Reload: %v", err)
	}
	if got := rateOf(h.cur.Load()); got != 25 {
		t.Errorf("rate: got %d, want 25", got)
	}
	if ev := h.next(t); ev.Snapshot == nil {
		t.Errorf("OnEvent: got %+v, want the new snapshot", ev)
	}
	if call := <-h.reloads; call.snap != h.cur.Load() || call.err != nil {
		t.Errorf("OnReload: got (%p, %v), want (%p, nil)", call.snap, call.err, h.cur.Load())
	}

	good := h.cur.Load()
	writeFile(t, h.path, configWithRate("-1"))
	err := h.w.Reload()
	if want := h.path + ": policies.per-ip.rate: must be >= 0"; err == nil || err.Error() != want {
		t.Errorf("Reload: got %v, want %q", err, want)
	}
	if h.cur.Load() != good {
		t.Errorf("snapshot replaced after a failed reload")
	}
	if ev := h.next(t); ev.Err == nil {
		t.Errorf("OnEvent: got %+v, want the failure", ev)
	}
	if call := <-h.reloads; call.snap != nil || call.err == nil {
		t.Errorf("OnReload: got (%v, %v), want (nil, the failure)", call.snap, call.err)
	}

	// The same rejected content again is not parsed or counted again.
	if err := h.w.Reload(); err != nil {
		t.Errorf("Reload of unchanged content: got %v, want nil", err)
	}
	if ev := h.next(t); !ev.Unchanged {
		t.Errorf("OnEvent: got %+v, want unchanged", ev)
	}
	select {
	case call := <-h.reloads:
		t.Errorf("OnReload for unchanged content: got (%v, %v), want no call", call.snap, call.err)
	default: // Reload is synchronous: a call would already be queued
	}

	if err := os.Remove(h.path); err != nil {
		t.Fatal(err)
	}
	if err := h.w.Reload(); err == nil || !strings.HasPrefix(err.Error(), "reloading config: ") {
		t.Errorf("missing file: got %v, want a reloading config error", err)
	}
	h.next(t)
	st := h.w.Stats()
	if st.Reloads != 1 || st.Failures != 2 || st.Unchanged != 1 {
		t.Errorf("stats: got %+v, want 1 reload, 2 failures, 1 unchanged", st)
	}
}

// TestReloadWhileWatching has SIGHUP-style reloads race the watcher's own;
// attempts are serialised, and a Reload after the last write leaves that
// write in force when it returns.
func TestReloadWhileWatching(t *testing.T) {
	h := newHarness(t, newConfigFile(t, configWithRate("10")), 5*time.Millisecond)
	h.run(t)
	for rate := 1; rate <= 5; rate++ {
		replaceFile(t, h.path, configWithRate(strconv.Itoa(rate)))
		if err := h.w.Reload(); err != nil {
			t.Fatalf("Reload: %v", err)
		}
		if got := rateOf(h.cur.Load()); got != int64(rate) {
			t.Fatalf("rate after Reload: got %d, want %d", got, rate)
		}
	}
	if st := h.w.Stats(); st.Reloads != 5 || st.Failures != 0 {
		t.Errorf("stats: got %+v, want 5 reloads (the watcher's own attempts find the content unchanged)", st)
	}
}

func TestWatcherConstruction(t *testing.T) {
	if _, err := NewWatcher(WatcherConfig{Loader: Loader{Path: "x"}}); err == nil {
		t.Errorf("nil current: got no error")
	}
	if _, err := NewWatcher(WatcherConfig{Loader: Loader{Path: "x"}, Current: &Current{}}); err == nil {
		t.Errorf("empty current: got no error")
	}
	snap := mustParse(t, minimalYAML)
	if _, err := NewWatcher(WatcherConfig{Current: NewCurrent(snap)}); err == nil {
		t.Errorf("no path: got no error")
	}

	h := newHarness(t, newConfigFile(t, minimalYAML), 0)
	h.run(t)
	if err := h.w.Run(context.Background()); err == nil {
		t.Errorf("second Run: got no error, want one")
	}
}
