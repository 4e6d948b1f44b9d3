//! From the rows read to the ranked features: groups and their support, the columns (collapsed
//! when equal), each feature's within-task and pooled correlation, the conjunctions and the floor.

use rayon::prelude::*;

use super::rank::rank;
use super::read::{Entries, Read};
use super::{Entry, Feature, HashMap, Options, Regime, Report, matches};
use crate::error::Result;
use crate::stats::round_places;
use crate::stats::within::{self, Column, Groups, Support};

/// The upper median of `sizes` (1 when empty).
fn upper_median(mut sizes: Vec<usize>) -> usize {
    sizes.sort_unstable();
    sizes.get(sizes.len() / 2).copied().unwrap_or(1)
}

/// A report of `n` graded rows out of `n_rows`, nothing found yet.
fn empty_report(n_rows: u64, n: usize, opts: &Options, endorsed: Vec<String>) -> Report {
    Report {
        regime: Regime::Unknown,
        n_rows,
        n_graded: n,
        n_groups: 0,
        n_groups_multi: 0,
        rollouts_per_group: 0,
        effective_rollouts: 0,
        support: Support {
            sat: 0.0,
            dead: 0.0,
            mixed: 0.0,
            capacity: 0.0,
        },
        tau: None,
        n_perm: opts.perms,
        n_features: 0,
        n_above_floor: 0,
        features: Vec::new(),
        top_feature: None,
        rho_max: 0.0,
        endorsed,
        endorsed_matched: 0,
        endorsed_on_top: None,
        integrity: None,
        inverted: Vec::new(),
        continuous_reward: false,
        degenerate: false,
        collinear: Vec::new(),
        distinct_per_ask: 0,
        warnings: Vec::new(),
    }
}

/// Fills in what the groups say: their count and sizes, the support, the effective rollouts and
/// the distinct rollouts per task.
fn describe(report: &mut Report, groups: &Groups, rewards: &[f64], profiles: &[u64]) {
    let multi: Vec<&Vec<u32>> = groups.multi().collect();
    report.n_groups = groups.members.len();
    report.n_groups_multi = multi.len();
    report.rollouts_per_group = upper_median(multi.iter().map(|m| m.len()).collect());
    report.continuous_reward = rewards.iter().any(|r| *r != 0.0 && *r != 1.0);
    report.support = within::support(rewards, groups);
    report.effective_rollouts = multi
        .iter()
        .filter(|m| {
            m.iter()
                .any(|&i| rewards[i as usize] != rewards[m[0] as usize])
        })
        .map(|m| m.len())
        .sum();
    report.distinct_per_ask = upper_median(
        multi
            .iter()
            .map(|m| {
                let mut p: Vec<u64> = m.iter().map(|&i| profiles[i as usize]).collect();
                p.sort_unstable();
                p.dedup();
                p.len()
            })
            .collect(),
    );
}

/// The columns: hand and user tiers in creation order, then the auto tier in vocabulary order.
/// The auto tier's holders are found first, so the texts are gone before the dense columns are
/// made.
///
/// # Errors
/// Texts kept in a file do not read back.
fn named_columns(
    read_columns: Vec<(String, Entries)>,
    texts: crate::stages::terms::TextKeys,
    df: crate::stages::terms::DocFreq,
    n: usize,
    opts: &Options,
) -> Result<Vec<(String, Column)>> {
    let mut auto = Vec::new();
    if opts.auto {
        let vocab = df.vocabulary(n, opts.min_obs, opts.top_k);
        let bits = crate::stages::terms::holders_of(&texts, &vocab)?;
        for ((term, _, _), bits) in vocab.into_iter().zip(bits) {
            auto.push((format!("contains:{term}"), Column::Bits(bits)));
        }
    }
    drop(texts);
    let mut named: Vec<(String, Column)> = read_columns
        .into_par_iter()
        // Too rare to rank: not worth n values.
        .filter(|(_, e)| e.len() >= opts.min_obs)
        .map(|(name, e)| (name, Column::from_each(n, |f| e.for_each(f))))
        .collect();
    named.extend(auto);
    Ok(named)
}

