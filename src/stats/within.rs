//! Within-ask statistics for reward scans: what a grouped update (one baseline per ask) would
//! learn from a reward, against a permutation floor (the measure spec's §7.1, §7.3, §7.4).
//!
//! Rewards are centred on their group's mean; a feature's within-ask correlation is the Pearson
//! correlation of its group-demeaned values with the centred rewards, with population moments over
//! all n rows (singleton groups contribute nothing). A feature is a [`Column`]: a bitset when it
//! is a 0/1 indicator, dense values otherwise (0 = absent).
//!
//! The floor shuffles rewards within each group of two or more and takes the `1 − alpha`
//! quantile of the strongest feature's |correlation| over the shuffles. Each shuffle starts from
//! the observed rewards and draws from its own ChaCha8 stream (family 5, one per shuffle), so
//! shuffles run in parallel and the floor is the same at any thread count. (The reference
//! shuffles the previous shuffle instead; a uniform shuffle of a uniform shuffle is a uniform
//! shuffle, so the nulls have the same distribution.) With 0/1 rewards a shuffle is a bitset of
//! the rows that pass, and a 0/1 feature's sum over it is a popcount.

use rand::Rng;
use rayon::prelude::*;

use super::bootstrap::rng_at;

/// The stream family of the permutation floor.
const FAMILY: u32 = 5;

/// Rows grouped by ask, groups numbered in first-appearance order.
#[derive(Debug, Clone)]
pub struct Groups {
    /// Each row's group.
    pub of: Vec<u32>,
    /// Each group's rows, ascending.
    pub members: Vec<Vec<u32>>,
}

impl Groups {
    /// Groups of `keys` (one per row).
    pub fn new<K: AsRef<str>>(keys: &[K]) -> Self {
        let mut index: std::collections::HashMap<&str, u32, foldhash::fast::RandomState> =
            std::collections::HashMap::default();
        let mut of = Vec::with_capacity(keys.len());
        let mut members: Vec<Vec<u32>> = Vec::new();
        for (i, k) in keys.iter().enumerate() {
            let next = u32::try_from(members.len()).unwrap_or(u32::MAX);
            let g = *index.entry(k.as_ref()).or_insert(next);
            if g == next {
                members.push(Vec::new());
            }
            members[g as usize].push(u32::try_from(i).unwrap_or(u32::MAX));
            of.push(g);
        }
        Self { of, members }
    }

    /// Groups of rows given their group's number, numbered as first seen (0, then 1, ...): the
    /// groups [`Groups::new`] makes of the keys the numbers stand for.
    ///
    /// # Panics
    /// Never with numbers as described; a number past those seen before it is a bug.
    pub fn of_numbers(of: Vec<u32>) -> Self {
        let groups = of.iter().max().map_or(0, |&g| g as usize + 1);
        let mut members: Vec<Vec<u32>> = vec![Vec::new(); groups];
        debug_assert!(
            of.iter()
                .try_fold(0u32, |next, &g| (g <= next).then(|| next.max(g + 1)))
                .is_some(),
            "group numbers are numbered as first seen"
        );
        for (i, &g) in of.iter().enumerate() {
            members[g as usize].push(u32::try_from(i).unwrap_or(u32::MAX));
        }
        Self { of, members }
    }

    /// Groups of two rows or more.
    pub fn multi(&self) -> impl Iterator<Item = &Vec<u32>> {
        self.members.iter().filter(|m| m.len() >= 2)
    }

    /// The rows.
    pub fn rows(&self) -> usize {
        self.of.len()
    }
}

/// Rewards centred on their group's mean, and the population sd of the centred values.
#[derive(Debug, Clone)]
pub struct Centred {
    /// `r_i − mean of its group`.
    pub rc: Vec<f64>,
    /// `sqrt(Σ rc² / n)`.
    pub sr: f64,
    /// Each group's mean.
    pub means: Vec<f64>,
}

