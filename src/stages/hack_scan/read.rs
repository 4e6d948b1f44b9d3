//! Reading the rows: each graded row's task, reward and profile, its hand-tier and user features
//! as columns of entries (numbered as first seen, kept batch by batch), the token numbers of its
//! text, and the auto tier's document frequencies.

use datafusion::arrow::array::RecordBatch;
use datafusion::prelude::SessionContext;
use rayon::prelude::*;
use std::fmt::Write as _;

use super::rows::{self, Columns, FIXED, Name};
use super::{HashMap, Options};
use crate::error::{Error, Result};
use crate::stages::terms::{DocFreq, KeyBlock, KeyBlockBuilder, TextKeys, Tokenizer};
use crate::stats::within::as_count;

/// Names a user feature may not take: the auto tier's and the conjunctions'.
pub(super) fn check_user_names(features: &[(String, String)]) -> Result<()> {
    let mut seen = std::collections::HashSet::new();
    for (name, _) in features {
        check_user_name(name)?;
        if !seen.insert(name.as_str()) {
            return Err(Error::option(
                "features",
                format!("`{name}` is given twice: name each feature once"),
            ));
        }
    }
    Ok(())
}

/// Checks one user feature name.
fn check_user_name(name: &str) -> Result<()> {
    if name.is_empty() || name.starts_with("contains:") || name.contains(" AND ") {
        return Err(Error::option(
            "features",
            format!(
                "`{name}`: a feature needs a name that is not empty, does not start with \
                 `contains:` and holds no ` AND ` (those name the automatic features)"
            ),
        ));
    }
    Ok(())
}

/// The rows, read: per graded row its task, reward and profile; the hand and user columns in
/// creation order; the texts; and the auto tier's document frequencies.
pub(super) struct Read {
    pub(super) n_rows: u64,
    /// Each row's task, numbered as first seen.
    pub(super) tasks: Vec<u32>,
    pub(super) rewards: Vec<f64>,
    pub(super) profiles: Vec<u64>,
    /// (name, entries) in creation order.
    pub(super) columns: Vec<(String, Entries)>,
    /// Each text's token keys (the auto tier's terms are found in them).
    pub(super) texts: TextKeys,
    pub(super) df: DocFreq,
}