/// The features of `named`: too-rare columns out; columns with the same entries are one
/// feature, the first name winning.
fn collapse(named: Vec<(String, Column)>, min_obs: usize) -> Vec<Feature> {
    let mut feats: Vec<Feature> = Vec::new();
    let mut seen: HashMap<u64, Vec<usize>> = HashMap::default();
    for (name, column) in named {
        let n_obs = column.n_obs();
        if n_obs < min_obs {
            continue;
        }
        let key = content_hash(&column);
        let same = seen
            .get(&key)
            .and_then(|at| at.iter().copied().find(|&f| feats[f].column == column));
        if let Some(f) = same {
            feats[f].aliases.push(name);
            continue;
        }
        seen.entry(key).or_default().push(feats.len());
        feats.push(Feature {
            name,
            aliases: Vec::new(),
            column,
            n_obs,
            endorsed: false,
            sd_within: 0.0,
            sd_pooled: 0.0,
            rho: 0.0,
            pooled: 0.0,
        });
    }
    feats
}

/// The report when nothing varies within a task (one rollout each, or every task unanimous):
/// the features by their pooled correlation only.
fn pooled_only(report: &mut Report, feats: &[Feature], cap: usize, single: bool) {
    let mut order: Vec<&Feature> = feats.iter().collect();
    order.sort_by(|a, b| b.pooled.abs().total_cmp(&a.pooled.abs()));
    report.n_features = feats.len();
    report.features = order
        .iter()
        .take(cap)
        .map(|f| Entry {
            name: f.name.clone(),
            aliases: f.aliases.clone(),
            rho: 0.0,
            pooled: round_places(f.pooled, 4),
            n_obs: f.n_obs,
            above_floor: false,
            endorsed: f.endorsed,
        })
        .collect();
    report.warnings.push(if single {
        "each task has one rollout: the within-task correlation needs repeats (4 or more \
         rollouts per task); only the pooled column is filled"
            .into()
    } else {
        "every task with repeats is unanimous (all its rollouts got the same reward): \
         nothing varies within a task, so only the pooled column is filled; add tasks the \
         agent sometimes fails, or more repeats"
            .into()
    });
}

/// What the rows read say: the report of the scan.
///
/// # Errors
/// Texts kept in a file do not read back.
pub(super) fn analyse(read: Read, opts: &Options) -> Result<Report> {
    let started = std::time::Instant::now();
    let Read {
        n_rows,
        tasks,
        rewards,
        profiles,
        columns,
        texts,
        df,
    } = read;
    let n = rewards.len();
    let endorsed: Vec<String> = opts
        .endorsed
        .iter()
        .filter(|e| !e.is_empty())
        .cloned()
        .collect();
    let mut report = empty_report(n_rows, n, opts, endorsed.clone());
    if n == 0 {
        report
            .warnings
            .push("no row has a reward: grade the rows first (`wai grade`), then scan".into());
        return Ok(report);
    }
    let graded = n as u64;
    if n_rows > graded {
        report.warnings.push(format!(
            "{} of {n_rows} rows have no reward and were left out; grade them (`wai grade`) to \
             scan them too",
            n_rows - graded
        ));
    }
    let groups = Groups::of_numbers(tasks);
    describe(&mut report, &groups, &rewards, &profiles);
    let centred = within::centre(&rewards, &groups);
    let named = named_columns(columns, texts, df, n, opts)?;
    tracing::debug!(columns = named.len(), elapsed = ?started.elapsed(), "hack scan: columns built");

    let mut feats = collapse(named, opts.min_obs);
    let moments = within::Moments::of(&rewards);
    feats.par_iter_mut().for_each(|f| {
        f.endorsed = std::iter::once(&f.name)
            .chain(&f.aliases)
            .any(|x| matches(x, &endorsed));
        f.sd_within = within::sd_within(&f.column, &groups);
        (f.pooled, f.sd_pooled) = within::pooled_given(&f.column, &rewards, &moments);
        f.rho = within::rho_within(&f.column, f.sd_within, &centred.rc, centred.sr);
    });
    feats.retain(|f| f.sd_pooled > 0.0);
    tracing::debug!(features = feats.len(), elapsed = ?started.elapsed(), "hack scan: features ranked");

    let cap = opts.top_features.unwrap_or(usize::MAX);
    let single = groups.multi().next().is_none();
    if single || centred.sr <= 0.0 {
        pooled_only(&mut report, &feats, cap, single);
        return Ok(report);
    }
    if opts.auto && opts.seeds > 0 {
        conjunctions(&mut feats, opts, &endorsed, &groups, &rewards, &centred);
    }
    tracing::debug!(features = feats.len(), elapsed = ?started.elapsed(), "hack scan: conjunctions");
    let sds: Vec<(&Column, f64)> = feats.iter().map(|f| (&f.column, f.sd_within)).collect();
    let (tau, nulls) = within::floor(
        &sds, &rewards, &groups, &centred, opts.perms, opts.alpha, opts.seed,
    );
    tracing::debug!(elapsed = ?started.elapsed(), "hack scan: floor");
    rank(&mut report, &feats, (tau, nulls.len()), &endorsed, cap);
    Ok(report)
}

