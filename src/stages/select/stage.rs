//! Selection as a [`crate::stages::Stage`] over rows in memory, and the hack scan of a
//! selection.

use std::collections::HashSet;
use std::sync::Arc;

use datafusion::arrow::array::RecordBatch;
use rayon::prelude::*;

use super::{Options, Report, RowInfo, Truncated, general_summary, rl, sft, training_order};
use crate::error::Result;
use crate::pipeline::row::BatchView;
use crate::stages::Session;
use crate::stages::hack_scan;

/// Which rows to select.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Mode {
    /// Whole mixed groups, for RL.
    #[default]
    Rl,
    /// Passing demonstrations, for SFT.
    Sft,
}

/// What selection reads: rows in memory, in the row schema, in input order.
pub struct Inputs {
    /// The rows.
    pub rows: Vec<RecordBatch>,
    /// RL or SFT.
    pub mode: Mode,
}

/// The selection: its report, and the chosen rows in training order (not serialized).
#[derive(Debug, Clone, serde::Serialize)]
pub struct Selection {
    /// What selection did.
    #[serde(flatten)]
    pub report: Report,
    /// The chosen rows, in training order (overlong rows marked).
    #[serde(skip)]
    pub rows: Vec<RecordBatch>,
}

impl std::fmt::Display for Selection {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.report.fmt(f)
    }
}

/// Selection over rows in memory (`wai select` reads its inputs twice instead, summaries then
/// the chosen rows, so that memory follows the selection).
pub struct SelectStage;

impl crate::stages::Stage for SelectStage {
    type Inputs = Inputs;
    type Options = Options;
    type Report = Selection;
    const NAME: &'static str = "select";

    async fn run(_session: &Session, inputs: Inputs, opts: &Options) -> Result<Selection> {
        let mut infos: Vec<RowInfo> = Vec::new();
        let mut at_of: Vec<(usize, usize)> = Vec::new();
        for (b, batch) in inputs.rows.iter().enumerate() {
            let view = BatchView::new(batch)?;
            let part: Vec<RowInfo> = (0..batch.num_rows())
                .into_par_iter()
                .map(|i| general_summary(&view, i))
                .collect::<Result<_>>()?;
            infos.extend(part);
            at_of.extend((0..batch.num_rows()).map(|j| (b, j)));
        }
        let (chosen, marked, report) = match inputs.mode {
            Mode::Rl => rl(&infos, opts),
            Mode::Sft => {
                let (c, r) = sft(&infos, opts);
                (c, Vec::new(), r)
            }
        };
        let at: Vec<(usize, usize)> = chosen.iter().map(|&i| at_of[i]).collect();
        let marked: HashSet<usize> = marked.into_iter().collect();
        let penalize = opts.truncated == Truncated::Penalize;
        let rows = if chosen.is_empty() {
            Vec::new()
        } else {
            training_order(&inputs.rows, &at, &chosen, &marked, penalize)?
        };
        Ok(Selection { report, rows })
    }
}

/// The hack scan of selected `rows` (in memory), ranking the top five features.
///
/// # Errors
/// The scan failed.
pub async fn scan_selection(
    session: &Session,
    rows: &[RecordBatch],
    endorsed: &[String],
) -> Result<hack_scan::Report> {
    let schema = rows
        .first()
        .map_or_else(crate::schema::row_schema, RecordBatch::schema);
    // Contiguous parts, one per core, read in order.
    let cores = std::thread::available_parallelism().map_or(1, std::num::NonZero::get);
    let parts: Vec<Vec<RecordBatch>> = rows
        .chunks(rows.len().div_ceil(cores).max(1))
        .map(<[RecordBatch]>::to_vec)
        .collect();
    let table = datafusion::datasource::MemTable::try_new(schema, parts)?;
    let frame = session.scope()?.read_table(Arc::new(table))?;
    let opts = hack_scan::Options {
        endorsed: endorsed.to_vec(),
        top_features: Some(5),
        ..hack_scan::Options::default()
    };
    crate::stages::run::<hack_scan::HackScanStage>(session, hack_scan::Inputs::new(frame), &opts)
        .await
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pipeline::row::testing::batch_of;
    use crate::stages::run;

    #[tokio::test]
    async fn the_stage_selects_rows_in_memory_as_the_summaries_choose() {
        let rows = super::super::tests::made_rows();
        let batch = batch_of(rows);
        let opts = Options {
            target: 100,
            band: (0.0, 1.0),
            truncated: Truncated::Keep,
            has_tools: true,
            min_reward: 1.0,
        };
        let session = Session::new().unwrap();
        for mode in [Mode::Rl, Mode::Sft] {
            let view = BatchView::new(&batch).unwrap();
            let infos: Vec<RowInfo> = (0..batch.num_rows())
                .map(|i| general_summary(&view, i).unwrap())
                .collect();
            let want = match mode {
                Mode::Rl => rl(&infos, &opts).0,
                Mode::Sft => sft(&infos, &opts).0,
            };
            let got = run::<SelectStage>(
                &session,
                Inputs {
                    rows: vec![batch.clone()],
                    mode,
                },
                &opts,
            )
            .await
            .unwrap();
            assert_eq!(got.report.n_selected, want.len());
            let n: usize = got.rows.iter().map(RecordBatch::num_rows).sum();
            assert_eq!(n, want.len());
        }
    }
}
