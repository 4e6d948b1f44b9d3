//! The words and word pairs of replies, as the hack scan's automatic features read them (the
//! measure spec's §7.2, auto tier).
//!
//! A text is lowercased and split into tokens: runs of two or more of `[a-z_]`, runs of digits,
//! and every other character that is not white space on its own (single ASCII letters are
//! dropped). Its terms are its distinct tokens and the pairs `"a b"` of consecutive tokens. The
//! vocabulary is the terms whose document frequency `df` is at least `min_obs` and below the
//! number of texts, most frequent first (ties by term), cut to `top_k`.
//!
//! Terms are counted by a 64-bit key (a fixed-seed hash of the term), so a text's terms cost no
//! string unless a count meets the term for the first time; ASCII texts are split by a byte
//! scanner, others by the same rule as a regular expression.

use std::borrow::Cow;
use std::collections::HashMap;
use std::hash::{BuildHasher, Hasher as _};
use std::io::Write as _;
use std::os::unix::fs::FileExt as _;
use std::sync::LazyLock;
use std::sync::atomic::{AtomicU64, Ordering};

use rayon::prelude::*;
use regex::Regex;

use crate::error::{Error, Result};

static TOKEN: LazyLock<Regex> = LazyLock::new(|| {
    // Python's `\s` also holds the separators \x1c-\x1f.
    Regex::new(r"[a-z_]{2,}|\d+|[^\s\x1c-\x1fa-z_\d]")
        .unwrap_or_else(|e| unreachable!("a fixed pattern: {e}"))
});

/// The seed of term keys.
const SEED: u64 = 0x7e57_7e4a;

/// Splits texts into terms; holds its buffers between texts.
#[derive(Default)]
pub struct Tokenizer {
    lower: String,
    /// Token spans in `lower`.
    spans: Vec<(u32, u32)>,
    /// The tokens' keys.
    keys: Vec<u64>,
}

/// A term of the current text: its key, and how to spell it.
#[derive(Debug, Clone, Copy)]
pub struct Term {
    /// The term's key.
    pub key: u64,
    token: u32,
    pair: bool,
}

fn is_word_byte(b: u8) -> bool {
    b.is_ascii_lowercase() || b == b'_'
}

/// An ASCII white-space byte as Python's `str.isspace` reads it: tab to carriage return, the
/// separators \x1c-\x1f, and space; compared, not branched on, so loops over a text vectorize.
pub(crate) fn is_space_byte(b: u8) -> bool {
    (b == b' ') | (b.wrapping_sub(b'\t') < 5) | (b.wrapping_sub(0x1c) < 4)
}

/// The key of a token.
fn token_key(token: &str) -> u64 {
    let mut h = foldhash::fast::FixedState::with_seed(SEED).build_hasher();
    h.write(token.as_bytes());
    h.finish()
}

/// The key of the pair of tokens with keys `a`, `b`. No token holds a space, so no pair's
/// spelling is a token's; the odd constant keeps the two key spaces apart.
fn pair_key(a: u64, b: u64) -> u64 {
    let mut h = foldhash::fast::FixedState::with_seed(SEED).build_hasher();
    h.write_u64(a);
    h.write_u64(b);
    h.finish() ^ 0x9e37_79b9_7f4a_7c15
}

impl Tokenizer {
    /// Every term of `text`, a term as often as it occurs: each token, then the pair it ends.
    pub fn terms(&mut self, text: &str) -> Vec<Term> {
        self.split(text);
        let mut terms = Vec::with_capacity(2 * self.keys.len());
        self.each_term(|t| terms.push(t));
        terms
    }

    /// The keys of the tokens of the text last split, in order (what a [`KeyBlockBuilder`] keeps).
    pub fn keys(&self) -> &[u64] {
        &self.keys
    }

    /// Calls `f` with every term of the text last split, as [`Tokenizer::terms`] orders them.
    fn each_term(&self, mut f: impl FnMut(Term)) {
        for (t, &key) in self.keys.iter().enumerate() {
            let token = u32::try_from(t).unwrap_or(u32::MAX);
            f(Term {
                key,
                token,
                pair: false,
            });
            if t > 0 {
                f(Term {
                    key: pair_key(self.keys[t - 1], key),
                    token: token - 1,
                    pair: true,
                });
            }
        }
    }

