//! OTLP JSON (spans and log records, one export a line or one document) of any bytes, through
//! `wai ingest --format otel`.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    wai_fuzz::run_on_file("in.traces.jsonl", data, |input, out| {
        let args = ["ingest", "--format", "otel", input, "--out", out];
        args.map(String::from).to_vec()
    });
});
