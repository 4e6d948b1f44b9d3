//! The state one invocation shares: the async runtime and whether progress may be drawn.

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};

/// Shared state of one invocation.
pub struct Context {
    /// The async runtime (object stores, DataFusion).
    pub runtime: tokio::runtime::Runtime,
    /// Whether a progress bar may be drawn.
    pub progress: bool,
    /// Whether the report is the `--json` document (data goes into it, not beside it).
    pub json: bool,
    /// Whether only errors are printed (`--quiet`).
    pub quiet: bool,
}

impl Context {
    /// A progress bar over `total` bytes, hidden unless stderr is a terminal and output is text.
    pub fn bytes_bar(&self, total: Option<u64>, what: &str) -> ProgressBar {
        if !self.progress {
            return ProgressBar::hidden();
        }
        let bar = ProgressBar::with_draw_target(total, ProgressDrawTarget::stderr());
        let style = ProgressStyle::with_template(
            "{msg} [{bar:30}] {bytes}/{total_bytes} {bytes_per_sec} eta {eta}",
        )
        .unwrap_or_else(|_| ProgressStyle::default_bar())
        .progress_chars("=> ");
        bar.set_style(style);
        bar.set_message(what.to_owned());
        bar
    }

    /// A progress bar over `total` items, hidden unless stderr is a terminal and output is text.
    pub fn count_bar(&self, total: u64, what: &str) -> ProgressBar {
        if !self.progress {
            return ProgressBar::hidden();
        }
        let bar = ProgressBar::with_draw_target(Some(total), ProgressDrawTarget::stderr());
        let style =
            ProgressStyle::with_template("{msg} [{bar:30}] {pos}/{len} {per_sec} eta {eta}")
                .unwrap_or_else(|_| ProgressStyle::default_bar())
                .progress_chars("=> ");
        bar.set_style(style);
        bar.set_message(what.to_owned());
        bar
    }
}

impl Context {
    /// A context with a multi-threaded runtime; no progress bars, text reports.
    ///
    /// # Errors
    /// The runtime cannot start.
    pub fn new() -> crate::Result<Self> {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .enable_all()
            .build()
            .map_err(|e| crate::Error::Internal(format!("cannot start the async runtime: {e}")))?;
        Ok(Self {
            runtime,
            progress: false,
            json: false,
            quiet: false,
        })
    }
}
