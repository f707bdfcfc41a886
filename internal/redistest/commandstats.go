package redistest

import (
	"fmt"
	"strconv"
	"strings"
	"time"
)

// CommandCount returns how often addr executed the named commands (lower
// case, as INFO commandstats names them: "evalsha", "eval"), or all commands
// when none are named, since start or the last ResetStats. The INFO call
// itself is not counted in its own reply.
func CommandCount(t TB, addr string, names ...string) int64 {
	t.Helper()
	return commandStat(t, addr, names).Calls
}

// CommandTime returns how many calls of the named commands addr executed
// and the time it spent in them, as CommandCount counts them. The time is
// Redis's own (INFO's usec): what a script costs the server, without the
// network or the client.
func CommandTime(t TB, addr string, names ...string) CommandStat {
	t.Helper()
	return commandStat(t, addr, names)
}

// CommandStat is one line of INFO commandstats, or their sum.
type CommandStat struct {
	Calls int64
	Usec  int64
}

func commandStat(t TB, addr string, names []string) CommandStat {
	t.Helper()
	info, err := Do(addr, "INFO", "commandstats")
	if err != nil {
		t.Fatalf("redistest: INFO commandstats on %s: %v", addr, err)
	}
	stats, err := parseCommandStats(info)
	if err != nil {
		t.Fatalf("redistest: %v", err)
	}
	var sum CommandStat
	add := func(c CommandStat) { sum.Calls, sum.Usec = sum.Calls+c.Calls, sum.Usec+c.Usec }
	if len(names) == 0 {
		for _, c := range stats {
			add(c)
		}
		return sum
	}
	for _, name := range names {
		add(stats[strings.ToLower(name)])
	}
	return sum
}

// parseCommandStats reads lines "cmdstat_<name>:calls=N,usec=M,...".
func parseCommandStats(info string) (map[string]CommandStat, error) {
	stats := make(map[string]CommandStat)
	for _, line := range strings.Split(info, "\n") {
		line = strings.TrimSpace(line)
		name, rest, ok := strings.Cut(line, ":")
		if !ok || !strings.HasPrefix(name, "cmdstat_") {
			continue
		}
		var c CommandStat
		for _, field := range strings.Split(rest, ",") {
			k, v, _ := strings.Cut(field, "=")
			var dst *int64
			switch k {
			case "calls":
				dst = &c.Calls
			case "usec":
				dst = &c.Usec
			default:
				continue
			}
			n, err := strconv.ParseInt(v, 10, 64)
			if err != nil {
				return nil, fmt.Errorf("commandstats %s: %s: %w", name, k, err)
			}
			*dst = n
		}
		stats[strings.TrimPrefix(name, "cmdstat_")] = c
	}
	return stats, nil
}

// ResetStats clears addr's command statistics (CONFIG RESETSTAT).
func ResetStats(t TB, addr string) {
	t.Helper()
	if _, err := Do(addr, "CONFIG", "RESETSTAT"); err != nil {
		t.Fatalf("redistest: CONFIG RESETSTAT on %s: %v", addr, err)
	}
}

// CPU returns the CPU time addr's server has spent since it started (INFO
// cpu: used_cpu_user + used_cpu_sys): all of it, reading, writing and its
// event loop included, where CommandTime counts the commands alone.
func CPU(t TB, addr string) time.Duration {
	t.Helper()
	info, err := Do(addr, "INFO", "cpu")
	if err != nil {
		t.Fatalf("redistest: INFO cpu on %s: %v", addr, err)
	}
	d, err := ParseCPU(info)
	if err != nil {
		t.Fatalf("redistest: %v", err)
	}
	return d
}

// ParseCPU reads INFO cpu's used_cpu_user + used_cpu_sys (not the
// children's: a fork for a snapshot is not the server serving).
func ParseCPU(info string) (time.Duration, error) {
	var s float64
	n := 0
	for _, line := range strings.Split(info, "\n") {
		k, v, _ := strings.Cut(strings.TrimSpace(line), ":")
		if k != "used_cpu_user" && k != "used_cpu_sys" {
			continue
		}
		f, err := strconv.ParseFloat(v, 64)
		if err != nil {
			return 0, fmt.Errorf("INFO cpu line %q: %w", line, err)
		}
		s, n = s+f, n+1
	}
	if n != 2 {
		return 0, fmt.Errorf("INFO cpu: found %d of used_cpu_user and used_cpu_sys", n)
	}
	return time.Duration(s * float64(time.Second)), nil
}