/// Reads `table`: the graded rows' features, in file order.
pub(super) async fn read(ctx: &SessionContext, table: &str, opts: &Options) -> Result<Read> {
    for (name, expr) in &opts.features {
        crate::pipeline::session::bounded_sql(expr, name).map_err(|e| match e {
            Error::Usage(m) => Error::option("features", m),
            e => e,
        })?;
        // A feature is a number or a boolean; text would fail row by row, later.
        let planned = ctx
            .sql_with_options(
                &format!("SELECT ({expr}) AS f FROM {table} LIMIT 0"),
                crate::pipeline::session::read_only(),
            )
            .await
            .map_err(|e| Error::option("features", format!("{name}={expr}: {e}")))?;
        let kind = planned.schema().field(0).data_type().clone();
        if !(kind.is_numeric()
            || kind == datafusion::arrow::datatypes::DataType::Boolean
            || kind == datafusion::arrow::datatypes::DataType::Null)
        {
            return Err(Error::option(
                "features",
                format!(
                    "{name}={expr} gives {kind}, not a number or a boolean: a feature is a number per row (compare or measure the text, as `length(final_text)` or `final_text ILIKE '%sorry%'`)"
                ),
            ));
        }
    }
    let counted = ctx
        .sql(&format!("SELECT count(*) AS n FROM {table}"))
        .await?
        .collect()
        .await?;
    let n_rows = counted
        .first()
        .map(|b| crate::stages::cells::Cells(b).count("n", 0))
        .transpose()?
        .unwrap_or(0);
    let user = opts
        .features
        .iter()
        .enumerate()
        .fold(String::new(), |mut s, (j, (_, e))| {
            let _ = write!(s, ", CAST(({e}) AS DOUBLE) AS __user_{j}");
            s
        });
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
    // Room for every row at once, not doubled as they come (untouched room takes no memory).
    let room = usize::try_from(n_rows).unwrap_or(0).min(1 << 32);
    let mut out = Read {
        n_rows,
        tasks: Vec::with_capacity(room),
        rewards: Vec::with_capacity(room),
        profiles: Vec::with_capacity(room),
        columns: Vec::new(),
        texts: TextKeys::default(),
        df: DocFreq::default(),
    };
    let mut registry = Registry::default();
    crate::pipeline::session::for_each_in_file_order(ctx, &sql, |batch| {
        add_batch(&batch, &names, opts, &mut out, &mut registry)
    })
    .await?;
    for (_, entries) in &mut out.columns {
        entries.finish();
    }
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
    // The texts are split once: counted, and their token keys kept (compactly) for finding
    // the vocabulary's holders.
    if opts.auto {
        let parts = rayon::current_num_threads().max(1) * 2;
        // Chunks of a thousand rows or more: each keeps its own table of keys.
        let counted: Vec<(DocFreq, Vec<KeyBlock>)> = rows
            .par_chunks(rows.len().div_ceil(parts).max(1024))
            .map(|chunk| {
                let (mut t, mut df) = (Tokenizer::default(), DocFreq::default());
                let mut block = KeyBlockBuilder::default();
                for r in chunk {
                    df.add(&mut t, &r.text);
                    block.push(t.keys());
                }
                (df, block.finish())
            })
            .collect();
        for (df, blocks) in counted {
            out.df.merge(df);
            for block in blocks {
                out.texts.push(block)?;
            }
        }
    }
    let first = out.rewards.len();
    for r in rows {
        let at = u32::try_from(out.rewards.len())
            .map_err(|_| Error::Usage("hack-scan reads at most 2^32 rows".into()))?;
        for (name, v) in &r.features {
            if *v != 0.0 && !v.is_nan() {
                let c = registry.column(name, names, &mut out.columns);
                out.columns[c].1.push(at, *v);
            }
        }
        let task = registry.task(r.task)?;
        out.tasks.push(task);
        out.rewards.push(r.reward);
        out.profiles.push(r.profile);
    }
    for (_, entries) in &mut out.columns {
        entries.seal(first, out.rewards.len());
    }
    Ok(())
}

/// A column's entries (its rows with a value other than 0 or NaN, ascending), kept batch by
/// batch in exactly the memory they need: a batch's as rows and values, or as a value a row
/// (0 where absent) when that is smaller (most rows have one); values as 32-bit counts when
/// every one of the batch is a whole number from 1 to 2^32 − 1.
#[derive(Debug, Default)]
pub(super) struct Entries {
    parts: Vec<Part>,
    len: usize,
    /// The batch under way.
    rows: Vec<u32>,
    values: Vec<f64>,
}

#[derive(Debug)]
struct Part {
    /// The rows of the values; `None`: a value a row from `first`.
    rows: Option<Box<[u32]>>,
    first: u32,
    values: Values,
}

#[derive(Debug)]
enum Values {
    Counts(Box<[u32]>),
    Floats(Box<[f64]>),
}

impl Entries {
    /// The entries `rows` (ascending), `values` (none 0 or NaN), as one batch.
    #[cfg(test)]
    pub(super) fn of(rows: &[u32], values: &[f64]) -> Self {
        let mut e = Self::default();
        for (r, v) in rows.iter().zip(values) {
            e.push(*r, *v);
        }
        let end = rows.last().map_or(0, |r| *r as usize + 1);
        e.seal(0, end);
        e
    }

    /// Adds an entry of the batch under way (rows ascending; the value neither 0 nor NaN).
    fn push(&mut self, row: u32, value: f64) {
        self.rows.push(row);
        self.values.push(value);
    }