/// Centres `rewards` within `groups`.
#[allow(clippy::cast_precision_loss)]
pub fn centre(rewards: &[f64], groups: &Groups) -> Centred {
    let means: Vec<f64> = groups
        .members
        .iter()
        .map(|m| m.iter().map(|&i| rewards[i as usize]).sum::<f64>() / m.len() as f64)
        .collect();
    let rc: Vec<f64> = rewards
        .iter()
        .zip(&groups.of)
        .map(|(r, g)| r - means[*g as usize])
        .collect();
    let n = rewards.len().max(1) as f64;
    let sr = (rc.iter().map(|x| x * x).sum::<f64>() / n).sqrt();
    Centred { rc, sr, means }
}

/// A feature over the rows: present where non-zero.
#[derive(Debug, Clone, PartialEq)]
pub enum Column {
    /// A 0/1 indicator: bit `i` set means 1.0 on row `i`.
    Bits(Vec<u64>),
    /// Whole numbers from 0 to 2^32 − 1 (counts, lengths), one per row (0 = absent): the values
    /// of a [`Column::Dense`] column in half its memory, read as the same `f64`s.
    Counts(Vec<u32>),
    /// Any other values, one per row (0 = absent; never NaN).
    Dense(Vec<f64>),
}

impl Column {
    /// The column of `n` rows with `values` on `rows` (ascending; zeros and NaN dropped): a
    /// bitset when every value is 1.
    pub fn from_entries(n: usize, rows: &[u32], values: &[f64]) -> Self {
        Self::from_each(n, |f| {
            rows.iter()
                .zip(values)
                .for_each(|(r, v)| f(*r as usize, *v));
        })
    }

    /// The column of `n` rows whose entries `each` gives (`each(f)` calls `f(row, value)` for
    /// each, rows ascending; zeros and NaN dropped), read twice: a bitset when every value is 1,
    /// counts when every value is a whole number from 1 to 2^32 − 1.
    pub fn from_each(n: usize, each: impl Fn(&mut dyn FnMut(usize, f64))) -> Self {
        let (mut binary, mut counts) = (true, true);
        each(&mut |_, v| {
            if v != 0.0 && !v.is_nan() {
                binary &= v == 1.0;
                counts &= as_count(v).is_some();
            }
        });
        if binary {
            let mut bits = vec![0u64; n.div_ceil(64)];
            each(&mut |r, v| {
                if v == 1.0 {
                    bits[r / 64] |= 1 << (r % 64);
                }
            });
            Self::Bits(bits)
        } else if counts {
            let mut dense = vec![0u32; n];
            each(&mut |r, v| {
                if let Some(c) = as_count(v) {
                    dense[r] = c;
                }
            });
            Self::Counts(dense)
        } else {
            let mut dense = vec![0.0; n];
            each(&mut |r, v| {
                if v != 0.0 && !v.is_nan() {
                    dense[r] = v;
                }
            });
            Self::Dense(dense)
        }
    }

    /// The column of dense `values` (zeros and NaN absent).
    pub fn from_dense(values: &[f64]) -> Self {
        Self::from_each(values.len(), |f| {
            values.iter().enumerate().for_each(|(i, v)| f(i, *v));
        })
    }

    /// Rows with an entry.
    pub fn n_obs(&self) -> usize {
        match self {
            Self::Bits(b) => b.iter().map(|w| w.count_ones() as usize).sum(),
            Self::Counts(d) => d.iter().filter(|v| **v != 0).count(),
            Self::Dense(d) => d.iter().filter(|v| **v != 0.0).count(),
        }
    }

    /// Whether every entry is exactly 1.
    pub fn is_binary(&self) -> bool {
        matches!(self, Self::Bits(_))
    }

    /// The rows where both indicators are set (`None` unless both are bitsets).
    pub fn and(&self, other: &Self) -> Option<Self> {
        match (self, other) {
            (Self::Bits(a), Self::Bits(b)) => {
                Some(Self::Bits(a.iter().zip(b).map(|(x, y)| x & y).collect()))
            }
            _ => None,
        }
    }

