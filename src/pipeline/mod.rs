//! How a run works: sessions, sources, reading and writing rows.
//!
//! `pipeline` knows no stage's internals; stages know nothing about files.

pub mod agents;
pub mod checkpoint;
pub mod cluster;
pub mod collect;
pub mod context;
pub mod ingest;
pub mod io;
pub mod json_lines;
pub mod judges;
pub mod lake;
pub mod limits;
pub mod lines_out;
pub mod memory;
pub mod output;
pub mod pipe;
pub mod project;
pub mod query;
pub mod read;
pub mod row;
pub mod rows_out;
pub mod scratch;
pub mod select_run;
pub mod session;
pub mod shards;
pub mod shared_scan;
pub mod signals;
pub mod source;
pub mod summaries;
pub mod tables;
pub mod to_lines;
pub mod verdict_key;
pub mod verdict_log;
pub mod world_files;
