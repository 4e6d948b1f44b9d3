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
