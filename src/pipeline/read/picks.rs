//! Picked rows of a Parquet file: which row groups hold them, and the row selection (or the
//! filter, for sparse groups) that reads only them.

use datafusion::arrow::array::RecordBatch;

use datafusion::arrow::array::BooleanArray;
use datafusion::arrow::compute::filter_record_batch;
use datafusion::parquet::arrow::arrow_reader::RowSelection;

use crate::error::{Error, Result};

/// The rows picked from one Parquet file, by row group.
pub(super) struct Picks<'a> {
    rows: &'a [bool],
    /// Each row group's first row and row count.
    spans: Vec<(usize, usize)>,
}

impl<'a> Picks<'a> {
    pub(super) fn new(
        meta: &datafusion::parquet::file::metadata::ParquetMetaData,
        rows: &'a [bool],
        display: &str,
    ) -> Result<Self> {
        let mut spans = Vec::with_capacity(meta.num_row_groups());
        let mut at = 0;
        for g in meta.row_groups() {
            let n = usize::try_from(g.num_rows()).unwrap_or(0);
            spans.push((at, n));
            at += n;
        }
        if at != rows.len() {
            return Err(Error::Input {
                stage: "read".into(),
                message: format!(
                    "`{display}` has {at} rows where it had {} when first read: it changed in between",
                    rows.len()
                ),
            });
        }
        Ok(Self { rows, spans })
    }

    /// Whether row group `g` has a picked row.
    pub(super) fn wanted(&self, g: usize) -> bool {
        let (start, n) = self.spans[g];
        self.rows[start..start + n].contains(&true)
    }

    /// The row groups with a picked row, in order.
    pub(super) fn groups(&self) -> Vec<usize> {
        (0..self.spans.len()).filter(|&g| self.wanted(g)).collect()
    }

    /// Whether row group `g`'s picks are few runs (at least 256 rows a run on average), which
    /// the decoder skips between faster than it decodes them.
    pub(super) fn sparse(&self, g: usize) -> bool {
        let (start, n) = self.spans[g];
        let marks = &self.rows[start..start + n];
        let runs = usize::from(marks.first() == Some(&true))
            + marks.windows(2).filter(|w| !w[0] && w[1]).count();
        runs * 256 <= n
    }

    /// Row group `g`'s picks as a filter over its rows.
    pub(super) fn filter(&self, g: usize) -> BooleanArray {
        let (start, n) = self.spans[g];
        BooleanArray::from(self.rows[start..start + n].to_vec())
    }

    /// How row groups `groups` are read, in order: the selection the decoder skips by (a sparse
    /// group's picks; every row of a dense group), and the sieve over the rows it yields (a dense
    /// group's picks), `None` when every group is sparse. Local files read one group at a time
    /// and remote ones all wanted groups at once, by this one rule.
    pub(super) fn plan(&self, groups: &[usize]) -> (RowSelection, Option<Sieve>) {
        let mut selection = Vec::with_capacity(groups.len());
        let mut after: Vec<bool> = Vec::new();
        for &g in groups {
            let picks = self.filter(g);
            if self.sparse(g) {
                after.resize(after.len() + picks.true_count(), true);
                selection.push(picks);
            } else {
                after.extend(picks.values().iter());
                selection.push(BooleanArray::from(vec![true; picks.len()]));
            }
        }
        let sieve = after.contains(&false).then(|| Sieve {
            keep: BooleanArray::from(after),
            at: 0,
        });
        (RowSelection::from_filters(&selection), sieve)
    }
}

/// The rows to keep of the batches a reading yields, in order: `keep[at..]` is over the rows not
/// yet seen.
pub(super) struct Sieve {
    keep: BooleanArray,
    at: usize,
}

impl Sieve {
    /// The kept rows of the next batch, `None` when it keeps none.
    pub(super) fn pass(&mut self, batch: &RecordBatch) -> Result<Option<RecordBatch>> {
        let n = batch.num_rows();
        let kept = filter_record_batch(batch, &self.keep.slice(self.at, n))?;
        self.at += n;
        Ok((kept.num_rows() > 0).then_some(kept))
    }
}
