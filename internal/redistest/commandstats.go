package redistest

import (
	"strconv"
	"strings"
)

// CommandCount returns how often addr executed the named commands (lower
// case, as INFO commandstats names them: "evalsha", "eval"), or all commands
// when none are named, since start or the last ResetStats. The INFO call
// itself is not counted in its own reply.
func CommandCount(t TB, addr string, names ...string) int64 {
	t.Helper()
	info, err := Do(addr, "INFO", "commandstats")
	if err != nil {
		t.Fatalf("redistest: INFO commandstats on %s: %v", addr, err)
	}
	calls, err := parseCommandStats(info)
	if err != nil {
		t.Fatalf("redistest: %v", err)
	}
	var n int64
	if len(names) == 0 {
		for _, c := range calls {
			n += c
		}
		return n
	}
	for _, name := range names {
		n += calls[strings.ToLower(name)]
	}
	return n
}

// parseCommandStats reads lines "cmdstat_<name>:calls=N,usec=...".
func parseCommandStats(info string) (map[string]int64, error) {
	calls := make(map[string]int64)
	for _, line := range strings.Split(info, "\n") {
		line = strings.TrimSpace(line)
		name, rest, ok := strings.Cut(line, ":")
		if !ok || !strings.HasPrefix(name, "cmdstat_") {
			continue
		}
		for _, field := range strings.Split(rest, ",") {
			k, v, _ := strings.Cut(field, "=")
			if k != "calls" {
				continue
			}
			n, err := strconv.ParseInt(v, 10, 64)
			if err != nil {
				return nil, err
			}
			calls[strings.TrimPrefix(name, "cmdstat_")] = n
		}
	}
	return calls, nil
}

// ResetStats clears addr's command statistics (CONFIG RESETSTAT).
func ResetStats(t TB, addr string) {
	t.Helper()
	if _, err := Do(addr, "CONFIG", "RESETSTAT"); err != nil {
		t.Fatalf("redistest: CONFIG RESETSTAT on %s: %v", addr, err)
	}
}
