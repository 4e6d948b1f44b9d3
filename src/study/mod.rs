//! The coverage study: how often each interval `wai` prints holds the truth.
//!
//! What it computes: for each cell (a family of intervals, a shape of task difficulty, k rollouts
//! a task, n tasks, and the family's parameter), `runs` simulated eval runs drawn from a known
//! truth, each scored by the stages' own code ([`sim`]); per (quantity, method), the share of runs
//! whose printed interval holds the truth, its binomial standard error `sqrt(c(1−c)/runs)`, the
//! mean width, the share of runs that print no interval, and the runs whose line says the interval
//! is approximate (under 20 tasks, within 3 tasks of an end, under 50 labels), with the coverage
//! of the runs left unwarned.
//!
//! Truths. Task pass rates are drawn from a Beta (the tasks are a sample from a population of
//! tasks, the estimand Miller 2024 argues for); pass@1's truth is the population mean `E[p]`,
//! pass^k's `E[p^k]`, pass@k's `E[1 − (1 − p)^k]` (exact Beta moments); a marker's `E[q]`;
//! compare's delta `e · (1 − E[p])` when the after arm fixes a share `e` of each task's failures
//! (0 under the null, where the sign-flip p-value's size is measured too); agreement's the rate
//! each label agrees at; the noise band's false-alarm rate is measured under no change (two arms
//! of the same agent, several eval runs a side).
//!
//! Determinism: run r of a cell draws from ChaCha8 seeded by the seed and the cell's name, stream
//! r; the bootstrap seed of a run is drawn from that stream. Runs are scored in parallel and
//! summed in run order, so the table is the same at any thread count, and a cell's numbers do
//! not depend on which other cells run.

mod sim;
mod table;

use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;
use rand_distr::Beta;
use rayon::prelude::*;

pub use table::markdown;

use crate::stats::interval::Method;

/// Task counts of the study.
pub const TASKS: [usize; 7] = [5, 10, 20, 50, 100, 500, 5000];
/// Rollouts a task.
pub const REPEATS: [u32; 4] = [1, 2, 4, 8];

/// A Beta distribution of per-task pass rates.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Shape {
    /// Beta(1, 1): every rate equally likely.
    Uniform,
    /// Beta(0.2, 0.2): all or nothing, the U agents show (mean 0.5).
    U,
    /// Beta(0.6, 0.15): all or nothing, mostly passing (mean 0.8).
    UHigh,
    /// Beta(5, 1): most tasks easy (mean 0.83).
    Easy,
    /// Beta(0.5, 3): most tasks hard (mean 0.14).
    Hard,
}

impl Shape {
    /// Every shape.
    pub const ALL: [Self; 5] = [Self::Uniform, Self::U, Self::UHigh, Self::Easy, Self::Hard];

    /// Its Beta parameters.
    pub fn params(self) -> (f64, f64) {
        match self {
            Self::Uniform => (1.0, 1.0),
            Self::U => (0.2, 0.2),
            Self::UHigh => (0.6, 0.15),
            Self::Easy => (5.0, 1.0),
            Self::Hard => (0.5, 3.0),
        }
    }

    /// Its name in cell keys and tables.
    pub fn name(self) -> &'static str {
        match self {
            Self::Uniform => "uniform",
            Self::U => "u",
            Self::UHigh => "u_high",
            Self::Easy => "easy",
            Self::Hard => "hard",
        }
    }

    fn beta(self) -> Beta<f64> {
        let (a, b) = self.params();
        Beta::new(a, b).expect("the shapes' parameters are positive")
    }

    /// `E[p]`.
    pub fn mean(self) -> f64 {
        let (a, b) = self.params();
        a / (a + b)
    }

    /// `[E[p], E[p^k], E[1 − (1 − p)^k]]`, from `E[p^k] = Π_{j<k} (a + j)/(a + b + j)`.
    pub fn pass_truths(self, k: u32) -> [f64; 3] {
        let (a, b) = self.params();
        let moment = |x: f64| {
            (0..k)
                .map(|j| (x + f64::from(j)) / (a + b + f64::from(j)))
                .product::<f64>()
        };
        [self.mean(), moment(a), 1.0 - moment(b)]
    }
}

/// Which intervals a cell measures.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Family {
    /// pass@1, pass^k and pass@k (`pass-at`).
    Pass,
    /// A marker mean (`markers`).
    Marker,
    /// The paired delta and the sign-flip p-value (`compare`).
    Compare,
    /// Judge-versus-gold agreement's Wilson interval (`judge-trust`).
    Agreement,
    /// `compare`'s noise band under no change.
    Noise,
}

