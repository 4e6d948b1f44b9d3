//! What keys the verdict log of a `wai grade` ([`super::verdict_log`]): the digest of what
//! decides its verdicts, the default scoring run id, and what opening the log found, as notes.

use std::fmt::Write as _;
use std::path::Path;

use sha2::{Digest, Sha256};

use super::judges::Workers;
use super::source;
use super::verdict_log::Found;
use crate::cli::GradeArgs;
use crate::report::plural;

/// What decides the verdicts of a grade: wai's version (its built-in judges and its reading of
/// the rows), the judges (specs and the text they name), the inputs (names and sizes), the
/// timeout and the variables passed to command judges. A verdict log is resumed only under the
/// same digest.
pub(crate) fn digest(
    args: &GradeArgs,
    texts: &[String],
    inputs: &[source::Input],
    workers: &Workers,
) -> String {
    let mut h = Sha256::new();
    let mut part = |t: &str| {
        h.update(t.as_bytes());
        h.update([0]);
    };
    part("wai grade verdicts 1");
    part(env!("CARGO_PKG_VERSION"));
    for (spec, text) in args.judges.iter().zip(texts) {
        part(spec);
        part(text);
    }
    for input in inputs {
        part(&input.display);
        part(&input.size.map_or_else(String::new, |s| s.to_string()));
    }
    part(&workers.timeout.as_secs_f64().to_string());
    part(&workers.forward.join(","));
    part(&workers.models.digest());
    part(if args.output.rejects.is_some() {
        "rejects"
    } else {
        ""
    });
    hex(&h.finalize())
}

/// `bytes` in lowercase hex.
fn hex(bytes: &[u8]) -> String {
    bytes.iter().fold(String::new(), |mut s, b| {
        let _ = write!(s, "{b:02x}");
        s
    })
}

/// The default scoring run id: the same judges (`texts`) on the same inputs give the same id.
pub(crate) fn run_id(args: &GradeArgs, texts: &[String]) -> String {
    let mut h = Sha256::new();
    for t in texts.iter().chain(&args.inputs) {
        h.update(t.as_bytes());
        h.update([0]);
    }
    format!("score_{}", hex(&h.finalize()[..6]))
}

/// What the verdict log held, as notes.
pub(crate) fn notes(found: &Found, log: &Path, resumed: u64, judged: u64) -> Vec<String> {
    let mut notes = Vec::new();
    if found.started_over {
        notes.push(format!(
            "the verdict log `{}` was left by a grade with other judges, inputs or options; it was started over",
            log.display()
        ));
    }
    if found.resumed > 0 {
        notes.push(format!(
            "resumed: {} from the verdict log of an interrupted grade, {} judged now",
            plural(resumed, "verdict"),
            plural(judged, "row")
        ));
    }
    if found.torn {
        notes.push("the verdict log's last line was cut off by the interrupted grade; that row was judged again".into());
    }
    notes
}
