//! Reads resolved inputs, whatever their format, as row-schema batches (their text as views
//! into the decoded pages, for the readings that keep them).

mod guard;
mod local;
mod picks;
mod plan;
mod reader;
mod splice;
mod widen;

#[cfg(test)]
mod tests;

pub use guard::decoder_panic;
pub(crate) use guard::{panic_text, take_decoder_panic};
pub use reader::{LocalParquet, Reader};
pub use splice::SpliceSource;
#[cfg(test)]
pub(crate) use widen::row_schema_with_views;
