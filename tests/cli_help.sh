#!/usr/bin/env bash
# Every subcommand answers --help and -h with its usage on standard output
# and exit status 0; an unknown option is a usage error (status 2) on
# standard error. The list of subcommands is read from `tessera --help`, so
# a new subcommand is checked without editing this file.
#
# Environment: TS_TESSERA (binary).
set -euo pipefail
: "${TS_TESSERA:?TS_TESSERA must point at the tessera binary}"
fail() { echo "cli_help: FAIL: $*" >&2; exit 1; }

top=$("$TS_TESSERA" --help) || fail "tessera --help exited $?"
grep -q '^usage: tessera' <<<"$top" || fail "tessera --help printed no usage"
cmds=$(sed -n 's/^  \([a-z]\+\) .*/\1/p' <<<"$top")
[ "$(wc -w <<<"$cmds")" -ge 6 ] || fail "tessera --help lists too few commands: $cmds"

for c in $cmds; do
    for flag in --help -h; do
        out=$("$TS_TESSERA" "$c" "$flag" 2>/dev/null) || fail "tessera $c $flag exited $?"
        grep -q "^usage: tessera $c" <<<"$out" || fail "tessera $c $flag: no usage on stdout"
    done
    rc=0
    "$TS_TESSERA" "$c" --no-such-option >/dev/null 2>"${TS_TMPDIR:-/tmp}/cli_help.err" || rc=$?
    [ "$rc" -eq 2 ] || fail "tessera $c --no-such-option exited $rc, not 2"
    grep -qi "usage" "${TS_TMPDIR:-/tmp}/cli_help.err" || fail "tessera $c --no-such-option: no usage on stderr"
done
echo "cli_help: $(wc -w <<<"$cmds") subcommands answer --help, -h and a bad option"
