// Package heaptest reads the Go heap for tests that bound memory: the live
// heap once garbage is gone, and the GOGC in force.
package heaptest

import (
	"runtime"
	"runtime/metrics"
	"testing"
)

// Live is the heap in use after two collections (the second frees what the
// first's finalizers released).
func Live() uint64 {
	runtime.GC()
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.HeapAlloc
}

// GOGC reads the GOGC percentage in force without changing it.
func GOGC(t testing.TB) int {
	t.Helper()
	s := []metrics.Sample{{Name: "/gc/gogc:percent"}}
	metrics.Read(s)
	if s[0].Value.Kind() != metrics.KindUint64 {
		t.Fatalf("runtime does not report /gc/gogc:percent")
	}
	return int(s[0].Value.Uint64())
}
