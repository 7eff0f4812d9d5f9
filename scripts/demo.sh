#!/usr/bin/env bash
# make demo: start tessera serve on the demo configuration and print
# ready-to-paste requests for the three demo tenants. Ctrl-C stops it
# (gracefully: in-flight requests finish first).
set -euo pipefail
TESSERA=${1:?usage: demo.sh path/to/tessera}
cd "$(dirname "$0")/.."
URL=http://127.0.0.1:8080
cat <<MSG
tessera demo: three tenants share one synthetic 15M-parameter model (random
weights, so the text is gibberish; any llama/qwen2 GGUF works in its place).
Demo keys (never use them in production):
  gold-team    tsk-demo-gold     (TTFT target 200 ms, served first)
  silver-team  tsk-demo-silver   (TTFT target 500 ms, 10% minimum share)
  bronze-team  tsk-demo-bronze   (best effort, 5% minimum share, rate-limited)
  admin        tsk-demo-admin
  metrics      tsk-demo-metrics  (reads /metrics only)

Try, from another terminal:
  curl -s $URL/v1/completions -H 'Authorization: Bearer tsk-demo-gold' -H 'Content-Type: application/json' \\
       -d '{"model":"demo","prompt":"Once upon a time","max_tokens":32}'
  curl -sN $URL/v1/chat/completions -H 'Authorization: Bearer tsk-demo-silver' -H 'Content-Type: application/json' \\
       -d '{"model":"demo","messages":[{"role":"user","content":"Hello!"}],"max_tokens":32,"stream":true}'
  curl -s $URL/admin/tenants -H 'Authorization: Bearer tsk-demo-admin'
  curl -s $URL/metrics -H 'Authorization: Bearer tsk-demo-metrics' | grep tessera_ttft

MSG
exec "$TESSERA" serve --config examples/demo.yaml