    /// How `term` (of the current text) is spelled.
    pub fn spell(&self, term: Term) -> String {
        let at = |t: u32| {
            let (a, b) = self.spans[t as usize];
            &self.lower[a as usize..b as usize]
        };
        if term.pair {
            format!("{} {}", at(term.token), at(term.token + 1))
        } else {
            at(term.token).to_owned()
        }
    }

    /// Lowercases `text` into `lower` and finds its token spans and keys.
    fn split(&mut self, text: &str) {
        self.spans_of(text);
        self.keys.clear();
        let lower = &self.lower;
        self.keys.extend(
            self.spans
                .iter()
                .map(|&(a, b)| token_key(&lower[a as usize..b as usize])),
        );
    }

    /// Lowercases `text` into `lower` and finds its token spans.
    fn spans_of(&mut self, text: &str) {
        self.lower.clear();
        self.spans.clear();
        let span = |a: usize, b: usize| {
            (
                u32::try_from(a).unwrap_or(u32::MAX),
                u32::try_from(b).unwrap_or(u32::MAX),
            )
        };
        if !text.is_ascii() {
            self.lower = text.to_lowercase();
            self.spans.extend(
                TOKEN
                    .find_iter(&self.lower)
                    .map(|m| span(m.start(), m.end())),
            );
            return;
        }
        self.lower.push_str(text);
        self.lower.make_ascii_lowercase();
        let b = self.lower.as_bytes();
        let mut i = 0;
        while i < b.len() {
            let c = b[i];
            if is_word_byte(c) {
                let start = i;
                while i < b.len() && is_word_byte(b[i]) {
                    i += 1;
                }
                if i - start >= 2 {
                    self.spans.push(span(start, i));
                }
            } else if c.is_ascii_digit() {
                let start = i;
                while i < b.len() && b[i].is_ascii_digit() {
                    i += 1;
                }
                self.spans.push(span(start, i));
            } else {
                if !is_space_byte(c) {
                    self.spans.push(span(i, i + 1));
                }
                i += 1;
            }
        }
    }
}

/// How many words an ASCII text `b` has, split on the bytes `space` says are white space: a
/// word starts at the first byte, or where white space gives way to another byte. Counted in
/// 32 bits (a text is under 4 GB) on pairs of bytes, compared rather than branched on, which
/// the compiler vectorizes (a third fewer instructions than a lookup table, and a branch per
/// byte was a twentieth of the hack scan).
pub(crate) fn ascii_words(b: &[u8], space: impl Fn(u8) -> bool) -> usize {
    let Some(&first) = b.first() else { return 0 };
    let starts: u32 = b
        .iter()
        .zip(&b[1..])
        .map(|(&x, &y)| u32::from(space(x) & !space(y)))
        .sum();
    usize::from(!space(first)) + starts as usize
}

/// The tokens of `text` (lowercased first).
pub fn tokens(text: &str) -> Vec<String> {
    let mut t = Tokenizer::default();
    t.spans_of(text);
    t.spans
        .iter()
        .map(|&(a, b)| t.lower[a as usize..b as usize].to_owned())
        .collect()
}

/// Document frequencies of terms, with each term's spelling.
#[derive(Default)]
pub struct DocFreq {
    /// Per key: texts holding it, the last text counted, the spelling.
    counts: HashMap<u64, (u32, u32, String), foldhash::fast::FixedState>,
    texts: u32,
}

impl DocFreq {
    /// Counts the distinct terms of `text` once; its token keys are left in `tokenizer`
    /// ([`Tokenizer::keys`]).
    pub fn add(&mut self, tokenizer: &mut Tokenizer, text: &str) {
        self.texts += 1;
        let doc = self.texts;
        tokenizer.split(text);
        let counts = &mut self.counts;
        tokenizer.each_term(|term| match counts.get_mut(&term.key) {
            Some(c) => {
                if c.1 != doc {
                    c.0 += 1;
                    c.1 = doc;
                }
            }
            None => {
                counts.insert(term.key, (1, doc, tokenizer.spell(term)));
            }
        });
    }

    /// How many distinct terms it has counted.
    pub fn len(&self) -> usize {
        self.counts.len()
    }