    /// Calls `f(row, value)` for every entry, rows ascending.
    pub fn for_each(&self, mut f: impl FnMut(usize, f64)) {
        match self {
            Self::Bits(bits) => each_bit(bits, |i| f(i, 1.0)),
            Self::Counts(d) => {
                for (i, v) in d.iter().enumerate() {
                    if *v != 0 {
                        f(i, f64::from(*v));
                    }
                }
            }
            Self::Dense(d) => {
                for (i, v) in d.iter().enumerate() {
                    if *v != 0.0 {
                        f(i, *v);
                    }
                }
            }
        }
    }
}

/// `v` as a count: a whole number from 1 to 2^32 − 1 (`None` otherwise, and for 0).
#[allow(
    clippy::cast_possible_truncation,
    clippy::cast_sign_loss,
    reason = "checked: the value is whole and in range"
)]
pub(crate) fn as_count(v: f64) -> Option<u32> {
    (v >= 1.0 && v <= f64::from(u32::MAX) && v.fract() == 0.0).then_some(v as u32)
}

/// Calls `f(i)` for every set bit `i`, ascending.
fn each_bit(bits: &[u64], mut f: impl FnMut(usize)) {
    for (w, word) in bits.iter().enumerate() {
        let mut x = *word;
        while x != 0 {
            f(w * 64 + x.trailing_zeros() as usize);
            x &= x - 1;
        }
    }
}

/// The within-group population sd of `f` over the rows of `groups`.
#[allow(clippy::cast_precision_loss)]
pub fn sd_within(f: &Column, groups: &Groups) -> f64 {
    // Per-group sums, added up in the order the groups are first touched (rows ascending).
    let mut sums = vec![(0.0f64, 0.0f64); groups.members.len()];
    let mut touched = vec![false; groups.members.len()];
    let mut order = Vec::new();
    f.for_each(|r, v| {
        let g = groups.of[r] as usize;
        if !touched[g] {
            touched[g] = true;
            order.push(g);
        }
        sums[g].0 += v;
        sums[g].1 += v * v;
    });
    let ss: f64 = order
        .iter()
        .map(|&g| {
            let (s, s2) = sums[g];
            s2 - s * s / groups.members[g].len() as f64
        })
        .sum();
    (ss.max(0.0) / groups.rows().max(1) as f64).sqrt()
}

/// The within-ask correlation of `f` (with its `sd_within`) against centred rewards `rc`.
#[allow(clippy::cast_precision_loss)]
pub fn rho_within(f: &Column, sd_within: f64, rc: &[f64], sr: f64) -> f64 {
    if sd_within <= 0.0 || sr <= 0.0 {
        return 0.0;
    }
    let mut dot = 0.0;
    f.for_each(|r, v| dot += v * rc[r]);
    dot / (rc.len() as f64 * sd_within * sr)
}

/// The pooled Pearson correlation of `f` with `rewards` (population moments), and `f`'s pooled
/// sd.
pub fn pooled(f: &Column, rewards: &[f64]) -> (f64, f64) {
    pooled_given(f, rewards, &Moments::of(rewards))
}

/// The rewards' population mean and sd, found once for every feature's [`pooled_given`].
#[derive(Debug, Clone, Copy)]
pub struct Moments {
    mean: f64,
    sd: f64,
}

impl Moments {
    /// The moments of `rewards`.
    #[allow(clippy::cast_precision_loss)]
    pub fn of(rewards: &[f64]) -> Self {
        let n = rewards.len().max(1) as f64;
        let mean = rewards.iter().sum::<f64>() / n;
        let sd = (rewards.iter().map(|r| r * r).sum::<f64>() / n - mean * mean)
            .max(0.0)
            .sqrt();
        Self { mean, sd }
    }
}

/// [`pooled`], with the rewards' moments given.
#[allow(clippy::cast_precision_loss)]
pub fn pooled_given(f: &Column, rewards: &[f64], moments: &Moments) -> (f64, f64) {
    let n = rewards.len().max(1) as f64;
    let (mut s, mut s2, mut sfr) = (0.0, 0.0, 0.0);
    f.for_each(|r, v| {
        s += v;
        s2 += v * v;
        sfr += v * rewards[r];
    });
    let sd = (s2 / n - (s / n) * (s / n)).max(0.0).sqrt();
    let Moments {
        mean: mean_r,
        sd: sd_r,
    } = *moments;
    if sd <= 0.0 || sd_r <= 0.0 {
        return (0.0, sd);
    }
    ((sfr / n - (s / n) * mean_r) / (sd * sd_r), sd)
}

