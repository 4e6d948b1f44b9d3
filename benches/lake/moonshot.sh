#!/usr/bin/env bash
# The batch-job issue's moonshot: N rows of `wai gen` JSONL through convert -> grade (a SQL
# judge) -> pass-at by tier -> markers -> compare against a second run -> hack-scan ->
# decontaminate against 5k eval items -> select (rl) -> export (openai), as one `wai run`, then
# as nine separate commands on the same files. Prints wall time, peak RSS, each stage's time and
# bytes read, and the ratio.
#
#   benches/lake/moonshot.sh [ROWS] [DIR]     # ROWS default 1000000 (2.4 GB of JSONL)
#   SHAPE=reference benches/lake/moonshot.sh   # rows as the reference writes them (no messages)
#   SEPARATE=0 benches/lake/moonshot.sh        # the one run only, not the nine commands after it
#
# Needs a release `wai` on PATH or in $WAI (cargo build --release). DIR (default a temp folder)
# needs about 3.5 GB per million rows; it is removed at the end unless named.
set -euo pipefail
rows=${1:-1000000}
wai=${WAI:-wai}
if [[ -n "${2:-}" ]]; then dir=$2; keep=1; mkdir -p "$dir"; else dir=$(mktemp -d); keep=0; fi
trap '[[ $keep == 1 ]] || rm -rf "$dir"' EXIT
cd "$dir"
mkdir -p in
timed() { /usr/bin/time -f "%e s wall, %U s user, %S s sys, %M KB peak" "$@"; }

shape=(--shape "${SHAPE:-wai}")
[[ -f in/night.jsonl ]] || "$wai" -q gen "${shape[@]}" --rows "$rows" --seed 1 -o in/night.jsonl
[[ -f base.parquet ]] || "$wai" -q gen "${shape[@]}" --rows "$rows" --seed 2 -o base.parquet
[[ -f evals.jsonl ]] || "$wai" -q gen "${shape[@]}" --rows 5000 --seed 3 -o evals.jsonl
echo "input: $(du -h in/night.jsonl | cut -f1) of JSONL, $rows rows, shape ${SHAPE:-wai}"

cat > pipeline.toml <<'TOML'
lake = "lake"
gates = ["pass_at.pass_at_1 >= 0.3", "hack_scan.regime != 'reward_hack'"]
[input]
paths = ["in/*.jsonl"]
[[stage]]
run = "convert"
[[stage]]
run = "grade"
judge = ["sql:CASE WHEN reward > 0.5 THEN 1 ELSE 0 END"]
[[stage]]
run = "pass-at"
by = ["dims.tier"]
[[stage]]
run = "markers"
[[stage]]
run = "compare"
baseline = "base.parquet"
[[stage]]
run = "hack-scan"
[[stage]]
run = "decontaminate"
against = ["evals.jsonl"]
[[stage]]
run = "select"
mode = "rl"
[[stage]]
run = "export"
format = "openai"
TOML

rm -rf lake
sync
echo "== one wai run"
start=$(date +%s.%N)
timed "$wai" -q run pipeline.toml
whole=$(echo "$(date +%s.%N) - $start" | bc)
python3 - <<'PY'
import json
m = json.load(open("lake/_wai/manifest.json"))
for s in m["runs"][-1]["stages"]:
    sc = s.get("scans")
    shared = f'  {sc["from_memory"]} of {sc["scans"]} scans from memory' if sc else ''
    print(f'  {s["name"]:14} {s["elapsed_s"]:7.1f} s  {s["bytes_read"] / 1e6:9.1f} MB read{shared}')
PY

if [[ "${SEPARATE:-1}" == 0 ]]; then exit 0; fi   # SEPARATE=0: the run alone (less disk)
echo "== nine commands"
judge='sql:CASE WHEN reward > 0.5 THEN 1 ELSE 0 END'
start=$(date +%s.%N)
timed bash -c "
set -e
$wai -q convert in/night.jsonl -o sep-rows.parquet
$wai -q grade sep-rows.parquet --judge \"$judge\" -o sep-scored.parquet
$wai -q pass-at sep-scored.parquet --by dims.tier
$wai -q markers sep-scored.parquet
$wai -q compare base.parquet sep-scored.parquet || true
$wai -q hack-scan sep-scored.parquet || true
$wai -q decontaminate sep-scored.parquet --against evals.jsonl -o sep-kept.parquet
$wai -q select sep-kept.parquet --mode rl -o sep-selected.parquet
$wai -q export sep-selected.parquet --format openai -o sep-train.jsonl
"
separate=$(echo "$(date +%s.%N) - $start" | bc)
printf 'one run %.1f s, nine commands %.1f s: ratio %.2f\n' "$whole" "$separate" "$(echo "$whole / $separate" | bc -l)"
