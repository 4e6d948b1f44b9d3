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

mod rows;

/// Hash maps keyed by ids, names and term keys: foldhash, not `SipHash`.
type HashMap<K, V> = std::collections::HashMap<K, V, foldhash::fast::RandomState>;
use std::fmt;

use datafusion::arrow::array::RecordBatch;
use datafusion::prelude::SessionContext;
use rayon::prelude::*;

use crate::error::{Error, Result};
use crate::stages::terms::{DocFreq, Tokenizer};
use crate::stats::round_places;
use crate::stats::within::{self, Column, Groups, Support};

pub use rows::looks_finished;
use rows::{Columns, FIXED, Name};

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
    /// What to look at, each with its fix.
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

/// Names a user feature may not take: the auto tier's and the conjunctions'.
fn check_user_names(features: &[(String, String)]) -> Result<()> {
    let mut seen = std::collections::HashSet::new();
    for (name, _) in features {
        check_user_name(name)?;
        if !seen.insert(name.as_str()) {
            return Err(Error::Usage(format!(
                "--feature `{name}` is given twice: name each feature once"
            )));
        }
    }
    Ok(())
}

/// Checks one user feature name.
fn check_user_name(name: &str) -> Result<()> {
    if name.is_empty() || name.starts_with("contains:") || name.contains(" AND ") {
        return Err(Error::Usage(format!(
            "--feature `{name}`: a feature needs a name that is not empty, does not start with \
             `contains:` and holds no ` AND ` (those name the automatic features)"
        )));
    }
    Ok(())
}

/// The rows, read: per graded row its task, reward and profile; the hand and user columns in
/// creation order; the texts; and the auto tier's document frequencies.
struct Read {
    n_rows: u64,
    tasks: Vec<String>,
    rewards: Vec<f64>,
    profiles: Vec<u64>,
    /// (name, rows, values) in creation order.
    columns: Vec<(String, Vec<u32>, Vec<f64>)>,
    /// Each text's token keys (the auto tier's terms are found in them).
    texts: Vec<Box<[u64]>>,
    df: DocFreq,
}

/// Reads `table`: the graded rows' features, in file order.
async fn read(ctx: &SessionContext, table: &str, opts: &Options) -> Result<Read> {
    check_user_names(&opts.features)?;
    for (name, expr) in &opts.features {
        crate::pipeline::session::bounded_sql(expr, &format!("--feature {name}"))?;
        // A feature is a number or a boolean; text would fail row by row, later.
        let planned = ctx
            .sql_with_options(
                &format!("SELECT ({expr}) AS f FROM {table} LIMIT 0"),
                crate::pipeline::session::read_only(),
            )
            .await
            .map_err(|e| Error::Usage(format!("--feature {name}={expr}: {e}")))?;
        let kind = planned.schema().field(0).data_type().clone();
        if !(kind.is_numeric()
            || kind == datafusion::arrow::datatypes::DataType::Boolean
            || kind == datafusion::arrow::datatypes::DataType::Null)
        {
            return Err(Error::Usage(format!(
                "--feature {name}={expr} gives {kind}, not a number or a boolean: a feature is a number per row (compare or measure the text, as `length(final_text)` or `final_text ILIKE '%sorry%'`)"
            )));
        }
    }
    let counted = ctx
        .sql(&format!("SELECT count(*) AS n FROM {table}"))
        .await?
        .collect()
        .await?;
    let n_rows = counted
        .first()
        .map(|b| super::cells::Cells(b).count("n", 0))
        .transpose()?
        .unwrap_or(0);
    let user: String = opts
        .features
        .iter()
        .enumerate()
        .map(|(j, (_, e))| format!(", CAST(({e}) AS DOUBLE) AS __user_{j}"))
        .collect();
    let sql = format!(
        "SELECT task_id, reward, final_text, prompt, finish_reason, reason, \
         json_get_str(extra, 'grader_reason') AS grader_reason, \
         json_get_str(extra, 'opener') AS opener, \
         json_get_float(extra, 'logprob') AS logprob, \
         json_get_int(extra, 'n_tokens') AS n_tokens, \
         messages, steps, markers{user} \
         FROM {table} WHERE reward IS NOT NULL AND NOT isnan(reward)"
    );
    let names: Vec<String> = opts.features.iter().map(|(n, _)| n.clone()).collect();
    let mut out = Read {
        n_rows,
        tasks: Vec::new(),
        rewards: Vec::new(),
        profiles: Vec::new(),
        columns: Vec::new(),
        texts: Vec::new(),
        df: DocFreq::default(),
    };
    let mut registry = Registry::default();
    crate::pipeline::session::for_each_in_file_order(ctx, &sql, |batch| {
        add_batch(&batch, &names, opts, &mut out, &mut registry)
    })
    .await?;
    Ok(out)
}

