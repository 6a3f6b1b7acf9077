#!/usr/bin/env bash
# Runs every test: GoogleTest through ctest, then pytest (unit, end to end, scenarios).
# Expects scripts/setup.sh --tests to have run. Exit status is non-zero if anything failed.
#
# pytest runs as TRACECORR_TEST_SHARDS processes side by side (default: 5
# when the CPUs are idle, else 1), which take whole modules from one queue
# (`pytest --claim DIR`, tests/py/conftest.py), heaviest first by their measured
# seconds, until none is left: they end together whatever the modules weigh on
# this machine. Most tests wait out a scenario's phases, a deadline or an
# emulated guest, so five share two CPUs: with four, the queue's 7 min 28 s
# left the CPUs 18 % idle, with five 6 min 13 s and 11 % (BENCHMARKS.md, "The
# writer's own time, and a stage per kill"). The first process takes the arm64
# guest (the long pole) and starts beside ctest. The few tests that act on
# every process of the host (marker `host_wide`: `tracecorr agent --all` sends
# to every agent it finds) then run before the queue opens to the other
# modules, so they never meet another test's targets (the guest's run under its
# own kernel).
set -uo pipefail
cd "$(dirname "$0")/.."
status=0

export TRACECORR_BUILD="$PWD/build"
pytest_args=(-p no:cacheprovider tests/py tests/scenarios -q -rfEsxX --durations=12)
# 5 means pytest collected nothing: that is a failure of the test command, not a pass.
# Side by side only on CPUs that are free: on a machine already busy (less
# than half its CPU time idle over a second, e.g. stress-ng beside it), the
# processes would starve each other's targets. Measured now, not by the load
# average, which still remembers the build that just ended.
cpu_idle_percent() {
  local a b
  a=$(awk '/^cpu /{print $5+$6, $2+$3+$4+$5+$6+$7+$8+$9}' /proc/stat)
  sleep 1
  b=$(awk '/^cpu /{print $5+$6, $2+$3+$4+$5+$6+$7+$8+$9}' /proc/stat)
  awk -v a="$a" -v b="$b" 'BEGIN { split(a, x, " "); split(b, y, " "); print int(100 * (y[1] - x[1]) / (y[2] - x[2] + 1e-9)) }'
}
shards="${TRACECORR_TEST_SHARDS:-}"
if [ -z "$shards" ]; then
  idle=$(cpu_idle_percent)
  shards=$([ "$idle" -lt 50 ] && echo 1 || echo 5)
  [ "$shards" = 1 ] && echo "== the CPUs are busy ($idle % idle over a second): one pytest process"
fi
if [ "$shards" = 1 ]; then
  echo "== ctest"
  ctest --test-dir build --output-on-failure -j2 || status=1
  echo "== pytest"
  /usr/bin/python3 -m pytest "${pytest_args[@]}" || status=1
  exit $status
fi

logs="$(mktemp -d /tmp/tracecorr-test-shards.XXXXXX)"
# Full conform runs overlap two sessions: conform's own default reads the load
# average, which the processes beside it keep at the CPU count.
export TRACECORR_TEST_CONFORM_SESSION_JOBS="${TRACECORR_TEST_CONFORM_SESSION_JOBS:-2}"
pids=()
trap 'kill -TERM "${pids[@]}" 2>/dev/null; wait; rm -rf "$logs"' EXIT
queue="$logs/queue"
mkdir "$queue"
start_process() {
  /usr/bin/python3 -m pytest "${pytest_args[@]}" -m "not host_wide" --claim "$queue" >"$logs/process-$1.log" 2>&1 &
  pids+=($!)
}
# The queue offers the arm64 guest's modules (SHARD_ALONE in tests/py/conftest.py)
# first and at once: process 1 takes them, beside ctest and the host-wide tests
# (its only process on the host is qemu-system-aarch64), then waits for the queue to open.
echo "== pytest: process 1 of $shards (the arm64 guest first) started"
start_process 1

echo "== ctest"
ctest --test-dir build --output-on-failure -j2 || status=1

echo "== pytest: the tests that act on every process of the host, alone"
/usr/bin/python3 -m pytest "${pytest_args[@]}" -m host_wide || status=1

echo "== pytest: $shards processes side by side, their output in turn"
touch "$queue/open"
for k in $(seq 2 "$shards"); do
  start_process "$k"
done
for k in $(seq 1 "$shards"); do
  wait "${pids[$((k - 1))]}" || status=1
  echo "== pytest: process $k of $shards"
  cat "$logs/process-$k.log"
done
exit $status
