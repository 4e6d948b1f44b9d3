//! pass@k's sufficient statistics: per slice, each task's counts and the rows' facts. Counts of
//! disjoint sets of rows merge into the counts of their union, exactly, so a nightly run measures
//! every row so far from the nights' stored counts and tonight's rows (`wai run`, `over = "all"`).

use std::path::Path;

use super::{Facts, SliceData, TaskCounts};
use crate::error::{Error, Result};

/// What a counts file says it is.
const KIND: &str = "wai pass-at counts";
/// Its layout's version.
const VERSION: u32 = 1;

/// The counts of one set of rows: overall, then each `--by` slicing's slices.
#[derive(Debug, Clone, Default, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Counts {
    /// Every row.
    pub overall: SliceData,
    /// Each slicing (its name, `dims.tier`), with its slices in order of value.
    pub slices: Vec<(String, Vec<SliceData>)>,
}

/// A counts file: [`Counts`], what they were sliced by, and the runs whose rows they count.
#[derive(Debug, serde::Serialize, serde::Deserialize)]
struct File {
    kind: String,
    version: u32,
    /// The `--by` slicings, by name, in order.
    by: Vec<String>,
    /// Which rows (`wai run` writes its run ids).
    covers: Vec<String>,
    counts: Counts,
}

/// Just what a counts file covers (its counts are skipped, not built).
#[derive(serde::Deserialize)]
struct Header {
    kind: String,
    version: u32,
    covers: Vec<String>,
}

impl Counts {
    /// The counts of the rows of `self` and of `other` (disjoint sets of rows), as if counted at
    /// once.
    ///
    /// # Errors
    /// The two were sliced differently.
    pub fn merge(self, other: Self) -> Result<Self> {
        let by = |c: &Self| c.slices.iter().map(|(b, _)| b.clone()).collect::<Vec<_>>();
        if by(&self) != by(&other) {
            return Err(Error::Input {
                stage: "pass-at".into(),
                message: format!(
                    "counts sliced by {:?} cannot be added to counts sliced by {:?}",
                    by(&other),
                    by(&self)
                ),
            });
        }
        let slices = (self.slices.into_iter())
            .zip(other.slices)
            .map(|((name, a), (_, b))| (name, merge_slices(a, b)))
            .collect();
        Ok(Self {
            overall: merge_slice(self.overall, other.overall),
            slices,
        })
    }

    /// Writes the counts to `path` (whole or not at all), saying they count the rows of `covers`
    /// and were sliced by `by`.
    ///
    /// # Errors
    /// The file cannot be written.
    pub fn save(&self, path: &Path, by: &[String], covers: &[String]) -> Result<()> {
        let file = File {
            kind: KIND.to_owned(),
            version: VERSION,
            by: by.to_vec(),
            covers: covers.to_vec(),
            counts: self.clone(),
        };
        let text = serde_json::to_vec(&file).map_err(|e| Error::Internal(e.to_string()))?;
        if let Some(parent) = path.parent().filter(|p| !p.as_os_str().is_empty()) {
            std::fs::create_dir_all(parent).map_err(|e| Error::io(parent, e))?;
        }
        let out = crate::pipeline::io::AtomicFile::create(path)?;
        std::io::Write::write_all(&mut out.file(), &text).map_err(|e| Error::io(path, e))?;
        out.commit()
    }

    /// Reads the counts at `path`, which must be sliced by `by`.
    ///
    /// # Errors
    /// The file cannot be read, is no counts file, or was sliced otherwise.
    pub fn load(path: &Path, by: &[String]) -> Result<Self> {
        let text = std::fs::read(path).map_err(|e| Error::io(path, e))?;
        let bad = |why: String| Error::Input {
            stage: "pass-at".into(),
            message: format!("`{}`: {why}", path.display()),
        };
        let file: File = serde_json::from_slice(&text)
            .map_err(|e| bad(format!("not a pass-at counts file ({e})")))?;
        if file.kind != KIND || file.version != VERSION {
            return Err(bad(format!(
                "a `{}` file of version {}, not a `{KIND}` file of version {VERSION}",
                file.kind, file.version
            )));
        }
        if file.by != by {
            // The file is sound; the flags do not fit it.
            return Err(Error::Usage(format!(
                "`{}`: counts sliced by {:?}, and this pass-at slices by {by:?}: give the `--by` they were saved with",
                path.display(),
                file.by
            )));
        }
        Ok(file.counts)
    }

