//! One simulated eval run of a cell, scored by the code `wai` prints with.
//!
//! Each function draws one run from the cell's truth and returns, for every (quantity, method)
//! the cell measures, whether an interval was printed, whether it held the truth, and its width.
//! The intervals come from the stages' own entry points ([`pass_at::estimate`],
//! [`markers::summarize`], [`paired::compare`], [`wilson::interval`], [`quantile::noise_band`]),
//! so the study measures what the commands print.

use rand::{Rng, RngCore};
use rand_chacha::ChaCha8Rng;
use rand_distr::{Beta, Binomial, Distribution};

use super::{Cell, Family, Outcome};
use crate::stages::{judge_trust, markers, pass_at};
use crate::stats::interval::Method;
use crate::stats::{paired, quantile, sum, wilson};

/// The methods measured for shares (pass@k and markers).
pub(super) const SHARE_METHODS: [Method; 3] = [Method::Percentile, Method::Wilson, Method::T];
/// The methods measured for paired deltas.
pub(super) const DELTA_METHODS: [Method; 2] = [Method::Percentile, Method::T];

/// Whether `ci` holds `truth`; `warned` is whether the printed line says the interval is
/// approximate.
fn held(ci: Option<[f64; 2]>, truth: f64, warned: bool) -> Outcome {
    match ci {
        Some([lo, hi]) => Outcome {
            printed: true,
            hit: lo - 1e-12 <= truth && truth <= hi + 1e-12,
            width: hi - lo,
            warned,
        },
        None => Outcome::default(),
    }
}

fn task_rates(beta: &Beta<f64>, n: usize, rng: &mut ChaCha8Rng) -> Vec<f64> {
    (0..n).map(|_| beta.sample(rng)).collect()
}

fn passes(p: f64, k: u32, rng: &mut ChaCha8Rng) -> u64 {
    Binomial::new(u64::from(k), p.clamp(0.0, 1.0)).map_or(0, |b| b.sample(rng))
}

/// pass@1, pass^k and pass@k by each share method: `[method][quantity]`, the k = 1 cells
/// measuring pass@1 only.
pub(super) fn pass(
    cell: &Cell,
    beta: &Beta<f64>,
    draws: u32,
    rng: &mut ChaCha8Rng,
) -> Vec<Outcome> {
    let ps = task_rates(beta, cell.tasks, rng);
    let tasks: Vec<pass_at::TaskCounts> = ps
        .iter()
        .enumerate()
        .map(|(i, p)| pass_at::TaskCounts {
            task_id: format!("t{i:05}"),
            n: u64::from(cell.k),
            c: passes(*p, cell.k, rng),
        })
        .collect();
    let seed = rng.next_u64();
    let truths = cell.shape.pass_truths(cell.k);
    let mut out = Vec::new();
    for method in SHARE_METHODS {
        let opts = pass_at::Options {
            k: vec![cell.k],
            min_k: 1,
            unanimous_short: false,
            seed,
            draws,
            interval: method,
            by: Vec::new(),
        };
        let r = pass_at::estimate(
            &tasks,
            0,
            0,
            &pass_at::Facts::default(),
            Some(cell.k),
            &opts,
        );
        // What the line prints: `percentile` is the reference's, with neither warning.
        let warned = |key| {
            method != Method::Percentile
                && (r.interval_approximate || r.interval_near_end.contains(&key))
        };
        out.push(held(r.ci95, truths[0], warned("pass_at_1")));
        if cell.k > 1 {
            out.push(held(r.pass_pow_k_ci95, truths[1], warned("pass_pow_k")));
            out.push(held(r.pass_at_k_ci95, truths[2], warned("pass_at_k")));
        }
    }
    out
}

/// A marker that applies to each of a task's `k` rows with chance 0.7 and fires (1.0) with the
/// task's propensity: its mean of task means, by each share method.
pub(super) fn marker(
    cell: &Cell,
    beta: &Beta<f64>,
    draws: u32,
    rng: &mut ChaCha8Rng,
) -> Vec<Outcome> {
    let qs = task_rates(beta, cell.tasks, rng);
    let tasks: Vec<Vec<f64>> = qs
        .iter()
        .map(|q| {
            let mut rows = Vec::new();
            for _ in 0..cell.k {
                if rng.random_bool(0.7) {
                    rows.push(if rng.random_bool(q.clamp(0.0, 1.0)) {
                        1.0
                    } else {
                        0.0
                    });
                }
            }
            rows
        })
        .collect();
    let seed = rng.next_u64();
    let truth = cell.shape.mean();
    SHARE_METHODS
        .iter()
        .map(|&method| {
            let opts = markers::Options {
                names: Vec::new(),
                seed,
                draws,
                interval: method,
            };
            let m = markers::summarize("m", &tasks, &opts);
            let warned =
                method != Method::Percentile && (m.interval_approximate || m.interval_near_end);
            held(m.ci95, truth, warned)
        })
        .collect()
}