/// Adds the pairwise conjunctions of the strongest indicators that beat both parents.
fn conjunctions(
    feats: &mut Vec<Feature>,
    opts: &Options,
    endorsed: &[String],
    groups: &Groups,
    rewards: &[f64],
    centred: &within::Centred,
) {
    let moments = &within::Moments::of(rewards);
    let mut binary: Vec<usize> = (0..feats.len())
        .filter(|&f| feats[f].column.is_binary())
        .collect();
    binary.sort_by(|&a, &b| feats[b].rho.abs().total_cmp(&feats[a].rho.abs()));
    binary.truncate(opts.seeds);
    let pairs: Vec<(usize, usize)> = binary
        .iter()
        .enumerate()
        .flat_map(|(i, &a)| binary[i + 1..].iter().map(move |&b| (a, b)))
        .collect();
    let made: Vec<Feature> = pairs
        .par_iter()
        .filter_map(|&(a, b)| {
            let (fa, fb) = (&feats[a], &feats[b]);
            let column = fa.column.and(&fb.column)?;
            let n_obs = column.n_obs();
            if n_obs < opts.min_obs || n_obs >= fa.n_obs || n_obs >= fb.n_obs {
                return None;
            }
            let (pooled, sd_pooled) = within::pooled_given(&column, rewards, moments);
            if sd_pooled <= 0.0 {
                return None;
            }
            let sd_within = within::sd_within(&column, groups);
            let rho = within::rho_within(&column, sd_within, &centred.rc, centred.sr);
            let name = format!("{} AND {}", fa.name, fb.name);
            (rho.abs() > fa.rho.abs().max(fb.rho.abs())).then(|| Feature {
                endorsed: fa.endorsed || fb.endorsed || matches(&name, endorsed),
                name,
                aliases: Vec::new(),
                column,
                n_obs,
                sd_within,
                sd_pooled,
                rho,
                pooled,
            })
        })
        .collect();
    feats.extend(made);
}