    /// The rows a counts file says it counts (run ids), or `None` for a file that is not one.
    pub fn covers(path: &Path) -> Option<Vec<String>> {
        let text = std::fs::read(path).ok()?;
        let file: Header = serde_json::from_slice(&text).ok()?;
        (file.kind == KIND && file.version == VERSION).then_some(file.covers)
    }
}

/// Two lists, each in order of `key`, as one in that order; an item whose key is in both is the
/// two `combine`d.
fn merge_sorted<T, K: Ord>(
    a: Vec<T>,
    b: Vec<T>,
    key: impl Fn(&T) -> &K,
    combine: impl Fn(T, T) -> T,
) -> Vec<T> {
    let mut out = Vec::with_capacity(a.len().max(b.len()));
    let (mut a, mut b) = (a.into_iter().peekable(), b.into_iter().peekable());
    loop {
        let next = match (a.peek(), b.peek()) {
            (Some(x), Some(y)) => match key(x).cmp(key(y)) {
                std::cmp::Ordering::Less => a.next(),
                std::cmp::Ordering::Greater => b.next(),
                std::cmp::Ordering::Equal => a.next().zip(b.next()).map(|(x, y)| combine(x, y)),
            },
            (Some(_), None) => a.next(),
            (None, Some(_)) => b.next(),
            (None, None) => break,
        };
        out.extend(next);
    }
    out
}

/// Two lists of slices (each in order of value) as one, slices of the same value merged.
fn merge_slices(a: Vec<SliceData>, b: Vec<SliceData>) -> Vec<SliceData> {
    merge_sorted(a, b, |s| &s.value, merge_slice)
}

fn merge_slice(a: SliceData, b: SliceData) -> SliceData {
    SliceData {
        value: a.value,
        tasks: merge_sorted(
            a.tasks,
            b.tasks,
            |t| &t.task_id,
            |x, y| TaskCounts {
                task_id: x.task_id,
                n: x.n + y.n,
                c: x.c + y.c,
            },
        ),
        n_partial: a.n_partial + b.n_partial,
        n_unjudged: a.n_unjudged + b.n_unjudged,
        facts: merge_facts(a.facts, b.facts),
    }
}

/// One of two optional values (`None` is no value): `b` when `b_first` says it comes first.
fn first<T>(a: Option<T>, b: Option<T>, b_first: impl Fn(&T, &T) -> bool) -> Option<T> {
    match (a, b) {
        (Some(x), Some(y)) => Some(if b_first(&y, &x) { y } else { x }),
        (x, None) => x,
        (None, y) => y,
    }
}

/// The smaller of two optional values, as SQL's `min` over both.
fn least<T: PartialOrd>(a: Option<T>, b: Option<T>) -> Option<T> {
    first(a, b, |y, x| y < x)
}

/// The smaller and the larger of two optional rewards as SQL's `min` and `max` order floats
/// (NaN above every number).
fn least_f64(a: Option<f64>, b: Option<f64>) -> Option<f64> {
    first(a, b, |y, x| y.total_cmp(x).is_lt())
}

fn most_f64(a: Option<f64>, b: Option<f64>) -> Option<f64> {
    first(a, b, |y, x| y.total_cmp(x).is_gt())
}

/// A config field's (distinct values, smallest value) over both: the report reads only whether
/// there are none, one, or several, and the value when there is one.
fn agreed<T: PartialOrd + PartialEq>(a: (u64, Option<T>), b: (u64, Option<T>)) -> (u64, Option<T>) {
    let distinct = match (a.0, b.0) {
        (0, n) | (n, 0) => n,
        (1, 1) if a.1 == b.1 => 1,
        (x, y) => x.max(y).max(2),
    };
    (distinct, least(a.1, b.1))
}