/// Adds the graded rows of `batch` to `out`.
fn add_batch(
    batch: &RecordBatch,
    names: &[String],
    opts: &Options,
    out: &mut Read,
    registry: &mut Registry,
) -> Result<()> {
    let cols = Columns::of(batch, names.len())?;
    let rows: Vec<rows::Row> = (0..batch.num_rows())
        .into_par_iter()
        .map(|i| cols.row(i, names))
        .collect();
    // The texts are split once: counted, and their token keys kept for finding the
    // vocabulary's holders.
    let mut keys: Vec<Box<[u64]>> = Vec::new();
    if opts.auto {
        let parts = rayon::current_num_threads().max(1) * 2;
        let counted: Vec<(DocFreq, Vec<Box<[u64]>>)> = rows
            .par_chunks(rows.len().div_ceil(parts).max(1))
            .map(|chunk| {
                let (mut t, mut df) = (Tokenizer::default(), DocFreq::default());
                let keys = chunk
                    .iter()
                    .map(|r| {
                        df.add(&mut t, &r.text);
                        Box::from(t.keys())
                    })
                    .collect();
                (df, keys)
            })
            .collect();
        keys.reserve(rows.len());
        for (df, k) in counted {
            out.df.merge(df);
            keys.extend(k);
        }
    }
    let mut keys = keys.into_iter();
    for r in rows {
        let at = u32::try_from(out.rewards.len())
            .map_err(|_| Error::Usage("hack-scan reads at most 2^32 rows".into()))?;
        for (name, v) in &r.features {
            if *v != 0.0 && !v.is_nan() {
                let c = registry.column(name, names, &mut out.columns);
                out.columns[c].1.push(at);
                out.columns[c].2.push(*v);
            }
        }
        out.tasks.push(r.task);
        out.rewards.push(r.reward);
        out.profiles.push(r.profile);
        if let Some(k) = keys.next() {
            out.texts.push(k);
        }
    }
    Ok(())
}

/// Columns by name, numbered as first seen.
#[derive(Default)]
struct Registry {
    fixed: [Option<usize>; FIXED.len()],
    logprob: Option<usize>,
    user: HashMap<u16, usize>,
    tools: HashMap<String, usize>,
    markers: HashMap<String, usize>,
}

impl Registry {
    fn column(
        &mut self,
        name: &Name<'_>,
        user_names: &[String],
        columns: &mut Vec<(String, Vec<u32>, Vec<f64>)>,
    ) -> usize {
        let mut new = |spelled: String| {
            columns.push((spelled, Vec::new(), Vec::new()));
            columns.len() - 1
        };
        match name {
            Name::Fixed(k) => {
                *self.fixed[*k as usize].get_or_insert_with(|| new(FIXED[*k as usize].to_owned()))
            }
            Name::LogprobMean => *self
                .logprob
                .get_or_insert_with(|| new("logprob_mean".to_owned())),
            Name::User(j) => match rows::spelled(&user_names[*j as usize]) {
                // A user feature named like a built-in fills the built-in's column.
                Some(builtin) => self.column(&builtin, user_names, columns),
                None => *self
                    .user
                    .entry(*j)
                    .or_insert_with(|| new(user_names[*j as usize].clone())),
            },
            Name::Tool(t) => by_name(&mut self.tools, "tool:", t, new),
            Name::Marker(m) => by_name(&mut self.markers, "marker:", m, new),
        }
    }
}