/// A hash of a column's entries.
fn content_hash(c: &Column) -> u64 {
    use std::hash::{BuildHasher, Hasher as _};
    let mut h = foldhash::fast::FixedState::with_seed(0xc011_a95e).build_hasher();
    match c {
        Column::Bits(b) => {
            h.write_u8(0);
            for w in b {
                h.write_u64(*w);
            }
        }
        Column::Counts(d) => {
            h.write_u8(2);
            for v in d {
                h.write_u32(*v);
            }
        }
        Column::Dense(d) => {
            h.write_u8(1);
            for v in d {
                h.write_u64(v.to_bits());
            }
        }
    }
    h.finish()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::stages::terms::DocFreq;

    /// Rows of `tasks` with `rewards`, each a distinct profile, and `columns`.
    fn read(tasks: &[&str], rewards: &[f64], columns: Vec<(String, Vec<u32>, Vec<f64>)>) -> Read {
        Read {
            n_rows: tasks.len() as u64,
            tasks: within::Groups::new(tasks).of,
            rewards: rewards.to_vec(),
            profiles: (0..tasks.len() as u64).collect(),
            columns: (columns.into_iter())
                .map(|(name, r, v)| (name, Entries::of(&r, &v)))
                .collect(),
            texts: crate::stages::terms::TextKeys::default(),
            df: DocFreq::default(),
        }
    }

    fn opts() -> Options {
        Options {
            auto: false,
            min_obs: 1,
            perms: 20,
            ..Options::default()
        }
    }

    #[test]
    fn the_upper_median_takes_the_higher_middle() {
        assert_eq!(upper_median(vec![]), 1);
        assert_eq!(upper_median(vec![3, 1]), 3);
        assert_eq!(upper_median(vec![5, 1, 2]), 2);
    }

    #[test]
    fn equal_columns_collapse_into_one_feature_named_first() {
        let a = Column::from_entries(4, &[0, 2], &[1.0, 1.0]);
        let named = vec![
            ("first".to_owned(), a.clone()),
            ("rare".to_owned(), Column::from_entries(4, &[1], &[2.0])),
            ("second".to_owned(), a.clone()),
        ];
        assert_eq!(content_hash(&named[0].1), content_hash(&named[2].1));
        assert_ne!(content_hash(&named[0].1), content_hash(&named[1].1));
        let feats = collapse(named, 2);
        assert_eq!(feats.len(), 1);
        assert_eq!(feats[0].name, "first");
        assert_eq!(feats[0].aliases, ["second"]);
        assert_eq!(feats[0].n_obs, 2);
    }

    #[test]
    fn no_reward_is_nothing_to_scan() {
        let report = analyse(read(&[], &[], Vec::new()), &opts()).unwrap();
        assert_eq!(report.regime, Regime::Unknown);
        assert_eq!(report.n_graded, 0);
        assert!(report.warnings[0].starts_with("no row has a reward"));
    }

    #[test]
    fn one_rollout_a_task_fills_only_the_pooled_column() {
        let columns = vec![("long".to_owned(), vec![1, 3], vec![1.0, 1.0])];
        let report = analyse(
            read(&["a", "b", "c", "d"], &[0.0, 1.0, 0.0, 1.0], columns),
            &opts(),
        )
        .unwrap();
        assert_eq!((report.n_groups, report.n_groups_multi), (4, 0));
        assert_eq!(report.n_features, 1);
        assert_eq!(report.features[0].pooled, 1.0);
        assert_eq!(report.features[0].rho, 0.0);
        assert!(report.tau.is_none());
        assert!(report.warnings[0].starts_with("each task has one rollout"));
    }

    #[test]
    fn a_feature_that_moves_with_the_reward_within_tasks_is_ranked() {
        // Four tasks of four rollouts; the feature is on exactly where the reward is 1.
        let tasks: Vec<&str> = ["a", "b", "c", "d"].iter().flat_map(|t| [*t; 4]).collect();
        let rewards: Vec<f64> = (0..16).map(|i| f64::from(u8::from(i % 2 == 1))).collect();
        let on: Vec<u32> = (0..16).filter(|i| i % 2 == 1).collect();
        let columns = vec![("good".to_owned(), on.clone(), vec![1.0; on.len()])];
        let mut o = opts();
        o.endorsed = vec!["good".into()];
        let report = analyse(read(&tasks, &rewards, columns), &o).unwrap();
        assert_eq!(report.regime, Regime::Train);
        assert_eq!(report.top_feature.as_deref(), Some("good"));
        assert_eq!(report.rho_max, 1.0);
        assert_eq!(report.rollouts_per_group, 4);
        assert_eq!(report.effective_rollouts, 16);
        assert_eq!(report.support.mixed, 1.0);
    }
}
