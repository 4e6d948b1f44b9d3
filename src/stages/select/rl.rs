//! RL selection: the gates in the reference's code order, then groups ordered and taken whole.

use std::collections::BTreeMap;
use std::sync::Arc;

use super::{Leak, Options, Report, RowInfo, Truncated, empty_report};
use crate::stages::simulate::hash::sha256_hex;

/// A row's part in choosing: gated out by the row gates; past them, as a duplicate, or dropped
/// as truncated (it still counts toward its key's rows after the gates); voting; or riding
/// along with its group.
const GATED: u8 = 0;
const PASSED: u8 = 1;
const DUPLICATE: u8 = 2;
const VOTING: u8 = 3;
const RIDER: u8 = 4;

/// What became of a key's rows.
enum Fate {
    /// No voting row.
    Empty,
    Unanimous,
    Collapsed,
    /// Kept: the key, its voting rows, their labels, its riders.
    Kept(Arc<str>, Vec<usize>, Vec<u8>, Vec<usize>),
}

/// A group of rows: its key, its rows, its pass rate.
type Group = (Arc<str>, Vec<usize>, f64);

/// A hash of `text` after `seed`.
pub(super) fn text_hash(text: &str, seed: u64) -> u64 {
    use std::hash::{BuildHasher, Hasher};
    let mut h = foldhash::fast::FixedState::with_seed(0x5e1e_c7ed).build_hasher();
    h.write_u64(seed);
    h.write(text.as_bytes());
    h.finish()
}

/// Rows in runs: the rows of a run are the same under some comparison, in row order.
pub(super) struct Runs {
    rows: Vec<usize>,
    /// Where each run ends in `rows`.
    ends: Vec<usize>,
}

impl Runs {
    /// The rows `of` in runs of rows the same under `same`, found by sorting their `hash`es in
    /// parallel: rows with one hash are one run, unless `same` tells them apart (a collision),
    /// when they are sorted by `same` and split.
    pub(super) fn of(
        of: &[usize],
        hash: impl Fn(usize) -> u64 + Sync,
        same: impl Fn(usize, usize) -> std::cmp::Ordering,
    ) -> Self {
        use rayon::prelude::*;
        let mut v: Vec<(u64, usize)> = of.par_iter().map(|&i| (hash(i), i)).collect();
        v.par_sort_unstable();
        let mut rows = Vec::with_capacity(v.len());
        let mut ends = Vec::new();
        for run in v.chunk_by_mut(|a, b| a.0 == b.0) {
            let first = run[0].1;
            if run[1..].iter().all(|p| same(first, p.1).is_eq()) {
                rows.extend(run.iter().map(|p| p.1));
                ends.push(rows.len());
                continue;
            }
            run.sort_by(|a, b| same(a.1, b.1).then(a.1.cmp(&b.1)));
            for sub in run.chunk_by(|a, b| same(a.1, b.1).is_eq()) {
                rows.extend(sub.iter().map(|p| p.1));
                ends.push(rows.len());
            }
        }
        Self { rows, ends }
    }

    /// Run `r`.
    pub(super) fn run(&self, r: usize) -> &[usize] {
        let start = if r == 0 { 0 } else { self.ends[r - 1] };
        &self.rows[start..self.ends[r]]
    }

    pub(super) fn iter(&self) -> impl Iterator<Item = &[usize]> {
        let mut start = 0;
        self.ends.iter().map(move |&end| {
            let run = &self.rows[start..end];
            start = end;
            run
        })
    }
}

/// The privileged-leak gate: the rows that quote no privileged context.
pub(super) fn leak_gate(rows: &[RowInfo], report: &mut Report) -> Vec<usize> {
    let mut kept = Vec::with_capacity(rows.len());
    for (i, r) in rows.iter().enumerate() {
        if let Some(n) = &r.leak {
            report.privileged_leaks_dropped += 1;
            if report.leaks.len() < 20 {
                report.leaks.push(Leak {
                    scenario_id: r.scenario_id.to_string(),
                    rollout_index: r.rollout_index,
                    needle: n.chars().take(80).collect(),
                });
            }
        } else {
            kept.push(i);
        }
    }
    kept
}

/// The label of row `i` as choosing reads it (0 for a penalized truncated row).
type LabelOf<'a> = dyn Fn(usize) -> Option<u8> + Sync + 'a;

