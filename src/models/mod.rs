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
