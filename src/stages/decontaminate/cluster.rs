//! The lexical rules on a cluster (`wai decontaminate --cluster`): the eval side's lexical index
//! travels inside the plan, as a literal argument of `wai_contaminated`, which each worker
//! rebuilds (once, kept for its next tasks) and runs over the training rows it scans. The workers return only the keys of the
//! rows they flag; this process streams the rows as ever and checks again just those whose key is
//! flagged, so the kept rows, the dropped list and the report are the ones a run alone gives.
//!
//! A row's key is a hash of what the lexical rules read of it (its task id, its prompt, the
//! compared fields). Two rows with one key read the same to the rules, so a row that is not
//! flagged never needs a second look; a collision only costs a flagged key's other row a check
//! here, which clears it. The semantic rule (an embedder) runs here, on the rows the lexical rules
//! left.

use std::hash::{BuildHasher as _, Hash as _, Hasher as _};
use std::sync::{Arc, Mutex, OnceLock};

use datafusion::arrow::array::{Array, ArrayRef, AsArray as _, StringArray, UInt64Array};
use datafusion::arrow::datatypes::DataType;
use datafusion::common::{Result as DfResult, ScalarValue, exec_err};
use datafusion::logical_expr::{
    ColumnarValue, ScalarFunctionArgs, ScalarUDF, ScalarUDFImpl, Signature, Volatility,
};
use serde::{Deserialize, Serialize};

use super::rows::{cell, recorded};
use super::{EvalIndex, Options, Row, check_batch};

/// The function's name in every session.
pub const FUNCTION: &str = "wai_contaminated";

/// The eval side's lexical index as it travels: what rebuilds the index's lexical part exactly
/// (the same text ids in the same order), and the options the rules read.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Lexical {
    fields: Vec<String>,
    n: usize,
    overlap: f64,
    /// The recorded eval task ids, sorted.
    tasks: Vec<String>,
    /// The normalised eval texts, by text id.
    texts: Vec<String>,
    /// [`probe_key`] as this process computes it: a worker that computes another (a machine
    /// of another kind) refuses the index rather than send keys this process cannot match.
    probe: u64,
}

/// The key of a fixed row, held equal on both sides.
fn probe_key() -> u64 {
    row_key(Some("wai"), Some("probe"), [Some("key"), None, Some("")])
}

impl Lexical {
    /// The lexical part of `index`, checked under `opts`.
    pub fn of(index: &EvalIndex, opts: &Options) -> Self {
        let mut tasks: Vec<String> = index.tasks.iter().cloned().collect();
        tasks.sort_unstable();
        Self {
            fields: opts.fields.clone(),
            n: index.n,
            overlap: opts.overlap,
            tasks,
            texts: index.texts.clone(),
            probe: probe_key(),
        }
    }

    /// The bytes the plan carries: the SHA-256 of the index's JSON (a worker keeps an index it
    /// rebuilt by it, and finds it again without reading the rest), then the JSON.
    ///
    /// # Errors
    /// Never in practice (the fields are text and numbers).
    pub fn to_bytes(&self) -> crate::error::Result<Vec<u8>> {
        use sha2::Digest as _;
        let json = serde_json::to_vec(self).map_err(|e| {
            crate::error::Error::Internal(format!("the eval index does not serialize: {e}"))
        })?;
        let mut bytes = sha2::Sha256::digest(&json).to_vec();
        bytes.extend(json);
        Ok(bytes)
    }

    /// The compared fields, in order.
    pub fn fields(&self) -> &[String] {
        &self.fields
    }

    /// The index and options these bytes describe.
    fn rebuild(&self) -> (EvalIndex, Options) {
        let mut index = EvalIndex::new(self.n);
        index.tasks.extend(self.tasks.iter().cloned());
        for text in &self.texts {
            index.add_normalized(text);
        }
        let opts = Options {
            fields: self.fields.clone(),
            n: self.n,
            overlap: self.overlap,
            similarity: None,
        };
        (index, opts)
    }
}

/// A row's key: a hash of what the lexical rules read of it, the same in every process of one
/// build (a fixed seed).
pub fn row_key<'a>(
    task: Option<&str>,
    prompt: Option<&str>,
    texts: impl IntoIterator<Item = Option<&'a str>>,
) -> u64 {
    let mut h = foldhash::quality::FixedState::with_seed(0x0dec_0a11_0ca1).build_hasher();
    task.hash(&mut h);
    prompt.hash(&mut h);
    for t in texts {
        t.hash(&mut h);
    }
    h.finish()
}

/// The rows of one batch as the rules read them: the task id, prompt and field columns.
pub(super) fn rows_of<'a>(
    task: &'a StringArray,
    prompt: &'a StringArray,
    fields: &[&'a StringArray],
) -> Vec<Row<'a>> {
    (0..task.len())
        .map(|i| Row {
            task: recorded(cell(task, i), cell(prompt, i)),
            texts: fields.iter().map(|a| cell(a, i).unwrap_or("")).collect(),
        })
        .collect()
}