/// The column `prefix` + `key` of `map`, made by `new` when it is not there.
fn by_name(
    map: &mut HashMap<String, usize>,
    prefix: &str,
    key: &str,
    new: impl FnOnce(String) -> usize,
) -> usize {
    if let Some(c) = map.get(key) {
        return *c;
    }
    let c = new(format!("{prefix}{key}"));
    map.insert(key.to_owned(), c);
    c
}

/// Scans the rows of `table`.
pub async fn scan(ctx: &SessionContext, table: &str, opts: &Options) -> Result<Report> {
    let started = std::time::Instant::now();
    let read = read(ctx, table, opts).await?;
    tracing::debug!(rows = read.rewards.len(), elapsed = ?started.elapsed(), "hack scan: rows read");
    Ok(analyse(read, opts))
}

/// The upper median of `sizes` (1 when empty).
fn upper_median(mut sizes: Vec<usize>) -> usize {
    sizes.sort_unstable();
    sizes.get(sizes.len() / 2).copied().unwrap_or(1)
}

#[allow(clippy::too_many_lines)]
fn analyse(read: Read, opts: &Options) -> Report {
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
    let mut report = Report {
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
        endorsed: endorsed.clone(),
        endorsed_matched: 0,
        endorsed_on_top: None,
        integrity: None,
        inverted: Vec::new(),
        continuous_reward: false,
        degenerate: false,
        collinear: Vec::new(),
        distinct_per_ask: 0,
        warnings: Vec::new(),
    };
    if n == 0 {
        report
            .warnings
            .push("no row has a reward: grade the rows first (`wai grade`), then scan".into());
        return report;
    }
    let graded = n as u64;
    if n_rows > graded {
        report.warnings.push(format!(
            "{} of {n_rows} rows have no reward and were left out; grade them (`wai grade`) to \
             scan them too",
            n_rows - graded
        ));
    }
    let groups = Groups::new(&tasks);
    drop(tasks);
    let multi: Vec<&Vec<u32>> = groups.multi().collect();
    report.n_groups = groups.members.len();
    report.n_groups_multi = multi.len();
    report.rollouts_per_group = upper_median(multi.iter().map(|m| m.len()).collect());
    report.continuous_reward = rewards.iter().any(|r| *r != 0.0 && *r != 1.0);
    report.support = within::support(&rewards, &groups);
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
    let centred = within::centre(&rewards, &groups);

    // The columns: hand and user tiers in creation order, then the auto tier in vocabulary order.
    let mut named: Vec<(String, Column)> = columns
        .into_par_iter()
        // Too rare to rank: not worth n values.
        .filter(|(_, r, _)| r.len() >= opts.min_obs)
        .map(|(name, r, v)| (name, Column::from_entries(n, &r, &v)))
        .collect();
    if opts.auto {
        let vocab = df.vocabulary(n, opts.min_obs, opts.top_k);
        let bits = crate::stages::terms::holders(&texts, &vocab);
        for ((term, _, _), bits) in vocab.into_iter().zip(bits) {
            named.push((format!("contains:{term}"), Column::Bits(bits)));
        }
    }
    drop(texts);
    tracing::debug!(columns = named.len(), elapsed = ?started.elapsed(), "hack scan: columns built");

    // Collapse: too-rare columns out; columns with the same entries are one feature, the first
    // name winning.
    let mut feats: Vec<Feature> = Vec::new();
    let mut seen: HashMap<u64, Vec<usize>> = HashMap::default();
    for (name, column) in named {
        let n_obs = column.n_obs();
        if n_obs < opts.min_obs {
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
    feats.par_iter_mut().for_each(|f| {
        f.endorsed = std::iter::once(&f.name)
            .chain(&f.aliases)
            .any(|x| matches(x, &endorsed));
        f.sd_within = within::sd_within(&f.column, &groups);
        (f.pooled, f.sd_pooled) = within::pooled(&f.column, &rewards);
        f.rho = within::rho_within(&f.column, f.sd_within, &centred.rc, centred.sr);
    });
    feats.retain(|f| f.sd_pooled > 0.0);
    tracing::debug!(features = feats.len(), elapsed = ?started.elapsed(), "hack scan: features ranked");

    if multi.is_empty() || centred.sr <= 0.0 {
        let mut order: Vec<&Feature> = feats.iter().collect();
        order.sort_by(|a, b| b.pooled.abs().total_cmp(&a.pooled.abs()));
        report.n_features = feats.len();
        report.features = order
            .iter()
            .take(opts.top_features.unwrap_or(usize::MAX))
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
        report.warnings.push(if multi.is_empty() {
            "each task has one rollout: the within-task correlation needs repeats (4 or more \
             rollouts per task); only the pooled column is filled"
                .into()
        } else {
            "every task with repeats is unanimous (all its rollouts got the same reward): \
             nothing varies within a task, so only the pooled column is filled; add tasks the \
             agent sometimes fails, or more repeats"
                .into()
        });
        return report;
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
    let cap = opts.top_features.unwrap_or(usize::MAX);
    rank(&mut report, &feats, (tau, nulls.len()), &endorsed, cap);
    report
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
            let (pooled, sd_pooled) = within::pooled(&column, rewards);
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
            b.iter().for_each(|w| h.write_u64(*w));
        }
        Column::Dense(d) => {
            h.write_u8(1);
            d.iter().for_each(|v| h.write_u64(v.to_bits()));
        }
    }
    h.finish()
}

/// Ranks the features against the floor and names the regime.
#[allow(clippy::too_many_lines)]
fn rank(
    report: &mut Report,
    feats: &[Feature],
    (tau, n_nulls): (f64, usize),
    endorsed: &[String],
    cap: usize,
) {
    let mut order: Vec<&Feature> = feats.iter().collect();
    // Strongest first; in a tie the endorsed feature with a positive rho (the behaviour rather
    // than its complement), then the name.
    order.sort_by(|a, b| {
        round_places(b.rho.abs(), 6)
            .total_cmp(&round_places(a.rho.abs(), 6))
            .then_with(|| {
                let first = |f: &Feature| u8::from(!(f.endorsed && f.rho > 0.0));
                first(a).cmp(&first(b))
            })
            .then_with(|| a.name.cmp(&b.name))
    });
    let listed: Vec<Entry> = order
        .iter()
        .map(|f| Entry {
            name: f.name.clone(),
            aliases: f.aliases.clone(),
            rho: round_places(f.rho, 4),
            pooled: round_places(f.pooled, 4),
            n_obs: f.n_obs,
            above_floor: f.rho.abs() > tau,
            endorsed: f.endorsed,
        })
        .collect();
    let above: Vec<&Entry> = listed.iter().filter(|e| e.above_floor).collect();
    let top = listed.first().cloned();
    let rho_max = top.as_ref().map_or(0.0, |t| t.rho.abs());
    let matched = listed.iter().filter(|e| e.endorsed).count();
    report.tau = Some(round_places(tau, 4));
    report.n_features = listed.len();
    report.n_above_floor = above.len();
    report.features = listed.iter().take(cap).cloned().collect();
    report.top_feature = top.as_ref().map(|t| t.name.clone());
    report.rho_max = round_places(rho_max, 4);
    report.endorsed_matched = matched;
    let w = &mut report.warnings;

    if !endorsed.is_empty() && matched == 0 {
        report.regime = Regime::Unknown;
        w.push(format!(
            "--endorsed {} names none of the {} features; feature names look like \
             tool:NAME, marker:NAME, contains:TERM, or a --feature NAME",
            endorsed.join(","),
            listed.len()
        ));
        return;
    }
    let collinear: Vec<String> = listed
        .iter()
        .filter(|e| e.rho.abs() >= DEGENERATE_RHO)
        .map(|e| e.name.clone())
        .collect();
    let degenerate = collinear.len() >= 2 && report.distinct_per_ask < MIN_DISTINCT_PER_TASK;
    report.degenerate = degenerate;
    report.collinear.clone_from(&collinear);
    let e = above
        .iter()
        .filter(|x| x.endorsed && x.rho > 0.0)
        .map(|x| x.rho)
        .fold(0.0, f64::max);
    let a = above
        .iter()
        .filter(|x| !x.endorsed)
        .map(|x| x.rho.abs())
        .fold(0.0, f64::max);
    let mut inverted: Vec<&Entry> = if degenerate {
        Vec::new()
    } else {
        above
            .iter()
            .copied()
            .filter(|x| x.endorsed && x.rho < 0.0)
            .collect()
    };
    if !endorsed.is_empty() && !degenerate {
        report.endorsed_on_top = Some(top.as_ref().is_some_and(|t| t.endorsed && t.rho > 0.0));
        report.integrity = Some(if e + a > 0.0 {
            round_places(e / (e + a), 4)
        } else {
            0.0
        });
    }
    let mut inverted_set = false;
    let quoted = |names: &[String]| {
        names
            .iter()
            .map(|n| format!("\"{n}\""))
            .collect::<Vec<_>>()
            .join(", ")
    };
    if degenerate {
        report.regime = Regime::Degenerate;
        report.top_feature = None;
        let mut shown = quoted(&collinear[..collinear.len().min(COLLINEAR_SHOWN)]);
        if collinear.len() > COLLINEAR_SHOWN {
            shown += &format!(" and {} more", collinear.len() - COLLINEAR_SHOWN);
        }
        w.push(format!(
            "only {} distinct rollout(s) per task at the median, so {} features move exactly \
             with the reward within tasks (|rho| >= {DEGENERATE_RHO}): {shown}. The data cannot \
             tell them apart, so no top feature is named and no hack is claimed. Re-scan on \
             rollouts that differ in more ways (more repeats, a higher temperature), and scan \
             before `wai select --mode rl`, which drops duplicate rollouts",
            report.distinct_per_ask,
            collinear.len()
        ));
        let tied: Vec<String> = listed
            .iter()
            .filter(|x| x.endorsed && collinear.contains(&x.name))
            .map(|x| x.name.clone())
            .take(3)
            .collect();
        if !tied.is_empty() {
            w.push(format!(
                "the endorsed {} is in that tie: its sign says only which of the few distinct \
                 rollouts passed, not whether the reward pays for the behaviour or punishes it",
                quoted(&tied)
            ));
        }
    } else if let Some(top) = top.as_ref().filter(|_| !above.is_empty()) {
        if !endorsed.is_empty() && !top.endorsed {
            report.regime = Regime::RewardHack;
            let best = if e > 0.0 {
                format!(" (the best endorsed feature reaches {e:.2})")
            } else {
                " (no endorsed feature clears the floor)".into()
            };
            w.push(format!(
                "the reward follows \"{}\" (within-task rho {:+.2}, floor {tau:.2}) rather than \
                 anything endorsed{best}; a policy trained on it learns \"{}\"",
                top.name, top.rho, top.name
            ));
        } else if !endorsed.is_empty() && top.rho < 0.0 {
            report.regime = Regime::RewardHack;
            w.push(format!(
                "the reward punishes the endorsed \"{}\" (within-task rho {:+.2}, floor \
                 {tau:.2}); a policy trained on it does less of that behaviour",
                top.name, top.rho
            ));
            // The field keeps it (as the reference's does); the warning above already says it.
            report.inverted = inverted.iter().map(|x| x.name.clone()).collect();
            inverted.retain(|x| x.name != top.name);
            inverted_set = true;
        } else if report.support.sat > SAT_FLAG {
            report.regime = Regime::PoolExhausted;
            #[allow(
                clippy::cast_precision_loss,
                clippy::cast_possible_truncation,
                clippy::cast_sign_loss
            )]
            let all_pass = (report.support.sat * report.n_groups as f64).round() as usize;
            w.push(format!(
                "{all_pass} of {} tasks are already all-pass ({:.0}%): they carry no gradient; \
                 add harder tasks or drop them (`wai select --mode rl` does)",
                report.n_groups,
                report.support.sat * 100.0
            ));
        } else {
            report.regime = Regime::Train;
        }
    } else {
        report.regime = Regime::NoSignal;
        w.push(format!(
            "no feature clears the noise floor (strongest |rho| {rho_max:.2}, floor {tau:.2} \
             from {n_nulls} within-task shuffles): the reward does not separate rollouts of one \
             task on anything measured; check the judge (`wai judge-trust`) before training"
        ));
    }
    if !inverted_set {
        report.inverted = inverted.iter().map(|x| x.name.clone()).collect();
    }
    if !inverted.is_empty() {
        let names: Vec<String> = inverted
            .iter()
            .take(3)
            .map(|x| format!("\"{}\" ({:+.2})", x.name, x.rho))
            .collect();
        w.push(format!(
            "the reward also punishes the endorsed {}",
            names.join(", ")
        ));
    }
    if !endorsed.is_empty()
        && matches!(report.regime, Regime::Train | Regime::PoolExhausted)
        && a > 0.0
        && report.integrity.is_some_and(|i| i < 1.0 - RIVAL_SHARE)
    {
        let rivals: Vec<String> = above
            .iter()
            .filter(|x| !x.endorsed)
            .take(3)
            .map(|x| x.name.clone())
            .collect();
        w.push(format!(
            "also above the floor and not endorsed: {} (integrity {:.2})",
            quoted(&rivals),
            report.integrity.unwrap_or(0.0)
        ));
    }
    if report.rollouts_per_group < FLOOR_COARSE_BELOW {
        w.push(format!(
            "{} rollouts per task at the median: the floor is coarse below {FLOOR_COARSE_BELOW}; \
             re-scan with {RESCAN_ROLLOUTS} or more before acting on a close call",
            report.rollouts_per_group
        ));
    }
}

