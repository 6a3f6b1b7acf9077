#!/usr/bin/env bash
# Runs every test: GoogleTest through ctest, then pytest (unit, end to end, scenarios).
# Expects scripts/setup.sh to have run. Exit status is non-zero if anything failed.
#
# pytest runs as two processes side by side: the conform matrices (marker
# `matrix`: many conform runs, each mostly waiting out its scenario's phases)
# and everything else. The few tests that act on every process of the host
# take tests/support/host_lock.py's lock exclusively, so they never meet a
# matrix run's target. TRACECORR_TEST_SERIAL=1 (or a load average already at
# the CPU count) runs one pytest process; =0 forces two.
set -uo pipefail
cd "$(dirname "$0")/.."
status=0

echo "== ctest"
ctest --test-dir build --output-on-failure -j2 || status=1

export TRACECORR_BUILD="$PWD/build"
pytest_args=(-p no:cacheprovider tests/py tests/scenarios -q -rfEs --durations=12)
# 5 means pytest collected nothing: that is a failure of the test command, not a pass.
# Side by side only on CPUs that are free: on a machine already busy (less
# than half its CPU time idle over a second, e.g. stress-ng beside it), the
# two would starve each other's targets. Measured now, not by the load
# average, which still remembers the build that just ended.
cpu_idle_percent() {
  local a b
  a=$(awk '/^cpu /{print $5+$6, $2+$3+$4+$5+$6+$7+$8+$9}' /proc/stat)
  sleep 1
  b=$(awk '/^cpu /{print $5+$6, $2+$3+$4+$5+$6+$7+$8+$9}' /proc/stat)
  awk -v a="$a" -v b="$b" 'BEGIN { split(a, x, " "); split(b, y, " "); print int(100 * (y[1] - x[1]) / (y[2] - x[2] + 1e-9)) }'
}
serial="${TRACECORR_TEST_SERIAL:-}"
if [ -z "$serial" ]; then
  idle=$(cpu_idle_percent)
  serial=$([ "$idle" -lt 50 ] && echo 1 || echo 0)
  [ "$serial" = 1 ] && echo "== the CPUs are busy ($idle % idle over a second): one pytest process"
fi
if [ "$serial" = 1 ]; then
  echo "== pytest"
  /usr/bin/python3 -m pytest "${pytest_args[@]}" || status=1
  exit $status
fi

TRACECORR_TEST_HOST_LOCK="$(mktemp -d /tmp/tracecorr-host-lock.XXXXXX)"
export TRACECORR_TEST_HOST_LOCK
# The CPUs were idle: a full conform run overlaps two sessions at a time (conform's own
# default reads the load average, which the two processes keep at the CPU count).
export TRACECORR_TEST_CONFORM_SESSION_JOBS="${TRACECORR_TEST_CONFORM_SESSION_JOBS:-2}"
matrix_log="$TRACECORR_TEST_HOST_LOCK/matrix.log"
echo "== pytest: the conform matrices (in the background, their output after the rest)"
/usr/bin/python3 -m pytest "${pytest_args[@]}" -m matrix >"$matrix_log" 2>&1 &
matrix_pid=$!
# Interrupted: the background pytest goes too (its conform runs stop their targets).
trap 'kill -TERM "$matrix_pid" 2>/dev/null; wait "$matrix_pid" 2>/dev/null; rm -rf "$TRACECORR_TEST_HOST_LOCK"' EXIT

echo "== pytest: everything else"
/usr/bin/python3 -m pytest "${pytest_args[@]}" -m "not matrix" || status=1

wait "$matrix_pid" || status=1
echo "== pytest: the conform matrices"
cat "$matrix_log"
exit $status