fn merge_facts(a: Facts, b: Facts) -> Facts {
    let mut failed_statuses = a.failed_statuses;
    failed_statuses.extend(b.failed_statuses);
    failed_statuses.sort();
    failed_statuses.dedup();
    Facts {
        rows: a.rows + b.rows,
        graded: a.graded + b.graded,
        reward_min: least_f64(a.reward_min, b.reward_min),
        reward_max: most_f64(a.reward_max, b.reward_max),
        status_rows: a.status_rows + b.status_rows,
        failed_rows: a.failed_rows + b.failed_rows,
        failed_statuses,
        failed_reason: least(a.failed_reason, b.failed_reason),
        finish_rows: a.finish_rows + b.finish_rows,
        truncated_rows: a.truncated_rows + b.truncated_rows,
        spoken_known: a.spoken_known + b.spoken_known,
        spoken_answered: a.spoken_answered + b.spoken_answered,
        spoken_unclosed: a.spoken_unclosed + b.spoken_unclosed,
        temperature: agreed(a.temperature, b.temperature),
        max_tokens: agreed(a.max_tokens, b.max_tokens),
        policy_version: agreed(a.policy_version, b.policy_version),
        judge_version: agreed(a.judge_version, b.judge_version),
        prompt_hash: agreed(a.prompt_hash, b.prompt_hash),
        user_model: agreed(a.user_model, b.user_model),
        writer_model: agreed(a.writer_model, b.writer_model),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn slice(value: &str, tasks: &[(&str, u64, u64)], facts: Facts) -> SliceData {
        SliceData {
            value: value.to_owned(),
            tasks: (tasks.iter())
                .map(|&(t, n, c)| TaskCounts {
                    task_id: t.to_owned(),
                    n,
                    c,
                })
                .collect(),
            n_partial: 1,
            n_unjudged: 2,
            facts,
        }
    }

    #[test]
    fn counts_merge_task_by_task_and_slice_by_slice() {
        let facts = |policy: Option<&str>, min: f64| Facts {
            rows: 10,
            reward_min: Some(min),
            reward_max: Some(min + 0.5),
            policy_version: (u64::from(policy.is_some()), policy.map(str::to_owned)),
            failed_statuses: vec!["timeout".into()],
            ..Facts::default()
        };
        let a = Counts {
            overall: slice("", &[("t1", 4, 1), ("t3", 2, 2)], facts(Some("v1"), 0.0)),
            slices: vec![(
                "dims.tier".into(),
                vec![slice("easy", &[("t1", 4, 1)], facts(Some("v1"), 0.0))],
            )],
        };
        let b = Counts {
            overall: slice("", &[("t2", 3, 0), ("t3", 1, 1)], facts(Some("v2"), 0.25)),
            slices: vec![(
                "dims.tier".into(),
                vec![
                    slice("easy", &[("t3", 1, 1)], facts(None, 0.25)),
                    slice("hard", &[("t2", 3, 0)], facts(Some("v2"), 0.25)),
                ],
            )],
        };
        let m = a.merge(b).unwrap();
        let tasks: Vec<(&str, u64, u64)> = (m.overall.tasks.iter())
            .map(|t| (t.task_id.as_str(), t.n, t.c))
            .collect();
        assert_eq!(tasks, [("t1", 4, 1), ("t2", 3, 0), ("t3", 3, 3)]);
        let f = &m.overall.facts;
        assert_eq!(
            (f.rows, m.overall.n_partial, m.overall.n_unjudged),
            (20, 2, 4)
        );
        assert_eq!((f.reward_min, f.reward_max), (Some(0.0), Some(0.75)));
        // Two versions are mixed; one version and none is that one.
        assert_eq!(f.policy_version.0, 2);
        assert_eq!(f.failed_statuses, ["timeout"]);
        let tiers = &m.slices[0].1;
        assert_eq!(
            tiers.iter().map(|s| s.value.as_str()).collect::<Vec<_>>(),
            ["easy", "hard"]
        );
        assert_eq!(tiers[0].facts.policy_version, (1, Some("v1".into())));
        assert_eq!(tiers[0].tasks.len(), 2);
        // Other slicings do not merge.
        let other = Counts {
            slices: vec![("category".into(), Vec::new())],
            ..Counts::default()
        };
        assert!(m.merge(other).is_err());
    }

    #[test]
    fn a_nan_reward_survives_the_file_and_orders_as_sql_does() {
        let facts = Facts {
            reward_min: Some(0.0),
            reward_max: Some(f64::NAN),
            ..Facts::default()
        };
        let text = serde_json::to_string(&facts).unwrap();
        let back: Facts = serde_json::from_str(&text).unwrap();
        assert!(back.reward_max.is_some_and(f64::is_nan), "{text}");
        assert_eq!(back.reward_min, Some(0.0));
        // NaN is above every number, as SQL's max and min order it.
        assert!(most_f64(Some(1.0), Some(f64::NAN)).is_some_and(f64::is_nan));
        assert!(most_f64(Some(f64::NAN), Some(1.0)).is_some_and(f64::is_nan));
        assert_eq!(least_f64(Some(f64::NAN), Some(1.0)), Some(1.0));
    }
}
