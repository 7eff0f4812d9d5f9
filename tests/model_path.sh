#!/usr/bin/env bash
# A model path that names something other than a regular file is refused at
# once with "<path>: not a regular file (<kind>)" and a non-zero status, by
# `tessera generate` and by `tessera serve --model` (issue 11: a FIFO hung
# start-up in open(), waiting for a writer that never comes). Every command
# runs under `timeout 10`, so a regression fails here instead of hanging.
#
# Environment: TS_TESSERA (binary), TS_TMPDIR (scratch).
set -euo pipefail
: "${TS_TESSERA:?TS_TESSERA must point at the tessera binary}"
: "${TS_TMPDIR:?TS_TMPDIR must name a scratch folder}"
W="$TS_TMPDIR/model_path"
fail() { echo "model_path: FAIL: $*" >&2; exit 1; }
rm -rf "$W"
mkdir -p "$W/dir"
mkfifo "$W/model.fifo"

# expect KIND PATH COMMAND...: the command fails fast, saying PATH is no
# regular file but a KIND.
expect() {
    local kind=$1 path=$2 rc=0
    shift 2
    timeout 10 "$@" >"$W/out" 2>"$W/err" </dev/null || rc=$?
    [ "$rc" -ne 124 ] || fail "$* still waiting after 10 s"
    [ "$rc" -ne 0 ] || fail "$* succeeded"
    grep -qF "$path: not a regular file ($kind)" "$W/err" || fail "$*: stderr is '$(cat "$W/err")'"
    ! grep -q "listening" "$W/out" || fail "$* listened"
    echo "model_path: $1 $2 ... $kind: status $rc, $(cat "$W/err")"
}

for p in "fifo $W/model.fifo" "character device /dev/null" "directory $W/dir"; do
    kind=${p% *}
    path=${p##* }
    expect "$kind" "$path" "$TS_TESSERA" generate --model "$path" --prompt hi -n 1
    expect "$kind" "$path" "$TS_TESSERA" serve --model "$path" --listen 127.0.0.1:0
done
echo "model_path: PASS"