/// How much of the reward varies within asks.
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize)]
pub struct Support {
    /// Share of asks where every rollout passed.
    pub sat: f64,
    /// Share where every rollout failed.
    pub dead: f64,
    /// Share with mixed rewards.
    pub mixed: f64,
    /// `Σ popvar(group) / (0.25 · groups)`: the gradient a grouped update can find.
    pub capacity: f64,
}

/// The support of `rewards` over `groups` (singletons included).
#[allow(clippy::cast_precision_loss)]
pub fn support(rewards: &[f64], groups: &Groups) -> Support {
    let g = groups.members.len().max(1) as f64;
    let (mut sat, mut dead, mut var) = (0.0, 0.0, 0.0);
    for m in &groups.members {
        let vals: Vec<f64> = m.iter().map(|&i| rewards[i as usize]).collect();
        let (lo, hi) = vals
            .iter()
            .fold((f64::INFINITY, f64::NEG_INFINITY), |(a, b), v| {
                (a.min(*v), b.max(*v))
            });
        if lo == hi {
            if lo >= 1.0 {
                sat += 1.0;
            } else if lo <= 0.0 {
                dead += 1.0;
            }
        }
        let mean = vals.iter().sum::<f64>() / vals.len() as f64;
        var += vals.iter().map(|v| (v - mean) * (v - mean)).sum::<f64>() / vals.len() as f64;
    }
    let unanimous = groups
        .members
        .iter()
        .filter(|m| {
            let first = rewards[m[0] as usize];
            m.iter().all(|&i| rewards[i as usize] == first)
        })
        .count() as f64;
    Support {
        sat: sat / g,
        dead: dead / g,
        mixed: (g - unanimous) / g,
        capacity: var / (0.25 * g),
    }
}

/// The permutation floor: over `perms` shuffles of the rewards within every group of two or more,
/// the strongest |within correlation| of `features` (each with its `sd_within`; those at 0 are
/// skipped) against the shuffled centred rewards, with the observed `sr`. Returns the `1 − alpha`
/// quantile (index `ceil((1−alpha)·k) − 1` of the sorted nulls) and the sorted nulls.
#[allow(
    clippy::cast_precision_loss,
    clippy::cast_possible_truncation,
    clippy::cast_sign_loss
)]
pub fn floor(
    features: &[(&Column, f64)],
    rewards: &[f64],
    groups: &Groups,
    centred: &Centred,
    perms: u32,
    alpha: f64,
    seed: u64,
) -> (f64, Vec<f64>) {
    let k = perms.max(1);
    if centred.sr <= 0.0 {
        return (0.0, vec![0.0; k as usize]);
    }
    // Σ f·rc_shuffled = Σ f·r_shuffled − Σ f·(its group's mean); the second term no shuffle
    // changes, since a shuffle within a group keeps the group's mean.
    let live: Vec<(&Column, f64, f64)> = features
        .iter()
        .filter(|(_, sd)| *sd > 0.0)
        .map(|(f, sd)| {
            let mut fixed = 0.0;
            f.for_each(|r, v| fixed += v * centred.means[groups.of[r] as usize]);
            (*f, *sd, fixed)
        })
        .collect();
    let scale = rewards.len() as f64 * centred.sr;
    // The strongest |correlation| given each live feature's sum (by its index in `live`).
    let strongest = |sum: &dyn Fn(usize) -> f64| {
        (live.iter().enumerate())
            .map(|(j, (_, sd, fixed))| ((sum(j) - fixed) / (scale * sd)).abs())
            .fold(0.0, f64::max)
    };
    let binary = rewards.iter().all(|r| *r == 0.0 || *r == 1.0);
    let mut nulls: Vec<f64> = if binary {
        // A few shuffles at a time, summed block of rows by block of rows: each block of a
        // feature is read from memory once for all of them, not once a shuffle. Each sum runs
        // over the rows in order, as one pass would, so the nulls are the same to the bit.
        let together = (k as usize)
            .div_ceil(2 * rayon::current_num_threads())
            .clamp(1, SHUFFLES_TOGETHER);
        let words = rewards.len().div_ceil(64);
        (0..k)
            .collect::<Vec<u32>>()
            .par_chunks(together)
            .flat_map_iter(|ps| {
                let passes: Vec<Vec<u64>> = (ps.iter())
                    .map(|&p| shuffled_bits(rewards, groups, &mut rng_at(seed, FAMILY, p)))
                    .collect();
                let mut sums = vec![0.0; ps.len() * live.len()];
                for start in (0..words).step_by(BLOCK_WORDS) {
                    let block = start..(start + BLOCK_WORDS).min(words);
                    for (j, (f, _, _)) in live.iter().enumerate() {
                        for (q, pass) in passes.iter().enumerate() {
                            add_over(f, pass, block.clone(), &mut sums[q * live.len() + j]);
                        }
                    }
                }
                (0..ps.len())
                    .map(|q| strongest(&|j| sums[q * live.len() + j]))
                    .collect::<Vec<f64>>()
            })
            .collect()
    } else {
        (0..k)
            .into_par_iter()
            .map(|p| {
                let perm = shuffled(rewards, groups, &mut rng_at(seed, FAMILY, p));
                let sums: Vec<f64> = (live.iter())
                    .map(|(f, _, _)| {
                        let mut s = 0.0;
                        f.for_each(|r, v| s += v * perm[r]);
                        s
                    })
                    .collect();
                strongest(&|j| sums[j])
            })
            .collect()
    };
    nulls.sort_by(f64::total_cmp);
    let at = (((1.0 - alpha) * f64::from(k)).ceil() as usize)
        .saturating_sub(1)
        .min(nulls.len() - 1);
    (nulls[at], nulls)
}

