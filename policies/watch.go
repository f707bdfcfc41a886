package policies

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/fsnotify/fsnotify"
)

// DefaultDebounce is how long the watcher waits after the last change to the
// file before reloading: editors and ConfigMap updates change a file in
// several steps, and one reload should see the end result.
const DefaultDebounce = 100 * time.Millisecond

// maxDebounceFactor bounds how long a stream of change events can postpone
// reading the file: at most this many debounce periods after the first.
const maxDebounceFactor = 10

// DefaultSettle is how long the file's content must stay the same before the
// watcher applies it. A file rewritten in place in several writes can be
// valid YAML half-way (a cut-off "per: 1m" defaults to 1s); waiting until
// two reads this far apart agree keeps such a half from being applied.
const DefaultSettle = time.Second

// WatcherConfig configures a Watcher.
type WatcherConfig struct {
	// Loader says what to reload; Loader.Path is required. It may be a
	// symlink (a Kubernetes ConfigMap mount) and may be replaced by rename.
	Loader Loader
	// Current receives each new snapshot; required, and it must already
	// hold the snapshot loaded from Loader.Path (its Digest tells the
	// watcher which content is in force).
	Current *Current
	// Debounce is the quiet time after a change event before the file is
	// read; zero means DefaultDebounce.
	Debounce time.Duration
	// Settle is how long new content must stay unchanged (same bytes, same
	// modification time) before the watcher applies it; zero means
	// DefaultSettle, a negative value applies content as soon as it is read.
	// Reload (SIGHUP) does not wait: it is the operator saying the file is
	// complete.
	Settle time.Duration
	// Logger receives reload results; nil means slog.Default().
	Logger *slog.Logger
	// OnReload, if set, is called after every attempt that found new content
	// or could not read the file: with the new snapshot (already in force)
	// and a nil error, or with a nil snapshot and the reason the old one
	// stays. cmd uses it to drop the buckets of limits that are gone.
	OnReload func(*Snapshot, error)
	// OnEvent, if set, is called after every attempt, including the ones
	// skipped because the content was unchanged and the ones that found new
	// content still settling, with the details.
	OnEvent func(ReloadEvent)
}

// ReloadEvent describes one reload attempt.
type ReloadEvent struct {
	// Snapshot is the new snapshot in force; nil when the attempt failed or
	// the content was unchanged.
	Snapshot *Snapshot
	// Previous is the snapshot that was in force before the attempt.
	Previous *Snapshot
	// Err is why the attempt failed; the previous snapshot stays in force.
	Err error
	// Unchanged is true when the file had the content last loaded (or last
	// rejected), so nothing was parsed. OnReload is not called for these.
	Unchanged bool
	// Settling is true when the watcher found new content that has not yet
	// stayed the same for the settle time; it reads the file again then.
	// Nothing was parsed; OnReload is not called for these.
	Settling bool
	// RestartRequired lists changed settings that are not applied until the
	// process restarts (see RestartRequired).
	RestartRequired []string
}

// WatchStats counts reload attempts since the watcher was made.
type WatchStats struct {
	Reloads   uint64 // snapshots swapped in
	Failures  uint64 // attempts rejected; the old snapshot stayed
	Unchanged uint64 // attempts skipped because the content was seen before
	LastError string // the latest failure ("" if none)
}

// Watcher reloads the configuration file into a Current when the file
// changes (Run) or when asked (Reload, which cmd calls on SIGHUP). Each
// reload reads the file once, parses it with a fresh koanf instance, builds a
// whole Snapshot and swaps it in; a failed reload keeps the old snapshot, is
// logged with file and place, and is counted. Run applies new content only
// once it has stayed the same for the settle time, so a file being written
// in several steps is not applied half-way. A path that is not a regular
// file (a FIFO, a device) is refused without blocking. The hooks of WatcherConfig run
// on the goroutine that attempted the reload (Run's, or Reload's caller), one
// attempt at a time, and must not call Reload. Watcher is safe for concurrent
// use; Run may be called once.
type Watcher struct {
	cfg     WatcherConfig
	path    string // as given, for messages
	abs     string
	current *Current
	logger  *slog.Logger
	now     func() time.Time

	reloadMu   sync.Mutex // serialises attempts and their OnReload calls
	lastDigest [32]byte   // guarded by reloadMu

	statsMu sync.Mutex
	stats   WatchStats

	running   atomic.Bool
	ready     chan struct{}
	readyOnce sync.Once
}