impl Family {
    /// Its name in cell keys.
    pub fn name(self) -> &'static str {
        match self {
            Self::Pass => "pass",
            Self::Marker => "marker",
            Self::Compare => "compare",
            Self::Agreement => "agreement",
            Self::Noise => "noise",
        }
    }
}

/// One cell of the study.
#[derive(Debug, Clone, PartialEq)]
pub struct Cell {
    /// The intervals measured.
    pub family: Family,
    /// The task rates' distribution (unused by agreement).
    pub shape: Shape,
    /// Rollouts a task (a run's, for the noise band).
    pub k: u32,
    /// Tasks (labels, for agreement).
    pub tasks: usize,
    /// Compare: the share of failures the after arm fixes; agreement: the agreement rate.
    pub param: f64,
    /// Noise band: eval runs a side.
    pub runs_per_arm: u32,
}

impl Cell {
    /// Its name, e.g. `pass/u/k=4/n=10`: what `--cells` matches and what seeds its runs.
    pub fn key(&self) -> String {
        let (f, s, k, n) = (self.family.name(), self.shape.name(), self.k, self.tasks);
        match self.family {
            Family::Pass | Family::Marker => format!("{f}/{s}/k={k}/n={n}"),
            Family::Compare => format!("{f}/{s}/k={k}/n={n}/effect={}", self.param),
            Family::Agreement => format!("{f}/a={}/n={n}", self.param),
            Family::Noise => format!("{f}/{s}/k={k}/runs={}/n={n}", self.runs_per_arm),
        }
    }

    /// (quantity, method) of each outcome the cell's runs give, in order.
    fn labels(&self) -> Vec<(&'static str, &'static str)> {
        match self.family {
            Family::Pass => sim::SHARE_METHODS
                .iter()
                .flat_map(|m| {
                    let all = [
                        ("pass@1", m.name()),
                        ("pass^k", m.name()),
                        ("pass@k", m.name()),
                    ];
                    all.into_iter().take(if self.k > 1 { 3 } else { 1 })
                })
                .collect(),
            Family::Marker => sim::SHARE_METHODS
                .iter()
                .map(|m| ("marker", m.name()))
                .collect(),
            Family::Compare => {
                let mut v: Vec<_> = sim::DELTA_METHODS
                    .iter()
                    .map(|m| ("delta", m.name()))
                    .collect();
                if self.param == 0.0 {
                    v.push(("p<0.05 under the null", "sign_flip"));
                }
                v
            }
            Family::Agreement => vec![("agreement", "wilson_z")],
            Family::Noise => vec![
                ("noise band false alarm", "t_band"),
                ("moved under no change", "t_band+t"),
            ],
        }
    }
}

/// Every cell of the full study.
pub fn cells() -> Vec<Cell> {
    let mut out = Vec::new();
    let cell = |family, shape, k, tasks, param, runs_per_arm| Cell {
        family,
        shape,
        k,
        tasks,
        param,
        runs_per_arm,
    };
    for family in [Family::Pass, Family::Marker] {
        for shape in Shape::ALL {
            for k in REPEATS {
                for n in TASKS {
                    out.push(cell(family, shape, k, n, 0.0, 1));
                }
            }
        }
    }
    for effect in [0.0, 0.2] {
        for shape in [Shape::Uniform, Shape::U, Shape::UHigh] {
            for k in REPEATS {
                for n in TASKS {
                    out.push(cell(Family::Compare, shape, k, n, effect, 1));
                }
            }
        }
    }
    for a in [0.7, 0.9, 0.97] {
        for n in TASKS {
            out.push(cell(Family::Agreement, Shape::Uniform, 1, n, a, 1));
        }
    }
    for shape in [Shape::Uniform, Shape::U] {
        for k in [1, 4] {
            for runs in [2, 3, 5] {
                for n in TASKS {
                    out.push(cell(Family::Noise, shape, k, n, 0.0, runs));
                }
            }
        }
    }
    out
}

/// How the study runs.
#[derive(Debug, Clone)]
pub struct Options {
    /// Simulated eval runs a cell.
    pub runs: u32,
    /// Simulated runs of the 5,000-task cells (`None` = `runs`).
    pub runs_largest: Option<u32>,
    /// Bootstrap replicates and sign flips a run.
    pub draws: u32,
    /// The seed.
    pub seed: u64,
    /// Run only cells whose key contains one of these (empty = every cell).
    pub cells: Vec<String>,
}

