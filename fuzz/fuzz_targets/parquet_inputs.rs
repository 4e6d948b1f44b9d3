//! A Parquet input of any bytes, read the two ways commands read one: row by row by the
//! streaming reader (`wai convert`) and as a table in a DataFusion session (`wai pass-at`).
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    wai_fuzz::let_decoder_panics_unwind();
    wai_fuzz::run_on_file("in.parquet", data, |input, out| {
        vec![
            "convert".into(),
            input.into(),
            "--out".into(),
            out.replace(".parquet", ".jsonl"),
        ]
    });
    wai_fuzz::run_on_file("in.parquet", data, |input, _| {
        vec!["pass-at".into(), input.into()]
    });
});