/// Before at the task's rate p, after at `p + e·(1 − p)` (a share `e = cell.param` of the
/// failures fixed): the paired delta by each delta method, then (null cells only) whether p < 0.05.
pub(super) fn compare(
    cell: &Cell,
    beta: &Beta<f64>,
    draws: u32,
    rng: &mut ChaCha8Rng,
) -> Vec<Outcome> {
    let ps = task_rates(beta, cell.tasks, rng);
    let k = f64::from(cell.k);
    let mut a = Vec::with_capacity(ps.len());
    let mut b = Vec::with_capacity(ps.len());
    #[allow(clippy::cast_precision_loss, reason = "pass counts")]
    for (i, p) in ps.iter().enumerate() {
        a.push((i, passes(*p, cell.k, rng) as f64 / k));
        let after = p + cell.param * (1.0 - p);
        b.push((i, passes(after, cell.k, rng) as f64 / k));
    }
    let seed = rng.next_u64();
    let truth = cell.param * (1.0 - cell.shape.mean());
    let mut out = Vec::new();
    let mut p_value = None;
    for method in DELTA_METHODS {
        let opts = paired::Options {
            draws,
            seed,
            method,
            ..paired::Options::default()
        };
        let c = paired::compare(&a, &b, &opts);
        p_value = c.p_value;
        let warned = method != Method::Percentile && c.interval_approximate;
        out.push(held(c.ci95, truth, warned));
    }
    if cell.param == 0.0 {
        out.push(Outcome {
            printed: p_value.is_some(),
            hit: p_value.is_some_and(|p| p < 0.05),
            width: 0.0,
            warned: false,
        });
    }
    out
}

/// `tasks` judge-versus-gold labels, each agreeing with chance `cell.param`: the Wilson
/// interval `judge-trust` prints, and its warning under 50 labels.
pub(super) fn agreement(cell: &Cell, rng: &mut ChaCha8Rng) -> Vec<Outcome> {
    let a = cell.param;
    let n = cell.tasks as u64;
    let agreed = Binomial::new(n, a).map_or(0, |b| b.sample(rng));
    #[allow(clippy::cast_precision_loss, reason = "label counts")]
    let ci = wilson::interval(agreed as f64, n as f64, wilson::Z_95).map(|(l, h)| [l, h]);
    // judge-trust warns that the estimate is coarse under `MIN_GOLD` labels.
    vec![held(ci, a, n < judge_trust::MIN_GOLD)]
}

/// `cell.runs_per_arm` eval runs a side of the same agent on the same tasks (no change): whether
/// `compare`'s noise band, measured from the runs, calls the delta outside the noise.
pub(super) fn noise(cell: &Cell, beta: &Beta<f64>, rng: &mut ChaCha8Rng) -> Vec<Outcome> {
    let ps = task_rates(beta, cell.tasks, rng);
    let runs = cell.runs_per_arm;
    let k = f64::from(cell.k);
    // Per arm: each run's per-task rates.
    let mut arm = || -> Vec<Vec<f64>> {
        (0..runs)
            .map(|_| {
                #[allow(clippy::cast_precision_loss, reason = "pass counts")]
                ps.iter()
                    .map(|p| passes(*p, cell.k, rng) as f64 / k)
                    .collect()
            })
            .collect()
    };
    let (before, after) = (arm(), arm());
    let run_means =
        |a: &[Vec<f64>]| -> Vec<f64> { a.iter().filter_map(|r| sum::mean(r)).collect() };
    let pooled = |a: &[Vec<f64>], t: usize| sum::mean(&a.iter().map(|r| r[t]).collect::<Vec<_>>());
    let arm_means = |a: &[Vec<f64>]| -> Vec<(usize, f64)> {
        (0..ps.len())
            .filter_map(|t| Some((t, pooled(a, t)?)))
            .collect()
    };
    // The interval only: the t interval reads no draws, and the p-value is not scored here.
    let opts = paired::Options {
        draws: 1,
        ..paired::Options::default()
    };
    let c = paired::compare(&arm_means(&before), &arm_means(&after), &opts);
    let floor = quantile::pooled_run_std(&run_means(&before), &run_means(&after));
    let band = floor.and_then(|f| {
        quantile::noise_band(f, runs, runs, Some(f64::from(2 * runs - 2)), 0.95).ok()
    });
    match (c.delta, band) {
        (Some(d), Some(b)) => {
            // Outside the band as `compare` reads it (`within` is `|d| < band`), and a delta to call.
            let outside = d.abs() >= b && d != 0.0;
            let moved = outside && c.ci95.is_some_and(|[lo, hi]| lo > 0.0 || hi < 0.0);
            vec![
                Outcome {
                    printed: true,
                    hit: outside,
                    width: 2.0 * b,
                    warned: false,
                },
                Outcome {
                    printed: true,
                    hit: moved,
                    width: 0.0,
                    warned: false,
                },
            ]
        }
        _ => vec![Outcome::default(); 2],
    }
}

/// Which simulation a family runs.
pub(super) fn run_once(cell: &Cell, draws: u32, rng: &mut ChaCha8Rng) -> Vec<Outcome> {
    let beta = cell.shape.beta();
    match cell.family {
        Family::Pass => pass(cell, &beta, draws, rng),
        Family::Marker => marker(cell, &beta, draws, rng),
        Family::Compare => compare(cell, &beta, draws, rng),
        Family::Agreement => agreement(cell, rng),
        Family::Noise => noise(cell, &beta, rng),
    }
}