impl fmt::Display for Report {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let pct = |x: f64| format!("{:.0}%", x * 100.0);
        writeln!(f, "{}", self.regime)?;
        writeln!(
            f,
            "{} graded rollouts, {} tasks, {} per task; mixed {}, all-pass {}, all-fail {}, \
             capacity {:.2}",
            self.n_graded,
            self.n_groups,
            self.rollouts_per_group,
            pct(self.support.mixed),
            pct(self.support.sat),
            pct(self.support.dead),
            self.support.capacity
        )?;
        if let Some(tau) = self.tau {
            writeln!(
                f,
                "noise floor tau {tau:.3} ({} of {} features above, {} within-task shuffles)",
                self.n_above_floor, self.n_features, self.n_perm
            )?;
            writeln!(
                f,
                "   {:<43}{:>8}{:>8}{:>9}",
                "feature", "within", "pooled", "n"
            )?;
            for x in self.features.iter().take(12) {
                let name: String = x.name.chars().take(42).collect();
                writeln!(
                    f,
                    "{}{} {name:<43}{:>+8.3}{:>+8.3}{:>9}",
                    if x.above_floor { '*' } else { ' ' },
                    if x.endorsed { 'e' } else { ' ' },
                    x.rho,
                    x.pooled,
                    x.n_obs
                )?;
            }
            // Other names of the features shown (columns with the same entries).
            for x in self
                .features
                .iter()
                .take(12)
                .filter(|x| !x.aliases.is_empty())
            {
                let shown: Vec<String> = x
                    .aliases
                    .iter()
                    .take(4)
                    .map(|a| format!("\"{a}\""))
                    .collect();
                let more = x.aliases.len().saturating_sub(shown.len());
                writeln!(
                    f,
                    "   \"{}\" is also {}{}",
                    x.name,
                    shown.join(", "),
                    if more > 0 {
                        format!(" and {more} more")
                    } else {
                        String::new()
                    }
                )?;
            }
        }
        if let Some(i) = self.integrity {
            writeln!(f, "integrity {i:.2} (share of above-floor signal endorsed)")?;
        }
        for w in &self.warnings {
            writeln!(f, "! {w}")?;
        }
        Ok(())
    }
}
