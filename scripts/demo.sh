#!/usr/bin/env bash
# The weightfs demo: mount the default demo store read-write, write ~10 versions of a generated
# ~500 MB model through plain file writes (as a trainer does) and seal each with DONE, list the
# mount, read a version back through a second, read-only mount and compare hashes with an
# independent copy, print the log (stored vs logical bytes), and unmount everything.
set -euo pipefail
cd "$(dirname "$0")/.."

DEMO=${DEMO_DIR:-demo}            # the embedded default store lives here (git-ignored)
PARAMS=${DEMO_PARAMS:-250M}       # ~500 MB of bf16 weights
VERSIONS=${DEMO_VERSIONS:-10}
WFS=bin/weightfs
GEN=bin/weightfs-gen

step() { printf '\n\033[1m== %s\033[0m\n' "$*"; }

pids=()
cleanup() {
	for m in "$DEMO/ro" "$DEMO/mnt"; do
		if grep -qs " $(realpath -m "$m") " /proc/mounts; then umount "$m" 2>/dev/null || umount -l "$m" || true; fi
	done
	for p in "${pids[@]}"; do wait "$p" 2>/dev/null || true; done
}
trap cleanup EXIT

wait_mounted() {
	for _ in $(seq 1 100); do
		grep -qs " $(realpath -m "$1") " /proc/mounts && return 0
		sleep 0.1
	done
	echo "mount of $1 did not come up" >&2
	return 1
}

rm -rf "$DEMO"
mkdir -p "$DEMO/mnt" "$DEMO/ro" "$DEMO/check"

step "weightfs init $DEMO/store"
$WFS init "$DEMO/store"

step "weightfs mount $DEMO/store $DEMO/mnt   (read-write, the trainer's side)"
$WFS mount "$DEMO/store" "$DEMO/mnt" & pids+=($!)
wait_mounted "$DEMO/mnt"

step "the trainer writes $VERSIONS versions of a $PARAMS-parameter model into the mount, sealing each with DONE"
$GEN --params "$PARAMS" --lr 3e-6 --seed 1 --versions "$VERSIONS" --out "$DEMO/mnt" --done

step "ls -l $DEMO/mnt"
ls -l "$DEMO/mnt"
step "ls -l $DEMO/mnt/latest/"
ls -l "$DEMO/mnt/latest/"

step "weightfs mount --read-only $DEMO/store $DEMO/ro   (an inference node's side)"
$WFS mount --read-only --cache-dir "$DEMO/ro-cache" "$DEMO/store" "$DEMO/ro" & pids+=($!)
wait_mounted "$DEMO/ro"
ls "$DEMO/ro"

check=$(( VERSIONS > 3 ? 3 : VERSIONS ))
v=$(printf 'weight_v%06d' "$check")
step "regenerate $v independently and compare sha256sum with both mounts"
$GEN --params "$PARAMS" --lr 3e-6 --seed 1 --version-only "$check" --out "$DEMO/check/$v"
ok=1
for f in $(cd "$DEMO/check/$v" && ls); do
	a=$(sha256sum < "$DEMO/check/$v/$f" | cut -d' ' -f1)
	b=$(sha256sum < "$DEMO/mnt/$v/$f" | cut -d' ' -f1)
	c=$(sha256sum < "$DEMO/ro/$v/$f" | cut -d' ' -f1)
	if [ "$a" = "$b" ] && [ "$a" = "$c" ]; then echo "  $f  $a  identical"; else echo "  $f  MISMATCH $a $b $c"; ok=0; fi
done

last=$(printf 'weight_v%06d' "$VERSIONS")
step "what an engine that holds the previous version reads instead: $DEMO/ro/patches/ and $DEMO/ro/deltas/$last/"
ls -l "$DEMO/ro/patches/" | tail -n 3
ls -l "$DEMO/ro/deltas/$last/"
python3 -c 'import json,sys; m=json.load(open(sys.argv[1]))["metadata"]; print("  slime index metadata:", m)' "$DEMO/ro/deltas/$last/model.safetensors.index.json"

step "weightfs log $DEMO/store   (stored vs logical bytes per version)"
$WFS log "$DEMO/store"

step "unmount"
umount "$DEMO/ro"
umount "$DEMO/mnt"
for p in "${pids[@]}"; do wait "$p"; done
pids=()
[ "$ok" = 1 ] && echo "demo OK: every byte read back identical" || { echo "demo FAILED"; exit 1; }
