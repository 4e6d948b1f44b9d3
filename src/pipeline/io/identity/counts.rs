//! A count per 128-bit key in bounded memory: [`KeyCounts`].
//!
//! The reader keeps one entry per row (its rollout id) and one per task across a whole read, so
//! a map in memory grows with the input: about 40 bytes a row, 400 MB at 10M rows. Here at most
//! `cap` entries are held in a hash map; when it fills, its entries are sorted (a moment with
//! them twice: the map and the sorted list) and written to a run file in a scratch folder, and
//! the map starts empty again. Two runs of the same level are merged into one of the next level
//! (a binary counter), so there are at most log2(spills) + 1 runs however long the read. Each run
//! keeps in memory a Bloom filter of its keys (10 bits a key, so a missing key reads the disk
//! about once in a hundred looks a run) and every [`STRIDE`]th key (0.06 bytes a key), so a key
//! that is there is found by reading one block of the file.
//!
//! The newest value of a key wins: the map before the runs, a newer run before an older one,
//! and a merge keeps the newer run's value.

use std::fs::File;
use std::io::{BufReader, BufWriter, Read, Write};
use std::os::unix::fs::FileExt;
use std::path::PathBuf;

use crate::error::{Error, Result};
use crate::pipeline::scratch::{Scratch, scratch};

/// Entries between two keys of a run's sparse index: one block read finds a key.
const STRIDE: usize = 256;
/// Bytes of one entry in a run file: the key, then the count, little-endian.
const ENTRY: usize = 20;

type Key = [u64; 2];

fn key_of(k: u128) -> Key {
    // The high half first, so the arrays sort as the numbers do.
    let b = k.to_be_bytes();
    let half = |r: std::ops::Range<usize>| u64::from_be_bytes(b[r].try_into().expect("8 bytes"));
    [half(0..8), half(8..16)]
}

/// Counts per 128-bit key (fingerprints: their bits are uniform, which the Bloom filters use),
/// at most `cap` of them in memory.
pub(super) struct KeyCounts {
    /// What the entries count, for the run files' names and errors.
    what: &'static str,
    mem: std::collections::HashMap<Key, u32, foldhash::fast::RandomState>,
    cap: usize,
    /// Oldest first; levels strictly decrease along it.
    runs: Vec<Run>,
    scratch: Option<Scratch>,
    /// Run files made so far, for their names.
    made: u64,
}

impl KeyCounts {
    /// An empty map holding at most `cap` entries (at least 1) in memory.
    pub(super) fn new(what: &'static str, cap: usize) -> Self {
        Self {
            what,
            mem: std::collections::HashMap::default(),
            cap: cap.max(1),
            runs: Vec::new(),
            scratch: None,
            made: 0,
        }
    }

    /// The count of `key`, if it has one.
    pub(super) fn get(&self, key: u128) -> Result<Option<u32>> {
        let key = key_of(key);
        if let Some(v) = self.mem.get(&key) {
            return Ok(Some(*v));
        }
        for run in self.runs.iter().rev() {
            if let Some(v) = run.find(key)? {
                return Ok(Some(v));
            }
        }
        Ok(None)
    }

    /// Sets the count of `key`.
    pub(super) fn set(&mut self, key: u128, count: u32) -> Result<()> {
        self.mem.insert(key_of(key), count);
        if self.mem.len() >= self.cap {
            self.spill()?;
        }
        Ok(())
    }

    /// Gives `key` a count of 0 if it has none, returning whether it had none: one look-up in
    /// memory for a key there or new, where a get then a set would be two.
    pub(super) fn insert_new(&mut self, key: u128) -> Result<bool> {
        let key = key_of(key);
        let std::collections::hash_map::Entry::Vacant(slot) = self.mem.entry(key) else {
            return Ok(false);
        };
        for run in self.runs.iter().rev() {
            if run.find(key)?.is_some() {
                return Ok(false);
            }
        }
        slot.insert(0);
        if self.mem.len() >= self.cap {
            self.spill()?;
        }
        Ok(true)
    }

    /// Adds 1 to the count of `key` (0 when it has none), returning the count before.
    pub(super) fn bump(&mut self, key: u128) -> Result<u32> {
        if let Some(v) = self.mem.get_mut(&key_of(key)) {
            let before = *v;
            *v = before.saturating_add(1);
            return Ok(before);
        }
        let before = self.get(key)?.unwrap_or(0);
        self.set(key, before.saturating_add(1))?;
        Ok(before)
    }

