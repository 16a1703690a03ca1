#!/usr/bin/env bash
# make test: go test on every package, showing progress as it goes, leaving nothing behind.
#
# - Progress: go test -json goes through internal/testprogress, which prints each package's
#   own closing line (ok/FAIL) as it comes, every failing test with its output, each slow test
#   when it ends, and every two minutes of silence the tests still running.
# - Nothing left in /tmp: the tests run with TMPDIR set to one directory of this run, removed
#   at the end whatever happened. go test's -timeout exits without running the tests'
#   cleanups (t.TempDir, unmounts, stopping the daemons and the S3 server they started), so
#   after go test the mounts still under that directory are unmounted and the processes
#   started from it (their binaries or arguments name it) are stopped before it is removed.
# The exit status is go test's.
#
# Usage: scripts/test.sh [go test flags...]   (TEST_TIMEOUT, GO and TEST_PKGS (default ./...)
# from the environment)
set -uo pipefail
cd "$(dirname "$0")/.."
GO=${GO:-go}
timeout=${TEST_TIMEOUT:-45m}
work=$(mktemp -d "${TMPDIR:-/tmp}/weightfs-test-XXXXXX") || exit 1

cleanup() {
	local m pid n=0
	# Mounts first, deepest first: a lazy unmount lets their daemons exit.
	while read -r m; do
		fusermount3 -u -z "$m" 2>/dev/null || umount -l "$m" 2>/dev/null || true
		n=$((n + 1))
	done < <(awk -v d="$work/" 'index($2, d) == 1 { print $2 }' /proc/mounts | sort -r)
	for pid in $(grep -lsF "$work/" /proc/[0-9]*/cmdline | cut -d/ -f3); do
		[ "$pid" != $$ ] && kill "$pid" 2>/dev/null && n=$((n + 1))
	done
	[ "$n" -gt 0 ] && echo "make test: cleaned up $n mount(s) and process(es) the tests left running"
	rm -rf "$work"
}
trap cleanup EXIT

"$GO" build -o "$work/testprogress" ./internal/testprogress || exit 1
# Like /tmp: tests run programs as other users (setpriv --reuid nobody) that must reach
# their mounts and files below it, and mktemp makes its directory 0700.
mkdir "$work/tmp" && chmod 0755 "$work" && chmod 1777 "$work/tmp" || exit 1
echo "make test: go test -timeout $timeout, every package (temporary files in $work)"
TMPDIR="$work/tmp" "$GO" test -count=1 -timeout "$timeout" -json "$@" ${TEST_PKGS:-./...} | "$work/testprogress"
rc=${PIPESTATUS[0]}
exit "$rc"
