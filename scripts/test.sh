#!/usr/bin/env bash
# Runs every test: GoogleTest through ctest, then pytest (unit, end to end, scenarios).
# Expects scripts/setup.sh --tests to have run. Exit status is non-zero if anything failed.
#
# pytest runs as TRACECORR_TEST_SHARDS processes side by side (default: 4
# when the CPUs are idle, else 1), each `pytest --shard K/N`: whole modules
# dealt out by their measured seconds (tests/py/conftest.py). Most tests wait
# out a scenario's phases, a deadline or an emulated guest, so four share two
# CPUs. Shard 1 is the arm64 guest alone (the long pole): it starts first,
# beside ctest. The few tests that act on every process of the host (marker
# `host_wide`: `tracecorr agent --all` sends to every agent it finds) then run
# before the other shards start, so they never meet another test's targets
# (the guest's run under its own kernel).
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
  shards=$([ "$idle" -lt 50 ] && echo 1 || echo 4)
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
start_shard() {
  /usr/bin/python3 -m pytest "${pytest_args[@]}" -m "not host_wide" --shard "$1/$shards" >"$logs/shard-$1.log" 2>&1 &
  pids+=($!)
}
# Shard 1 holds the arm64 guest and nothing else (SHARD_ALONE in tests/py/conftest.py):
# the long pole, started before everything else. Its only process on the host is
# qemu-system-aarch64 (the guest's targets run under the guest's own kernel), so
# the host-wide tests still meet no other test's targets.
echo "== pytest: shard 1 of $shards (the arm64 guest) started"
start_shard 1

echo "== ctest"
ctest --test-dir build --output-on-failure -j2 || status=1

echo "== pytest: the tests that act on every process of the host, alone"
/usr/bin/python3 -m pytest "${pytest_args[@]}" -m host_wide || status=1

echo "== pytest: $shards processes side by side, their output in turn"
for k in $(seq 2 "$shards"); do
  start_shard "$k"
done
for k in $(seq 1 "$shards"); do
  wait "${pids[$((k - 1))]}" || status=1
  echo "== pytest: shard $k of $shards"
  cat "$logs/shard-$k.log"
done
exit $status
