//! A verifier judge file of any text (`wai::stages::grade::verify::VerifierJudge::parse`), and,
//! when it parses, the verifier judging the grade tests' transcripts: a usage error naming the
//! file, or one verdict a row that the rows take.
#![no_main]

use libfuzzer_sys::fuzz_target;
use wai::ExitStatus;
use wai::stages::grade::verify::VerifierJudge;
use wai::stages::grade::{self, Judge, Stamp};

const NAME: &str = "judge.toml";

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let mut judge = match VerifierJudge::parse(text, NAME, "verifier") {
        Ok(judge) => judge,
        Err(e) => {
            assert_eq!(e.exit_status(), ExitStatus::Usage, "{e}");
            assert!(e.to_string().contains(NAME), "{e}");
            return;
        }
    };
    let stamp = Stamp {
        judge: judge.name().to_owned(),
        version: judge.version().map(str::to_owned),
        run_id: "fuzz".into(),
        source: "grade",
    };
    for batch in wai_fuzz::transcripts() {
        let judged = judge.judge(&batch);
        wai_fuzz::check(&judged, NAME);
        if let Ok(verdicts) = judged {
            assert_eq!(verdicts.len(), batch.num_rows());
            let graded = grade::apply(&batch, &verdicts, &stamp);
            assert!(graded.is_ok(), "{graded:?}");
        }
    }
});