    /// Writes the map's entries as a run (keeping its allocation for the next ones), then
    /// merges runs of equal level.
    fn spill(&mut self) -> Result<()> {
        let mut entries: Vec<(Key, u32)> = self.mem.drain().collect();
        entries.sort_unstable_by_key(|e| e.0);
        let (path, file) = self.new_file()?;
        let mut out = RunWriter::new(path, file, entries.len());
        for (k, v) in entries {
            out.push(k, v)?;
        }
        self.runs.push(out.finish(0)?);
        while self.runs.len() >= 2
            && self.runs[self.runs.len() - 1].level == self.runs[self.runs.len() - 2].level
        {
            let newer = self.runs.pop().expect("two runs");
            let older = self.runs.pop().expect("two runs");
            let merged = self.merge(older, newer)?;
            self.runs.push(merged);
        }
        Ok(())
    }

    /// One run of the next level holding both runs' keys, `newer`'s count for a key in both;
    /// their files are removed after. Their filters and indexes are let go before the merged
    /// run's are made, so a merge does not hold both.
    fn merge(&mut self, older: Run, newer: Run) -> Result<Run> {
        let level = older.level + 1;
        let entries = older.len + newer.len;
        let mut a = older.entries()?;
        let mut b = newer.entries()?;
        drop((older, newer));
        let (path, file) = self.new_file()?;
        let mut out = RunWriter::new(path, file, entries);
        let (mut x, mut y) = (a.next_entry()?, b.next_entry()?);
        loop {
            match (x, y) {
                (None, None) => break,
                (Some((ka, va)), None) => {
                    out.push(ka, va)?;
                    x = a.next_entry()?;
                }
                (None, Some((kb, vb))) => {
                    out.push(kb, vb)?;
                    y = b.next_entry()?;
                }
                (Some((ka, va)), Some((kb, vb))) => match ka.cmp(&kb) {
                    std::cmp::Ordering::Less => {
                        out.push(ka, va)?;
                        x = a.next_entry()?;
                    }
                    std::cmp::Ordering::Greater => {
                        out.push(kb, vb)?;
                        y = b.next_entry()?;
                    }
                    std::cmp::Ordering::Equal => {
                        out.push(kb, vb)?;
                        x = a.next_entry()?;
                        y = b.next_entry()?;
                    }
                },
            }
        }
        let merged = out.finish(level)?;
        for input in [a, b] {
            // The folder goes at the end anyway; a file left here is no error.
            let _ = std::fs::remove_file(&input.path);
        }
        Ok(merged)
    }

    fn new_file(&mut self) -> Result<(PathBuf, File)> {
        if self.scratch.is_none() {
            self.scratch = Some(scratch()?);
        }
        self.made += 1;
        let name = format!("{}-{}.run", self.what, self.made);
        self.scratch.as_ref().expect("made above").create(&name)
    }

    /// Entries in memory and on disk, and the runs' levels: for tests.
    #[cfg(test)]
    pub(super) fn shape(&self) -> (usize, Vec<u32>) {
        (self.mem.len(), self.runs.iter().map(|r| r.level).collect())
    }
}

/// A Bloom filter over uniform 128-bit keys: blocks of 512 bits, one block a key, 7 bits set in
/// it, all taken from the key's own bits (no hashing: the keys are hashes already).
struct Bloom {
    blocks: Vec<[u64; 8]>,
}

impl Bloom {
    /// Hash functions a key sets, each 9 bits of its low half.
    const K: u32 = 7;

    /// Room for `n` keys at about 10 bits each.
    fn new(n: usize) -> Self {
        let blocks = (n * 10).div_ceil(512).max(1);
        Self {
            blocks: vec![[0; 8]; blocks],
        }
    }

    fn block(&self, key: Key) -> usize {
        // The high half picks the block, uniformly (a multiply-shift, no modulo); the product
        // shifted down is below the block count, a `usize`.
        let blocks = self.blocks.len() as u128;
        usize::try_from((u128::from(key[0]) * blocks) >> 64).unwrap_or(0)
    }

    fn bits(key: Key) -> impl Iterator<Item = (usize, u64)> {
        (0..Self::K).map(move |i| {
            let bit = (key[1] >> (9 * i)) & 511;
            ((bit >> 6) as usize, 1u64 << (bit & 63))
        })
    }

    fn insert(&mut self, key: Key) {
        let b = self.block(key);
        for (word, mask) in Self::bits(key) {
            self.blocks[b][word] |= mask;
        }
    }

    fn may_contain(&self, key: Key) -> bool {
        let block = &self.blocks[self.block(key)];
        Self::bits(key).all(|(word, mask)| block[word] & mask != 0)
    }
}

