//! Text as the reference reads it: `norm`, words, and the hashes of word windows.

use std::hash::BuildHasher;

/// Lowercased, white space collapsed to single spaces, trimmed.
pub fn norm(text: &str) -> String {
    norm_of(&text.to_lowercase())
}

/// The runs of `[a-z0-9]` in the lowercased text.
pub fn words(text: &str) -> Vec<String> {
    words_of(&text.to_lowercase())
        .into_iter()
        .map(str::to_owned)
        .collect()
}

/// [`norm`] of an already lowercased text.
pub(super) fn norm_of(lower: &str) -> String {
    lower.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// [`words`] of an already lowercased text, borrowed from it.
pub(super) fn words_of(lower: &str) -> Vec<&str> {
    lower
        .split(|c: char| !(c.is_ascii_lowercase() || c.is_ascii_digit()))
        .filter(|w| !w.is_empty())
        .collect()
}

/// Hashes of words and of word windows, the same on both sides and in every run.
#[derive(Clone)]
pub(super) struct Hasher(pub(super) foldhash::fast::FixedState);

impl Hasher {
    pub(super) fn new() -> Self {
        Self(foldhash::fast::FixedState::with_seed(0x005e_ed0f_dec0))
    }

    /// The hash of each window of `n` words (none under `n` words).
    pub(super) fn windows(&self, words: &[&str], n: usize) -> Vec<u64> {
        if n == 0 || words.len() < n {
            return Vec::new();
        }
        let each: Vec<u64> = words.iter().map(|w| self.0.hash_one(*w)).collect();
        each.windows(n)
            .map(|w| {
                w.iter().fold(0x9e37_79b9_7f4a_7c15_u64, |h, x| {
                    (h.rotate_left(23) ^ x).wrapping_mul(0x2545_f491_4f6c_dd1d)
                })
            })
            .collect()
    }
}