// NewWatcher returns a Watcher for cfg. It starts nothing.
func NewWatcher(cfg WatcherConfig) (*Watcher, error) {
	if cfg.Current == nil || cfg.Current.Load() == nil {
		return nil, errors.New("policies: watcher needs a current snapshot")
	}
	if cfg.Loader.Path == "" {
		return nil, errors.New("policies: watcher needs a config path")
	}
	abs, err := filepath.Abs(cfg.Loader.Path)
	if err != nil {
		return nil, fmt.Errorf("watching config: %w", err)
	}
	if cfg.Debounce <= 0 {
		cfg.Debounce = DefaultDebounce
	}
	switch {
	case cfg.Settle == 0:
		cfg.Settle = DefaultSettle
	case cfg.Settle < 0:
		cfg.Settle = 0
	}
	logger := cfg.Logger
	if logger == nil {
		logger = slog.Default()
	}
	return &Watcher{
		cfg:        cfg,
		path:       cfg.Loader.Path,
		abs:        abs,
		current:    cfg.Current,
		logger:     logger,
		lastDigest: cfg.Current.Load().Digest,
		ready:      make(chan struct{}),
		now:        time.Now,
	}, nil
}

// Stats returns the counters so far.
func (w *Watcher) Stats() WatchStats {
	w.statsMu.Lock()
	defer w.statsMu.Unlock()
	return w.stats
}

// Ready is closed once Run watches the file, so a change made after it is
// seen.
func (w *Watcher) Ready() <-chan struct{} { return w.ready }

// Reload reads the file and, if its content is new, swaps in the snapshot
// built from it. It returns the reason a new content was rejected, and nil
// when the content was applied or unchanged. It does not wait for the
// content to settle.
func (w *Watcher) Reload() error {
	w.reloadMu.Lock()
	defer w.reloadMu.Unlock()
	f, err := w.read()
	if err != nil {
		return w.report(w.readFailed(err))
	}
	return w.report(w.attempt(f))
}

// read reads the config file and the keys file of the snapshot in force,
// whose digests together say whether anything changed. A keys file that
// cannot be read now is left for the load to read again: it names the
// error, unless the new config names no keys file. reloadMu is held.
func (w *Watcher) read() (configFile, error) {
	f, err := readConfig(w.path)
	if err != nil {
		return f, err
	}
	path := w.current.Load().Tenants.KeysFile
	if path == "" {
		return f, nil
	}
	keys, err := readKeys(path)
	if err != nil {
		f.digest = sha256.Sum256(append(f.digest[:], err.Error()...))
		return f, nil
	}
	f.keys, f.digest = keys, sourceDigest(f.digest, keys)
	return f, nil
}

// report hands ev to the hooks and returns its error. reloadMu is held.
func (w *Watcher) report(ev ReloadEvent) error {
	if w.cfg.OnReload != nil && !ev.Unchanged && !ev.Settling {
		w.cfg.OnReload(ev.Snapshot, ev.Err)
	}
	if w.cfg.OnEvent != nil {
		w.cfg.OnEvent(ev)
	}
	return ev.Err
}

func (w *Watcher) readFailed(err error) ReloadEvent {
	ev := ReloadEvent{Previous: w.current.Load(), Err: fmt.Errorf("reloading config: %w", err)}
	w.fail(ev.Err)
	return ev
}

// unchanged reports whether f holds the content last loaded or rejected,
// counting and logging it if so. reloadMu is held.
func (w *Watcher) unchanged(f configFile) bool {
	if f.digest != w.lastDigest {
		return false
	}
	w.statsMu.Lock()
	w.stats.Unchanged++
	w.statsMu.Unlock()
	w.logger.Debug("config unchanged, not reloaded", "file", w.path)
	return true
}

