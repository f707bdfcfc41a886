#!/usr/bin/env bash
# Instructions a request of the in-process serving benchmarks, under
# callgrind: (the count at 1,200 requests − the count at 200) / 1,000, the
# smaller of two runs, one sub-benchmark a process.
#
#   bench/callgrind.sh [REV]    # REV: a commit to measure instead of the work tree
#
# Debian 12's valgrind (3.19) cannot execute RDTSCP, which Go's runtime runs
# in runtime.cputicks when one of its locks is contended (sysmon, mostly):
# the test binary's RDTSCP is replaced by RDTSC; NOP, which reads the same
# counter without the serialisation, and changes no instruction count of
# the gateway's own code.
set -euo pipefail
top=$(git rev-parse --show-toplevel)
out=$(mktemp -d)
trap 'rm -rf "$out"; [ -n "${tree:-}" ] && git -C "$top" worktree remove --force "$tree"' EXIT
src=$top
if [ $# -gt 0 ]; then
	tree=$out/tree
	git -C "$top" worktree add -q --detach "$tree" "$1"
	src=$tree
fi
# The benchmarks live beside proxy/h1's server and transport; before that,
# in proxy.
pkg=./proxy/h1/
[ -f "$src/proxy/h1/servetargets_bench_test.go" ] || pkg=./proxy/
(cd "$src" && go test -c -o "$out/proxy.test" "$pkg")
python3 - "$out/proxy.test" <<'PY'
import re, subprocess, sys
path = sys.argv[1]
nm = subprocess.run(["go", "tool", "nm", path], capture_output=True, text=True, check=True).stdout
addr = int(next(l for l in nm.splitlines() if re.search(r" runtime\.cputicks(\.abi0)?$", l)).split()[0], 16)
sec = subprocess.run(["readelf", "-SW", path], capture_output=True, text=True, check=True).stdout
va, off = (int(x, 16) for x in re.search(r"\.text\s+PROGBITS\s+([0-9a-f]+)\s+([0-9a-f]+)", sec).groups())
b = bytearray(open(path, "rb").read())
i = b.find(b"\x0f\x01\xf9", addr - va + off, addr - va + off + 64)
if i >= 0:
    b[i:i + 3] = b"\x0f\x31\x90"
    open(path, "wb").write(b)
PY
count() { # sub-benchmark, requests -> instructions of the whole run
	GOGC=off GOMAXPROCS=1 GODEBUG=memprofilerate=0,asyncpreemptoff=1 valgrind --tool=callgrind \
		--callgrind-out-file="$out/cg" "$out/proxy.test" -test.run '^$' -test.bench "$1" -test.benchtime "$2x" >"$out/log" 2>&1
	grep -q ns/op "$out/log" || { cat "$out/log" >&2; exit 1; }
	awk '/^summary:/ {print $2}' "$out/cg"
}
for b in '^BenchmarkServeTargets$/^nopolicy$' '^BenchmarkServeTargets$/^local$' '^BenchmarkServeTargets$/^nopolicy-post$' \
	'^BenchmarkServeTargets$/^llm$' '^BenchmarkServeTargets$/^llm-new-prompt$' '^BenchmarkServeDenied$/^gateway$' '^BenchmarkServeDenied$/^gateway-lean$' '^BenchmarkServeDenied$/^bare$' \
	'^BenchmarkServeTargets$/^local-stdserver$' '^BenchmarkServeTargets$/^local-standard$' '^BenchmarkServeTargets$/^local-stdboth$'; do
	best=
	for _ in 1 2; do
		v=$((($(count "$b" 1200) - $(count "$b" 200)) / 1000))
		if [ -z "$best" ] || [ "$v" -lt "$best" ]; then best=$v; fi
	done
	printf '%-45s %8d instructions a request\n' "$b" "$best"
done
