//! One line a command judge printed, of any text, read as the judge reads it
//! (`wai::fuzzing::judge_line`: the reply parser, then the verdict contract), and the verdict
//! landed in a row (`grade::apply`) and written to the verdict log and read back.
#![no_main]

use libfuzzer_sys::fuzz_target;
use wai::stages::grade::{self, Stamp, Verdict};

fuzz_target!(|data: &[u8]| {
    let Ok(line) = std::str::from_utf8(data) else {
        return;
    };
    let Some(verdict) = wai::fuzzing::judge_line(line) else {
        return;
    };
    let batch = wai_fuzz::transcripts().swap_remove(0).slice(0, 1);
    let stamp = Stamp {
        judge: "cmd".into(),
        version: None,
        run_id: "fuzz".into(),
        source: "grade",
    };
    let graded = grade::apply(&batch, std::slice::from_ref(&verdict), &stamp);
    assert!(graded.is_ok(), "{graded:?}");
    // The verdict log (a resumable grade) reads back what it wrote.
    let record = verdict.to_record();
    let back = Verdict::from_record(&record).expect("a written verdict reads back");
    assert_eq!(back.to_record(), record);
});