    /// Whether it has counted no term.
    pub fn is_empty(&self) -> bool {
        self.counts.is_empty()
    }

    /// Adds the counts of `other` (over other texts).
    pub fn merge(&mut self, mut other: Self) {
        if self.counts.len() < other.counts.len() {
            std::mem::swap(&mut self.counts, &mut other.counts);
        }
        // Texts counted after this get ids above every stamp of either side.
        self.texts = self.texts.max(other.texts);
        for (k, (c, stamp, s)) in other.counts {
            self.counts.entry(k).or_insert((0, stamp, s)).0 += c;
        }
    }

    /// The vocabulary over `n` texts: terms with `min_obs <= df < n`, by descending `df` then
    /// term, the first `top_k`; each as (term, key, df).
    pub fn vocabulary(self, n: usize, min_obs: usize, top_k: usize) -> Vec<(String, u64, usize)> {
        let mut vocab: Vec<(String, u64, usize)> = self
            .counts
            .into_iter()
            .map(|(k, (c, _, s))| (s, k, c as usize))
            .filter(|(_, _, df)| *df >= min_obs && *df < n)
            .collect();
        vocab.sort_by(|a, b| b.2.cmp(&a.2).then_with(|| a.0.cmp(&b.0)));
        vocab.truncate(top_k);
        vocab
    }
}

/// The token keys of many texts, kept from counting them so no text is split twice, in about a
/// quarter of their size: a block of texts (those one parallel chunk counted) numbers its
/// distinct keys, and each text is kept as those numbers, 16 bits each (32 in a block of more
/// than 65,536 distinct tokens). A key is 8 bytes; a text of 80 tokens costs 160 bytes here, not
/// 640, in blocks of a thousand texts or more (a block's table is its own).
///
/// The numbers of the first [`SPILL_AFTER`] bytes stay in memory; those of later blocks go to a
/// file in a scratch folder under the system's temporary folder (removed with it), so past that
/// a text costs its block's table and its end in memory (tens of bytes), not its numbers (1.7 GB
/// for ten million texts of 83 tokens): [`holders_of`] reads each block back once. Where the
/// temporary folder is in memory (tmpfs), so is the file: point `TMPDIR` at a disk.
#[derive(Debug)]
pub struct TextKeys {
    blocks: Vec<KeyBlock>,
    /// The index of each block's first text.
    starts: Vec<usize>,
    texts: usize,
    /// Bytes of numbers held in memory, and how many may be before blocks go to the file.
    held: usize,
    limit: usize,
    spill: Option<Spill>,
}

/// Bytes of token numbers [`TextKeys`] keeps in memory before it writes blocks to a file.
pub const SPILL_AFTER: usize = 256 << 20;

impl Default for TextKeys {
    fn default() -> Self {
        Self::with_limit(SPILL_AFTER)
    }
}

/// The file blocks of numbers go to, in its scratch folder.
#[derive(Debug)]
struct Spill {
    _scratch: crate::pipeline::scratch::Scratch,
    path: std::path::PathBuf,
    file: std::fs::File,
    written: u64,
}

/// A block of [`TextKeys`].
#[derive(Debug)]
pub struct KeyBlock {
    /// Its distinct keys, by number.
    table: Vec<u64>,
    ids: Ids,
    /// Where each text's numbers end in `ids`.
    ends: Vec<u32>,
}

#[derive(Debug)]
enum Ids {
    Narrow(Vec<u16>),
    Wide(Vec<u32>),
    /// In the spill file: `len` numbers from byte `at`, little-endian, 4 bytes each if `wide`.
    Spilled {
        at: u64,
        len: usize,
        wide: bool,
    },
}

impl Ids {
    /// Bytes the numbers take.
    fn bytes(&self) -> usize {
        match self {
            Self::Narrow(v) => 2 * v.len(),
            Self::Wide(v) => 4 * v.len(),
            Self::Spilled { len, wide, .. } => len * if *wide { 4 } else { 2 },
        }
    }
}

/// Builds [`KeyBlock`]s, text by text: one, unless its texts' tokens pass 32-bit offsets.
#[derive(Default)]
pub struct KeyBlockBuilder {
    numbers: HashMap<u64, u32, foldhash::fast::FixedState>,
    table: Vec<u64>,
    ids: Vec<u32>,
    ends: Vec<u32>,
    done: Vec<KeyBlock>,
}

