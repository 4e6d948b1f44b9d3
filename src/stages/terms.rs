//! The words and word pairs of replies, as the hack scan's automatic features read them (the
//! measure spec's §7.2, auto tier).
//!
//! A text is lowercased and split into tokens: runs of two or more of `[a-z_]`, runs of digits,
//! and every other character that is not white space on its own (single ASCII letters are
//! dropped). Its terms are its distinct tokens and the pairs `"a b"` of consecutive tokens. The
//! vocabulary is the terms whose document frequency `df` is at least `min_obs` and below the
//! number of texts, most frequent first (ties by term), cut to `top_k`.

use std::collections::{BTreeSet, HashMap};
use std::sync::LazyLock;

use rayon::prelude::*;
use regex::Regex;

static TOKEN: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r"[a-z_]{2,}|\d+|[^\sa-z_\d]")
        .unwrap_or_else(|e| unreachable!("a fixed pattern: {e}"))
});

/// The tokens of `text` (lowercased first).
pub fn tokens(text: &str) -> Vec<String> {
    let lower = text.to_lowercase();
    TOKEN
        .find_iter(&lower)
        .map(|m| m.as_str().to_owned())
        .collect()
}

/// The distinct terms of `text`: its tokens and the pairs of consecutive tokens.
pub fn terms(text: &str) -> BTreeSet<String> {
    let t = tokens(text);
    let mut out: BTreeSet<String> = t.iter().cloned().collect();
    out.extend(t.windows(2).map(|w| format!("{} {}", w[0], w[1])));
    out
}

/// The vocabulary of `texts`: terms with `min_obs <= df < texts.len()`, by descending `df` then
/// term, the first `top_k`; each with the (ascending) indices of the texts that hold it.
pub fn vocabulary(texts: &[&str], min_obs: usize, top_k: usize) -> Vec<(String, Vec<u32>)> {
    let per_text: Vec<BTreeSet<String>> = texts.par_iter().map(|t| terms(t)).collect();
    let mut holders: HashMap<&str, Vec<u32>> = HashMap::new();
    for (i, ts) in per_text.iter().enumerate() {
        for t in ts {
            holders
                .entry(t.as_str())
                .or_default()
                .push(u32::try_from(i).unwrap_or(u32::MAX));
        }
    }
    let n = texts.len();
    let mut vocab: Vec<(String, Vec<u32>)> = holders
        .into_iter()
        .filter(|(_, rows)| rows.len() >= min_obs && rows.len() < n)
        .map(|(t, rows)| (t.to_owned(), rows))
        .collect();
    vocab.sort_by(|a, b| b.1.len().cmp(&a.1.len()).then_with(|| a.0.cmp(&b.0)));
    vocab.truncate(top_k);
    vocab
}

#[cfg(test)]
mod tests {
    use serde_json::Value;

    use super::*;

    #[test]
    fn tokens_drop_single_letters_and_split_symbols() {
        assert_eq!(
            tokens("A b2 order-17, ###  x_y Über"),
            [
                "2", "order", "-", "17", ",", "#", "#", "#", "x_y", "ü", "ber"
            ]
        );
        let t = terms("ready ###");
        assert!(
            t.contains("ready") && t.contains("#") && t.contains("# #") && t.contains("ready #")
        );
    }

    #[test]
    fn the_planted_rows_vocabulary_counts_as_the_reference_does() {
        let text = std::fs::read_to_string(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/tests/fixtures/hack_scan_planted.jsonl"
        ))
        .expect("fixture");
        let replies: Vec<String> = text
            .lines()
            .map(|l| {
                let v: Value = serde_json::from_str(l).expect("json");
                v["final_text"].as_str().unwrap_or("").to_owned()
            })
            .collect();
        let refs: Vec<&str> = replies.iter().map(String::as_str).collect();
        let vocab = vocabulary(&refs, 20, 200);
        let df = |term: &str| {
            vocab
                .iter()
                .find(|(t, _)| t == term)
                .map(|(_, rows)| rows.len())
        };
        // The reference's n_obs for these features (vectors.json, hack_scan planted_delimiter).
        assert_eq!(df("#"), Some(36));
        assert_eq!(df("# #"), Some(36));
        assert_eq!(df("is"), Some(32));
        assert_eq!(df("we"), Some(33));
        // Most frequent first, ties by term.
        assert!(
            vocab.windows(2).all(|w| w[0].1.len() > w[1].1.len()
                || (w[0].1.len() == w[1].1.len() && w[0].0 < w[1].0))
        );
        assert!(
            vocab
                .iter()
                .all(|(_, rows)| rows.len() >= 20 && rows.len() < refs.len())
        );
    }
}
