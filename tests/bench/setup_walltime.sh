#!/usr/bin/env bash
# The README's main job from a fresh clone, timed: `bash scripts/setup.sh`
# (packages already installed: the apt step is timed apart, as the first run
# on a new machine pays it once) and then the first verdicts,
# `build/bin/tracecorr conform -- build/fixtures/x86_64/reference/tracecorr-fixture`.
#
#   bash tests/bench/setup_walltime.sh [--stress] [--tests]
#
# No compiler cache (CCACHE_DISABLE=1: setup.sh still names ccache as the
# launcher when the machine has it, and ccache then compiles without caching).
# --stress runs `stress-ng --cpu 2` beside it (started here, stopped here).
# --tests times `bash scripts/setup.sh --tests` after the main job instead
# (what the test command adds on top of it).
# Prints the load average before, the wall and CPU seconds of each step, the
# build steps ninja ran, and the size of the build tree.
set -euo pipefail
repo=$(cd "$(dirname "$0")/../.." && pwd)
stress=0
tests=0
for arg in "$@"; do
  case $arg in
    --stress) stress=1 ;;
    --tests) tests=1 ;;
    *) echo "usage: $0 [--stress] [--tests]" >&2; exit 2 ;;
  esac
done

clone=$(mktemp -d /tmp/tracecorr-setup-bench.XXXXXX)
stress_pid=""
cleanup() {
  [ -n "$stress_pid" ] && kill "$stress_pid" 2>/dev/null && wait "$stress_pid" 2>/dev/null
  rm -rf "$clone"
}
trap cleanup EXIT
git clone -q --no-hardlinks "$repo" "$clone/tracecorr"
cd "$clone/tracecorr"
git -C "$repo" diff --quiet HEAD || echo "setup-bench: note: $repo has uncommitted changes; the clone is of HEAD"
export CCACHE_DISABLE=1

echo "setup-bench: commit $(git rev-parse --short HEAD), $(nproc) CPUs, load before: $(cut -d' ' -f1-3 /proc/loadavg)"
if [ "$stress" = 1 ]; then
  stress-ng --cpu 2 --quiet &
  stress_pid=$!
  echo "setup-bench: stress-ng --cpu 2 beside (pid $stress_pid)"
fi

timed() {  # timed <label> <command...>: wall and CPU (user+sys of the children) seconds
  local label=$1 start end
  shift
  start=$(date +%s.%N)
  "$@"
  end=$(date +%s.%N)
  # CPU time of every finished child, from bash's own accounting (times). Not
  # in $(...): a command substitution's subshell has no children of its own.
  local cpu
  times >"$clone/times"
  cpu=$(tail -1 "$clone/times" | awk '{ split($1, u, "m"); split($2, s, "m"); sub("s", "", u[2]); sub("s", "", s[2]); print u[1] * 60 + u[2] + s[1] * 60 + s[2] }')
  echo "setup-bench: $label: $(awk -v a="$start" -v b="$end" 'BEGIN { printf "%.1f", b - a }') s wall, children's CPU so far ${cpu} s, load $(cut -d' ' -f1-3 /proc/loadavg)"
}

timed "setup.sh (main job)" bash scripts/setup.sh
echo "setup-bench: build steps run: $(wc -l < build/.ninja_log) (ninja log lines, header included)"
if [ "$tests" = 1 ]; then
  timed "setup.sh --tests (after the main job)" bash scripts/setup.sh --tests
  echo "setup-bench: build steps run: $(wc -l < build/.ninja_log) (ninja log lines, header included)"
else
  timed "first verdicts (tracecorr conform on the reference)" \
    build/bin/tracecorr conform --quiet -- build/fixtures/x86_64/reference/tracecorr-fixture
fi
echo "setup-bench: build tree $(du -sh build | cut -f1), tracecorr $(du -h build/bin/tracecorr | cut -f1)"
