#!/usr/bin/env bash
# bench/streams.sh - many concurrent streaming clients against one server.
# Starts tessera serve on 127.0.0.1 with the tiny model, opens N streaming
# completions at once (default 1000) from one client process, and prints how
# many completed, whether each id came back exactly once, and the wall time.
# Only 127.0.0.1; bounded (the client times out after 120 s per request).
set -euo pipefail
TESSERA=${TESSERA:-build/tessera}
N=${1:-1000}
dir=$(mktemp -d /tmp/tessera-streams.XXXXXX)
trap 'kill $pid 2>/dev/null || true; wait 2>/dev/null || true; rm -rf "$dir"' EXIT
"$TESSERA" mkmodel "$dir/tiny.gguf" --preset tiny --vocab 2000 >/dev/null 2>&1
"$TESSERA" keygen > "$dir/key"
cat > "$dir/s.yaml" <<YAML
listen: 127.0.0.1:1
limits: {max_connections: $((N + 64))}
models:
  - {name: tiny, path: $dir/tiny.gguf, kv_cache_bytes: 64MiB, max_seqs: 64, budget_max: 512}
tenants:
  - {name: load, tier: gold, key_sha256: $(awk '/sha256/{print $2}' "$dir/key")}
YAML
"$TESSERA" serve --config "$dir/s.yaml" --listen 127.0.0.1:0 > "$dir/log" 2>&1 &
pid=$!
for _ in $(seq 100); do grep -q listening "$dir/log" && break; sleep 0.1; done
port=$(grep -o '127.0.0.1:[0-9]*' "$dir/log" | head -1 | cut -d: -f2)
ulimit -n $((N + 256)) 2>/dev/null || true
/usr/bin/python3 "$(dirname "$0")/streams_client.py" "$port" "$(awk '/^key:/{print $2}' "$dir/key")" "$N"
kill -TERM $pid
wait $pid
