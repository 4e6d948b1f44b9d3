//! The JSONL row reader (`wai::pipeline::io::read_jsonl`) on any bytes: rows or an error naming
//! the file, line and field, with bad lines failing the read and set aside alike; and each
//! line decoded alike by the fast parser (sonic-rs) and by serde_json alone.
#![no_main]

use libfuzzer_sys::fuzz_target;
use wai::pipeline::io::{Identity, OnBadRow, ReadCounts, read_jsonl};
use wai::pipeline::row::{decode_text, decode_text_serde};

const NAME: &str = "fuzz.jsonl";

fuzz_target!(|data: &[u8]| {
    let mut rejects = Vec::new();
    for on_bad in [OnBadRow::Fail, OnBadRow::Reject(&mut rejects)] {
        let mut on_bad = on_bad;
        let result = read_jsonl(
            NAME,
            data,
            &mut Identity::default(),
            &mut on_bad,
            &mut ReadCounts::default(),
            &|_| {},
            &mut |batch| {
                // What a read emits is a row batch the writers take.
                assert_eq!(batch.schema(), wai::schema::row_schema());
                Ok(())
            },
        );
        wai_fuzz::check(&result, NAME);
    }
    for line in data.split(|b| *b == b'\n') {
        assert_eq!(decode_text(line), decode_text_serde(line));
    }
});
