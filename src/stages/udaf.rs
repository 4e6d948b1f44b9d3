//! Aggregate functions registered in every session.
//!
//! - `fsum(x)`: the correctly rounded sum of a `DOUBLE` column ([`crate::stats::sum`]), null when
//!   no value is: the same bits whatever order the rows arrive in (partitions, cores, a
//!   cluster's workers), where `sum` and `avg` add in arrival order. The stages' per-task sums
//!   and means of floats use it.

use std::sync::Arc;

use datafusion::arrow::array::{
    Array, ArrayRef, AsArray as _, BooleanArray, Float64Array, ListArray,
};
use datafusion::arrow::buffer::{NullBuffer, OffsetBuffer};
use datafusion::arrow::datatypes::{DataType, Field, FieldRef, Float64Type};
use datafusion::common::{Result as DfResult, ScalarValue, exec_err, not_impl_err};
use datafusion::logical_expr::function::{AccumulatorArgs, StateFieldsArgs};
use datafusion::logical_expr::{
    Accumulator, AggregateUDF, AggregateUDFImpl, EmitTo, GroupsAccumulator, Signature, Volatility,
};

use crate::stats::sum::Partials;

/// `fsum(x)`.
#[derive(Debug, PartialEq, Eq, Hash)]
struct Fsum {
    signature: Signature,
}

/// The function.
pub fn fsum() -> AggregateUDF {
    AggregateUDF::new_from_impl(Fsum {
        signature: Signature::uniform(1, vec![DataType::Float64], Volatility::Immutable),
    })
}

/// Every aggregate function `wai` registers in a session.
pub fn all() -> Vec<AggregateUDF> {
    vec![fsum()]
}

impl AggregateUDFImpl for Fsum {
    fn name(&self) -> &'static str {
        "fsum"
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    fn return_type(&self, _args: &[DataType]) -> DfResult<DataType> {
        Ok(DataType::Float64)
    }

    fn accumulator(&self, args: AccumulatorArgs) -> DfResult<Box<dyn Accumulator>> {
        if args.is_distinct {
            return not_impl_err!("fsum(DISTINCT x): sum the distinct values in a subquery");
        }
        Ok(Box::<Sum>::default())
    }

    fn groups_accumulator_supported(&self, args: AccumulatorArgs) -> bool {
        !args.is_distinct
    }

    fn create_groups_accumulator(
        &self,
        _args: AccumulatorArgs,
    ) -> DfResult<Box<dyn GroupsAccumulator>> {
        Ok(Box::<GroupSums>::default())
    }

    fn state_fields(&self, args: StateFieldsArgs) -> DfResult<Vec<FieldRef>> {
        Ok(vec![
            Arc::new(Field::new_list(
                format!("{}[partials]", args.name),
                Field::new_list_field(DataType::Float64, false),
                true,
            )),
            Arc::new(Field::new(
                format!("{}[special]", args.name),
                DataType::Float64,
                false,
            )),
        ])
    }
}

/// One group's sum: the finite values' partials (none until a value is seen), and the plain sum
/// of the values that are not finite (an infinity or NaN makes the sum that, as in `sum`).
#[derive(Debug, Default)]
struct Sum {
    partials: Option<Partials>,
    special: f64,
}

impl Sum {
    /// The sum, or `None` when no value was seen.
    ///
    /// # Errors
    /// The finite values' sum went past the largest double (its rounded value would depend on
    /// the order they came in).
    fn value(&self) -> DfResult<Option<f64>> {
        let Some(p) = &self.partials else {
            return Ok(None);
        };
        if self.special != 0.0 {
            return Ok(Some(self.special));
        }
        if p.overflowed() {
            return exec_err!("fsum: the sum of the values is past the largest double");
        }
        Ok(Some(p.value()))
    }

    /// The bytes the sum holds on the heap.
    fn heap_bytes(&self) -> usize {
        self.partials.as_ref().map_or(0, Partials::heap_bytes)
    }