/// What a run scored: an interval printed, holding the truth (or, for the p-value and the band,
/// the event counted), and its width.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub(crate) struct Outcome {
    printed: bool,
    hit: bool,
    width: f64,
    /// The printed line says the interval is approximate (few tasks, or near an end).
    warned: bool,
}

/// One (cell, quantity, method) of the table.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct Row {
    /// The cell's key.
    pub cell: String,
    /// `pass`, `marker`, `compare`, `agreement`, `noise`.
    pub family: &'static str,
    /// `pass@1`, `pass^k`, `pass@k`, `marker`, `delta`, ...
    pub quantity: &'static str,
    /// `percentile`, `wilson`, `t`, ...
    pub method: &'static str,
    /// The shape's name.
    pub shape: &'static str,
    /// Rollouts a task.
    pub k: u32,
    /// Tasks.
    pub tasks: usize,
    /// The family's parameter.
    pub param: f64,
    /// Eval runs a side (noise band).
    pub runs_per_arm: u32,
    /// Simulated runs.
    pub runs: u32,
    /// Runs that printed an interval.
    pub printed: u32,
    /// Of those, runs whose interval held the truth (or whose event happened).
    pub hits: u32,
    /// Of the printed runs, those whose line says the interval is approximate (under
    /// [`crate::stats::interval::RELIABLE_TASKS`] tasks, near an end, or, for agreement, under
    /// 50 labels).
    pub warned: u32,
    /// Of the runs printed without that warning, those whose interval held the truth.
    pub hits_unwarned: u32,
    /// `hits / printed`.
    pub rate: Option<f64>,
    /// Its binomial standard error.
    pub se: Option<f64>,
    /// Mean width of the printed intervals.
    pub mean_width: Option<f64>,
}

fn rng_of(seed: u64, key: &str, run: u32) -> ChaCha8Rng {
    // FNV-1a of the key: a cell's draws depend on its name, not on its place in the list.
    let hash = key.bytes().fold(0xcbf2_9ce4_8422_2325_u64, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
    });
    let mut rng = ChaCha8Rng::seed_from_u64(seed ^ hash);
    rng.set_stream(u64::from(run));
    rng
}

/// Runs one cell: one row per (quantity, method).
pub fn run_cell(cell: &Cell, runs: u32, draws: u32, seed: u64) -> Vec<Row> {
    let key = cell.key();
    let outcomes: Vec<Vec<Outcome>> = (0..runs)
        .into_par_iter()
        .map(|r| sim::run_once(cell, draws, &mut rng_of(seed, &key, r)))
        .collect();
    cell.labels()
        .into_iter()
        .enumerate()
        .map(|(i, (quantity, method))| {
            let at = |o: &Vec<Outcome>| o.get(i).copied().unwrap_or_default();
            let printed = outcomes.iter().filter(|o| at(o).printed).count();
            let hits = outcomes
                .iter()
                .filter(|o| at(o).printed && at(o).hit)
                .count();
            let warned = outcomes
                .iter()
                .filter(|o| at(o).printed && at(o).warned)
                .count();
            let hits_unwarned = outcomes
                .iter()
                .filter(|o| at(o).printed && at(o).hit && !at(o).warned)
                .count();
            let widths: Vec<f64> = outcomes
                .iter()
                .map(at)
                .filter(|o| o.printed)
                .map(|o| o.width)
                .collect();
            #[allow(clippy::cast_precision_loss, reason = "run counts")]
            let rate = (printed > 0).then(|| hits as f64 / printed as f64);
            #[allow(clippy::cast_precision_loss, reason = "run counts")]
            let se = rate.map(|c| (c * (1.0 - c) / printed as f64).sqrt());
            Row {
                cell: key.clone(),
                family: cell.family.name(),
                quantity,
                method,
                shape: cell.shape.name(),
                k: cell.k,
                tasks: cell.tasks,
                param: cell.param,
                runs_per_arm: cell.runs_per_arm,
                runs,
                printed: u32::try_from(printed).unwrap_or(u32::MAX),
                hits: u32::try_from(hits).unwrap_or(u32::MAX),
                warned: u32::try_from(warned).unwrap_or(u32::MAX),
                hits_unwarned: u32::try_from(hits_unwarned).unwrap_or(u32::MAX),
                rate,
                se,
                mean_width: crate::stats::sum::mean(&widths),
            }
        })
        .collect()
}

