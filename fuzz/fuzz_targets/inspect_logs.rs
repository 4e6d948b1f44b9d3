//! An `inspect_ai` log of any bytes, through `wai ingest --format inspect`: a `.eval` archive
//! when the bytes start as a zip does, else a JSON log.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let name = if data.starts_with(b"PK") {
        "log.eval"
    } else {
        "log.json"
    };
    wai_fuzz::run_on_file(name, data, |input, out| {
        let args = ["ingest", "--format", "inspect", input, "--out", out];
        args.map(String::from).to_vec()
    });
});
