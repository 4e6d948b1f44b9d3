//! OTLP JSON (spans and log records, one export a line or one document) of any bytes, through
//! `wai ingest --format otel`; and each line read alike by the reader's fast path (typed
//! deserialization of the canonical shape) and its general one.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    wai_fuzz::run_on_file("in.traces.jsonl", data, |input, out| {
        let args = ["ingest", "--format", "otel", input, "--out", out];
        args.map(String::from).to_vec()
    });
    wai::fuzzing::otlp_lines_alike(data);
});
