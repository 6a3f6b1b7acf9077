#!/usr/bin/env bash
# Runs inside the clean root that test_deb_in_clean_root.sh makes (chroot, as
# root): installs the packages from /tmp/debs and runs the main job from the
# installed files. Arguments: <version> <dpkg architecture>.
set -euo pipefail
version=$1
arch=$2
fixtures=/usr/lib/tracecorr/fixtures
step() { echo "clean-root: $*"; }
fail() { echo "clean-root: FAILED: $*" >&2; exit 1; }

export DEBIAN_FRONTEND=noninteractive
step "apt-get install ./tracecorr_${version}_${arch}.deb ./python3-tracecorr_${version}_${arch}.deb python3-pytest"
cd /tmp/debs
apt-get update -qq
apt-get install -y -qq --no-install-recommends "./tracecorr_${version}_${arch}.deb" \
  "./python3-tracecorr_${version}_${arch}.deb" python3-pytest >/dev/null
cd /tmp

step "dpkg -L: every path is an installed one"
outside=$(dpkg -L tracecorr python3-tracecorr | grep -v -E '^(/\.|/usr(/.*)?)$' || true)
[ -z "$outside" ] || fail "dpkg -L lists paths outside /usr: $outside"
if dpkg -L tracecorr python3-tracecorr | grep -E '/(work|build|home|tmp)/'; then
  fail "dpkg -L lists a build-tree path"
fi
for f in /usr/share/man/man1/tracecorr.1.gz /usr/share/man/man1/tracecorr-conform.1.gz \
         /usr/share/bash-completion/completions/tracecorr /usr/share/doc/tracecorr/changelog.Debian.gz; do
  [ -s "$f" ] || fail "$f missing"
done

step "tracecorr --version"
[ "$(tracecorr --version)" = "tracecorr $version" ] || fail "tracecorr --version: $(tracecorr --version)"
size=$(stat -c %s /usr/bin/tracecorr)
step "/usr/bin/tracecorr is $size bytes"
[ "$size" -le $((20 * 1024 * 1024)) ] || fail "/usr/bin/tracecorr is over 20 MB"

step "tracecorr doctor"
tracecorr doctor || fail "tracecorr doctor exited $?"

step "tracecorr list"
tracecorr list >/tmp/list.txt || fail "tracecorr list exited $?"
for id in PROC-01 PCTX-01 TCTX-01; do
  grep -q "$id" /tmp/list.txt || fail "tracecorr list names no $id"
done

step "tracecorr inspect of the bundled Elastic reference"
TRACECORR_FIXTURE_JOURNAL=/tmp/journal.jsonl "$fixtures/reference/tracecorr-fixture" --hold --threads 3 \
  >/dev/null 2>&1 &
fixture=$!
trap 'kill "$fixture" 2>/dev/null || true' EXIT
for _ in $(seq 100); do
  grep -q '"event": *"ready"' /tmp/journal.jsonl 2>/dev/null && break
  sleep 0.1
done
tracecorr inspect "$fixture" | tee /tmp/inspect.txt
grep -q "static-offset" /tmp/inspect.txt && grep -q -A1 "^findings" /tmp/inspect.txt \
  && grep -A1 "^findings" /tmp/inspect.txt | grep -q "none" || fail "inspect: not the reference's report"
kill "$fixture"
wait "$fixture" 2>/dev/null || true

# A busy machine may leave a run inconclusive (exit 3, and says so): run it again, twice at most.
conform() {
  local status=0
  for _ in 1 2 3; do
    status=0
    tracecorr conform "$@" || status=$?
    [ "$status" = 3 ] || break
    step "inconclusive (exit 3): again"
  done
  return "$status"
}

step "tracecorr conform on the bundled reference (the main job)"
mkdir -p /tmp/reports
conform --junit /tmp/reports/junit.xml --html /tmp/reports/report.html --json /tmp/reports/report.json \
  -- "$fixtures/reference/tracecorr-fixture" || fail "conform on the reference exited $?"
for f in junit.xml report.html report.json; do
  [ -s "/tmp/reports/$f" ] || fail "conform wrote no $f"
done

step "one mutant of every protocol, judged by its own rule"
python3 - "$fixtures" >/tmp/mutants.txt <<'EOF'
import json, sys
from pathlib import Path
fixtures = Path(sys.argv[1])
for folder, program in (("", "tracecorr-fixture"), ("otel_process_context", "otel-ctx-writer"),
                        ("otel_thread_context", "otel-tctx-writer")):
    mutants = json.loads((fixtures / folder / "mutants" / "mutants.json").read_text())["mutants"]
    runtime = [m for m in mutants if "fault" in m]
    m = runtime[0]
    print(m["requirement"], fixtures / folder / "mutants" / m["name"] / program, *m.get("args", []))
EOF
while read -r requirement program args; do
  status=0
  # shellcheck disable=SC2086  # the mutant's arguments, one word each
  conform --quiet --only "$requirement" -- "$program" $args >/tmp/mutant.txt || status=$?
  [ "$status" = 1 ] || { cat /tmp/mutant.txt; fail "$program: exit $status, not 1 (a failure of $requirement)"; }
  step "$requirement fails on $program"
done </tmp/mutants.txt

step "python3 -m pytest --help shows the plugin's options"
python3 -m pytest --help >/tmp/pytest-help.txt
grep -q -- "--tracecorr-cmd" /tmp/pytest-help.txt || fail "pytest --help has no --tracecorr-cmd"
python3 -c 'import tracecorr; print("clean-root: python3 imports", tracecorr.__file__, len(tracecorr.protocols()), "protocols")'
step "all steps passed"