/// The row gates (incomplete junk, do-nothing, unusable labels; a verified zero is always
/// kept) over the `live` rows: the rows past them.
fn row_gates(
    rows: &[RowInfo],
    live: &[usize],
    label_of: &LabelOf<'_>,
    opts: &Options,
    report: &mut Report,
) -> Vec<usize> {
    let text_gates = rows.iter().any(|r| r.trainable);
    let mut after = Vec::with_capacity(live.len());
    for &i in live {
        let r = &rows[i];
        let verified_zero = label_of(i) == Some(0)
            && (r.label_source.starts_with("claude") || r.label_source.starts_with("gold"))
            && r.trainable;
        let gate = if verified_zero {
            None
        } else if text_gates
            && r.junk.is_some()
            && !(r.truncated
                && opts.truncated != Truncated::Drop
                && r.junk == Some("long unfinished reply"))
        {
            Some("incomplete_junk")
        } else if text_gates
            && label_of(i).is_none()
            && opts.has_tools
            && r.wants_tool
            && !r.tool_call
        {
            Some("do_nothing")
        } else if label_of(i).is_none() {
            Some("unusable_label")
        } else {
            None
        };
        match gate {
            Some(g) => *report.gates.entry(g.to_owned()).or_insert(0) += 1,
            None => after.push(i),
        }
    }
    for g in ["do_nothing", "incomplete_junk", "unusable_label"] {
        report.gates.entry(g.to_owned()).or_insert(0);
    }
    report.n_after_gates = after.len();
    after
}

/// Every row in runs of one key (rows of a task read together share their key's allocation).
fn by_key(rows: &[RowInfo]) -> Runs {
    let all: Vec<usize> = (0..rows.len()).collect();
    let same_key = |a: usize, b: usize| {
        let (a, b) = (&rows[a].key, &rows[b].key);
        if Arc::ptr_eq(a, b) {
            std::cmp::Ordering::Equal
        } else {
            a.cmp(b)
        }
    };
    Runs::of(&all, |i| text_hash(&rows[i].key, 0), same_key)
}

/// Duplicates within a prompt, among the rows `after` the gates: the first row of each run is
/// kept, the rest become [`DUPLICATE`].
fn mark_duplicates(
    rows: &[RowInfo],
    after: &[usize],
    label_of: &LabelOf<'_>,
    role: &mut [u8],
    report: &mut Report,
) {
    let says = |i: usize| (&*rows[i].prompt, &*rows[i].signature, rows[i].final_norm);
    let same = |a: usize, b: usize| says(a).cmp(&says(b));
    let hash = |i: usize| {
        text_hash(
            &rows[i].signature,
            text_hash(&rows[i].prompt, rows[i].final_norm),
        )
    };
    let by_says = Runs::of(after, hash, same);
    let mut dup_asks: foldhash::HashSet<&str> = foldhash::HashSet::default();
    for run in by_says.iter() {
        let first = run[0];
        for &i in &run[1..] {
            report.duplicates_dropped += 1;
            dup_asks.insert(&*rows[i].prompt);
            if label_of(first) != label_of(i) {
                report.conflicting_rewards += 1;
            }
            role[i] = DUPLICATE;
        }
    }
    report.duplicate_asks = dup_asks.len();
}

/// Truncated rows, among those still [`PASSED`]: dropped, riders that do not vote, or voting
/// (penalized); every other passed row votes.
fn mark_truncated(
    rows: &[RowInfo],
    after: &[usize],
    truncated: Truncated,
    role: &mut [u8],
    report: &mut Report,
) {
    for &i in after {
        if role[i] != PASSED {
            continue;
        }
        if rows[i].truncated {
            match truncated {
                Truncated::Drop => {
                    *report.truncated.entry("dropped".into()).or_insert(0) += 1;
                    continue;
                }
                Truncated::Keep => {
                    *report.truncated.entry("kept".into()).or_insert(0) += 1;
                    role[i] = RIDER;
                    continue;
                }
                Truncated::Penalize => {
                    *report.truncated.entry("penalized".into()).or_insert(0) += 1;
                }
            }
        }
        role[i] = VOTING;
    }
}

/// What became of each key's rows (a key's voting rows in row order, and its riders):
/// unanimous, then collapsed. Their order here does not matter: they are ordered later by
/// fault, pass rate and a hash of the key.
fn fates(rows: &[RowInfo], by_key: &Runs, role: &[u8], label_of: &LabelOf<'_>) -> Vec<Fate> {
    use rayon::prelude::*;
    (0..by_key.ends.len())
        .into_par_iter()
        .map(|r| {
            let run = by_key.run(r);
            let in_role =
                |k: u8| -> Vec<usize> { run.iter().copied().filter(|&i| role[i] == k).collect() };
            let members = in_role(VOTING);
            if members.is_empty() {
                return Fate::Empty;
            }
            let rows_after_gates = run.iter().filter(|&&i| role[i] != GATED).count();
            let labels: Vec<u8> = members.iter().filter_map(|&i| label_of(i)).collect();
            let unanimous = labels.len() >= 2 && labels.iter().all(|l| *l == labels[0]);
            if unanimous {
                Fate::Unanimous
            } else if labels.len() < 2 && rows_after_gates >= 2 {
                Fate::Collapsed
            } else {
                let key = Arc::clone(&rows[members[0]].key);
                Fate::Kept(key, members, labels, in_role(RIDER))
            }
        })
        .collect()
}