/// The key of row `i`.
pub(super) fn key_of(
    task: &StringArray,
    prompt: &StringArray,
    fields: &[&StringArray],
    i: usize,
) -> u64 {
    row_key(
        cell(task, i),
        cell(prompt, i),
        fields.iter().map(|a| cell(a, i)),
    )
}

/// `wai_contaminated(index, task_id, prompt, field, ...)`: the key of each row a lexical rule
/// flags, null for the others. `index` is [`Lexical::to_bytes`] as a binary literal; the fields
/// are those it names, in its order.
///
/// Volatile, though it is not: a volatile expression is never copied into a filter below it, so
/// `WHERE key IS NOT NULL` over it runs the rules once per row, not twice.
#[derive(Debug, PartialEq, Eq, Hash)]
pub struct Contaminated {
    signature: Signature,
}

impl Contaminated {
    /// The function.
    pub fn udf() -> ScalarUDF {
        ScalarUDF::new_from_impl(Self {
            signature: Signature::variadic_any(Volatility::Volatile),
        })
    }
}

/// An index rebuilt from its bytes, and the options it is checked under.
type Rebuilt = (EvalIndex, Options);

/// One index's slot: rebuilt by the first task that needs it, while the others wait for it.
type Slot = Arc<OnceLock<std::result::Result<Arc<Rebuilt>, String>>>;

/// Indexes a worker keeps between tasks, by the SHA-256 their bytes start with: the tasks of one
/// query, and the queries of a few eval sets, share them.
const KEPT: usize = 4;

/// The indexes this process rebuilt, oldest first.
static REBUILT: Mutex<Vec<([u8; 32], Slot)>> = Mutex::new(Vec::new());

fn rebuilt(bytes: &[u8]) -> DfResult<Arc<Rebuilt>> {
    let Some((digest, json)) = bytes.split_first_chunk::<32>() else {
        return exec_err!(
            "{FUNCTION}: the eval index is {} bytes, too short",
            bytes.len()
        );
    };
    let slot: Slot = {
        let mut kept = REBUILT
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some((_, slot)) = kept.iter().find(|(d, _)| d == digest) {
            Arc::clone(slot)
        } else {
            if kept.len() == KEPT {
                kept.remove(0);
            }
            let slot = Slot::default();
            kept.push((*digest, Arc::clone(&slot)));
            slot
        }
    };
    let made = slot.get_or_init(|| {
        let lexical: Lexical = serde_json::from_slice(json)
            .map_err(|e| format!("{FUNCTION}: the eval index does not decode: {e}"))?;
        if lexical.probe != probe_key() {
            return Err(format!(
                "{FUNCTION}: this worker computes row keys unlike the coordinator (a machine of another kind): run decontaminate without it"
            ));
        }
        Ok(Arc::new(lexical.rebuild()))
    });
    match made {
        Ok(index) => Ok(Arc::clone(index)),
        Err(e) => exec_err!("{e}"),
    }
}

fn text(a: &ArrayRef) -> DfResult<StringArray> {
    let utf8 = datafusion::arrow::compute::cast(a, &DataType::Utf8)?;
    Ok(utf8.as_string::<i32>().clone())
}

