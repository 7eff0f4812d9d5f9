# npm_cache.sh - sourced by script tests that run an npm package as their
# independent reference (the OpenAI SDK, Hugging Face tokenizers and Jinja).
#
#   npm_cache_install TEST PKG@VER...   installs the packages once into the
#                                       shared cache and sets NPM_CACHE_DIR;
#                                       node_modules lies under it.
#
# The cache is TESSERA_NPM_CACHE, else ~/.cache/tessera-npm; a lock keeps
# concurrent test runs from installing into it at once. A package that cannot
# be installed (no node, no registry) FAILS the calling test, saying why: a
# skipped reference test would pass silently exactly when nobody looks.

npm_cache_fail() { echo "$1: FAIL: $2" >&2; exit 1; }

# Is the exact version PKG@VER (or, for PKG@MAJOR, any MAJOR.x) installed?
npm_cache_have() {
    local spec=$1 name ver
    name=${spec%@*}; ver=${spec##*@}
    [ -n "$name" ] || { name=$spec; ver=""; }
    node -e 'const [dir, name, want] = process.argv.slice(1);
             let v; try { v = require(dir + "/node_modules/" + name + "/package.json").version; }
             catch (e) { process.exit(1); }
             process.exit(!want || v === want || v.startsWith(want + ".") ? 0 : 1)' \
        "$NPM_CACHE_DIR" "$name" "$ver" 2>/dev/null
}

npm_cache_install() {
    local test=$1; shift
    command -v node >/dev/null || npm_cache_fail "$test" "node is not installed (scripts/deps.sh installs nodejs and npm)"
    command -v npm >/dev/null || npm_cache_fail "$test" "npm is not installed (scripts/deps.sh installs nodejs and npm)"
    local major
    major=$(node -p 'process.versions.node.split(".")[0]')
    [ "$major" -ge 18 ] || npm_cache_fail "$test" "node $(node --version) is too old; the references need 18 or newer"
    NPM_CACHE_DIR="${TESSERA_NPM_CACHE:-${HOME:-$TS_TMPDIR}/.cache/tessera-npm}"
    mkdir -p "$NPM_CACHE_DIR" 2>/dev/null || NPM_CACHE_DIR="$TS_TMPDIR/tessera-npm"
    mkdir -p "$NPM_CACHE_DIR"
    export NPM_CACHE_DIR
    (
        flock -w 300 9 || npm_cache_fail "$test" "timed out waiting for the lock on $NPM_CACHE_DIR"
        local want=() p
        for p in "$@"; do npm_cache_have "$p" || want+=("$p"); done
        [ ${#want[@]} -eq 0 ] && exit 0
        echo "$test: installing ${want[*]} into $NPM_CACHE_DIR"
        timeout 600 npm install --prefix "$NPM_CACHE_DIR" --no-audit --no-fund --loglevel=error "${want[@]}" ||
            npm_cache_fail "$test" "cannot install ${want[*]} into $NPM_CACHE_DIR: is the npm registry reachable? (npm's messages above)"
        for p in "${want[@]}"; do
            npm_cache_have "$p" || npm_cache_fail "$test" "npm finished but $p is not in $NPM_CACHE_DIR"
        done
    ) 9>"$NPM_CACHE_DIR/.lock" || exit 1
}