/// Shuffles of the floor summed together over a block of rows.
const SHUFFLES_TOGETHER: usize = 8;
/// Words (of 64 rows) in a block: a block of a 64-bit column is 128 KiB.
const BLOCK_WORDS: usize = 256;

/// Adds to `sum` `f`'s values on the rows set in `pass` within its `words`, rows in order (a
/// popcount a word for an indicator).
fn add_over(f: &Column, pass: &[u64], words: std::ops::Range<usize>, sum: &mut f64) {
    let base = words.start * 64;
    let pass = &pass[words.clone()];
    match f {
        Column::Bits(b) => {
            for (x, y) in b[words].iter().zip(pass) {
                *sum += f64::from((x & y).count_ones());
            }
        }
        Column::Counts(d) => each_bit(pass, |i| *sum += f64::from(d[base + i])),
        Column::Dense(d) => each_bit(pass, |i| *sum += d[base + i]),
    }
}

/// The 0/1 `rewards` shuffled within every group of two or more, as the bitset of passing rows:
/// each group's passes land on a uniform choice of its members.
fn shuffled_bits(rewards: &[f64], groups: &Groups, rng: &mut impl Rng) -> Vec<u64> {
    let mut bits = vec![0u64; rewards.len().div_ceil(64)];
    let mut set = |i: u32| bits[i as usize / 64] |= 1 << (i % 64);
    let mut scratch: Vec<u32> = Vec::new();
    for m in &groups.members {
        let ones = m.iter().filter(|&&i| rewards[i as usize] == 1.0).count();
        if ones == 0 {
            continue;
        }
        if m.len() < 2 || ones == m.len() {
            for &i in m {
                set(i);
            }
            continue;
        }
        // A partial Fisher–Yates draws the smaller side: the passes, or the failures.
        let draw = ones.min(m.len() - ones);
        scratch.clear();
        scratch.extend_from_slice(m);
        for j in 0..draw {
            let at = rng.random_range(j..scratch.len());
            scratch.swap(j, at);
        }
        if draw == ones {
            scratch[..draw].iter().for_each(|&i| set(i));
        } else {
            scratch[draw..].iter().for_each(|&i| set(i));
        }
    }
    bits
}