    /// Ends the batch of rows `first..end`.
    fn seal(&mut self, first: usize, end: usize) {
        if self.rows.is_empty() {
            return;
        }
        self.len += self.rows.len();
        let counts = self.values.iter().all(|v| as_count(*v).is_some());
        let width = if counts { 4 } else { 8 };
        let dense = self.rows.len() * (4 + width) > (end - first) * width;
        let at = |r: u32| if dense { r as usize - first } else { 0 };
        let values = if counts {
            let mut c = vec![0u32; if dense { end - first } else { self.rows.len() }];
            for (i, (r, v)) in self.rows.iter().zip(&self.values).enumerate() {
                c[if dense { at(*r) } else { i }] = as_count(*v).unwrap_or(0);
            }
            Values::Counts(c.into_boxed_slice())
        } else if dense {
            let mut d = vec![0.0; end - first];
            for (r, v) in self.rows.iter().zip(&self.values) {
                d[at(*r)] = *v;
            }
            Values::Floats(d.into_boxed_slice())
        } else {
            Values::Floats(self.values.as_slice().into())
        };
        self.parts.push(Part {
            rows: (!dense).then(|| self.rows.as_slice().into()),
            first: u32::try_from(first).unwrap_or(u32::MAX),
            values,
        });
        self.rows.clear();
        self.values.clear();
    }

    /// Lets go of the buffers of the batch under way, once the last batch is sealed.
    fn finish(&mut self) {
        self.rows = Vec::new();
        self.values = Vec::new();
    }

    /// How many entries.
    pub(super) fn len(&self) -> usize {
        self.len
    }

    /// Calls `f(row, value)` for every entry, rows ascending.
    pub(super) fn for_each(&self, mut f: impl FnMut(usize, f64)) {
        for part in &self.parts {
            let first = part.first as usize;
            match (&part.rows, &part.values) {
                (Some(rows), Values::Counts(c)) => {
                    (rows.iter().zip(c.iter())).for_each(|(r, v)| f(*r as usize, f64::from(*v)));
                }
                (Some(rows), Values::Floats(x)) => {
                    (rows.iter().zip(x.iter())).for_each(|(r, v)| f(*r as usize, *v));
                }
                (None, Values::Counts(c)) => (c.iter().enumerate())
                    .filter(|(_, v)| **v != 0)
                    .for_each(|(i, v)| f(first + i, f64::from(*v))),
                (None, Values::Floats(x)) => (x.iter().enumerate())
                    .filter(|(_, v)| **v != 0.0)
                    .for_each(|(i, v)| f(first + i, *v)),
            }
        }
    }
}

/// Columns by name, numbered as first seen.
#[derive(Default)]
struct Registry {
    fixed: [Option<usize>; FIXED.len()],
    logprob: Option<usize>,
    user: HashMap<u16, usize>,
    tools: HashMap<String, usize>,
    markers: HashMap<String, usize>,
    /// Tasks, numbered as first seen: a row keeps its task's number, not its text.
    tasks: HashMap<String, u32>,
}

