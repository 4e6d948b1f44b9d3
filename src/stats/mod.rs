//! Pure numerics shared by stages: one formula, one place.

pub mod wilson;
