//! Integration tests: one binary, one module per area.

// Tests unwrap freely: a failed unwrap is a failed test, with its location.
#![allow(clippy::unwrap_used)]

mod cli; // exit codes and messages of the binary, as snapshots
mod cluster; // wai worker and --cluster: three workers on 127.0.0.1 give the local answers; a dead worker, another version
mod collect; // wai collect: the real OTLP exporter into it, kill -9, backpressure, bad requests
mod compact; // wai lake compact: every query and the next nights the same, a stopped compaction swept
mod compare; // before/after comparisons and holdout sizing: reference vectors, properties
mod convert; // JSONL <-> Parquet round trips, bad input, atomic outputs
mod decontaminate; // train against eval: reference examples, planted copies, embedders
mod exit_codes; // docs/exit-codes.md's family table, every row run against the binary
mod export; // training rows: the reference's exports record for record, the gates, TRL shapes, datasets folders
mod fuzzed; // what the fuzz targets found: bad input that crashed or was "a bug"
mod grade; // judges, warnings and the gate
mod hack_scan; // what the reward teaches: reference vectors, a planted shortcut, determinism
mod ingest; // foreign traces: OpenAI chat, τ-bench, OTel
mod json; // every command's --json document against the envelope's schema
mod judge_trust; // the judge against hand labels: reference vectors, the fixed false passes
mod labels; // hand labels onto rows: reference vectors, refusals that change nothing
mod library; // the library on its own: a stage run from Rust, its option checks, rows in memory
mod models; // LLM judges and the model layer against a deterministic model server on 127.0.0.1
mod outputs; // where outputs may go: never over inputs or data, rejects with their output, temp files
mod pass_at; // pass@k and markers: reference vectors, τ-bench, SQL, determinism
mod python; // the Python package: its pytest suite and mypy --strict
mod report; // wai report: the page's figures against the stages', every input kind, hostile rows, Chromium
mod run; // wai run and its lake: pipelines, incremental runs, kill and resume, results in SQL
mod s3; // object-store inputs against real servers on 127.0.0.1 (moto for S3, http.server)
mod simulate; // simulate and demo: determinism, coverage, faults, command agents, kill and resume
mod sql; // SQL over rows: canned queries, pushdown, output formats
mod support;
mod workers; // judge and agent processes: their environment, signals, secrets in messages
