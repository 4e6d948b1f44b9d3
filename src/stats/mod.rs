//! Pure numerics shared by stages: one formula, one place.

pub mod bootstrap;
pub mod interval;
pub mod kappa;
pub mod paired;
pub mod passk;
pub mod quantile;
pub mod sizing;
pub mod sum;
pub mod wilson;
pub mod within;

/// Python's `round(x, places)`: correctly rounded on the exact binary value, ties to even
/// (Rust's float formatting rounds the same way).
pub fn round_places(x: f64, places: usize) -> f64 {
    format!("{x:.places$}").parse().unwrap_or(x)
}
