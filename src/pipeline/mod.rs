//! How a run works: sessions, sources, reading and writing rows.
//!
//! `pipeline` knows no stage's internals; stages know nothing about files.

pub mod ingest;
pub mod io;
pub mod output;
pub mod pipe;
pub mod read;
pub mod row;
pub mod session;
pub mod signals;
pub mod source;
