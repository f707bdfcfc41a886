package main

import (
	"fmt"
	"os/exec"
)

// pinning is where the load generators (wrk, the open-loop generator) and
// the servers run: taskset prefixes, nil for no pinning.
type pinning struct {
	generator, servers []string
	about              string
}

// resolvePin reads -pin: "auto" pins on 4 CPUs or more, "on" on 2 or more,
// "off" never. Pinned, the generators share the last CPU and the servers
// get the others.
func resolvePin(mode string, cpus int) (pinning, error) {
	var on bool
	switch mode {
	case "auto":
		on = cpus >= 4
	case "on":
		if cpus < 2 {
			return pinning{}, fmt.Errorf("-pin on: %d CPU, nothing to pin apart", cpus)
		}
		on = true
	case "off":
	default:
		return pinning{}, fmt.Errorf("-pin %q: want auto, on or off", mode)
	}
	if !on {
		return pinning{about: fmt.Sprintf("none (-pin %s, %d CPUs): generators and servers share every CPU", mode, cpus)}, nil
	}
	if _, err := exec.LookPath("taskset"); err != nil {
		return pinning{}, fmt.Errorf("-pin %s: taskset (util-linux) not found: %w", mode, err)
	}
	gen := fmt.Sprint(cpus - 1)
	srv := "0"
	if cpus > 2 {
		srv = fmt.Sprintf("0-%d", cpus-2)
	}
	return pinning{
		generator: []string{"taskset", "-c", gen},
		servers:   []string{"taskset", "-c", srv},
		about:     fmt.Sprintf("load generators on CPU %s, servers on CPU %s (taskset)", gen, srv),
	}, nil
}