// attempt parses f and swaps in its snapshot, unless its content is the one
// last loaded or rejected. reloadMu is held.
func (w *Watcher) attempt(f configFile) ReloadEvent {
	prev := w.current.Load()
	ev := ReloadEvent{Previous: prev}
	if w.unchanged(f) {
		ev.Unchanged = true
		return ev
	}
	// Remember rejected content too: parsing it again would fail again.
	w.lastDigest = f.digest
	snap, err := Parse(w.cfg.Loader.Path, f.data, Options{Env: w.cfg.Loader.Env, Builtins: w.cfg.Loader.Builtins, keys: f.keys})
	if err != nil {
		ev.Err = err
		w.fail(err)
		return ev
	}
	// The same as f.digest, unless the config now names another keys
	// file, which the load read itself.
	w.lastDigest = snap.Digest
	ev.Snapshot = snap
	ev.RestartRequired = RestartRequired(prev.Config, snap.Config)
	w.current.Store(snap)
	w.statsMu.Lock()
	w.stats.Reloads++
	w.statsMu.Unlock()
	w.logger.Info("config reloaded", "file", w.path, "routes", len(snap.Routes), "policies", len(snap.Policies))
	LogWarnings(w.logger, snap)
	if len(ev.RestartRequired) > 0 {
		w.logger.Warn("config changes that need a restart were not applied",
			"file", w.path, "settings", strings.Join(ev.RestartRequired, ", "))
	}
	return ev
}

// LogWarnings logs each of snap's warnings at WARN level.
func LogWarnings(log *slog.Logger, snap *Snapshot) {
	for _, fe := range snap.Warnings {
		log.Warn("config warning", "warning", fe.Error())
	}
}

// pendingChange is new content Run has read but not applied yet: it waits
// until the file has held it for the settle time.
type pendingChange struct {
	file  configFile
	since time.Time // when this content was first read
}

// check is Run's reload attempt: it applies the file's content only once it
// has stayed the same for the settle time. It returns how long to wait
// before checking again (0: nothing pending).
func (w *Watcher) check(pending *pendingChange) (time.Duration, *pendingChange) {
	w.reloadMu.Lock()
	defer w.reloadMu.Unlock()
	f, err := w.read()
	if err != nil {
		_ = w.report(w.readFailed(err)) // logged and counted
		return 0, nil
	}
	now := w.now()
	switch {
	case w.unchanged(f):
		// Back to the content in force (or just applied by Reload).
		_ = w.report(ReloadEvent{Previous: w.current.Load(), Unchanged: true})
		return 0, nil
	case pending == nil || !pending.file.sameAs(f):
		pending = &pendingChange{file: f, since: now}
	}
	if wait := w.cfg.Settle - now.Sub(pending.since); wait > 0 {
		w.logger.Debug("config changed; waiting for it to settle", "file", w.path, "bytes", len(f.data), "wait", wait)
		_ = w.report(ReloadEvent{Previous: w.current.Load(), Settling: true})
		return wait, pending
	}
	_ = w.report(w.attempt(f))
	return 0, nil
}

func (w *Watcher) fail(err error) {
	w.statsMu.Lock()
	w.stats.Failures++
	w.stats.LastError = err.Error()
	w.statsMu.Unlock()
	w.logger.Error("config reload failed; keeping the previous config", "file", w.path, "error", err.Error())
}

