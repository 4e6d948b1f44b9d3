//! How a run works: sessions, sources, reading and writing rows.
//!
//! `pipeline` knows no stage's internals; stages know nothing about files.

pub mod context;
pub mod ingest;
pub mod io;
pub mod judges;
pub mod output;
pub mod pipe;
pub mod read;
pub mod row;
pub mod rows_out;
pub mod scratch;
pub mod session;
pub mod signals;
pub mod source;
pub mod tables;
pub mod verdict_log;
