#!/usr/bin/env bash
# What `wai lake compact` buys: NIGHTS nightly runs of ROWS rows each (a grade, a pass-at over
# every row so far, markers over every row so far), then the lake copied and the copy compacted,
# and reads of both timed in alternating pairs: a `wai sql --lake` over every scored row, the
# canned pass@1 trend, and one more night (its measures read every row so far).
#
#   benches/lake/compact.sh [NIGHTS] [ROWS] [DIR]     # default 60 nights of 5000 rows
#
# Needs a release `wai` on PATH or in $WAI, and farm-bench.
set -euo pipefail
nights=${1:-60}
rows=${2:-5000}
wai=${WAI:-wai}
if [[ -n "${3:-}" ]]; then dir=$3; keep=1; mkdir -p "$dir"; else dir=$(mktemp -d); keep=0; fi
trap '[[ $keep == 1 ]] || rm -rf "$dir"' EXIT
cd "$dir"
mkdir -p in
pipeline() {
  cat > "$1.toml" <<TOML
lake = "$1"
[input]
paths = ["in/*.parquet"]
[[stage]]
run = "grade"
judge = ["sql:CASE WHEN reward > 0.5 THEN 1 ELSE 0 END"]
[[stage]]
run = "pass-at"
over = "all"
[[stage]]
run = "markers"
over = "all"
TOML
}
pipeline plain
for n in $(seq 1 "$nights"); do
  # Each night other rollouts of the same tasks: the rollout ids are made unique by the seed.
  "$wai" -q gen --rows "$rows" --seed "$n" -o "in/night-$n.parquet"
  "$wai" -q run plain.toml >/dev/null || true
done
cp -r plain packed
pipeline packed
"$wai" lake compact packed
echo "files: $(find plain -name '*.parquet' | wc -l) before, $(find packed -name '*.parquet' | wc -l) after"
q="SELECT count(*) AS n, avg(reward) AS r FROM scored"
farm-bench -n 5 --timeout 600 --vs "$wai -q sql --lake plain \"$q\"" -- "$wai" -q sql --lake packed "$q" | grep -E 'wall|peak|A/B'
farm-bench -n 5 --timeout 600 --vs "$wai -q sql --lake plain -Q lake_pass_at_trend" -- "$wai" -q sql --lake packed -Q lake_pass_at_trend | grep -E 'wall|peak|A/B'
# One more night on each, measured once each (a night cannot be run twice).
"$wai" -q gen --rows "$rows" --seed $((nights + 1)) -o "in/night-$((nights + 1)).parquet"
for lake in plain packed; do
  /usr/bin/time -f "$lake: one more night %e s wall, %M KB peak" "$wai" -q run "$lake.toml" >/dev/null || true
done
