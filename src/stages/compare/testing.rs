//! Arms built in memory for the parts' unit tests: per-task pass rates, with markers and runs.

use super::arm::{Arm, Cell, Dictionary, NO_RUN};
use super::{Arms, PASS_AT_1, Sides};

/// One arm's rows as cells: `(task, metric, run, values)`.
pub(super) type Rows<'a> = &'a [(&'a str, &'a str, Option<&'a str>, &'a [f64])];

/// Adds the cells of `rows` to an arm, naming tasks, metrics and runs in `dict`.
fn arm(rows: Rows, dict: &mut Dictionary) -> Arm {
    let mut arm = Arm::default();
    for (task, metric, run, values) in rows {
        let run = run.map_or(NO_RUN, |r| {
            let i = arm.runs.iter().position(|x| x == r).unwrap_or_else(|| {
                arm.runs.push(r.to_owned());
                arm.runs.len() - 1
            });
            u32::try_from(i).unwrap()
        });
        arm.cells.push(Cell {
            run,
            group: 0,
            task: dict.tasks.intern(task),
            metric: dict.metrics.intern(metric),
            n: values.len() as u64,
            sum: values.iter().sum(),
            lo: values.iter().copied().fold(f64::INFINITY, f64::min),
            hi: values.iter().copied().fold(f64::NEG_INFINITY, f64::max),
        });
    }
    arm.config.k = 4;
    arm
}

/// Both arms of `before` and `after`.
pub(super) fn arms(before: Rows, after: Rows) -> Arms {
    let mut dict = Dictionary::default();
    dict.metrics.intern(PASS_AT_1);
    let before = arm(before, &mut dict);
    let after = arm(after, &mut dict);
    Arms {
        before,
        after,
        dict,
        seeds: Sides::default(),
        groups: None,
        balanced: None,
    }
}

/// `n` tasks of four rollouts each, `passes(i)` of them passing on task i, as pass@1 rows.
pub(super) fn pass_rows(n: usize, passes: impl Fn(usize) -> usize) -> Vec<(String, Vec<f64>)> {
    (0..n)
        .map(|i| {
            let p = passes(i);
            let values = (0..4).map(|j| if j < p { 1.0 } else { 0.0 }).collect();
            (format!("t{i:03}"), values)
        })
        .collect()
}

/// The pass@1 rows of `side`, as [`Rows`].
fn view(side: &[(String, Vec<f64>)]) -> Vec<(&str, &str, Option<&str>, &[f64])> {
    side.iter()
        .map(|(t, v)| (t.as_str(), PASS_AT_1, None, v.as_slice()))
        .collect()
}

/// Arms of pass@1 rows only (one run a side).
pub(super) fn pass_arms(before: &[(String, Vec<f64>)], after: &[(String, Vec<f64>)]) -> Arms {
    arms(&view(before), &view(after))
}
