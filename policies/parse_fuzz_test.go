package policies

import (
	"os"
	"strings"
	"testing"
)

// FuzzParse feeds arbitrary files and GATEWAY_ variables to the loader: a
// config is either compiled or refused with an error, never a panic, and a
// refusal always names the file.
func FuzzParse(f *testing.F) {
	for _, path := range []string{"../gateway.yaml", "../gateway.redis.yaml"} {
		data, err := os.ReadFile(path)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(data, "")
	}
	f.Add([]byte(minimalYAML), "GATEWAY_POLICIES_PER_IP_RATE=x")
	f.Add([]byte("routes: 7\npolicies: [1, {a: b}]\n"), "GATEWAY_ROUTES_0_UPSTREAM=")
	f.Add([]byte("server: {listen: [1,2]}\nroutes: [{policies: {}}]\n"), "GATEWAY_SERVER_TRUSTED_PROXIES=,,")
	f.Fuzz(func(t *testing.T, data []byte, env string) {
		snap, err := Parse("fuzz.yaml", data, Options{Env: []string{env}})
		switch {
		case err == nil && snap == nil:
			t.Fatal("got neither a snapshot nor an error")
		case err != nil && snap != nil:
			t.Fatalf("got a snapshot and an error: %v", err)
		case err == nil && len(snap.Routes) == 0:
			t.Fatal("compiled a config without routes")
		case err != nil && !strings.Contains(err.Error(), "fuzz.yaml") && !strings.Contains(err.Error(), "GATEWAY_"):
			t.Fatalf("error names neither the file nor the variable: %v", err)
		}
	})
}
