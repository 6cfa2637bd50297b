#!/usr/bin/env bash
# The main job on the embedded default (SQLite + a local object folder under
# ./.tenure): checkpoint a folder, change it, checkpoint again, restore both
# versions elsewhere and show they match.
set -euo pipefail
export TENURE_DATA="${TENURE_DATA:-$PWD/.tenure/demo}"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
src="$work/project"
mkdir -p "$src/src" "$src/empty"
printf 'print("hello from tenure")\n' > "$src/src/main.py"
chmod +x "$src/src/main.py"
head -c 3000000 /dev/urandom > "$src/data.bin"
ln -s src/main.py "$src/entry"
name="demo-$(date +%s)"

echo "== workspace create $name"
tenure workspace create "$name"
echo "== checkpoint (first: everything is new)"
tenure workspace checkpoint "$name" --from "$src"
echo "== checkpoint again (unchanged: the head is kept, nothing is read)"
tenure workspace checkpoint "$name" --from "$src"
echo "== edit one file and checkpoint (only the change is stored)"
printf 'print("edited")\n' >> "$src/src/main.py"
tenure workspace checkpoint "$name" --from "$src"
echo "== snapshots"
tenure snapshot list "$name"
echo "== restore the head elsewhere and compare"
tenure workspace restore "$name" --to "$work/restored"
diff -r --no-dereference "$src" "$work/restored" && echo "restored copy is identical"
echo "== verify the head snapshot"
head_id="$(tenure --json workspace list | python3 -c "import json,sys; print([w['head_snapshot_id'] for w in json.load(sys.stdin) if w['name']=='$name'][0])")"
tenure snapshot verify "$head_id"
echo "demo finished: data in $TENURE_DATA"