/// One sorted run file, with what finds a key in it.
struct Run {
    path: PathBuf,
    file: File,
    len: usize,
    level: u32,
    /// The key of every [`STRIDE`]th entry, from the first.
    index: Vec<Key>,
    bloom: Bloom,
}

impl Run {
    fn find(&self, key: Key) -> Result<Option<u32>> {
        if !self.bloom.may_contain(key) {
            return Ok(None);
        }
        self.look_up(key)
    }

    /// [`Run::find`] past the filter: the one block that may hold `key`, read and searched.
    fn look_up(&self, key: Key) -> Result<Option<u32>> {
        // The block whose first key is the last at or before `key`.
        let Some(block) = self.index.partition_point(|k| *k <= key).checked_sub(1) else {
            return Ok(None);
        };
        let start = block * STRIDE;
        let n = STRIDE.min(self.len - start);
        let mut buf = vec![0u8; n * ENTRY];
        self.file
            .read_exact_at(&mut buf, (start * ENTRY) as u64)
            .map_err(|e| Error::io(&self.path, e))?;
        let entry = |i: usize| decode_entry(&buf[i * ENTRY..(i + 1) * ENTRY]);
        let (mut lo, mut hi) = (0, n);
        while lo < hi {
            let mid = usize::midpoint(lo, hi);
            let (k, v) = entry(mid);
            match k.cmp(&key) {
                std::cmp::Ordering::Less => lo = mid + 1,
                std::cmp::Ordering::Greater => hi = mid,
                std::cmp::Ordering::Equal => return Ok(Some(v)),
            }
        }
        Ok(None)
    }

    fn entries(&self) -> Result<RunEntries> {
        // Opened again: the handle's own offset is past the end, where the writer left it.
        let file = File::open(&self.path).map_err(|e| Error::io(&self.path, e))?;
        Ok(RunEntries {
            path: self.path.clone(),
            reader: BufReader::with_capacity(1 << 20, file),
            left: self.len,
        })
    }
}

fn decode_entry(b: &[u8]) -> (Key, u32) {
    let word =
        |r: std::ops::Range<usize>| u64::from_le_bytes(b[r].try_into().expect("eight bytes"));
    let count = u32::from_le_bytes(b[16..20].try_into().expect("four bytes"));
    ([word(0..8), word(8..16)], count)
}

/// A run's entries in order, read from its file.
struct RunEntries {
    path: PathBuf,
    reader: BufReader<File>,
    left: usize,
}

impl RunEntries {
    fn next_entry(&mut self) -> Result<Option<(Key, u32)>> {
        if self.left == 0 {
            return Ok(None);
        }
        self.left -= 1;
        let mut b = [0u8; ENTRY];
        self.reader
            .read_exact(&mut b)
            .map_err(|e| Error::io(&self.path, e))?;
        Ok(Some(decode_entry(&b)))
    }
}

/// Writes sorted entries to a run file, with its index and Bloom filter.
struct RunWriter {
    path: PathBuf,
    out: BufWriter<File>,
    len: usize,
    index: Vec<Key>,
    bloom: Bloom,
}

impl RunWriter {
    fn new(path: PathBuf, file: File, expected: usize) -> Self {
        Self {
            path,
            out: BufWriter::with_capacity(1 << 20, file),
            len: 0,
            index: Vec::with_capacity(expected.div_ceil(STRIDE)),
            bloom: Bloom::new(expected),
        }
    }

    fn push(&mut self, key: Key, count: u32) -> Result<()> {
        if self.len.is_multiple_of(STRIDE) {
            self.index.push(key);
        }
        self.bloom.insert(key);
        let mut b = [0u8; ENTRY];
        b[..8].copy_from_slice(&key[0].to_le_bytes());
        b[8..16].copy_from_slice(&key[1].to_le_bytes());
        b[16..].copy_from_slice(&count.to_le_bytes());
        self.out
            .write_all(&b)
            .map_err(|e| Error::io(&self.path, e))?;
        self.len += 1;
        Ok(())
    }

    fn finish(self, level: u32) -> Result<Run> {
        let file = self
            .out
            .into_inner()
            .map_err(|e| Error::io(&self.path, e.into_error()))?;
        Ok(Run {
            path: self.path,
            file,
            len: self.len,
            level,
            index: self.index,
            bloom: self.bloom,
        })
    }
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use rand::{Rng, SeedableRng};
    use rand_chacha::ChaCha8Rng;

    use super::*;

