//! Pure numerics shared by stages: one formula, one place.

pub mod bootstrap;
pub mod passk;
pub mod sum;
pub mod wilson;