    /// Adds the state of another sum: its partials (`None` when it saw no value) and special sum.
    fn merge(&mut self, parts: Option<&[f64]>, special: f64) {
        if let Some(parts) = parts {
            self.partials
                .get_or_insert_with(Partials::default)
                .merge(parts);
            self.special += special;
        }
    }

    fn add(&mut self, x: f64) {
        let p = self.partials.get_or_insert_with(Partials::default);
        if x.is_finite() {
            p.add(x);
        } else {
            self.special += x;
        }
    }
}

impl Accumulator for Sum {
    fn update_batch(&mut self, values: &[ArrayRef]) -> DfResult<()> {
        let Some(v) = values.first() else {
            return Ok(());
        };
        for x in v.as_primitive::<Float64Type>().iter().flatten() {
            self.add(x);
        }
        Ok(())
    }

    fn evaluate(&mut self) -> DfResult<ScalarValue> {
        Ok(ScalarValue::Float64(self.value()?))
    }

    fn size(&self) -> usize {
        size_of::<Self>() + self.heap_bytes()
    }

    fn state(&mut self) -> DfResult<Vec<ScalarValue>> {
        // The one-row form of the groups' state.
        state_of(std::slice::from_ref(self))?
            .iter()
            .map(|a| ScalarValue::try_from_array(a, 0))
            .collect()
    }

    fn merge_batch(&mut self, states: &[ArrayRef]) -> DfResult<()> {
        let (Some(lists), Some(special)) = (states.first(), states.get(1)) else {
            return Ok(());
        };
        let (lists, special) = (
            lists.as_list::<i32>(),
            special.as_primitive::<Float64Type>(),
        );
        for i in 0..lists.len() {
            let parts = lists.is_valid(i).then(|| lists.value(i));
            self.merge(
                parts
                    .as_ref()
                    .map(|p| p.as_primitive::<Float64Type>().values().as_ref()),
                special.value(i),
            );
        }
        Ok(())
    }
}

/// The sums of many groups at once (what a `GROUP BY` runs): [`Sum`] by group index, and the
/// bytes their partials hold on the heap (kept as they change: `size` is asked every batch).
#[derive(Debug, Default)]
struct GroupSums {
    sums: Vec<Sum>,
    heap: usize,
}

impl GroupSums {
    /// Changes group `g` by `change`, keeping the heap count.
    fn with(&mut self, g: usize, change: impl FnOnce(&mut Sum)) {
        let before = self.sums[g].heap_bytes();
        change(&mut self.sums[g]);
        self.heap = self.heap + self.sums[g].heap_bytes() - before;
    }

    /// The first groups `emit_to` names, taken out.
    fn take(&mut self, emit_to: EmitTo) -> Vec<Sum> {
        let taken = emit_to.take_needed(&mut self.sums);
        self.heap -= taken.iter().map(Sum::heap_bytes).sum::<usize>();
        taken
    }
}

/// The state of `sums`: each one's partials as a list (null for a sum that saw no value), and
/// its special sum.
fn state_of(sums: &[Sum]) -> DfResult<Vec<ArrayRef>> {
    let item = Arc::new(Field::new_list_field(DataType::Float64, false));
    let lengths = sums
        .iter()
        .map(|s| s.partials.as_ref().map_or(0, |p| p.parts().len()));
    let values: Vec<f64> = sums
        .iter()
        .filter_map(|s| s.partials.as_ref())
        .flat_map(|p| p.parts().iter().copied())
        .collect();
    let valid: NullBuffer = sums.iter().map(|s| s.partials.is_some()).collect();
    let lists = ListArray::try_new(
        item,
        OffsetBuffer::from_lengths(lengths),
        Arc::new(Float64Array::from(values)),
        Some(valid),
    )?;
    let special: Float64Array = sums.iter().map(|s| Some(s.special)).collect();
    Ok(vec![Arc::new(lists), Arc::new(special)])
}

