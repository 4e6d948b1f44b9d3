//! Within-ask statistics for reward scans: what a grouped update (one baseline per ask) would
//! learn from a reward, against a permutation floor (the measure spec's §7.1, §7.3, §7.4).
//!
//! Rewards are centred on their group's mean; a feature's within-ask correlation is the Pearson
//! correlation of its group-demeaned values with the centred rewards, with population moments over
//! all n rows (singleton groups contribute nothing). Features are sparse: only non-zero entries
//! are stored. The floor shuffles rewards within each group of two or more, each permutation
//! starting from the previous arrangement, and takes the `1 − alpha` quantile of the strongest
//! feature's |correlation|. Draws are ChaCha8 streams (family 5), one per permutation, so the
//! floor is the same at any thread count.

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
        let mut index: std::collections::HashMap<&str, u32> = std::collections::HashMap::new();
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

    /// Groups of two rows or more.
    pub fn multi(&self) -> impl Iterator<Item = &Vec<u32>> {
        self.members.iter().filter(|m| m.len() >= 2)
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

/// A sparse feature: its non-zero entries, rows ascending.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Feature {
    /// Rows with an entry.
    pub rows: Vec<u32>,
    /// Their values.
    pub values: Vec<f64>,
}

impl Feature {
    /// The feature of dense `values` (zeros and NaN not stored).
    pub fn from_dense(values: &[f64]) -> Self {
        let mut f = Self::default();
        for (i, v) in values.iter().enumerate() {
            if *v != 0.0 && !v.is_nan() {
                f.rows.push(u32::try_from(i).unwrap_or(u32::MAX));
                f.values.push(*v);
            }
        }
        f
    }
}

/// The within-group population sd of `f` over `n` rows.
#[allow(clippy::cast_precision_loss)]
pub fn sd_within(f: &Feature, groups: &Groups, n: usize) -> f64 {
    let mut sums: std::collections::BTreeMap<u32, (f64, f64)> = std::collections::BTreeMap::new();
    for (r, v) in f.rows.iter().zip(&f.values) {
        let e = sums.entry(groups.of[*r as usize]).or_default();
        e.0 += v;
        e.1 += v * v;
    }
    let ss: f64 = sums
        .iter()
        .map(|(g, (s, s2))| s2 - s * s / groups.members[*g as usize].len() as f64)
        .sum();
    (ss.max(0.0) / n.max(1) as f64).sqrt()
}

/// The within-ask correlation of `f` (with its `sd_within`) against centred rewards `rc`.
#[allow(clippy::cast_precision_loss)]
pub fn rho_within(f: &Feature, sd_within: f64, rc: &[f64], sr: f64) -> f64 {
    if sd_within <= 0.0 || sr <= 0.0 {
        return 0.0;
    }
    let dot: f64 = f
        .rows
        .iter()
        .zip(&f.values)
        .map(|(r, v)| v * rc[*r as usize])
        .sum();
    dot / (rc.len() as f64 * sd_within * sr)
}

/// The pooled Pearson correlation of `f` with `rewards` (population moments), and `f`'s pooled
/// sd.
#[allow(clippy::cast_precision_loss)]
pub fn pooled(f: &Feature, rewards: &[f64]) -> (f64, f64) {
    let n = rewards.len().max(1) as f64;
    let (s, s2, sfr) = f
        .rows
        .iter()
        .zip(&f.values)
        .fold((0.0, 0.0, 0.0), |(s, s2, sfr), (r, v)| {
            (s + v, s2 + v * v, sfr + v * rewards[*r as usize])
        });
    let sd = (s2 / n - (s / n) * (s / n)).max(0.0).sqrt();
    let mean_r = rewards.iter().sum::<f64>() / n;
    let sd_r = (rewards.iter().map(|r| r * r).sum::<f64>() / n - mean_r * mean_r)
        .max(0.0)
        .sqrt();
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

/// The permutation floor: over `perms` permutations (each shuffling the previous arrangement
/// within every group of two or more), the strongest |within correlation| of `features` (each with
/// its `sd_within`, those at 0 skipped) against the shuffled centred rewards, with the original
/// `sr`; returns the `1 − alpha` quantile (index `ceil((1−alpha)·k) − 1`) and the sorted nulls.
#[allow(
    clippy::cast_precision_loss,
    clippy::cast_possible_truncation,
    clippy::cast_sign_loss
)]
pub fn floor(
    features: &[(&Feature, f64)],
    rewards: &[f64],
    groups: &Groups,
    centred: &Centred,
    perms: u32,
    alpha: f64,
    seed: u64,
) -> (f64, Vec<f64>) {
    let mut perm = rewards.to_vec();
    let mut nulls = Vec::with_capacity(perms.max(1) as usize);
    let live: Vec<&(&Feature, f64)> = features.iter().filter(|(_, sd)| *sd > 0.0).collect();
    for p in 0..perms.max(1) {
        let mut rng = rng_at(seed, FAMILY, p);
        for m in groups.multi() {
            // Fisher–Yates over the group's current values, written back in member order.
            let mut vals: Vec<f64> = m.iter().map(|&i| perm[i as usize]).collect();
            for i in (1..vals.len()).rev() {
                let j = rng.random_range(0..=i);
                vals.swap(i, j);
            }
            for (&i, v) in m.iter().zip(vals) {
                perm[i as usize] = v;
            }
        }
        let rc: Vec<f64> = perm
            .iter()
            .zip(&groups.of)
            .map(|(r, g)| r - centred.means[*g as usize])
            .collect();
        let strongest = live
            .par_iter()
            .map(|(f, sd)| rho_within(f, *sd, &rc, centred.sr).abs())
            .reduce(|| 0.0, f64::max);
        nulls.push(strongest);
    }
    nulls.sort_by(f64::total_cmp);
    let k = nulls.len();
    let at = (((1.0 - alpha) * k as f64).ceil() as usize)
        .saturating_sub(1)
        .min(k - 1);
    (nulls[at], nulls)
}

#[cfg(test)]
mod tests {
    use serde_json::Value;

    use super::*;

    /// The reference's planted-delimiter rows: (prompt, final_text, reward).
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
        fn feature(&self, of: impl Fn(&str) -> usize) -> (Feature, f64) {
            let f = Feature::from_dense(
                &self
                    .rows
                    .iter()
                    .map(|r| of(&r.1) as f64)
                    .collect::<Vec<_>>(),
            );
            let sd = sd_within(&f, &self.groups, self.rows.len());
            (f, sd)
        }
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
        // Under the null the one feature rarely reaches its observed 0.45.
        assert!(tau < 0.45 && tau > 0.0, "{tau}");
    }
}
