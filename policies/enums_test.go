package policies

import (
	"testing"

	"github.com/ratelimit-gateway/gateway/limiter"
)

// Each name of a closed list reads back as itself through UnmarshalText and
// MarshalText, and the empty text leaves the zero value (the default).
func TestNamesRoundTrip(t *testing.T) {
	check := func(name string, text string, u interface {
		UnmarshalText([]byte) error
		MarshalText() ([]byte, error)
	}) {
		t.Helper()
		if err := u.UnmarshalText([]byte(text)); err != nil {
			t.Fatalf("%s %q: %v", name, text, err)
		}
		got, err := u.MarshalText()
		if err != nil || string(got) != text {
			t.Errorf("%s: got %q (%v), want %q", name, got, err, text)
		}
	}
	for _, n := range append(limiter.Algorithms, "") {
		check("algorithm", string(n), new(limiter.Algorithm))
	}
	for _, n := range append(limiter.FailureModes, "") {
		check("failure mode", string(n), new(limiter.FailureMode))
	}
	for _, n := range append(Costs, "") {
		check("cost", string(n), new(Cost))
	}
	for _, n := range append(RateLimitHeaderSets, "") {
		check("rate-limit headers", string(n), new(RateLimitHeaders))
	}
	for _, n := range append(Modes, "") {
		check("mode", string(n), new(Mode))
	}
	for _, n := range append(OnLimits, "") {
		check("on_limit", string(n), new(OnLimit))
	}
	for _, n := range append(Charges, "") {
		check("charge", string(n), new(Charge))
	}
	for _, n := range append(Windows, "") {
		check("window", string(n), new(Window))
	}
	for _, n := range append(OnConflicts, "") {
		check("on_conflict", string(n), new(OnConflict))
	}
	for _, n := range append(MissingKeys, "") {
		check("missing key", string(n), new(MissingKey))
	}
	for _, n := range append(UpstreamTransports, "") {
		check("upstream transport", string(n), new(UpstreamTransport))
	}
	for _, n := range append(ClientServers, "") {
		check("client server", string(n), new(ClientServer))
	}
	for _, n := range append(Enforces, "") {
		check("enforce", string(n), new(Enforce))
	}
	for _, n := range append(UnsizedInputs, "") {
		check("unsized input", string(n), new(UnsizedInput))
	}
	var a limiter.Algorithm = limiter.GCRA
	if err := a.UnmarshalText([]byte("GCRA")); err == nil || a != limiter.GCRA {
		t.Errorf("got %q, %v; want an error and the value kept", a, err)
	}
}
