package proxy

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain fails the package when a test leaves goroutines behind: every
// upstream, gateway server and transport must be closed by its test.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }
