#!/usr/bin/env bash
# The cost of --cluster on one host (issue #40): 1M `wai gen` rows through pass-at, compare, a
# GROUP BY task_id query and decontaminate (against 5,000 eval rows), alone and on 2 local
# workers, alternating, ROUNDS rounds; and the bytes
# each command sends over loopback (the workers' fragments, results and shuffles: /proc/net/dev's
# `lo` counters, so run it on a quiet machine).
#
#   benches/cluster/overhead.sh [ROWS] [ROUNDS] [DIR]
set -euo pipefail
rows=${1:-1000000}
rounds=${2:-3}
dir=${3:-$(mktemp -d)}
wai=${WAI:-$HOME/.cache/wai-target/release/wai}
mkdir -p "$dir"
cd "$dir"
[ -f a.parquet ] || "$wai" gen -n "$rows" --seed 1 -o a.parquet >/dev/null
[ -f b.parquet ] || "$wai" gen -n "$rows" --seed 2 -o b.parquet >/dev/null
# decontaminate's eval set: 5,000 rows of another seed.
[ -f eval.jsonl ] || "$wai" gen -n 5000 --seed 3 -o eval.jsonl >/dev/null
pids=()
trap 'kill "${pids[@]}" 2>/dev/null || true' EXIT
for i in 1 2; do
    "$wai" worker --listen 127.0.0.1:0 2>"worker$i.log" &
    pids+=($!)
done
for i in 1 2; do
    until grep -q listening "worker$i.log"; do sleep 0.1; done
done
cluster=$(grep -h listening worker*.log | sed 's/.*"address":"\([^"]*\)".*/\1/' | paste -sd,)
lo_bytes() { awk '$1 == "lo:" { print $2 }' /proc/net/dev; }
run() { # name, then the command
    local name=$1 start end before after
    shift
    before=$(lo_bytes)
    start=$(date +%s.%N)
    "$@" >/dev/null
    end=$(date +%s.%N)
    after=$(lo_bytes)
    printf '%s\t%.2f s\t%s loopback bytes\n' "$name" "$(echo "$end - $start" | bc)" "$((after - before))"
}
query="SELECT task_id, count(*) AS n, avg(reward) AS r FROM rows GROUP BY task_id ORDER BY task_id"
for round in $(seq "$rounds"); do
    echo "round $round"
    run "pass-at local" "$wai" pass-at a.parquet --by dims.tier
    run "pass-at cluster" "$wai" pass-at a.parquet --by dims.tier --cluster "$cluster"
    run "compare local" "$wai" compare a.parquet b.parquet
    run "compare cluster" "$wai" compare a.parquet b.parquet --cluster "$cluster"
    run "sql local" "$wai" sql -t a.parquet "$query" --format csv
    run "sql cluster" "$wai" sql -t a.parquet "$query" --format csv --cluster "$cluster"
    run "decontaminate local" "$wai" decontaminate a.parquet --against eval.jsonl -o kept-local.parquet
    run "decontaminate cluster" "$wai" decontaminate a.parquet --against eval.jsonl -o kept-cluster.parquet --cluster "$cluster"
    cmp kept-local.parquet kept-cluster.parquet
done
echo "fragments taken: $(grep -c '"task"' worker1.log) and $(grep -c '"task"' worker2.log)"
