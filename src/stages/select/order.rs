//! The chosen rows in training order, the overlong ones marked (and, under `penalize`, their
//! reward zeroed with the judge's kept).

use std::collections::HashSet;
use std::hash::BuildHasher;
use std::sync::Arc;

use datafusion::arrow::array::{Array, ArrayRef, AsArray, Float64Array, RecordBatch};
use datafusion::arrow::datatypes::Float64Type;
use rayon::prelude::*;
use serde_json::{Value, json};

use crate::error::Result;
use crate::schema::col;

/// Rows in chunks per core to put into training order (each chunk one output batch).
const ORDER_CHUNK: usize = 8192;

/// The chosen rows of `taken` (`at[k]` is where `chosen[k]` landed) in training order, a batch
/// per [`ORDER_CHUNK`] rows, the chunks gathered in parallel. Rows in `marked` carry
/// `overlong: true` in `extra`; under `penalize` their reward is 0 and the judge's is kept as
/// `reward_before_penalty`.
pub fn training_order<S: BuildHasher + Sync>(
    taken: &[RecordBatch],
    at: &[(usize, usize)],
    chosen: &[usize],
    marked: &HashSet<usize, S>,
    penalize: bool,
) -> Result<Vec<RecordBatch>> {
    let refs: Vec<&RecordBatch> = taken.iter().collect();
    chosen
        .par_chunks(ORDER_CHUNK)
        .zip(at.par_chunks(ORDER_CHUNK))
        .map(|(chunk, idx)| {
            let out = datafusion::arrow::compute::interleave_record_batch(&refs, idx)?;
            if chunk.iter().any(|i| marked.contains(i)) {
                mark_overlong(&out, chunk, marked, penalize)
            } else {
                Ok(out)
            }
        })
        .collect()
}

/// `out` (the rows `chunk` names) with the rows in `marked` marked overlong (see
/// [`training_order`]).
fn mark_overlong<S: BuildHasher>(
    out: &RecordBatch,
    chunk: &[usize],
    marked: &HashSet<usize, S>,
    penalize: bool,
) -> Result<RecordBatch> {
    let schema = out.schema();
    let rpos = schema.index_of(col::REWARD)?;
    let epos = schema.index_of(col::EXTRA)?;
    let old = out.column(rpos).as_primitive::<Float64Type>();
    let extra = out.column(epos).as_string::<i32>();
    let mut rewards = Vec::with_capacity(chunk.len());
    let mut extras: Vec<Option<String>> = Vec::with_capacity(chunk.len());
    for (j, i) in chunk.iter().enumerate() {
        let reward = old.is_valid(j).then(|| old.value(j));
        let text = extra.is_valid(j).then(|| extra.value(j).to_owned());
        if marked.contains(i) {
            let mut m: serde_json::Map<String, Value> = text
                .as_deref()
                .and_then(|t| serde_json::from_str(t).ok())
                .unwrap_or_default();
            m.insert("overlong".into(), Value::Bool(true));
            if penalize {
                m.insert(
                    "reward_before_penalty".into(),
                    reward.map_or(Value::Null, |r| json!(r)),
                );
                rewards.push(Some(0.0));
            } else {
                rewards.push(reward);
            }
            extras.push(Some(Value::Object(m).to_string()));
        } else {
            rewards.push(reward);
            extras.push(text);
        }
    }
    let mut cols: Vec<ArrayRef> = out.columns().to_vec();
    cols[rpos] = Arc::new(Float64Array::from(rewards));
    cols[epos] = Arc::new(datafusion::arrow::array::StringArray::from(extras));
    Ok(RecordBatch::try_new(schema, cols)?)
}

#[cfg(test)]
mod tests {
    use std::collections::HashSet;

    use datafusion::arrow::array::{Int64Array, StringArray};
    use datafusion::arrow::datatypes::{DataType, Field, Int64Type, Schema};

    use super::*;