/// The groups kept and inside the band (riders rejoining their groups).
fn band(fates: Vec<Fate>, (lo, hi): (f64, f64), report: &mut Report) -> Vec<Group> {
    let mut banded = Vec::new();
    for fate in fates {
        let (key, mut members, labels, riders) = match fate {
            Fate::Empty => continue,
            Fate::Unanimous => {
                report.unanimous_groups_dropped += 1;
                continue;
            }
            Fate::Collapsed => {
                report.collapsed_groups_dropped += 1;
                report.unanimous_groups_dropped += 1;
                continue;
            }
            Fate::Kept(key, members, labels, riders) => (key, members, labels, riders),
        };
        let n = labels.len();
        #[allow(clippy::cast_precision_loss, reason = "a count of rollouts")]
        let p = if n == 0 {
            f64::NAN
        } else {
            labels.iter().map(|l| f64::from(*l)).sum::<f64>() / n as f64
        };
        if n >= 2 && p > 0.0 && p < 1.0 {
            if p > hi {
                *report.band_dropped.entry("too_easy".into()).or_insert(0) += 1;
                continue;
            }
            if p < lo {
                *report.band_dropped.entry("too_hard".into()).or_insert(0) += 1;
                continue;
            }
        }
        members.extend(riders);
        banded.push((key, members, p));
    }
    report.band_dropped.entry("too_easy".into()).or_insert(0);
    report.band_dropped.entry("too_hard".into()).or_insert(0);
    banded
}

/// Groups one ask per distinct pass rate in turn, rates ascending; ties by a hash of the key.
fn spread_rates(gs: Vec<Group>) -> Vec<Group> {
    use rayon::prelude::*;
    let mut by_rate: BTreeMap<i64, Vec<Group>> = BTreeMap::new();
    for g in gs {
        #[allow(clippy::cast_possible_truncation, reason = "a pass rate in millionths")]
        let rate = if g.2.is_nan() {
            i64::MAX
        } else {
            (g.2 * 1e6).round() as i64
        };
        by_rate.entry(rate).or_default().push(g);
    }
    for v in by_rate.values_mut() {
        // By a hash of the key, made in parallel; reversed, to pop from the end.
        let mut keyed: Vec<(String, Group)> = std::mem::take(v)
            .into_par_iter()
            .map(|g| (sha256_hex(&format!(":{}", g.0)), g))
            .collect();
        keyed.sort_by(|a, b| a.0.cmp(&b.0));
        *v = keyed.into_iter().rev().map(|(_, g)| g).collect();
    }
    let mut spread = Vec::new();
    loop {
        let mut any = false;
        for v in by_rate.values_mut() {
            if let Some(g) = v.pop() {
                spread.push(g);
                any = true;
            }
        }
        if !any {
            break;
        }
    }
    spread
}

/// The groups in buckets by the fault their first row met, each bucket spread over pass rates
/// (in-band asks, mixed and inside the band, before the rest); the biggest bucket first.
fn buckets(
    rows: &[RowInfo],
    banded: Vec<Group>,
    (lo, hi): (f64, f64),
) -> Vec<(Arc<str>, Vec<Group>)> {
    let mut buckets: BTreeMap<Arc<str>, Vec<Group>> = BTreeMap::new();
    for g in banded {
        buckets
            .entry(Arc::clone(&rows[g.1[0]].fault_kind))
            .or_default()
            .push(g);
    }
    let mut ordered: Vec<(Arc<str>, Vec<Group>)> = buckets
        .into_iter()
        .map(|(kind, gs)| {
            let in_band = |p: f64| !p.is_nan() && p > 0.0 && p < 1.0 && p >= lo && p <= hi;
            let (inside, outside): (Vec<_>, Vec<_>) = gs.into_iter().partition(|g| in_band(g.2));
            let mut spread = spread_rates(inside);
            spread.extend(spread_rates(outside));
            (kind, spread)
        })
        .collect();
    ordered.sort_by(|a, b| b.1.len().cmp(&a.1.len()).then(a.0.cmp(&b.0)));
    ordered
}

