//! The headline by slice (the `by` table) and by eval run (the repeats).

use std::collections::{BTreeMap, BTreeSet};

use super::arm::{self, Arm};
use super::checks::Gate;
use super::measure::{Basis, TaskMean, fmt_ci, fmt_delta, gain_tag, mean_of, pairs};
use super::{Group, Metric, PASS_AT_1, Repeats, Sides, WEAK_SLICE_SCORE};
use crate::stages::holdout;
use crate::stats::paired::{self, Comparison, Direction};

/// The slice table and what it found.
#[derive(Debug, Default)]
pub(super) struct Slices {
    /// The slice table.
    pub groups: Option<BTreeMap<String, Group>>,
    /// Slices that moved the wrong way.
    pub down: Vec<String>,
    /// Weak slices.
    pub weak: Vec<String>,
    /// What the table is by.
    pub by: Option<String>,
    /// `given` or `auto`.
    pub by_source: Option<&'static str>,
}

/// Fewest paired tasks for a slice to be read: `ceil(log2(2 / alpha))`, at least 2.
pub(super) fn slice_min_tasks(alpha: f64) -> usize {
    #[allow(
        clippy::cast_possible_truncation,
        clippy::cast_sign_loss,
        reason = "small"
    )]
    let n = (2.0 / alpha).log2().ceil() as usize;
    n.max(2)
}

/// One slice's reading of the headline.
fn group(
    c: Comparison,
    tb: &[TaskMean],
    ta: &[TaskMean],
    headline: &str,
    lower: bool,
    min: usize,
) -> Group {
    let gv = if lower {
        c.verdict.mirrored()
    } else {
        c.verdict
    };
    let low_n = c.n_paired < min;
    let is_rate = headline == PASS_AT_1
        || [c.mean_a, c.mean_b]
            .iter()
            .all(|m| m.is_some_and(|v| (0.0..=1.0).contains(&v)));
    let mut reasons = Vec::new();
    if is_rate && !lower && c.mean_b.is_some_and(|m| m < WEAK_SLICE_SCORE) {
        reasons.push("low");
    }
    let at_ceiling = is_rate && c.mean_b.is_some_and(|m| m >= holdout::CEILING_PASS_RATE);
    if gv != Direction::BBetter && !at_ceiling && !low_n {
        reasons.push("no_gain");
    }
    Group {
        rows_a: tb.iter().map(|t| t.2).sum(),
        rows_b: ta.iter().map(|t| t.2).sum(),
        comparison: c,
        lower_is_better: lower,
        gain_verdict: gv,
        low_n,
        weak: !reasons.is_empty(),
        weak_reasons: reasons,
    }
}

/// The headline in each slice both arms share (slice i draws from seed + 100 + i), with a
/// warning for each slice that moved the wrong way.
pub(super) fn slices(b: &Basis, head: &Metric, headline: &str, gate: &mut Gate) -> Slices {
    let mut out = Slices::default();
    let Some((name, src)) = &b.arms.groups else {
        return out;
    };
    let (before, after, dict) = (&b.arms.before, &b.arms.after, &b.arms.dict);
    let min = slice_min_tasks(b.opts.alpha);
    let mut table = BTreeMap::new();
    let gid = b.id(headline);
    let in_after: BTreeSet<u32> = after.cells.iter().map(|c| c.group).collect();
    let shared: BTreeSet<u32> = before
        .cells
        .iter()
        .map(|c| c.group)
        .filter(|g| in_after.contains(g))
        .collect();
    let mut sorted: Vec<(String, u32)> = shared
        .into_iter()
        .map(|g| (dict.groups.name(g).to_owned(), g))
        .collect();
    sorted.sort();
    for (i, (gname, g)) in sorted.iter().enumerate() {
        let Some(mid) = gid else { break };
        let tb = arm::task_means(&before.cells, mid, None, Some(*g), &b.ranks);
        let ta = arm::task_means(&after.cells, mid, None, Some(*g), &b.ranks);
        if tb.is_empty() || ta.is_empty() {
            continue;
        }
        let c = paired::compare(
            &pairs(&tb),
            &pairs(&ta),
            &b.compare_opts(b.opts.seed + 100 + i as u64),
        );
        let row = group(c, &tb, &ta, headline, head.lower_is_better, min);
        if row.gain_verdict == Direction::ABetter {
            out.down.push(gname.clone());
        }
        if row.weak {
            out.weak.push(gname.clone());
        }
        table.insert(gname.clone(), row);
    }
    for g in &out.down {
        let c = &table[g].comparison;
        gate.warnings.push(format!(
            "slice {name}={g} moved the wrong way: {} ({})",
            fmt_delta(c.delta),
            fmt_ci(c.ci95)
        ));
    }
    out.by = Some(name.clone());
    out.by_source = Some(*src);
    out.groups = Some(table);
    out
}

/// The per-task means of each run of `a` (two or more eval runs), else of each training seed
/// (two or more), else `all` as one run.
fn split_runs(
    b: &Basis,
    a: &Arm,
    seeds: &[(String, Vec<arm::Cell>)],
    all: &[TaskMean],
    metric: Option<u32>,
) -> Vec<Vec<TaskMean>> {
    let Some(mid) = metric else {
        return Vec::new();
    };
    if a.runs.len() >= 2 {
        (0..u32::try_from(a.runs.len()).unwrap_or(0))
            .map(|r| arm::task_means(&a.cells, mid, Some(r), None, &b.ranks))
            .collect()
    } else if seeds.len() >= 2 {
        seeds
            .iter()
            .map(|(_, cells)| arm::task_means(cells, mid, None, None, &b.ranks))
            .collect()
    } else {
        vec![all.to_vec()]
    }
}