    /// Batches of rows `from..to` with an id, a reward (the id's parity) and an `extra`.
    fn taken(cuts: &[usize]) -> Vec<RecordBatch> {
        let schema = Arc::new(Schema::new(vec![
            Field::new("id", DataType::Int64, false),
            Field::new(col::REWARD, DataType::Float64, true),
            Field::new(col::EXTRA, DataType::Utf8, true),
        ]));
        cuts.windows(2)
            .map(|w| {
                let ids: Vec<i64> = (w[0]..w[1])
                    .map(|i| i64::try_from(i).expect("a small id"))
                    .collect();
                let columns: Vec<ArrayRef> = vec![
                    Arc::new(Int64Array::from(ids.clone())),
                    Arc::new(
                        ids.iter()
                            .map(|i| Some(f64::from(u8::from(i % 2 == 1))))
                            .collect::<Float64Array>(),
                    ),
                    Arc::new(
                        ids.iter()
                            .map(|i| (i % 3 == 0).then(|| format!(r#"{{"n":{i}}}"#)))
                            .collect::<StringArray>(),
                    ),
                ];
                RecordBatch::try_new(schema.clone(), columns).expect("a batch")
            })
            .collect()
    }

    /// Rows over several chunks come out in the order chosen, whatever batch they were read
    /// into; marked rows, and only they, say `overlong`, and under `penalize` their reward is
    /// 0 with the judge's kept.
    #[test]
    fn training_order_follows_the_choice_across_chunks() {
        let cuts: [usize; 5] = [0, 7_000, 7_001, 19_000, 25_000];
        let batches = taken(&cuts);
        let n = 25_000usize;
        // A fixed shuffle of every row: position k takes row (k * 7919) mod n.
        let chosen: Vec<usize> = (0..n).map(|k| k * 7919 % n).collect();
        let at: Vec<(usize, usize)> = chosen
            .iter()
            .map(|&r| {
                let b = cuts.iter().rposition(|&c| c <= r).expect("a batch");
                (b, r - cuts[b])
            })
            .collect();
        let marked: HashSet<usize> = chosen.iter().copied().filter(|r| r % 97 == 0).collect();
        for penalize in [false, true] {
            let outs = training_order(&batches, &at, &chosen, &marked, penalize).expect("ordered");
            assert_eq!(outs.len(), n.div_ceil(ORDER_CHUNK));
            let mut k = 0;
            for out in &outs {
                let ids = out.column(0).as_primitive::<Int64Type>();
                let rewards = out.column(1).as_primitive::<Float64Type>();
                let extras = out.column(2).as_string::<i32>();
                for j in 0..out.num_rows() {
                    let row = chosen[k];
                    assert_eq!(
                        usize::try_from(ids.value(j)).ok(),
                        Some(row),
                        "position {k}"
                    );
                    let extra: Option<Value> = extras
                        .is_valid(j)
                        .then(|| serde_json::from_str(extras.value(j)).expect("JSON"));
                    let judged = f64::from(u8::from(row % 2 == 1));
                    if marked.contains(&row) {
                        let extra = extra.expect("a marked row has an extra");
                        assert_eq!(extra["overlong"], true);
                        if row.is_multiple_of(3) {
                            assert_eq!(extra["n"], row, "the row's own extra is kept");
                        }
                        if penalize {
                            assert_eq!(rewards.value(j), 0.0);
                            assert_eq!(extra["reward_before_penalty"], judged);
                        } else {
                            assert_eq!(rewards.value(j), judged);
                            assert!(extra.get("reward_before_penalty").is_none());
                        }
                    } else {
                        assert_eq!(rewards.value(j), judged);
                        assert_eq!(extra.is_some(), row.is_multiple_of(3));
                        assert!(extra.is_none_or(|e| e.get("overlong").is_none()));
                    }
                    k += 1;
                }
            }
            assert_eq!(k, n);
        }
    }
}