impl Registry {
    fn column(
        &mut self,
        name: &Name<'_>,
        user_names: &[String],
        columns: &mut Vec<(String, Entries)>,
    ) -> usize {
        let mut new = |spelled: String| {
            columns.push((spelled, Entries::default()));
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

impl Registry {
    /// The number of task `task`, numbered as first seen.
    fn task(&mut self, task: &str) -> Result<u32> {
        if let Some(&n) = self.tasks.get(task) {
            return Ok(n);
        }
        let n = u32::try_from(self.tasks.len())
            .map_err(|_| Error::Usage("hack-scan reads at most 2^32 tasks".into()))?;
        self.tasks.insert(task.to_owned(), n);
        Ok(n)
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn user_names_are_checked() {
        let ok = vec![("apology".to_owned(), "1".to_owned())];
        assert!(check_user_names(&ok).is_ok());
        for bad in ["", "contains:x", "a AND b"] {
            let e = check_user_names(&[(bad.to_owned(), "1".to_owned())]).unwrap_err();
            assert!(
                matches!(e, Error::Option { ref key, .. } if key == "features"),
                "{e}"
            );
        }
        let twice = [ok[0].clone(), ok[0].clone()];
        let e = check_user_names(&twice).unwrap_err();
        assert!(e.to_string().contains("`apology` is given twice"), "{e}");
    }

    #[test]
    fn entries_keep_each_batch_as_the_smaller_of_sparse_and_dense() {
        let want = [
            (1, 1.0),
            (4, 2.0),
            (9, 1.0),
            (10, 3.0),
            (11, 1.0),
            (12, -1.0),
            (13, 7.0),
            (21, 2.5),
        ];
        let mut e = Entries::default();
        // Rows 0..10: three entries; 10..14: one a row; 14..20: none; 20..24: one.
        for (first, end) in [(0, 10), (10, 14), (14, 20), (20, 24)] {
            for &(r, v) in want.iter().filter(|(r, _)| (first..end).contains(r)) {
                e.push(u32::try_from(r).unwrap(), v);
            }
            e.seal(first, end);
        }
        let kinds: Vec<(bool, bool)> = (e.parts.iter())
            .map(|p| (p.rows.is_none(), matches!(p.values, Values::Counts(_))))
            .collect();
        // Dense where every row has one; counts where none is negative or a fraction.
        assert_eq!(kinds, [(false, true), (true, false), (false, false)]);
        assert_eq!(e.len(), want.len());
        let mut got = Vec::new();
        e.for_each(|r, v| got.push((r, v)));
        assert_eq!(got, want);
        let rows: Vec<u32> = want
            .iter()
            .map(|(r, _)| u32::try_from(*r).unwrap())
            .collect();
        let values: Vec<f64> = want.iter().map(|(_, v)| *v).collect();
        let column = crate::stats::within::Column::from_each(24, |f| e.for_each(f));
        assert_eq!(
            column,
            crate::stats::within::Column::from_entries(24, &rows, &values)
        );
        assert!(!column.is_binary());
        // Ones only: a bitset, whichever way the batches were kept.
        let ones = Entries::of(&[0, 1, 2, 5], &[1.0; 4]);
        let bits = crate::stats::within::Column::from_each(6, |f| ones.for_each(f));
        assert_eq!(bits, crate::stats::within::Column::Bits(vec![0b10_0111]));
    }

    #[test]
    fn columns_are_numbered_as_first_seen_and_built_ins_share_theirs() {
        let user = vec!["mine".to_owned(), "reply_length".to_owned()];
        let mut registry = Registry::default();
        let mut columns = Vec::new();
        let c = |r: &mut Registry, n: Name<'_>, cols: &mut Vec<_>| r.column(&n, &user, cols);
        assert_eq!(c(&mut registry, Name::Tool("refund"), &mut columns), 0);
        assert_eq!(c(&mut registry, Name::User(0), &mut columns), 1);
        assert_eq!(c(&mut registry, Name::Fixed(0), &mut columns), 2);
        // A user feature named like a built-in fills the built-in's column.
        assert_eq!(c(&mut registry, Name::User(1), &mut columns), 2);
        assert_eq!(c(&mut registry, Name::Tool("refund"), &mut columns), 0);
        assert_eq!(c(&mut registry, Name::LogprobMean, &mut columns), 3);
        let names: Vec<&str> = columns.iter().map(|(n, _)| n.as_str()).collect();
        assert_eq!(
            names,
            ["tool:refund", "mine", "reply_length", "logprob_mean"]
        );
    }

    #[tokio::test]
    async fn a_feature_that_gives_text_is_refused_by_its_name() {
        let session = crate::stages::Session::new().unwrap();
        let rows = session
            .context()
            .sql("SELECT 'a' AS final_text")
            .await
            .unwrap();
        let scope = session.scope_with(&[("rows", rows)]).unwrap();
        let opts = Options {
            features: vec![("t".into(), "final_text".into())],
            ..Options::default()
        };
        let Err(e) = read(&scope, "rows", &opts).await else {
            panic!("a text feature is refused");
        };
        assert!(e.to_string().contains("t=final_text gives Utf8"), "{e}");
    }
}