impl GroupsAccumulator for GroupSums {
    fn update_batch(
        &mut self,
        values: &[ArrayRef],
        group_indices: &[usize],
        opt_filter: Option<&BooleanArray>,
        total_num_groups: usize,
    ) -> DfResult<()> {
        self.sums.resize_with(total_num_groups, Sum::default);
        let Some(v) = values.first() else {
            return Ok(());
        };
        let v = v.as_primitive::<Float64Type>();
        for (i, &g) in group_indices.iter().enumerate() {
            let kept = opt_filter.is_none_or(|f| f.is_valid(i) && f.value(i));
            if kept && v.is_valid(i) {
                self.with(g, |s| s.add(v.value(i)));
            }
        }
        Ok(())
    }

    fn evaluate(&mut self, emit_to: EmitTo) -> DfResult<ArrayRef> {
        let sums = self.take(emit_to);
        let values = sums.iter().map(Sum::value).collect::<DfResult<Vec<_>>>()?;
        Ok(Arc::new(Float64Array::from(values)))
    }

    fn state(&mut self, emit_to: EmitTo) -> DfResult<Vec<ArrayRef>> {
        state_of(&self.take(emit_to))
    }

    fn merge_batch(
        &mut self,
        values: &[ArrayRef],
        group_indices: &[usize],
        total_num_groups: usize,
    ) -> DfResult<()> {
        self.sums.resize_with(total_num_groups, Sum::default);
        let (Some(lists), Some(special)) = (values.first(), values.get(1)) else {
            return Ok(());
        };
        let (lists, special) = (
            lists.as_list::<i32>(),
            special.as_primitive::<Float64Type>(),
        );
        for (i, &g) in group_indices.iter().enumerate() {
            let parts = lists.is_valid(i).then(|| lists.value(i));
            let parts = parts
                .as_ref()
                .map(|p| p.as_primitive::<Float64Type>().values().as_ref());
            self.with(g, |s| s.merge(parts, special.value(i)));
        }
        Ok(())
    }

    fn convert_to_state(
        &self,
        values: &[ArrayRef],
        opt_filter: Option<&BooleanArray>,
    ) -> DfResult<Vec<ArrayRef>> {
        let Some(v) = values.first() else {
            return state_of(&[]);
        };
        let v = v.as_primitive::<Float64Type>();
        let sums: Vec<Sum> = (0..v.len())
            .map(|i| {
                let mut sum = Sum::default();
                if opt_filter.is_none_or(|f| f.is_valid(i) && f.value(i)) && v.is_valid(i) {
                    sum.add(v.value(i));
                }
                sum
            })
            .collect();
        state_of(&sums)
    }

    fn size(&self) -> usize {
        self.sums.capacity() * size_of::<Sum>() + self.heap
    }
}

#[cfg(test)]
mod tests {
    use datafusion::arrow::array::RecordBatch;
    use datafusion::arrow::datatypes::Schema;
    use datafusion::datasource::MemTable;
    use datafusion::prelude::SessionContext;

    use super::*;

