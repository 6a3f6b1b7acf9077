#!/usr/bin/env bash
# Runs every test: GoogleTest through ctest, then pytest (unit, end to end, scenarios).
# Expects scripts/setup.sh to have run. Exit status is non-zero if anything failed.
set -uo pipefail
cd "$(dirname "$0")/.."
status=0

echo "== ctest"
ctest --test-dir build --output-on-failure -j2 || status=1

echo "== pytest"
export TRACECORR_BUILD="$PWD/build"
/usr/bin/python3 -m pytest -p no:cacheprovider tests/py tests/scenarios -q -rfEs
rc=$?
# 5 means pytest collected nothing: that is a failure of the test command, not a pass.
[ $rc -eq 0 ] || status=1

exit $status
