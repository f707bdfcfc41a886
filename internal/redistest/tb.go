package redistest

import (
	"fmt"
	"os"
	"sync"
	"testing"
)

// TB is the part of testing.TB the servers need: *testing.T and *testing.B
// are TBs, and so is a Main, for a TestMain (package examples run there
// before any test has a T).
type TB interface {
	Helper()
	Fatalf(format string, args ...any)
	TempDir() string
	Cleanup(func())
}

// Main is a TB for a TestMain: Fatalf panics, Close runs the cleanups and
// removes the temporary directories. Use it from one goroutine.
type Main struct {
	mu       sync.Mutex
	dirs     []string
	cleanups []func()
}

// Helper does nothing.
func (m *Main) Helper() {}

// Fatalf panics with the message: a TestMain has no test to fail.
func (m *Main) Fatalf(format string, args ...any) { panic(fmt.Sprintf(format, args...)) }

// Fatal panics with the message, as Fatalf does.
func (m *Main) Fatal(args ...any) { panic(fmt.Sprint(args...)) }

// TempDir returns a new temporary directory, removed by Close.
func (m *Main) TempDir() string {
	dir, err := os.MkdirTemp("", "redistest")
	if err != nil {
		m.Fatalf("redistest: %v", err)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	m.dirs = append(m.dirs, dir)
	return dir
}

// Cleanup registers f to run at Close, last registered first.
func (m *Main) Cleanup(f func()) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.cleanups = append(m.cleanups, f)
}

// Close stops what was started and removes the directories.
func (m *Main) Close() {
	m.mu.Lock()
	cleanups, dirs := m.cleanups, m.dirs
	m.cleanups, m.dirs = nil, nil
	m.mu.Unlock()
	for i := len(cleanups) - 1; i >= 0; i-- {
		cleanups[i]()
	}
	for _, d := range dirs {
		os.RemoveAll(d)
	}
}

// RunWithServer is a TestMain's body for a package whose examples share one
// redis-server: it starts the server, sets *addr to its address, runs m,
// stops the server and returns m's exit code.
func RunWithServer(m *testing.M, addr *string) int {
	main := &Main{}
	defer main.Close()
	*addr = Start(main).Addr()
	return m.Run()
}