/// Runs every cell `opts` selects, in [`cells`] order, calling `progress` after each.
pub fn run(opts: &Options, mut progress: impl FnMut(&Cell, &[Row])) -> Vec<Row> {
    let mut rows = Vec::new();
    for cell in cells() {
        let key = cell.key();
        if !opts.cells.is_empty() && !opts.cells.iter().any(|c| key.contains(c.as_str())) {
            continue;
        }
        let runs = if cell.tasks == TASKS[TASKS.len() - 1] {
            opts.runs_largest.unwrap_or(opts.runs)
        } else {
            opts.runs
        };
        let got = run_cell(&cell, runs, opts.draws, opts.seed);
        progress(&cell, &got);
        rows.extend(got);
    }
    rows
}

/// The default method of a family's quantity, as the commands print it.
pub fn default_method(quantity: &str) -> Option<&'static str> {
    match quantity {
        "pass@1" | "pass^k" | "pass@k" | "marker" => Some(Method::default().name()),
        "delta" => Some(Method::T.name()),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn beta_moments_are_exact() {
        // Beta(1, 1): E[p²] = 1/3, E[1 − (1 − p)²] = 1 − 1/3.
        let [m, pow, at] = Shape::Uniform.pass_truths(2);
        assert!((m - 0.5).abs() < 1e-15 && (pow - 1.0 / 3.0).abs() < 1e-15);
        assert!((at - 2.0 / 3.0).abs() < 1e-15);
        assert_eq!(Shape::U.pass_truths(1)[1], 0.2 / 0.4);
    }

    fn cell_of(key: &str) -> Cell {
        cells().into_iter().find(|c| c.key() == key).expect(key)
    }

    /// A few cells with few runs: a regression that breaks coverage badly fails here (the full
    /// study is `wai coverage-study`, see docs/statistics.md).
    #[test]
    fn default_intervals_cover_near_95_percent_in_a_few_cells() {
        for key in [
            "pass/uniform/k=4/n=50",
            "pass/u/k=1/n=20",
            "marker/easy/k=4/n=50",
            "compare/u/k=4/n=50/effect=0.2",
            "agreement/a=0.9/n=100",
        ] {
            let rows = run_cell(&cell_of(key), 300, 200, 7);
            for r in &rows {
                let rate = r.rate.expect("every run prints an interval");
                if default_method(r.quantity) == Some(r.method) || r.family == "agreement" {
                    // 300 runs: se 1.3 points; the band is 4 or more se wide either side.
                    assert!(
                        (0.89..=0.995).contains(&rate),
                        "{key} {} {}: {rate}",
                        r.quantity,
                        r.method
                    );
                }
            }
        }
        let null = run_cell(&cell_of("compare/uniform/k=2/n=50/effect=0"), 300, 200, 7);
        let size = null
            .iter()
            .find(|r| r.method == "sign_flip")
            .and_then(|r| r.rate)
            .unwrap();
        assert!(size < 0.10, "{size}");
        let noise = run_cell(&cell_of("noise/uniform/k=4/runs=3/n=50"), 300, 200, 7);
        let alarm = noise[0].rate.unwrap();
        assert!(alarm < 0.11, "{alarm}");
    }

    /// A boundary cell, where no interval covers 93–98% (pass@8 of easy tasks, truth 0.9992, about
    /// 0.08 failing tasks expected at 100 tasks): the default interval covers nearly every run,
    /// and nearly every run's line says it is approximate near an end.
    #[test]
    fn a_boundary_cell_is_warned_in_most_runs() {
        let rows = run_cell(&cell_of("pass/easy/k=8/n=100"), 300, 50, 7);
        let at = rows
            .iter()
            .find(|r| r.quantity == "pass@k" && r.method == "wilson")
            .unwrap();
        assert!(at.rate.unwrap() > 0.98, "{at:?}");
        assert!(f64::from(at.warned) > 0.9 * f64::from(at.printed), "{at:?}");
        // pass@1 (truth 0.83) is far from both ends: no run warned.
        let p1 = rows
            .iter()
            .find(|r| r.quantity == "pass@1" && r.method == "wilson")
            .unwrap();
        assert_eq!(p1.warned, 0, "{p1:?}");
        // The reference's interval prints its own line, with no warning.
        assert!(
            rows.iter()
                .filter(|r| r.method == "percentile")
                .all(|r| r.warned == 0)
        );
    }

    #[test]
    fn a_cell_is_the_same_at_any_thread_count_and_alone() {
        let cell = cell_of("pass/u/k=2/n=10");
        let many = run_cell(&cell, 40, 50, 3);
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(1)
            .build()
            .unwrap();
        let one = pool.install(|| run_cell(&cell, 40, 50, 3));
        assert_eq!(many, one);
    }
}