    /// `SELECT g, fsum(x), sum(x) FROM t GROUP BY g` over `x` dealt into `parts` partitions.
    async fn sums(
        values: &[(i64, Option<f64>)],
        parts: usize,
        skip: bool,
    ) -> Vec<(i64, Option<f64>)> {
        let schema = Arc::new(Schema::new(vec![
            Field::new("g", DataType::Int64, false),
            Field::new("x", DataType::Float64, true),
        ]));
        let mut partitions = vec![Vec::new(); parts];
        for (i, chunk) in values.chunks(7).enumerate() {
            let batch = RecordBatch::try_new(
                Arc::clone(&schema),
                vec![
                    Arc::new(
                        chunk
                            .iter()
                            .map(|v| v.0)
                            .collect::<datafusion::arrow::array::Int64Array>(),
                    ),
                    Arc::new(chunk.iter().map(|v| v.1).collect::<Float64Array>()),
                ],
            )
            .expect("batch");
            partitions[i % parts].push(batch);
        }
        // Partial aggregation skipped from the first rows: the states come from
        // `convert_to_state`, one a row.
        let mut config = datafusion::prelude::SessionConfig::new();
        if skip {
            let options = &mut config.options_mut().execution;
            options.skip_partial_aggregation_probe_rows_threshold = 1;
            options.skip_partial_aggregation_probe_ratio_threshold = 0.0;
        }
        let ctx = SessionContext::new_with_config(config);
        ctx.register_udaf(fsum());
        ctx.register_table(
            "t",
            Arc::new(MemTable::try_new(schema, partitions).expect("table")),
        )
        .expect("register");
        // Without groups (one accumulator): the sum of every value.
        let run = |sql: &'static str| {
            let ctx = ctx.clone();
            async move { ctx.sql(sql).await?.collect().await }
        };
        let total = run("SELECT fsum(x) AS s FROM t").await.expect("ran");
        let total = total[0].column(0).as_primitive::<Float64Type>().value(0);
        let every = crate::stats::sum::fsum(values.iter().filter_map(|v| v.1));
        assert_eq!(total.to_bits(), every.to_bits(), "{parts} partitions");
        let out = run("SELECT g, fsum(x) AS s FROM t GROUP BY g ORDER BY g")
            .await
            .expect("ran");
        out.iter()
            .flat_map(|b| {
                let g = b
                    .column(0)
                    .as_primitive::<datafusion::arrow::datatypes::Int64Type>()
                    .clone();
                let s = b.column(1).as_primitive::<Float64Type>().clone();
                (0..b.num_rows()).map(move |i| (g.value(i), s.is_valid(i).then(|| s.value(i))))
            })
            .collect()
    }

    #[tokio::test]
    async fn the_sum_is_correctly_rounded_at_any_partitioning() {
        let mut values: Vec<(i64, Option<f64>)> = (0..400_i32)
            .map(|i| {
                let x = 0.1 * f64::from(i % 13) + 1e15 * f64::from(i % 2);
                (i64::from(i % 4), Some(x))
            })
            .collect();
        values.push((5, None));
        let want: Vec<(i64, Option<f64>)> = (0..4)
            .map(|g| {
                let xs = values.iter().filter(|v| v.0 == g).filter_map(|v| v.1);
                (g, Some(crate::stats::sum::fsum(xs)))
            })
            .chain([(5, None)])
            .collect();
        for parts in [1, 2, 3, 8] {
            for skip in [false, true] {
                assert_eq!(sums(&values, parts, skip).await, want, "{parts} partitions");
            }
        }
    }

    async fn one(sql: &str) -> DfResult<Vec<RecordBatch>> {
        let ctx = SessionContext::new();
        ctx.register_udaf(fsum());
        ctx.sql(sql).await?.collect().await
    }

    #[tokio::test]
    async fn an_overflow_and_distinct_are_refused_and_a_filter_is_kept() {
        // Past the largest double, the rounded value would depend on the order: refused.
        let e = one("SELECT fsum(x) FROM (VALUES (1e308), (1e308), (-1e308)) t(x)")
            .await
            .expect_err("overflow");
        assert!(e.to_string().contains("past the largest double"), "{e}");
        let e = one("SELECT fsum(DISTINCT x), count(*) FROM (VALUES (1.0), (1.0)) t(x)")
            .await
            .expect_err("distinct");
        assert!(e.to_string().contains("DISTINCT"), "{e}");
        let out = one(
            "SELECT fsum(x) FILTER (WHERE x > 0.5) AS s FROM (VALUES (0.1), (0.7), (0.9), (CAST(NULL AS DOUBLE))) t(x)",
        )
        .await
        .expect("filtered");
        let s = out[0].column(0).as_primitive::<Float64Type>().value(0);
        assert_eq!(s.to_bits(), crate::stats::sum::fsum([0.7, 0.9]).to_bits());
    }
}
