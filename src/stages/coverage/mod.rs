//! Before the first rollout: [`preflight()`] (what the simulator will make of the tools and the
//! policy, and what to fix first) and [`gap`] (which rules and tools a set of test asks
//! reaches). Pure text heuristics over [`words`], no model.
//!
//! Matching is on words: a rule is reached by an ask that shares its content words, or that
//! names a tool the rule mentions; a tool is named by its literal name, by its nouns, or by its
//! verb's synonyms with its nouns. A branch only the fixture data selects (an amount, a date)
//! reads as untested even when an ask lands on it: confirm with graded rows.

pub mod gap;
pub mod preflight;
pub mod words;

pub use gap::{AskReach, AxisCounts, CoverageGap, CoverageGapStage, RowsPerRule, coverage_gap};
pub use preflight::{Preflight, PreflightStage, ToolIssues, preflight};
pub use words::{ask_names, content_words, is_branch, mentions, stance};
