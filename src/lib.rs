//! `wai`: evaluate tool-using LLM agents and turn their rollouts into trainer-ready data.
//!
//! Rows (one rollout each, [`schema`]) live as Arrow record batches in Parquet; stages run as
//! DataFusion plans; anything can be queried with SQL. The binary is a thin layer over this
//! library: the command line's definitions and commands are private, reached through
//! [`run_main`] (the binary) and [`run_command_line`] (a command run in-process); programs use
//! the stages ([`stages::run`], `docs/library.md`).
//!
//! Layout: [`pipeline`] reads and writes rows (JSONL, Parquet, object stores) and builds
//! sessions; [`stages`] holds operators and the SQL functions they share; [`stats`] the formulas;
//! [`report`] the rendering; [`study`] the coverage study of the intervals; [`queries`] the canned
//! SQL; [`synth`] the synthetic row generator; `testing` (feature `testing`) rows in memory for
//! tests and examples; `fuzzing` (feature `fuzzing`) what the fuzz targets in `fuzz/` reach.

#![warn(missing_docs)]

mod cli;
mod commands;
mod entry;
pub mod error;
#[cfg(feature = "fuzzing")]
pub mod fuzzing;
pub mod models;
pub mod pipeline;
pub mod queries;
pub mod report;
pub mod schema;
pub mod stages;
pub mod stats;
pub mod study;
pub mod synth;
#[cfg(any(test, feature = "testing"))]
pub mod testing;

pub use entry::{Outcome, run_command_line, run_main};
pub use error::{Error, ExitStatus, Result};
