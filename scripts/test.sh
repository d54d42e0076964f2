#!/usr/bin/env bash
# Runs PhotoVault's whole test suite: installs what the tests need (Debian packages),
# builds, and runs every test (unit tests and real FUSE mounts driven by real tools).
# Needs root for the mount tests (CI runs as root) and /dev/fuse.
set -euo pipefail
# A step that fails must say so: CI shows only this script's output.
trap 'echo "test.sh: failed (exit $?) at line $LINENO: $BASH_COMMAND" >&2' ERR
cd "$(dirname "$0")/.."
export PATH="/opt/swift/usr/bin:$PATH"
bash scripts/deps.sh test
if [ ! -e /dev/fuse ]; then
  modprobe fuse 2>/dev/null || true
  [ -e /dev/fuse ] || mknod -m 666 /dev/fuse c 10 229 2>/dev/null || true
fi
[ -e /dev/fuse ] || { echo "test.sh: /dev/fuse is missing: the mount tests cannot run" >&2; exit 1; }
# Leftover mounts from an interrupted run would make tests fail confusingly.
# (No match is the normal case: grep's exit 1 must not end the run under pipefail.)
{ grep -E ' fuse\.photovault ' /proc/self/mountinfo 2>/dev/null || true; } | awk '{print $5}' |
  while read -r m; do fusermount3 -uz "$m" || true; done
# The toolchain (swift-build and every swiftc it starts) leaves a TemporaryDirectory.XXXXXX
# in $TMPDIR on each run, a few per invocation and one per compile job, never removed (the
# tests themselves make none): the run gets a TMPDIR of its own, removed at the end. The
# tests keep their sandboxes and mounts in /tmp itself, not in TMPDIR.
run_tmp=$(mktemp -d /tmp/pv-test-tmp.XXXXXX)
trap 'rm -rf --one-file-system "$run_tmp"' EXIT
export TMPDIR=$run_tmp
swift build 2>&1 | tail -n 3
log=$(mktemp)
set +e
swift test 2>&1 | tee "$log"
rc=${PIPESTATUS[0]}
set -e
echo
echo "== PhotoVault test summary =="
grep -E "Executed [0-9]+ tests?, with [0-9]+ failures?" "$log" | tail -n 1 || true
grep -E "Test run with [0-9]+ tests" "$log" | tail -n 1 || true
rm -f "$log"
exit "$rc"
