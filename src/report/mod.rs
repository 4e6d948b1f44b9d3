//! Rendering results for people and programs: aligned tables, CSV, JSON, JSON Lines, Parquet.

pub mod envelope;
pub(crate) mod page;
pub mod redact;
pub mod table;

/// A score as the reference prints it in sentences: an integer when whole, else two decimals.
pub fn score_text(v: f64) -> String {
    if v.fract() == 0.0 {
        format!("{v:.0}")
    } else {
        format!("{v:.2}")
    }
}

/// Python's `{:.0%}`: x·100 to no decimals (ties to even on the exact value, as Python), then `%`.
pub fn percent(x: f64) -> String {
    format!("{:.0}%", x * 100.0)
}

/// `1 row`, `2 rows`.
pub fn plural(n: u64, word: &str) -> String {
    format!("{n} {word}{}", if n == 1 { "" } else { "s" })
}

/// `names` in backticks, joined by commas (`` `a`, `b` ``), or `none` when there are none: for
/// an error that says what the data does hold.
pub fn backticked(names: impl IntoIterator<Item = impl std::fmt::Display>, none: &str) -> String {
    let quoted: Vec<String> = names.into_iter().map(|n| format!("`{n}`")).collect();
    if quoted.is_empty() {
        none.to_owned()
    } else {
        quoted.join(", ")
    }
}
