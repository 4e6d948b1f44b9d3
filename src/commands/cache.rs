//! `wai cache stats|clear`: what the model response cache holds, and emptying it.

use std::fmt::Write as _;

use super::Outcome;
use crate::cli::{CacheAction, CacheArgs};
use crate::error::{ExitStatus, Result};
use crate::models::cache::{self, Cache};
use crate::report::envelope::{Envelope, Output};

/// What `wai cache clear` reports.
#[derive(serde::Serialize)]
struct Cleared {
    /// The cache file.
    path: String,
    /// Replies removed.
    removed: u64,
    /// Only this model's, when one was named.
    model: Option<String>,
}

/// Runs `wai cache`.
pub(crate) fn run(args: &CacheArgs) -> Result<Outcome> {
    match &args.action {
        CacheAction::Stats { cache: dir } => {
            let dir = dir.clone().unwrap_or_else(cache::default_dir);
            let c = Cache::open(&dir)?;
            let stats = c.stats()?;
            let mut text = format!(
                "{}: {} ({} of replies, {} on disk)",
                stats.path,
                replies(stats.entries),
                bytes(stats.reply_bytes),
                bytes(stats.file_bytes)
            );
            for (model, n) in &stats.models {
                let _ = write!(text, "\n  {model}: {n}");
            }
            let json = Envelope::new("cache stats", &stats)
                .output(Output::new(&stats.path, "file"))
                .to_json()?;
            Ok(Outcome {
                text,
                json,
                status: ExitStatus::Success,
            })
        }
        CacheAction::Clear { cache: dir, model } => {
            let dir = dir.clone().unwrap_or_else(cache::default_dir);
            let c = Cache::open(&dir)?;
            let removed = c.clear(model.as_deref())?;
            let report = Cleared {
                path: c.path().display().to_string(),
                removed,
                model: model.clone(),
            };
            let text = format!(
                "removed {}{} from {}",
                replies(removed),
                model.as_ref().map_or(String::new(), |m| format!(" of {m}")),
                report.path
            );
            let json = Envelope::new("cache clear", &report)
                .output(Output::new(&report.path, "file"))
                .to_json()?;
            Ok(Outcome {
                text,
                json,
                status: ExitStatus::Success,
            })
        }
    }
}

#[allow(clippy::cast_precision_loss, reason = "a size for a person")]
fn bytes(n: u64) -> String {
    match n {
        0..1024 => format!("{n} B"),
        1024..1_048_576 => format!("{:.1} KiB", n as f64 / 1024.0),
        _ => format!("{:.1} MiB", n as f64 / 1_048_576.0),
    }
}

fn replies(n: u64) -> String {
    format!("{n} {}", if n == 1 { "reply" } else { "replies" })
}
