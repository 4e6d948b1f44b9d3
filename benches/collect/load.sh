#!/usr/bin/env bash
# `wai collect` under a bounded load on loopback: a release collector (no TLS, no token) and
# wai-otlp-load sending BATCHES requests of 512 GenAI spans over 8 connections. Prints the load's
# line (spans/s, acknowledgement latency p50/p99/max, statuses), the collector's peak RSS, its
# CPU time, and what landed. A 503 is sent again after its Retry-After, as an exporter does, so
# spans/s is what the collector sustains, not what its buffer swallows.
#
#   benches/collect/load.sh [BATCHES] [CONNECTIONS]     # default 1000 (512,000 spans), 8
#
# Needs release binaries: cargo build --release --features testing --bin wai --bin wai-otlp-load
set -euo pipefail
batches=${1:-1000}
connections=${2:-8}
bin=${BIN:-target/release}
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
"$bin/wai" collect --lake "$dir/lake" --listen 127.0.0.1:0 --idle 2s 2> "$dir/log" &
pid=$!
for _ in $(seq 100); do grep -q listening "$dir/log" && break; sleep 0.05; done
port=$(grep -o '"address":"127.0.0.1:[0-9]*' "$dir/log" | grep -o '[0-9]*$')
"$bin/wai-otlp-load" --url "http://127.0.0.1:$port" --batches "$batches" --connections "$connections" --retry
peak=$(grep VmHWM "/proc/$pid/status" | awk '{print $2}')
cpu=$(awk '{print ($14 + $15) / 100}' "/proc/$pid/stat")
sleep 3
kill -TERM "$pid"
wait "$pid" || true
echo "{\"collector_peak_rss_mb\": $((peak / 1024)), \"collector_cpu_s_during_load\": $cpu}"
grep '"event":"stopped"' "$dir/log"