// Run watches the file's directory until ctx is done. After each burst of
// change events (the debounce) it reads the file, and applies new content
// once a read the settle time later finds it unchanged; a change in between
// starts the wait again. Watching the directory rather than the file is what
// makes an editor's write-then-rename and a ConfigMap's "..data" symlink swap
// visible: both replace the file instead of writing to it. When the path is a
// symlink, the directory of its target is watched as well. Run returns nil
// when ctx is done, having closed the underlying watcher.
func (w *Watcher) Run(ctx context.Context) error {
	if !w.running.CompareAndSwap(false, true) {
		return errors.New("policies: watcher already running")
	}
	fw, err := fsnotify.NewWatcher()
	if err != nil {
		return fmt.Errorf("watching config: %w", err)
	}
	defer fw.Close()

	dir := filepath.Dir(w.abs)
	if err := fw.Add(dir); err != nil {
		return fmt.Errorf("watching config directory %s: %w", dir, err)
	}
	watched := map[string]bool{dir: true}
	target := w.followTarget(fw, watched, "")
	keys := w.followKeys(fw, watched)
	w.logger.Info("watching config for changes", "file", w.path, "debounce", w.cfg.Debounce, "settle", w.cfg.Settle)
	w.readyOnce.Do(func() { close(w.ready) })

	timer := time.NewTimer(w.cfg.Debounce)
	timer.Stop()
	var deadline time.Time // of the pending read; zero when none is pending
	var pending *pendingChange
	for {
		select {
		case <-ctx.Done():
			timer.Stop()
			return nil
		case ev, ok := <-fw.Events:
			if !ok {
				return errors.New("watching config: event stream closed")
			}
			if !w.relevant(ev.Name, target) && !keys.relevant(ev.Name) {
				continue
			}
			now := w.now()
			if deadline.IsZero() {
				deadline = now.Add(maxDebounceFactor * w.cfg.Debounce)
			}
			timer.Reset(min(w.cfg.Debounce, deadline.Sub(now)))
		case err, ok := <-fw.Errors:
			if !ok {
				return errors.New("watching config: error stream closed")
			}
			w.logger.Warn("watching config", "file", w.path, "error", err.Error())
		case <-timer.C:
			deadline = time.Time{}
			var wait time.Duration
			wait, pending = w.check(pending) // the result is logged, counted and reported to the hooks
			if wait > 0 {
				timer.Reset(wait)
			}
			target = w.followTarget(fw, watched, target)
			keys = w.followKeys(fw, watched)
		}
	}
}

// followTarget watches the directory of the file the path resolves to, when
// that is elsewhere, and stops watching the previous one. It returns the
// resolved path ("" if it cannot be resolved now).
func (w *Watcher) followTarget(fw *fsnotify.Watcher, watched map[string]bool, old string) string {
	target, err := filepath.EvalSymlinks(w.abs)
	if err != nil {
		return old
	}
	home := filepath.Dir(w.abs)
	if old != "" && filepath.Dir(old) != home && filepath.Dir(old) != filepath.Dir(target) {
		_ = fw.Remove(filepath.Dir(old)) // the directory may be gone already (a ConfigMap's old version)
		delete(watched, filepath.Dir(old))
	}
	if d := filepath.Dir(target); !watched[d] {
		if err := fw.Add(d); err != nil {
			w.logger.Warn("watching config target directory", "dir", d, "error", err.Error())
		} else {
			watched[d] = true
		}
	}
	return target
}

// keysWatch is what Run watches of the keys file in force: its path and
// the path it resolves to, each a file or a directory.
type keysWatch struct {
	paths []string
}

// followKeys watches the directory of the keys file in force (the
// directory itself when it is one) and that of the path it resolves to.
// Directories watched before stay watched: an event there is only read.
func (w *Watcher) followKeys(fw *fsnotify.Watcher, watched map[string]bool) keysWatch {
	path := w.current.Load().Tenants.KeysFile
	if path == "" {
		return keysWatch{}
	}
	abs, err := filepath.Abs(path)
	if err != nil {
		return keysWatch{}
	}
	kw := keysWatch{paths: []string{abs}}
	if target, err := filepath.EvalSymlinks(abs); err == nil && target != abs {
		kw.paths = append(kw.paths, target)
	}
	for _, p := range kw.paths {
		dirs := []string{filepath.Dir(p)}
		if fi, err := os.Stat(p); err == nil && fi.IsDir() {
			dirs = append(dirs, p)
		}
		for _, d := range dirs {
			if watched[d] {
				continue
			}
			if err := fw.Add(d); err != nil {
				w.logger.Warn("watching keys file directory", "dir", d, "error", err.Error())
				continue
			}
			watched[d] = true
		}
	}
	return kw
}

// relevant reports whether a change to name may change the keys: the keys
// file, or anything inside the keys directory.
func (kw keysWatch) relevant(name string) bool {
	for _, p := range kw.paths {
		if name == p || filepath.Base(name) == filepath.Base(p) || filepath.Dir(name) == p {
			return true
		}
	}
	return false
}

// relevant reports whether a change to name may change the configuration:
// the file itself, its symlink target, or Kubernetes' "..data" machinery.
func (w *Watcher) relevant(name, target string) bool {
	base := filepath.Base(name)
	return base == filepath.Base(w.abs) ||
		(target != "" && base == filepath.Base(target)) ||
		strings.HasPrefix(base, "..")
}