impl KeyBlockBuilder {
    /// Adds a text, given its token keys ([`Tokenizer::keys`]).
    pub fn push(&mut self, keys: &[u64]) {
        if self.ids.len() + keys.len() > u32::MAX as usize && !self.ends.is_empty() {
            // Offsets are 32 bits: the texts so far are a block, this one starts the next.
            let full = std::mem::take(self);
            self.done = full.done_with_last();
        }
        for &key in keys {
            let next = u32::try_from(self.table.len()).unwrap_or(u32::MAX);
            let id = *self.numbers.entry(key).or_insert_with(|| {
                self.table.push(key);
                next
            });
            self.ids.push(id);
        }
        self.ends
            .push(u32::try_from(self.ids.len()).unwrap_or(u32::MAX));
    }

    /// The blocks, in order.
    pub fn finish(self) -> Vec<KeyBlock> {
        self.done_with_last()
    }

    /// The finished blocks and the one under way.
    fn done_with_last(self) -> Vec<KeyBlock> {
        let Self {
            mut table,
            ids,
            mut ends,
            mut done,
            ..
        } = self;
        let ids = if table.len() <= usize::from(u16::MAX) + 1 {
            Ids::Narrow(
                (ids.iter())
                    .map(|&i| u16::try_from(i).unwrap_or(u16::MAX))
                    .collect(),
            )
        } else {
            let mut ids = ids;
            ids.shrink_to_fit();
            Ids::Wide(ids)
        };
        table.shrink_to_fit();
        ends.shrink_to_fit();
        done.push(KeyBlock { table, ids, ends });
        done
    }
}