/// The smallest and largest of two or more values.
pub(super) fn range(v: &[f64]) -> Option<[f64; 2]> {
    (v.len() >= 2).then(|| {
        let lo = v.iter().copied().fold(f64::INFINITY, f64::min);
        let hi = v.iter().copied().fold(f64::NEG_INFINITY, f64::max);
        [lo, hi]
    })
}

/// How runs are paired, and each pair's two sides of per-task means.
type Jobs = (
    Option<&'static str>,
    Vec<(Vec<(u32, f64)>, Vec<(u32, f64)>)>,
);

/// Pairs the runs: run i with run i when both sides have as many, else each run of the side with
/// more against all rows of the other.
fn pair_runs(rb: &[Vec<TaskMean>], ra: &[Vec<TaskMean>], all: &Sides<Vec<TaskMean>>) -> Jobs {
    if rb.len() < 2 && ra.len() < 2 {
        return (None, Vec::new());
    }
    match rb.len().cmp(&ra.len()) {
        std::cmp::Ordering::Equal => {
            let jobs = rb
                .iter()
                .zip(ra)
                .map(|(x, y)| (pairs(x), pairs(y)))
                .collect();
            (Some("run i before vs run i after"), jobs)
        }
        std::cmp::Ordering::Greater => {
            let after = pairs(&all.after);
            let jobs = rb.iter().map(|x| (pairs(x), after.clone())).collect();
            (Some("each before run vs all after rows"), jobs)
        }
        std::cmp::Ordering::Less => {
            let before = pairs(&all.before);
            let jobs = ra.iter().map(|y| (before.clone(), pairs(y))).collect();
            (Some("all before rows vs each after run"), jobs)
        }
    }
}

/// The headline per eval run (pair i draws from seed + 1000 + i), and how many runs agree with
/// the pooled verdict (`source`: where the noise floor came from).
pub(super) fn repeats(b: &Basis, head: &Metric, headline: &str, source: Option<&str>) -> Repeats {
    let arms = b.arms;
    let hid = b.id(headline);
    let head_means = &b.pooled[headline];
    let rb = split_runs(b, &arms.before, &arms.seeds.before, &head_means.before, hid);
    let ra = split_runs(b, &arms.after, &arms.seeds.after, &head_means.after, hid);
    let run_means = Sides {
        before: rb.iter().filter_map(|t| mean_of(t)).collect::<Vec<f64>>(),
        after: ra.iter().filter_map(|t| mean_of(t)).collect::<Vec<f64>>(),
    };
    let tag_of = |c: &Comparison, band: Option<f64>| -> &'static str {
        if band.is_some_and(|b| c.delta.is_some_and(|d| d.abs() < b)) {
            return "flat";
        }
        gain_tag(if head.lower_is_better {
            c.verdict.mirrored()
        } else {
            c.verdict
        })
    };
    let pooled_tag = tag_of(&head.comparison, head.noise_band);
    let (pairing, jobs) = pair_runs(&rb, &ra, head_means);
    let (mut deltas, mut tags) = (Vec::new(), Vec::new());
    for (i, (x, y)) in jobs.iter().enumerate() {
        let c = paired::compare(x, y, &b.compare_opts(b.opts.seed + 1000 + i as u64));
        deltas.push(c.delta);
        tags.push(tag_of(&c, None));
    }
    let agree = (!tags.is_empty()).then(|| tags.iter().filter(|t| **t == pooled_tag).count());
    let n = tags.len().max(1);
    let note = match agree {
        Some(a) => format!("{a}/{n} runs agree"),
        None if source == Some("given") => "1 run, noise from the given run_std".into(),
        None => "1 run, noise unknown".into(),
    };
    Repeats {
        metric: headline.to_owned(),
        n_runs: Sides {
            before: rb.len(),
            after: ra.len(),
        },
        range: Sides {
            before: range(&run_means.before),
            after: range(&run_means.after),
        },
        spread: Sides {
            before: range(&run_means.before).map(|[lo, hi]| hi - lo),
            after: range(&run_means.after).map(|[lo, hi]| hi - lo),
        },
        run_means,
        pairing,
        run_deltas: deltas,
        run_tags: tags,
        pooled_tag,
        agree,
        n,
        note,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slices_need_log2_of_2_over_alpha_tasks() {
        assert_eq!(slice_min_tasks(0.05), 6);
        assert_eq!(slice_min_tasks(0.5), 2);
    }

    #[test]
    fn the_range_needs_two_values() {
        assert_eq!(range(&[0.5]), None);
        assert_eq!(range(&[0.5, 0.2, 0.9]), Some([0.2, 0.9]));
    }

    #[test]
    fn runs_pair_one_to_one_or_against_the_other_side_s_rows() {
        let run = |x: f64| vec![(0, x, 4), (1, x, 4)];
        let all = Sides {
            before: run(0.5),
            after: run(0.6),
        };
        assert_eq!(pair_runs(&[run(0.5)], &[run(0.6)], &all).0, None);
        let (pairing, jobs) = pair_runs(&[run(0.4), run(0.6)], &[run(0.5), run(0.7)], &all);
        assert_eq!(pairing, Some("run i before vs run i after"));
        assert_eq!(
            jobs[1],
            (vec![(0, 0.6), (1, 0.6)], vec![(0, 0.7), (1, 0.7)])
        );
        let (pairing, jobs) = pair_runs(&[run(0.4), run(0.6)], &[run(0.6)], &all);
        assert_eq!(pairing, Some("each before run vs all after rows"));
        assert_eq!(jobs.len(), 2);
        let (pairing, _) = pair_runs(&[run(0.5)], &[run(0.4), run(0.6)], &all);
        assert_eq!(pairing, Some("all before rows vs each after run"));
    }
}
