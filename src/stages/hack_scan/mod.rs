//! The hack scan: what a grouped update (one baseline per task) would learn from a reward, and
//! whether that is the behaviour meant or a shortcut (the measure spec's §7).
//!
//! Every rollout becomes a row of candidate features: the hand tier (reply length, tool calls,
//! turns, truncation, surface counts, one indicator per tool called, the mean token logprob, every
//! marker), the user's SQL features, and the auto tier (presence of the most common words and
//! word pairs of what the agent said). Reward and features are demeaned within each task and
//! ranked by their correlation; a permutation floor (rewards shuffled within tasks) says which
//! correlations clear chance. Conjunctions of the strongest indicators join the ranking when they
//! beat both parents. The regime names what training on the reward would do: `train`,
//! `reward_hack`, `pool_exhausted`, `no_signal`, `degenerate` or `unknown`.
//!
//! Rows are grouped by `task_id` (the reference groups by prompt text, which splits one task
//! asked in several phrasings and merges different tasks that share a prompt).

mod analyse;
mod rank;
mod read;
mod rows;
mod text;

/// Hash maps keyed by ids, names and term keys: foldhash, not `SipHash`.
type HashMap<K, V> = std::collections::HashMap<K, V, foldhash::fast::RandomState>;
use std::fmt;

use datafusion::prelude::DataFrame;

use crate::error::{Error, Result};
use crate::stats::within::{Column, Support};

pub use crate::stages::ending::looks_finished;

/// |within-ask rho| at or above this is an identity with the centred reward, not a correlation.
const DEGENERATE_RHO: f64 = 0.999;
/// Distinct rollouts a task needs (at the median) before features can be told apart.
const MIN_DISTINCT_PER_TASK: usize = 3;
/// A rival above the floor is reported when integrity is below `1 − RIVAL_SHARE`.
const RIVAL_SHARE: f64 = 0.2;
/// Share of all-pass tasks that exhausts the pool.
const SAT_FLAG: f64 = 0.2;
/// Below this many rollouts per task at the median the floor is coarse.
const FLOOR_COARSE_BELOW: usize = 4;
/// The repeats to re-scan at when it is.
const RESCAN_ROLLOUTS: usize = 8;
/// Collinear features named in the degenerate warning.
const COLLINEAR_SHOWN: usize = 4;

/// How to scan.
#[derive(Debug, Clone)]
pub struct Options {
    /// What the reward should pay for: substrings of feature names, case-insensitive.
    pub endorsed: Vec<String>,
    /// The user's features: (name, SQL expression over the row).
    pub features: Vec<(String, String)>,
    /// Add the auto tier (words and word pairs) and conjunctions.
    pub auto: bool,
    /// Words and word pairs in the auto tier.
    pub top_k: usize,
    /// Shuffles behind the floor.
    pub perms: u32,
    /// Fewest rows a feature needs.
    pub min_obs: usize,
    /// Strongest indicators that seed pairwise conjunctions.
    pub seeds: usize,
    /// The floor's level: `tau` is the `1 − alpha` quantile of the shuffled maximum.
    pub alpha: f64,
    /// The seed of the shuffles.
    pub seed: u64,
    /// Ranked features listed in the report (`None`: all).
    pub top_features: Option<usize>,
}

impl crate::stages::Options for Options {
    fn check(&self) -> Result<()> {
        if !(self.alpha > 0.0 && self.alpha < 1.0) {
            return Err(Error::option(
                "alpha",
                format!("must be between 0 and 1, not {}", self.alpha),
            ));
        }
        read::check_user_names(&self.features)
    }
}

impl Default for Options {
    fn default() -> Self {
        Self {
            endorsed: Vec::new(),
            features: Vec::new(),
            auto: true,
            top_k: 200,
            perms: 100,
            min_obs: 20,
            seeds: 12,
            alpha: 0.05,
            seed: 0,
            top_features: Some(20),
        }
    }
}

/// What training on the reward would do.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Regime {
    /// The reward tracks what it should (or nothing was endorsed and something clears the floor).
    Train,
    /// The reward is best explained by something not endorsed, or punishes what is.
    RewardHack,
    /// Too many tasks are already all-pass to carry a gradient.
    PoolExhausted,
    /// Nothing clears the floor.
    NoSignal,
    /// Too few distinct rollouts per task to tell the collinear features apart.
    Degenerate,
    /// Nothing to scan, or the endorsed patterns name no feature.
    Unknown,
}

impl fmt::Display for Regime {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Train => "TRAIN",
            Self::RewardHack => "REWARD HACK",
            Self::PoolExhausted => "POOL EXHAUSTED",
            Self::NoSignal => "NO SIGNAL",
            Self::Degenerate => "DEGENERATE",
            Self::Unknown => "UNKNOWN",
        })
    }
}

/// One ranked feature.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct Entry {
    /// Its name.
    pub name: String,
    /// Other features with exactly the same entries.
    pub aliases: Vec<String>,
    /// The within-task correlation with the reward (4 decimals).
    pub rho: f64,
    /// The pooled correlation (4 decimals).
    pub pooled: f64,
    /// Rows where it is non-zero.
    pub n_obs: usize,
    /// `|rho| > tau`.
    pub above_floor: bool,
    /// An endorsed pattern names it (or a parent of it).
    pub endorsed: bool,
}