/// Groups taken whole, round-robin over the buckets, until `target` rows.
fn fill(ordered: &[(Arc<str>, Vec<Group>)], target: usize, report: &mut Report) -> Vec<usize> {
    let mut chosen = Vec::new();
    let mut cursors = vec![0usize; ordered.len()];
    'fill: loop {
        let mut any = false;
        for (b, (kind, gs)) in ordered.iter().enumerate() {
            if chosen.len() >= target {
                break 'fill;
            }
            if let Some(g) = gs.get(cursors[b]) {
                cursors[b] += 1;
                any = true;
                *report.fault_kinds.entry(kind.to_string()).or_insert(0) += 1;
                report.groups_selected += 1;
                chosen.extend(g.1.iter().copied());
            }
        }
        if !any {
            break;
        }
    }
    chosen
}

/// What a person should know of an RL selection.
fn warnings(report: &mut Report, mut per_task: Vec<usize>, nothing: bool) {
    use std::fmt::Write as _;
    if report.duplicates_dropped > 0 {
        let mut w = format!(
            "{} duplicate rollout(s) within {} ask(s) dropped",
            report.duplicates_dropped, report.duplicate_asks
        );
        if report.conflicting_rewards > 0 {
            let _ = write!(
                w,
                "; {} identical trajectories got different rewards, which is judge noise",
                report.conflicting_rewards
            );
        }
        report.warnings.push(w);
    }
    per_task.sort_unstable();
    let median = per_task.get(per_task.len() / 2).copied().unwrap_or(0);
    if median > 0 && median < 16 {
        #[allow(clippy::cast_precision_loss, reason = "a small count of rollouts")]
        let off = 1.0 / (median as f64).sqrt() / 2.0 * 1.2;
        report.warnings.push(format!(
            "difficulty was measured from {median} rollouts per task, so a task's band assignment can be off by about ±{off:.1}; simulate with `repeats` 16 for a firmer band"
        ));
    }
    if report.eval_sourced > 0 {
        report.warnings.push(format!(
            "{} selected row(s) carry rewards from an eval (lineage.source == \"eval\"); training on them turns the held-out scorer into the reward model",
            report.eval_sourced
        ));
    }
    if nothing {
        report.warnings.push("nothing selected: no task has both a pass and a fail among its kept rows; simulate more rollouts per ask (`repeats` 8) or widen `band`".into());
    }
}

/// RL selection: the indices of the chosen rows, in training order, the chosen rows that were
/// truncated (kept as riders or penalized, by `opts.truncated`), and the report.
pub fn rl(rows: &[RowInfo], opts: &Options) -> (Vec<usize>, Vec<usize>, Report) {
    let mut report = empty_report("rl", rows.len(), opts);
    let live = leak_gate(rows, &mut report);
    // Truncation marking: under `penalize` a truncated row's label is 0 from here on.
    let mut penalized = vec![false; rows.len()];
    if opts.truncated == Truncated::Penalize {
        for &i in &live {
            penalized[i] = rows[i].truncated;
        }
    }
    let label_of = |i: usize| {
        if penalized[i] { Some(0) } else { rows[i].label }
    };
    let after = row_gates(rows, &live, &label_of, opts, &mut report);
    // Rows of one key, and rows that say the same thing, are found by sorting their hashes in
    // parallel: hash maps over a million rows, on one core, were three quarters of choosing.
    // Every row is sorted by key (the median rollouts per task counts them all).
    let by_key = by_key(rows);
    let mut role = vec![GATED; rows.len()];
    for &i in &after {
        role[i] = PASSED;
    }
    if rows.iter().any(|r| r.trainable) {
        mark_duplicates(rows, &after, &label_of, &mut role, &mut report);
    }
    mark_truncated(rows, &after, opts.truncated, &mut role, &mut report);
    let per_task: Vec<usize> = by_key.iter().map(<[usize]>::len).collect();
    let fates = fates(rows, &by_key, &role, &label_of);
    drop(by_key);
    let banded = band(fates, opts.band, &mut report);
    let ordered = buckets(rows, banded, opts.band);
    let chosen = fill(&ordered, opts.target, &mut report);
    report.n_selected = chosen.len();
    report.eval_sourced = chosen.iter().filter(|&&i| rows[i].eval_sourced).count();
    // The chosen rows the truncation marking touched (stamped `overlong` on output).
    let marked: Vec<usize> = chosen
        .iter()
        .copied()
        .filter(|&i| rows[i].truncated && opts.truncated != Truncated::Drop)
        .collect();
    warnings(&mut report, per_task, chosen.is_empty());
    (chosen, marked, report)
}
