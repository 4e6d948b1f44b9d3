//! A τ-bench results file of any bytes, through `wai ingest --format tau-bench`.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    wai_fuzz::run_on_file("results.json", data, |input, out| {
        let args = ["ingest", "--format", "tau-bench", input, "--out", out];
        args.map(String::from).to_vec()
    });
});
