#!/usr/bin/env bash
# Per-call `hookstate feedback claim` latency and claims/s with 1 and 4 concurrent processes,
# beside the legacy moonshine claim (mv <id>.json -> .claiming.<pid>, jq rewrite, mv back, rm) on
# the same machine in the same run. Prints one line per measure; never pass/fail.
# Usage: bash scripts/bench-feedback-claim.sh [COMMENTS]   (build first: cargo build --release -p hookstate)
set -euo pipefail
cd "$(dirname "$0")/.."
n=${1:-200}
bin=target/release/hookstate
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

ms() { date +%s%N; }
report() { # name count start end latencies-file
  python3 - "$@" <<'PY'
import sys
name, count, start, end, lat = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]), sys.argv[5]
xs = sorted(float(l) for l in open(lat) if l.strip())
p = lambda q: xs[min(len(xs) - 1, int(q * len(xs)))]
secs = (end - start) / 1e9
print(f"{name}: claims={count} claims_per_s={count / secs:.1f} p50_ms={p(0.5):.2f} p99_ms={p(0.99):.2f}")
PY
}

setup_store() {
  local db=$1
  for i in $(seq 1 "$n"); do
    "$bin" --db "$db" feedback --project bench add --target '{"kind":"block","path":"a.md"}' "c$i" >/dev/null
  done
}

claim_loop() { # db latencies-file count
  for _ in $(seq 1 "$3"); do
    local t0; t0=$(ms)
    "$bin" --db "$1" feedback --project bench claim >/dev/null
    echo "$(( ($(ms) - t0) ))" | awk '{ print $1 / 1e6 }' >> "$2"
  done
}

setup_store "$work/one.redb"
start=$(ms); claim_loop "$work/one.redb" "$work/lat1" "$n"; end=$(ms)
report "hookstate feedback claim, 1 process" "$n" "$start" "$end" "$work/lat1"

setup_store "$work/four.redb"
start=$(ms)
for w in 1 2 3 4; do claim_loop "$work/four.redb" "$work/lat4" $((n / 4)) & done
wait; end=$(ms)
report "hookstate feedback claim, 4 processes" "$n" "$start" "$end" "$work/lat4"

# The legacy protocol: one bash + jq claim per comment, exactly the Stop hook's steps.
fb=$work/legacy/.feedback; mkdir -p "$fb"
for i in $(seq 1 "$n"); do
  printf '{\n  "id": "fb_%s",\n  "status": "pending",\n  "deliveredAt": null\n}\n' "$i" > "$fb/fb_$i.json"
done
legacy_claim() { # file
  bash -c 'f=$1; c="$f.claiming.$$"; mv "$f" "$c" 2>/dev/null || exit 0
    jq --arg now "$(date -u +%Y-%m-%dT%H:%M:%SZ)" ".status=\"delivered\" | .deliveredAt=\$now" "$c" > "$c.tmp" \
      && mv "$c.tmp" "$f" && rm -f "$c"' _ "$1"
}
start=$(ms)
for i in $(seq 1 "$n"); do
  t0=$(ms); legacy_claim "$fb/fb_$i.json"; echo "$(( $(ms) - t0 ))" | awk '{ print $1 / 1e6 }' >> "$work/latl"
done
end=$(ms)
report "legacy bash+jq rename claim, 1 process (not durable)" "$n" "$start" "$end" "$work/latl"
