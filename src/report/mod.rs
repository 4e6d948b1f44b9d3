//! Rendering results for people and programs: aligned tables, CSV, JSON, JSON Lines, Parquet.

pub mod table;

/// `1 row`, `2 rows`.
pub fn plural(n: u64, word: &str) -> String {
    format!("{n} {word}{}", if n == 1 { "" } else { "s" })
}