/// A block's numbers: borrowed from memory, or read back from the spill file.
enum Numbers<'a> {
    Narrow(Cow<'a, [u16]>),
    Wide(Cow<'a, [u32]>),
}

impl KeyBlock {
    /// Calls `f(text, key)` with the keys of its texts, `ids` being its numbers: texts in order,
    /// each text's keys in order.
    fn each_key(&self, ids: &Numbers<'_>, mut f: impl FnMut(usize, u64)) {
        let mut start = 0;
        for (t, &end) in self.ends.iter().enumerate() {
            let end = end as usize;
            match ids {
                Numbers::Narrow(ids) => {
                    (ids[start..end].iter()).for_each(|&id| f(t, self.table[usize::from(id)]));
                }
                Numbers::Wide(ids) => {
                    (ids[start..end].iter()).for_each(|&id| f(t, self.table[id as usize]));
                }
            }
            start = end;
        }
    }
}

impl TextKeys {
    /// Keeps the numbers of the first `limit` bytes in memory, and writes later blocks' to a
    /// file.
    pub fn with_limit(limit: usize) -> Self {
        Self {
            blocks: Vec::new(),
            starts: Vec::new(),
            texts: 0,
            held: 0,
            limit,
            spill: None,
        }
    }

    /// Adds a block's texts after the others: its numbers in memory while the limit allows,
    /// else in the spill file (made the first time).
    ///
    /// # Errors
    /// The scratch folder or the file cannot be made or written.
    pub fn push(&mut self, mut block: KeyBlock) -> Result<()> {
        let bytes = block.ids.bytes();
        if self.held + bytes > self.limit {
            self.spill(&mut block)?;
        } else {
            self.held += bytes;
        }
        self.starts.push(self.texts);
        self.texts += block.ends.len();
        self.blocks.push(block);
        Ok(())
    }

    /// Writes `block`'s numbers to the spill file, leaving where they are.
    fn spill(&mut self, block: &mut KeyBlock) -> Result<()> {
        let spill = match &mut self.spill {
            Some(spill) => spill,
            none => {
                let scratch = crate::pipeline::scratch::scratch()?;
                let (path, file) = scratch.create("token-numbers")?;
                tracing::debug!(path = %path.display(), held = self.held, "hack scan: token numbers go to a file");
                none.insert(Spill {
                    _scratch: scratch,
                    path,
                    file,
                    written: 0,
                })
            }
        };
        let (bytes, len, wide): (Vec<u8>, usize, bool) = match &block.ids {
            Ids::Narrow(v) => (
                v.iter().flat_map(|x| x.to_le_bytes()).collect(),
                v.len(),
                false,
            ),
            Ids::Wide(v) => (
                v.iter().flat_map(|x| x.to_le_bytes()).collect(),
                v.len(),
                true,
            ),
            Ids::Spilled { .. } => return Ok(()),
        };
        (&spill.file)
            .write_all(&bytes)
            .map_err(|e| Error::io(&spill.path, e))?;
        block.ids = Ids::Spilled {
            at: spill.written,
            len,
            wide,
        };
        spill.written += bytes.len() as u64;
        Ok(())
    }

    /// The numbers of `block`, read back if they were spilled.
    fn numbers<'a>(&'a self, block: &'a KeyBlock) -> Result<Numbers<'a>> {
        let (at, len, wide) = match &block.ids {
            Ids::Narrow(v) => return Ok(Numbers::Narrow(Cow::Borrowed(v))),
            Ids::Wide(v) => return Ok(Numbers::Wide(Cow::Borrowed(v))),
            Ids::Spilled { at, len, wide } => (*at, *len, *wide),
        };
        let spill = self
            .spill
            .as_ref()
            .ok_or_else(|| Error::Internal("spilled token numbers without a file".into()))?;
        let mut bytes = vec![0u8; len * if wide { 4 } else { 2 }];
        spill
            .file
            .read_exact_at(&mut bytes, at)
            .map_err(|e| Error::io(&spill.path, e))?;
        Ok(if wide {
            Numbers::Wide(Cow::Owned(
                (bytes.chunks_exact(4))
                    .map(|b| u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
                    .collect(),
            ))
        } else {
            Numbers::Narrow(Cow::Owned(
                (bytes.chunks_exact(2))
                    .map(|b| u16::from_le_bytes([b[0], b[1]]))
                    .collect(),
            ))
        })
    }

    /// The texts.
    pub fn len(&self) -> usize {
        self.texts
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.texts == 0
    }

    /// Every text's tokens.
    pub fn tokens(&self) -> usize {
        (self.blocks.iter())
            .map(|b| b.ends.last().map_or(0, |&e| e as usize))
            .sum()
    }

    /// Bytes of token numbers written to the spill file.
    pub fn spilled(&self) -> u64 {
        self.spill.as_ref().map_or(0, |s| s.written)
    }
}

/// Which texts hold each term of `vocab` (from [`DocFreq::vocabulary`]), the texts kept as
/// [`TextKeys`] from counting them (so no text is split twice): one bitset per term, bit `i` for
/// text `i`, set when the text holds the term (a token, or the pair of two consecutive tokens).
///
/// Blocks are read in parallel, each (read back from the file if it was spilled) filling the
/// words of its own texts, then adding them to the shared bitsets (a block's first and last
/// words may hold another block's texts too).
///
/// # Errors
/// A spilled block does not read back.
pub fn holders_of(texts: &TextKeys, vocab: &[(String, u64, usize)]) -> Result<Vec<Vec<u64>>> {
    // Keys are hashes already: a fast hasher, not SipHash (which was a twentieth of the scan).
    let index: HashMap<u64, usize, foldhash::fast::FixedState> =
        vocab.iter().enumerate().map(|(i, v)| (v.1, i)).collect();
    let terms = vocab.len();
    let bits: Vec<Vec<AtomicU64>> = (0..terms)
        .map(|_| {
            (0..texts.len().div_ceil(64))
                .map(|_| AtomicU64::new(0))
                .collect()
        })
        .collect();
    (texts.blocks.par_iter().zip(&texts.starts)).try_for_each(|(block, &start)| {
        let ids = texts.numbers(block)?;
        let first = start / 64;
        let words = (start + block.ends.len()).div_ceil(64) - first;
        // Word-major: the words of one text are near each other.
        let mut local = vec![0u64; words * terms];
        let mut last: Option<(usize, u64)> = None;
        block.each_key(&ids, |t, key| {
            let at = start + t;
            let (word, bit) = (at / 64 - first, at % 64);
            let mut hold = |key: u64| {
                if let Some(&term) = index.get(&key) {
                    local[word * terms + term] |= 1 << bit;
                }
            };
            hold(key);
            if let Some((text, before)) = last
                && text == t
            {
                hold(pair_key(before, key));
            }
            last = Some((t, key));
        });
        for (w, word) in local.chunks_exact(terms.max(1)).enumerate() {
            for (term, &x) in word.iter().enumerate() {
                if x != 0 {
                    bits[term][first + w].fetch_or(x, Ordering::Relaxed);
                }
            }
        }
        Ok::<_, Error>(())
    })?;
    Ok(bits
        .into_iter()
        .map(|b| b.into_iter().map(AtomicU64::into_inner).collect())
        .collect())
}

#[cfg(test)]
mod tests {
    use serde_json::Value;

    use super::*;

    /// The vocabulary of `texts` (see [`DocFreq::vocabulary`]), each term with the bitset of the
    /// texts that hold it, as the hack scan finds them.
    fn vocabulary(texts: &[&str], min_obs: usize, top_k: usize) -> Vec<(String, Vec<u64>)> {
        let (mut tokenizer, mut df) = (Tokenizer::default(), DocFreq::default());
        let mut block = KeyBlockBuilder::default();
        for t in texts {
            df.add(&mut tokenizer, t);
            block.push(tokenizer.keys());
        }
        let mut kept = TextKeys::default();
        for b in block.finish() {
            kept.push(b).unwrap();
        }
        let vocab = df.vocabulary(texts.len(), min_obs, top_k);
        let bits = holders_of(&kept, &vocab).unwrap();
        vocab.into_iter().map(|v| v.0).zip(bits).collect()
    }

    /// Which texts (each its token keys) hold each term of `vocab`, text by text: what
    /// [`holders_of`] must find.
    fn holders(texts: &[Vec<u64>], vocab: &[(String, u64, usize)]) -> Vec<Vec<u64>> {
        let index: HashMap<u64, usize> =
            (vocab.iter().enumerate()).map(|(t, v)| (v.1, t)).collect();
        let mut bits = vec![vec![0u64; texts.len().div_ceil(64)]; vocab.len()];
        for (i, keys) in texts.iter().enumerate() {
            let pairs = keys.windows(2).map(|w| pair_key(w[0], w[1]));
            for key in keys.iter().copied().chain(pairs) {
                if let Some(&t) = index.get(&key) {
                    bits[t][i / 64] |= 1 << (i % 64);
                }
            }
        }
        bits
    }

    impl TextKeys {
        /// Every text's keys, read back.
        fn all_keys(&self) -> Vec<Vec<u64>> {
            let mut all = Vec::new();
            for block in &self.blocks {
                let ids = self.numbers(block).unwrap();
                let from = all.len();
                all.extend(block.ends.iter().map(|_| Vec::new()));
                block.each_key(&ids, |t, k| all[from + t].push(k));
            }
            all
        }
    }

    #[test]
    fn tokens_drop_single_letters_and_split_symbols() {
        assert_eq!(
            tokens("A b2 order-17, ###  x_y Über"),
            [
                "2", "order", "-", "17", ",", "#", "#", "#", "x_y", "ü", "ber"
            ]
        );
        let mut tokenizer = Tokenizer::default();
        let terms: Vec<Term> = tokenizer.terms("ready ### ready");
        let mut t: Vec<String> = terms.iter().map(|x| tokenizer.spell(*x)).collect();
        t.sort();
        // Every occurrence: three `#`, two `# #`, and so on.
        assert_eq!(
            t,
            [
                "#", "#", "#", "# #", "# #", "# ready", "ready", "ready", "ready #"
            ]
        );
        // Non-ASCII texts split by the same rule.
        assert_eq!(tokens("Çà va, 2x"), ["ç", "à", "va", ",", "2"]);
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
        let count = |bits: &[u64]| bits.iter().map(|w| w.count_ones() as usize).sum::<usize>();
        let df = |term: &str| vocab.iter().find(|(t, _)| t == term).map(|(_, b)| count(b));
        // The reference's n_obs for these features (vectors.json, hack_scan planted_delimiter).
        assert_eq!(df("#"), Some(36));
        assert_eq!(df("# #"), Some(36));
        assert_eq!(df("is"), Some(32));
        assert_eq!(df("we"), Some(33));
        // Most frequent first, ties by term.
        assert!(vocab.windows(2).all(|w| count(&w[0].1) > count(&w[1].1)
            || (count(&w[0].1) == count(&w[1].1) && w[0].0 < w[1].0)));
        assert!(
            vocab
                .iter()
                .all(|(_, b)| count(b) >= 20 && count(b) < refs.len())
        );
    }

    #[test]
    fn texts_kept_compactly_hold_the_terms_their_keys_hold() {
        // Texts of a small vocabulary, an empty one, and a block of more distinct tokens than
        // 16 bits number.
        let small: Vec<String> = (0..300)
            .map(|i| format!("call lookup_{} then reply ok {} {}", i % 7, i % 11, i % 3))
            .chain(std::iter::once(String::new()))
            .collect();
        let word = |mut i: u32| -> String {
            (0..4)
                .map(|_| {
                    let c = char::from(b'a' + u8::try_from(i % 26).unwrap_or(0));
                    i /= 26;
                    c
                })
                .collect()
        };
        let wide: String = (0..70_000).map(|i| word(i) + " ").collect();
        let last = format!("{} {} lookup_3", word(1), word(2));
        let texts: Vec<&str> = (small.iter().map(String::as_str))
            .chain([wide.as_str(), last.as_str()])
            .collect();
        // Blocks of uneven sizes, as the scan's chunks are; the wide text in a block of its own.
        let blocks = [
            &texts[..100],
            &texts[100..301],
            &texts[301..302],
            &texts[302..],
        ];
        // All in memory; the first and the last (small) block in memory, the two between in the
        // file; all in the file.
        for limit in [SPILL_AFTER, 2_000, 0] {
            let mut tokenizer = Tokenizer::default();
            let mut df = DocFreq::default();
            let mut plain: Vec<Vec<u64>> = Vec::new();
            let mut kept = TextKeys::with_limit(limit);
            for (b, block) in blocks.into_iter().enumerate() {
                let mut builder = KeyBlockBuilder::default();
                for t in block {
                    df.add(&mut tokenizer, t);
                    plain.push(tokenizer.keys().to_vec());
                    builder.push(tokenizer.keys());
                }
                let mut built = builder.finish();
                assert_eq!(built.len(), 1);
                let built = built.remove(0);
                assert_eq!(
                    matches!(built.ids, Ids::Wide(_)),
                    b == 2,
                    "only the block of 70,000 distinct tokens needs 32-bit numbers"
                );
                kept.push(built).unwrap();
            }
            let spilled = kept
                .blocks
                .iter()
                .filter(|b| matches!(b.ids, Ids::Spilled { .. }));
            assert_eq!(
                spilled.count(),
                [0, 2, 4][usize::from(limit < SPILL_AFTER) + usize::from(limit == 0)],
                "{limit}"
            );
            assert_eq!(kept.spilled() > 0, limit < SPILL_AFTER);
            assert_eq!(kept.len(), texts.len());
            assert_eq!(kept.tokens(), plain.iter().map(Vec::len).sum::<usize>());
            assert_eq!(kept.all_keys(), plain, "{limit}");
            let vocab = df.vocabulary(texts.len(), 1, 1_000_000);
            assert!(vocab.len() > 70_000, "{}", vocab.len());
            let bits = holders_of(&kept, &vocab).unwrap();
            assert_eq!(bits, holders(&plain, &vocab), "{limit}");
            assert!(bits.iter().any(|b| b.iter().any(|w| *w != 0)));
        }
        let mut tokenizer = Tokenizer::default();
        // At the edge: 65,536 distinct tokens are numbered in 16 bits (the last is 65,535),
        // one more takes 32.
        for (distinct, wide) in [(65_536, false), (65_537, true)] {
            let text: String = (0..distinct).map(|i| word(i) + " ").collect();
            tokenizer.split(&text);
            let mut builder = KeyBlockBuilder::default();
            builder.push(tokenizer.keys());
            let mut kept = TextKeys::default();
            for block in builder.finish() {
                assert_eq!(matches!(block.ids, Ids::Wide(_)), wide, "{distinct}");
                kept.push(block).unwrap();
            }
            assert_eq!(kept.all_keys(), [tokenizer.keys()], "{distinct}");
        }
    }
}
