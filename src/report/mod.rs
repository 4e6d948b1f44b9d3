//! Rendering results for people and programs: aligned tables, CSV, JSON, JSON Lines, Parquet.

pub mod table;
