//! The JSONL row reader (`wai::pipeline::io::read_jsonl`) on any bytes: rows or an error naming
//! the file, line and field, with bad lines failing the read and set aside alike.
#![no_main]

use libfuzzer_sys::fuzz_target;
use wai::pipeline::io::{Identity, OnBadRow, ReadCounts, read_jsonl};

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
});
