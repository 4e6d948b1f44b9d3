//! The worker protocol (`wai::pipeline::pipe`) against a worker that prints any bytes: a command
//! judge over two rows whose program is `cat` of the fuzzed file, so replies, calls, log lines,
//! garbage and early exits all come down the real pipes. Each row gets a verdict, or the run
//! stops with an error that is not a bug.
#![no_main]

use std::time::Duration;

use libfuzzer_sys::fuzz_target;
use wai::stages::grade::Judge;
use wai::stages::grade::command::{CommandJudge, Options};

fuzz_target!(|data: &[u8]| {
    wai_fuzz::ignore_sigpipe();
    let dir = tempfile::tempdir().expect("a scratch folder");
    let file = dir.path().join("worker.out");
    std::fs::write(&file, data).expect("write the worker's output");
    let opts = Options {
        command: format!("cat '{}'", file.display()),
        workers: 1,
        timeout: Duration::from_secs(5),
        role: "judge",
        forward: Vec::new(),
    };
    let batch = wai_fuzz::transcripts().swap_remove(0).slice(0, 2);
    let mut judge = CommandJudge::start(opts).expect("the worker starts");
    let judged = judge.judge(&batch);
    wai_fuzz::check(&judged, "worker.out");
    if let Ok(verdicts) = judged {
        assert_eq!(verdicts.len(), 2);
    }
});