/// What the scan found.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Report {
    /// What training on the reward would do.
    pub regime: Regime,
    /// Rows read.
    pub n_rows: u64,
    /// Rows with a reward.
    pub n_graded: usize,
    /// Tasks.
    pub n_groups: usize,
    /// Tasks with two rollouts or more.
    pub n_groups_multi: usize,
    /// Rollouts per task at the (upper) median of those.
    pub rollouts_per_group: usize,
    /// Rollouts in tasks whose rewards differ.
    pub effective_rollouts: usize,
    /// Tasks all-pass, all-fail, mixed, and the gradient capacity.
    pub support: Support,
    /// The noise floor.
    pub tau: Option<f64>,
    /// Shuffles behind it.
    pub n_perm: u32,
    /// Features ranked.
    pub n_features: usize,
    /// Of which above the floor.
    pub n_above_floor: usize,
    /// The ranking (the first `top_features`).
    pub features: Vec<Entry>,
    /// The strongest feature (none when degenerate).
    pub top_feature: Option<String>,
    /// Its |rho|.
    pub rho_max: f64,
    /// The endorsed patterns.
    pub endorsed: Vec<String>,
    /// Ranked features they name.
    pub endorsed_matched: usize,
    /// Whether the top feature is endorsed with a positive rho (with `endorsed`).
    pub endorsed_on_top: Option<bool>,
    /// Share of the above-floor signal on endorsed features (with `endorsed`).
    pub integrity: Option<f64>,
    /// Endorsed features the reward punishes (above the floor, negative rho).
    pub inverted: Vec<String>,
    /// Some reward is neither 0 nor 1.
    pub continuous_reward: bool,
    /// The refusal: too few distinct rollouts for collinear features.
    pub degenerate: bool,
    /// Features at |rho| ≥ 0.999.
    pub collinear: Vec<String>,
    /// Distinct rollouts per task at the median.
    pub distinct_per_ask: usize,
    /// What to look at, each with its fix (an option named by its key in backticks:
    /// `` `endorsed` ``, `` `features` ``; selection for RL as `` `select` in `rl` mode ``).
    pub warnings: Vec<String>,
}

/// A candidate feature.
struct Feature {
    name: String,
    aliases: Vec<String>,
    column: Column,
    n_obs: usize,
    endorsed: bool,
    sd_within: f64,
    sd_pooled: f64,
    rho: f64,
    pooled: f64,
}

/// Whether `name` contains one of `patterns` (case-insensitive).
fn matches(name: &str, patterns: &[String]) -> bool {
    let low = name.to_lowercase();
    patterns.iter().any(|p| low.contains(&p.to_lowercase()))
}

/// What the scan reads: rows (graded or not; the ungraded are counted and left out).
pub struct Inputs {
    /// The rows, in file order.
    pub rows: DataFrame,
}

impl Inputs {
    /// The scan of `rows`.
    pub fn new(rows: DataFrame) -> Self {
        Self { rows }
    }
}

/// The hack scan as a [`crate::stages::Stage`]. A user feature that does not plan, or gives
/// text, fails with an [`Error::Option`] on `features` naming the feature (`NAME=EXPR: why`).
pub struct HackScanStage;

impl crate::stages::Stage for HackScanStage {
    type Inputs = Inputs;
    type Options = Options;
    type Report = Report;
    const NAME: &'static str = "hack-scan";

    async fn run(
        session: &crate::stages::Session,
        inputs: Inputs,
        opts: &Options,
    ) -> Result<Report> {
        let started = std::time::Instant::now();
        let scope = session.scope_with(&[("rows", inputs.rows)])?;
        let read = read::read(&scope, "rows", opts).await?;
        tracing::debug!(
            rows = read.rewards.len(),
            token_keys = read.texts.tokens(),
            token_bytes_spilled = read.texts.spilled(),
            terms = read.df.len(),
            entries = read.columns.iter().map(|c| c.1.len()).sum::<usize>(),
            columns = read.columns.len(),
            elapsed = ?started.elapsed(),
            "hack scan: rows read"
        );
        analyse::analyse(read, opts)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pipeline::row::testing::{batch_of, fixture};
    use crate::stages::{Options as _, Session, run};

    #[test]
    fn options_are_checked_by_their_keys() {
        assert!(Options::default().check().is_ok());
        for alpha in [0.0, 1.0, f64::NAN] {
            let e = Options {
                alpha,
                ..Options::default()
            }
            .check()
            .unwrap_err();
            assert!(
                matches!(e, Error::Option { ref key, .. } if key == "alpha"),
                "{e}"
            );
        }
    }

    #[test]
    fn patterns_match_in_any_case() {
        assert!(matches("tool:Refund", &["refund".into()]));
        assert!(!matches("tool:lookup", &["refund".into()]));
    }

    #[tokio::test]
    async fn the_stage_scans_rows_in_memory_and_leaves_the_session_alone() {
        let session = Session::new().unwrap();
        let batch = batch_of(fixture("hack_scan_planted.jsonl"));
        let n = batch.num_rows() as u64;
        let rows = session.context().read_batch(batch).unwrap();
        let opts = Options {
            endorsed: vec!["nothing like it".into()],
            ..Options::default()
        };
        let report = run::<HackScanStage>(&session, Inputs::new(rows), &opts)
            .await
            .unwrap();
        assert_eq!(report.n_rows, n);
        assert_eq!(report.n_graded as u64, n);
        assert_eq!(report.regime, Regime::Unknown, "{report}");
        assert!(
            report.warnings[0].starts_with("`endorsed` nothing like it names none of the"),
            "{report}"
        );
        assert!(session.context().table("rows").await.is_err());
    }
}
