package main

import (
	"os"
	"strings"
	"testing"
)

// adminListenEnv gives every gateway a test starts an admin listener on a
// free port: several run at once, and the default 127.0.0.1:9090 may be
// taken on the machine.
const adminListenEnv = "GATEWAY_ADMIN_LISTEN=127.0.0.1:0"

func TestMain(m *testing.M) {
	name, value, _ := strings.Cut(adminListenEnv, "=")
	if _, set := os.LookupEnv(name); !set {
		os.Setenv(name, value)
	}
	code := m.Run()
	if binDir != "" { // buildGateway's
		os.RemoveAll(binDir)
	}
	os.Exit(code)
}
