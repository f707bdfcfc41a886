package certstore

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"time"

	"github.com/fsnotify/fsnotify"
)

// Run watches the directories of every file the store reads, and of the
// files their symlinks resolve to, and reloads once changes there have
// stopped for the debounce. Watching directories rather than files is what
// makes a replaced file visible: a Kubernetes Secret swaps its "..data"
// symlink, certbot its live/ links, an editor renames over the file. Run
// returns nil when ctx is done, having closed its watcher.
func (s *Store) Run(ctx context.Context) error {
	if !s.running.CompareAndSwap(false, true) {
		return errors.New("certstore: already running")
	}
	fw, err := fsnotify.NewWatcher()
	if err != nil {
		return fmt.Errorf("watching certificates: %w", err)
	}
	defer fw.Close()
	watched := map[string]bool{}
	s.follow(fw, watched)
	// A change between New and the watch above is seen here.
	_ = s.Reload()
	s.cfg.Logger.Info("watching certificates for changes", "dirs", len(watched))
	timer := time.NewTimer(s.cfg.Debounce)
	timer.Stop()
	for {
		select {
		case <-ctx.Done():
			timer.Stop()
			return nil
		case _, ok := <-fw.Events:
			if !ok {
				return errors.New("watching certificates: event stream closed")
			}
			timer.Reset(s.cfg.Debounce)
		case err, ok := <-fw.Errors:
			if !ok {
				return errors.New("watching certificates: error stream closed")
			}
			s.cfg.Logger.Warn("watching certificates", "error", err.Error())
		case <-timer.C:
			_ = s.Reload() // logged and counted by Reload
			s.follow(fw, watched)
		}
	}
}

// follow adds the directories not yet watched: each file's own, and that
// of the file it resolves to now.
func (s *Store) follow(fw *fsnotify.Watcher, watched map[string]bool) {
	var files []string
	for _, p := range s.cfg.Pairs {
		files = append(files, p.CertFile, p.KeyFile)
	}
	if s.cfg.ClientCAFile != "" {
		files = append(files, s.cfg.ClientCAFile)
	}
	for _, f := range files {
		dirs := []string{filepath.Dir(f)}
		if target, err := filepath.EvalSymlinks(f); err == nil {
			dirs = append(dirs, filepath.Dir(target))
		}
		for _, d := range dirs {
			if watched[d] {
				continue
			}
			if err := fw.Add(d); err != nil {
				s.cfg.Logger.Warn("watching certificate directory", "dir", d, "error", err.Error())
				continue
			}
			watched[d] = true
		}
	}
}