impl ScalarUDFImpl for Contaminated {
    fn name(&self) -> &str {
        FUNCTION
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    fn return_type(&self, _args: &[DataType]) -> DfResult<DataType> {
        Ok(DataType::UInt64)
    }

    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> DfResult<ColumnarValue> {
        // The index is a literal: read as it is, never spread over the rows.
        let (
            Some(ColumnarValue::Scalar(
                ScalarValue::Binary(Some(bytes))
                | ScalarValue::LargeBinary(Some(bytes))
                | ScalarValue::BinaryView(Some(bytes)),
            )),
            Some(task),
            Some(prompt),
        ) = (args.args.first(), args.args.get(1), args.args.get(2))
        else {
            return exec_err!(
                "{FUNCTION} takes the eval index (a binary literal), task_id, prompt and the compared fields"
            );
        };
        let prepared = rebuilt(bytes)?;
        let (index, opts) = (&prepared.0, &prepared.1);
        if args.args.len() != 3 + opts.fields.len() {
            return exec_err!(
                "{FUNCTION}: the eval index compares {} fields, {} given",
                opts.fields.len(),
                args.args.len() - 3
            );
        }
        let n = args.number_rows;
        let task = text(&task.to_array(n)?)?;
        let prompt = text(&prompt.to_array(n)?)?;
        let fields: Vec<StringArray> = args.args[3..]
            .iter()
            .map(|a| text(&a.to_array(n)?))
            .collect::<DfResult<_>>()?;
        let field_refs: Vec<&StringArray> = fields.iter().collect();
        let rows = rows_of(&task, &prompt, &field_refs);
        let hits = check_batch(index, opts, &rows, 0, None);
        let keys: UInt64Array = hits
            .iter()
            .enumerate()
            .map(|(i, h)| h.as_ref().map(|_| key_of(&task, &prompt, &field_refs, i)))
            .collect();
        Ok(ColumnarValue::Array(Arc::new(keys)))
    }
}

/// The keys of the rows of table `table` in `ctx` that the lexical rules of `lexical` flag: the
/// query a cluster runs (`wai_contaminated` over the table, its nulls dropped). A compared column
/// the table lacks reads as null, as when its rows are read one by one.
///
/// # Errors
/// The query failed.
pub async fn flagged_keys(
    ctx: &datafusion::prelude::SessionContext,
    table: &str,
    lexical: &Lexical,
) -> crate::error::Result<foldhash::HashSet<u64>> {
    use datafusion::prelude::{col, lit};
    let df = ctx.table(table).await?;
    let column = |name: &str| {
        if df.schema().has_column_with_unqualified_name(name) {
            col(datafusion::common::Column::new_unqualified(name))
        } else {
            lit(ScalarValue::Utf8(None))
        }
    };
    let bytes = lexical.to_bytes()?;
    tracing::info!(
        bytes = bytes.len(),
        texts = lexical.texts.len(),
        "the eval index travels with each plan fragment"
    );
    let mut args = vec![
        lit(ScalarValue::Binary(Some(bytes))),
        column(crate::schema::col::TASK_ID),
        column(crate::schema::col::PROMPT),
    ];
    args.extend(lexical.fields.iter().map(|f| column(f)));
    let keys = df
        .select(vec![Contaminated::udf().call(args).alias("key")])?
        .filter(col("key").is_not_null())?
        .collect()
        .await?;
    let mut out = foldhash::HashSet::default();
    for batch in &keys {
        let a = batch
            .column(0)
            .as_primitive::<datafusion::arrow::datatypes::UInt64Type>();
        out.extend(a.iter().flatten());
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use datafusion::arrow::array::RecordBatch;
    use datafusion::arrow::datatypes::{Field, Schema};
    use datafusion::prelude::SessionContext;

    use super::*;

    fn index() -> EvalIndex {
        let mut ix = EvalIndex::new(3);
        let _ = ix.add(Some("e1"), "Cancel  Order 9911 now please.", &[]);
        let _ = ix.add(None, "refund the blue shoes today", &["Done!".to_owned()]);
        ix
    }

    #[test]
    fn the_rebuilt_index_flags_what_the_original_flags() {
        let opts = Options {
            n: 3,
            ..Options::default()
        };
        let ix = index();
        let lexical = Lexical::of(&ix, &opts);
        let bytes = lexical.to_bytes().expect("bytes");
        let decoded: Lexical = serde_json::from_slice(&bytes[32..]).expect("decode");
        assert_eq!(decoded, lexical);
        // Found again by its digest: the same rebuilt index.
        let (a, b) = (rebuilt(&bytes).expect("a"), rebuilt(&bytes).expect("b"));
        assert!(Arc::ptr_eq(&a, &b));
        // A worker whose keys differ refuses the index.
        let mut other = lexical.clone();
        other.probe ^= 1;
        let Err(e) = rebuilt(&other.to_bytes().expect("bytes")) else {
            panic!("a worker with other keys took the index");
        };
        assert!(e.to_string().contains("row keys unlike"), "{e}");
        let (again, _) = decoded.rebuild();
        assert_eq!(again.texts, ix.texts);
        assert_eq!(again.tasks, ix.tasks);
        assert_eq!(again.norms, ix.norms);
        assert_eq!(again.ngrams, ix.ngrams);
    }

    #[tokio::test]
    async fn the_query_returns_the_keys_of_flagged_rows_only() {
        // `final_text` is compared but the table has no such column: it reads as null.
        let opts = Options {
            n: 3,
            fields: vec!["prompt".into(), "final_text".into()],
            ..Options::default()
        };
        let lexical = Lexical::of(&index(), &opts);
        let rows = [
            (Some("e1"), Some("anything at all")),
            (Some("t2"), Some("cancel order 9911 now please")),
            (Some("t3"), Some("please refund the blue shoes today")),
            (Some("t4"), Some("nothing to see here, at all")),
            (None, None),
        ];
        let schema = Arc::new(Schema::new(vec![
            Field::new("task_id", DataType::Utf8, true),
            Field::new("prompt", DataType::Utf8, true),
        ]));
        let batch = RecordBatch::try_new(
            schema,
            vec![
                Arc::new(rows.iter().map(|r| r.0).collect::<StringArray>()),
                Arc::new(rows.iter().map(|r| r.1).collect::<StringArray>()),
            ],
        )
        .expect("batch");
        let ctx = SessionContext::new();
        ctx.register_batch("t", batch).expect("register");
        let keys = flagged_keys(&ctx, "t", &lexical).await.expect("query");
        let want: foldhash::HashSet<u64> = rows[..3]
            .iter()
            .map(|(t, p)| row_key(*t, *p, [*p, None]))
            .collect();
        assert_eq!(keys, want);
    }
}