    /// Against a plain map, under gets, sets and bumps of keys old and new, with a cap small
    /// enough to spill and merge many times (keys drawn from a small pool, so most are seen
    /// again after they went to disk).
    #[test]
    fn spilled_counts_read_as_a_map_in_memory_does() {
        for cap in [1, 3, 64] {
            let mut rng = ChaCha8Rng::seed_from_u64(cap as u64);
            let pool: Vec<u128> = (0..500).map(|_| rng.random()).collect();
            let mut counts = KeyCounts::new("test", cap);
            let mut want: HashMap<u128, u32> = HashMap::new();
            for _ in 0..4000 {
                let key = pool[rng.random_range(0..pool.len())];
                match rng.random_range(0..4) {
                    0 => assert_eq!(counts.get(key).unwrap(), want.get(&key).copied()),
                    3 => {
                        let new = !want.contains_key(&key);
                        assert_eq!(counts.insert_new(key).unwrap(), new);
                        want.entry(key).or_insert(0);
                    }
                    1 => {
                        let v = rng.random_range(0..1000);
                        counts.set(key, v).unwrap();
                        want.insert(key, v);
                    }
                    _ => {
                        let before = want.get(&key).copied().unwrap_or(0);
                        assert_eq!(counts.bump(key).unwrap(), before);
                        want.insert(key, before + 1);
                    }
                }
            }
            for key in &pool {
                assert_eq!(counts.get(*key).unwrap(), want.get(key).copied());
            }
            let (in_memory, levels) = counts.shape();
            assert!(in_memory < cap, "cap {cap}: {in_memory} in memory");
            // Merged runs' files are gone: one file a run.
            let files = std::fs::read_dir(counts.scratch.as_ref().unwrap().path())
                .unwrap()
                .filter(|e| e.as_ref().unwrap().path().extension() == Some("run".as_ref()))
                .count();
            assert_eq!(files, levels.len(), "cap {cap}");
            // A binary counter: levels strictly fall from the oldest run to the newest.
            assert!(levels.windows(2).all(|w| w[0] > w[1]), "{levels:?}");
            if cap < 64 {
                assert!(levels.len() >= 2, "cap {cap}: runs {levels:?}");
            }
        }
    }

    /// Many keys, each set once: the runs stay few (one per level) and the filters keep
    /// missing keys off the disk.
    #[test]
    fn runs_stay_logarithmic_and_missing_keys_are_found_missing() {
        let mut rng = ChaCha8Rng::seed_from_u64(7);
        let mut counts = KeyCounts::new("test", 1000);
        let keys: Vec<u128> = (0..100_000).map(|_| rng.random()).collect();
        for (i, k) in (0u32..).zip(&keys) {
            counts.set(*k, i).unwrap();
        }
        let (_, levels) = counts.shape();
        assert!(levels.len() <= 7, "{levels:?}");
        for (i, k) in (0u32..).zip(&keys).step_by(97) {
            assert_eq!(counts.get(*k).unwrap(), Some(i));
        }
        let present = (0..10_000)
            .filter(|_| counts.get(rng.random()).unwrap().is_some())
            .count();
        assert_eq!(present, 0);
        let passed = (0..100_000)
            .filter(|_| {
                let k = key_of(rng.random());
                counts.runs.iter().any(|r| r.bloom.may_contain(k))
            })
            .count();
        // About 1% a run, a handful of runs.
        assert!(passed < 100_000 * levels.len() * 3 / 100, "{passed}");
    }

    /// Runs of a block, a block and one, two blocks and one: every key is found, and keys
    /// beside them, below the first and past the last are not, even past the filter.
    #[test]
    fn keys_at_block_edges_are_found_and_keys_beside_them_are_not() {
        for n in [1, 255, 256, 257, 512, 513] {
            let mut rng = ChaCha8Rng::seed_from_u64(n as u64);
            // Even keys, so each has an absent neighbour on both sides.
            let keys: Vec<u128> = (0..n).map(|_| (rng.random::<u128>() & !1) | 2).collect();
            let mut counts = KeyCounts::new("test", n);
            for (i, k) in (0u32..).zip(&keys) {
                counts.set(*k, i).unwrap();
            }
            assert_eq!(counts.shape(), (0, vec![0]), "{n} keys, one spill");
            let run = &counts.runs[0];
            for (i, k) in (0u32..).zip(&keys) {
                assert_eq!(counts.get(*k).unwrap(), Some(i));
                for beside in [*k - 1, *k + 1] {
                    assert_eq!(run.look_up(key_of(beside)).unwrap(), None);
                }
            }
            for absent in [0, u128::MAX] {
                assert_eq!(run.look_up(key_of(absent)).unwrap(), None);
            }
            let dir = counts.scratch.as_ref().unwrap().path().to_path_buf();
            drop(counts);
            assert!(!dir.exists(), "the scratch folder goes with the map");
        }
    }
}