/// `rewards` shuffled within every group of two or more (Fisher–Yates).
fn shuffled(rewards: &[f64], groups: &Groups, rng: &mut impl Rng) -> Vec<f64> {
    let mut perm = rewards.to_vec();
    let mut vals = Vec::new();
    for m in groups.multi() {
        vals.clear();
        vals.extend(m.iter().map(|&i| rewards[i as usize]));
        for i in (1..vals.len()).rev() {
            let j = rng.random_range(0..=i);
            vals.swap(i, j);
        }
        for (&i, v) in m.iter().zip(&vals) {
            perm[i as usize] = *v;
        }
    }
    perm
}
#[cfg(test)]
mod tests {
    use serde_json::Value;

    use super::*;

    /// The reference's planted-delimiter rows: (prompt, `final_text`, reward).
    fn planted() -> Vec<(String, String, f64)> {
        let text = std::fs::read_to_string(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/tests/fixtures/hack_scan_planted.jsonl"
        ))
        .expect("fixture");
        text.lines()
            .map(|l| {
                let v: Value = serde_json::from_str(l).expect("json");
                (
                    v["prompt"].as_str().unwrap_or("").to_owned(),
                    v["final_text"].as_str().unwrap_or("").to_owned(),
                    v["reward"].as_f64().unwrap_or(0.0),
                )
            })
            .collect()
    }

    /// The planted rows' groups, rewards and centred rewards, and a feature of each reply.
    struct Planted {
        rows: Vec<(String, String, f64)>,
        groups: Groups,
        rewards: Vec<f64>,
        c: Centred,
    }

    impl Planted {
        fn new() -> Self {
            let rows = planted();
            let groups = Groups::new(&rows.iter().map(|r| r.0.as_str()).collect::<Vec<_>>());
            let rewards: Vec<f64> = rows.iter().map(|r| r.2).collect();
            let c = centre(&rewards, &groups);
            Self {
                rows,
                groups,
                rewards,
                c,
            }
        }

        /// `of` of each reply as a feature, with its within-ask sd.
        fn feature(&self, of: impl Fn(&str) -> usize) -> (Column, f64) {
            let f = Column::from_dense(
                &self
                    .rows
                    .iter()
                    .map(|r| of(&r.1) as f64)
                    .collect::<Vec<_>>(),
            );
            let sd = sd_within(&f, &self.groups);
            (f, sd)
        }
    }

    #[test]
    fn counts_are_kept_in_32_bits_and_read_as_the_same_floats() {
        let p = Planted::new();
        let (counts, sd) = p.feature(|t| t.split_whitespace().count());
        let Column::Counts(c) = &counts else {
            panic!("word counts are counts: {counts:?}");
        };
        // The same values as 64-bit floats.
        let dense = Column::Dense(c.iter().map(|v| f64::from(*v)).collect());
        assert_eq!(counts.n_obs(), dense.n_obs());
        assert_eq!(sd.to_bits(), sd_within(&dense, &p.groups).to_bits());
        let (a, b) = (pooled(&counts, &p.rewards), pooled(&dense, &p.rewards));
        assert_eq!(
            (a.0.to_bits(), a.1.to_bits()),
            (b.0.to_bits(), b.1.to_bits())
        );
        let floor_of = |f: &Column| {
            let sds = [(f, sd)];
            floor(&sds, &p.rewards, &p.groups, &p.c, 50, 0.05, 3).1
        };
        assert_eq!(floor_of(&counts), floor_of(&dense));
        // A fraction, a negative value or one past 2^32 keeps 64 bits; ones are a bitset.
        for (values, counts) in [
            (vec![0.0, 2.0, 3.0], true),
            (vec![0.0, 2.5, 3.0], false),
            (vec![-1.0, 2.0, 3.0], false),
            (vec![4_294_967_296.0, 2.0, 3.0], false),
            (vec![4_294_967_295.0, 2.0, 3.0], true),
        ] {
            let c = Column::from_dense(&values);
            assert_eq!(matches!(c, Column::Counts(_)), counts, "{values:?}");
            let mut back = vec![0.0; values.len()];
            c.for_each(|i, v| back[i] = v);
            assert_eq!(back, values);
        }
        assert!(Column::from_dense(&[0.0, 1.0, 1.0]).is_binary());
    }

    #[test]
    fn groups_of_numbers_are_the_groups_of_the_keys() {
        let keys = ["b", "a", "b", "c", "a", "a", "d"];
        let by_key = Groups::new(&keys);
        let by_number = Groups::of_numbers(by_key.of.clone());
        assert_eq!(by_number.of, [0, 1, 0, 2, 1, 1, 3]);
        assert_eq!(by_number.members, by_key.members);
        assert_eq!(by_number.multi().count(), 2);
    }

    #[test]
    fn within_and_pooled_correlations_match_the_reference() {
        let p = Planted::new();
        let (rewards, c) = (&p.rewards, &p.c);
        let (words, sd) = p.feature(|t| t.split_whitespace().count());
        let round4 = |x: f64| crate::stats::round_places(x, 4);
        assert_eq!(round4(rho_within(&words, sd, &c.rc, c.sr)), 0.4467);
        assert_eq!(round4(pooled(&words, rewards).0), 0.4189);
        // reply_length: the reply's characters (these rows have no conversation).
        let (chars, sd) = p.feature(|t| t.chars().count());
        assert_eq!(round4(rho_within(&chars, sd, &c.rc, c.sr)), 0.3135);
        assert_eq!(round4(pooled(&chars, rewards).0), 0.2922);
        // The reference's support line.
        let s = support(rewards, &p.groups);
        assert_eq!((s.sat, s.dead, s.mixed), (0.0, 0.0, 1.0));
        assert!((s.capacity - 0.888_888_888_888_889_1).abs() < 1e-12);
        // The delimiter itself: a perfect within-ask correlation.
        let (hashes, sd) = p.feature(|t| t.matches('#').count());
        assert_eq!(round4(rho_within(&hashes, sd, &c.rc, c.sr)), 1.0);
    }

    #[test]
    fn the_floor_is_seeded_and_shuffles_within_asks_only() {
        let p = Planted::new();
        let (words, sd) = p.feature(|t| t.split_whitespace().count());
        let (tau, nulls) = floor(&[(&words, sd)], &p.rewards, &p.groups, &p.c, 100, 0.05, 0);
        let (again, _) = floor(&[(&words, sd)], &p.rewards, &p.groups, &p.c, 100, 0.05, 0);
        assert_eq!(tau, again);
        assert_eq!(nulls.len(), 100);
        assert_eq!(tau, nulls[94]);
        // Under the null the one feature rarely reaches its observed 0.45; the reference's floor
        // over all 23 features is 0.43, so one feature's is lower.
        assert!(tau < 0.45 && tau > 0.1, "{tau}");
        let (other, _) = floor(&[(&words, sd)], &p.rewards, &p.groups, &p.c, 100, 0.05, 1);
        assert_ne!(tau, other, "another seed, other shuffles");
    }

    #[test]
    fn a_shuffle_of_01_rewards_keeps_each_groups_passes() {
        let p = Planted::new();
        for s in 0..20 {
            let mut rng = rng_at(s, FAMILY, 0);
            let bits = shuffled_bits(&p.rewards, &p.groups, &mut rng);
            let perm = shuffled(&p.rewards, &p.groups, &mut rng);
            for m in &p.groups.members {
                let passes =
                    |on: &dyn Fn(usize) -> bool| m.iter().filter(|&&i| on(i as usize)).count();
                let observed = passes(&|i| p.rewards[i] == 1.0);
                assert_eq!(passes(&|i| bits[i / 64] >> (i % 64) & 1 == 1), observed);
                assert_eq!(passes(&|i| perm[i] == 1.0), observed);
            }
        }
    }

    #[test]
    fn the_bitset_floor_equals_the_float_floor_on_the_same_shuffle() {
        // Sums over a shuffle as popcounts (0/1 rewards) and as a float pass agree.
        let p = Planted::new();
        let (hashes, _) = p.feature(|t| t.matches('#').count().min(1));
        let (words, _) = p.feature(|t| t.split_whitespace().count());
        assert!(hashes.is_binary() && !words.is_binary());
        let mut rng = rng_at(7, FAMILY, 0);
        let bits = shuffled_bits(&p.rewards, &p.groups, &mut rng);
        let perm: Vec<f64> = (0..p.rewards.len())
            .map(|i| f64::from(u8::try_from(bits[i / 64] >> (i % 64) & 1).unwrap_or(0)))
            .collect();
        for f in [&hashes, &words] {
            let mut float = 0.0;
            f.for_each(|r, v| float += v * perm[r]);
            let mut sum = 0.0;
            add_over(f, &bits, 0..bits.len(), &mut sum);
            assert_eq!(float, sum);
        }
    }

    #[test]
    fn the_floor_summed_in_blocks_gives_the_nulls_of_one_pass_a_shuffle() {
        // 50,000 rows (four blocks), tasks of 8; an indicator, counts and fractions.
        let n = 50_000usize;
        let keys: Vec<String> = (0..n).map(|i| format!("t{}", i / 8)).collect();
        let groups = Groups::new(&keys.iter().map(String::as_str).collect::<Vec<_>>());
        let mix = |i: usize| (i.wrapping_mul(2_654_435_761) >> 7) % 1000;
        let rewards: Vec<f64> = (0..n).map(|i| f64::from(u8::from(mix(i) < 450))).collect();
        let c = centre(&rewards, &groups);
        let column =
            |f: &dyn Fn(usize) -> f64| Column::from_dense(&(0..n).map(f).collect::<Vec<_>>());
        let columns = [
            column(&|i| f64::from(u8::from(mix(i + 1) < 300))),
            column(&|i| (mix(i + 2) % 40) as f64),
            column(&|i| (mix(i + 3) as f64 - 500.0) / 7.0),
            column(&|i| {
                if rewards[i] == 1.0 {
                    (mix(i) % 5) as f64
                } else {
                    0.0
                }
            }),
        ];
        let kinds: Vec<u8> = columns
            .iter()
            .map(|c| match c {
                Column::Bits(_) => 0,
                Column::Counts(_) => 1,
                Column::Dense(_) => 2,
            })
            .collect();
        assert_eq!(kinds, [0, 1, 2, 1]);
        let sds: Vec<(&Column, f64)> = columns.iter().map(|f| (f, sd_within(f, &groups))).collect();
        let (k, seed) = (37u32, 11u64);
        let (_, nulls) = floor(&sds, &rewards, &groups, &c, k, 0.05, seed);
        // One pass a shuffle over all rows, as the floor summed before blocks.
        let scale = n as f64 * c.sr;
        let mut want: Vec<f64> = (0..k)
            .map(|p| {
                let pass = shuffled_bits(&rewards, &groups, &mut rng_at(seed, FAMILY, p));
                sds.iter()
                    .map(|(f, sd)| {
                        let mut fixed = 0.0;
                        f.for_each(|r, v| fixed += v * c.means[groups.of[r] as usize]);
                        let mut sum = 0.0;
                        f.for_each(|r, v| {
                            if pass[r / 64] >> (r % 64) & 1 == 1 {
                                sum += v;
                            }
                        });
                        ((sum - fixed) / (scale * sd)).abs()
                    })
                    .fold(0.0, f64::max)
            })
            .collect();
        want.sort_by(f64::total_cmp);
        let bits = |v: &[f64]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
        assert_eq!(bits(&nulls), bits(&want));
        // And at any thread count: 1 and 2 threads sum 8 shuffles together, 3 threads 7, 16
        // threads 2.
        for threads in [1, 3, 16] {
            let pool = rayon::ThreadPoolBuilder::new()
                .num_threads(threads)
                .build()
                .unwrap();
            let (_, got) = pool.install(|| floor(&sds, &rewards, &groups, &c, k, 0.05, seed));
            assert_eq!(bits(&got), bits(&want), "{threads} threads");
        }
    }
}
