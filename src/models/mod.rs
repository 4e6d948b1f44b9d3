//! The model layer: every call wai makes to a model goes through here. Spec strings name the
//! model and its server ([`spec`]); one shape for requests and replies maps onto each provider's
//! wire protocol ([`wire`]); [`client`] makes the calls (concurrency, retries, timeouts, the
//! run's budget, a circuit breaker); and [`cache`] keeps every reply, so a rerun is free.
//!
//! Keys come from the environment and go only into request headers: never into a row, the
//! cache, a log line or an error message (server replies quoted in errors are redacted).

pub mod cache;
pub mod client;
pub mod spec;
pub mod wire;

pub use client::{Answer, CallError, Model, Settings, Tally};
pub use spec::{ModelSpec, Provider};
pub use wire::{ChatRequest, Message, Reply, ToolCall, Usage};

use crate::error::{Error, Result};

/// The async runtime a stage makes its model calls on: its own, so that a caller that is itself
/// inside one (a notebook, a DataFusion task) can still use the stage.
pub(crate) fn runtime() -> Result<tokio::runtime::Runtime> {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .thread_name("wai-model")
        .enable_all()
        .build()
        .map_err(|e| Error::Internal(format!("a runtime for model calls: {e}")))
}

/// Runs `work` on `runtime`, driven from a thread of its own (the caller may be inside a
/// runtime, where blocking on another is refused).
pub(crate) fn block_on<T: Send>(
    runtime: &tokio::runtime::Runtime,
    work: impl std::future::Future<Output = T> + Send,
) -> Result<T> {
    std::thread::scope(|s| {
        s.spawn(|| runtime.block_on(work))
            .join()
            .map_err(|_| Error::Internal("the model-call thread panicked".into()))
    })
}

/// How often [`block_on_watched`] tells its watcher that nothing new has happened.
const WATCH_EVERY: std::time::Duration = std::time::Duration::from_secs(1);

/// [`block_on`], with the caller's thread watching: `work` sends counts on the channel it is
/// given, and each reaches `watch` as it comes (and the last one again every second while
/// nothing comes), on the calling thread, until `work` ends.
pub(crate) fn block_on_watched<T: Send, F: std::future::Future<Output = T> + Send>(
    runtime: &tokio::runtime::Runtime,
    work: impl FnOnce(std::sync::mpsc::Sender<usize>) -> F,
    watch: &mut dyn FnMut(usize),
) -> Result<T> {
    let (tx, rx) = std::sync::mpsc::channel();
    let work = work(tx);
    std::thread::scope(|s| {
        let worker = s.spawn(|| runtime.block_on(work));
        let mut last = None;
        loop {
            match rx.recv_timeout(WATCH_EVERY) {
                Ok(n) => {
                    last = Some(n);
                    watch(n);
                }
                Err(std::sync::mpsc::RecvTimeoutError::Timeout) => {
                    if let Some(n) = last {
                        watch(n);
                    }
                }
                // The work is over (or its thread gone): every sender is dropped.
                Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => break,
            }
        }
        worker
            .join()
            .map_err(|_| Error::Internal("the model-call thread panicked".into()))
    })
}
