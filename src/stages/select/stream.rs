//! Streaming selection: choosing from every row's summary, then ordering the chosen rows read
//! whole, through [`Readings`] (the caller's two readings of its inputs and its output), so that
//! memory follows the selection, not the input.

use std::collections::HashSet;

use rayon::prelude::*;

use super::{
    LEAVES, Mode, Options, PairOptions, PairReport, Report, Truncated, build_pairs, fill_summaries,
    general_summary, pair_row, plan_pairs, rl, scan_selection, sft, training_order,
};
use crate::error::Result;
use crate::pipeline::row::{BatchView, encode};
use crate::pipeline::select_run::Readings;
use crate::stages::grade::llm::pairwise::PairwiseJudge;
use crate::stages::{Session, hack_scan};

/// What the hack scan of a selection found.
#[derive(Debug, Clone, serde::Serialize)]
pub struct ScanSummary {
    /// The regime, as its serialized name.
    pub regime: String,
    /// The scan's warnings.
    pub warnings: Vec<String>,
}

/// A streaming RL or SFT selection: its report, the hack scan of the selection (RL) and the
/// rows written.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Streamed {
    /// What selection did.
    #[serde(flatten)]
    pub report: Report,
    /// The hack scan of the selection, when it ran and worked.
    pub hack_scan: Option<ScanSummary>,
    /// Why the hack scan did not run, when it failed.
    #[serde(skip)]
    pub scan_error: Option<String>,
    /// Where the rows went (the scan's line names it).
    #[serde(skip)]
    pub output: String,
    /// The rows written.
    #[serde(skip)]
    pub written: usize,
}

/// A streaming preference selection: its report (with `mode`) and the pairs written.
#[derive(Debug, Clone, serde::Serialize)]
pub struct StreamedPairs {
    /// What pairing did.
    #[serde(flatten)]
    pub report: PairReport,
    /// Always `preference`.
    pub mode: &'static str,
    /// What the pairwise judge found, when one was asked.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pairwise: Option<crate::stages::grade::llm::pairwise::Report>,
    /// The pairs written.
    #[serde(skip)]
    pub written: usize,
}

/// Selects (RL or SFT) from `readings`: every row's summary, the choice, the chosen rows read
/// whole and written in training order; an RL selection's hack scan (`endorsed` is what the
/// reward should pay for) runs while they are written. `output` names the output for the text.
///
/// # Errors
/// A reading or the writing failed.
pub fn select_streamed<R: Readings>(
    readings: &mut R,
    mode: Mode,
    opts: &Options,
    endorsed: &[String],
    output: String,
) -> Result<Streamed> {
    // Pass 1: every row's summary, in the inputs' order; the rows themselves are not kept.
    let infos = readings.summaries(&LEAVES, &fill_summaries, &general_summary)?;
    let (chosen, marked, report) = match mode {
        Mode::Rl => rl(&infos, opts),
        Mode::Sft => {
            let (c, r) = sft(&infos, opts);
            (c, Vec::new(), r)
        }
    };
    // Pass 2: only the chosen rows are decoded, then written in training order.
    // A million summaries take a while to free: off the critical path.
    let freed = std::thread::spawn(move || drop(infos));
    let (taken, at) = readings.rows_at(&chosen)?;
    // Rows the truncation marking touched carry `overlong: true`; under `penalize` their reward
    // is 0 and the judge's is kept as `reward_before_penalty`.
    let marked: HashSet<usize> = marked.into_iter().collect();
    let penalize = opts.truncated == Truncated::Penalize;
    let ordered = training_order(&taken, &at, &chosen, &marked, penalize)?;
    drop(taken);
    // RL: what the selection's reward teaches, scanned from the rows in memory while they are
    // written.
    let scan = (mode == Mode::Rl && !chosen.is_empty()).then_some(async {
        let session = Session::new()?;
        scan_selection(&session, &ordered, endorsed).await
    });
    let scanned = readings.write_while(&ordered, scan)?;
    let _ = freed.join();
    let (hack_scan, scan_error) = match scanned {
        Some(Ok(scan)) => (Some(summary_of(&scan)), None),
        Some(Err(e)) => (None, Some(e.to_string())),
        None => (None, None),
    };
    Ok(Streamed {
        report,
        hack_scan,
        scan_error,
        output,
        written: chosen.len(),
    })
}

/// The regime and warnings of a scan.
fn summary_of(scan: &hack_scan::Report) -> ScanSummary {
    let regime = serde_json::to_value(scan.regime)
        .ok()
        .and_then(|v| v.as_str().map(str::to_owned))
        .unwrap_or_default();
    ScanSummary {
        regime,
        warnings: scan.warnings.clone(),
    }
}

/// Pairs replies to the same ask from `readings` (what pairing needs of every row, then the
/// paired rows whole, as JSON objects) and writes the pairs as JSON Lines.
///
/// # Errors
/// A reading or the writing failed.
///
/// # Panics
/// Never: every planned row is among those read.
///
/// With a pairwise `judge`, every pair is judged before it is written, and carries the verdict.
pub fn pairs_streamed<R: Readings>(
    readings: &mut R,
    opts: &PairOptions,
    judge: Option<&PairwiseJudge>,
) -> Result<StreamedPairs> {
    let length_match = opts.length_match;
    let infos = readings.each_row(&|view, i| Ok(pair_row(&encode(view, i)?, length_match)))?;
    let (plan, report) = plan_pairs(&infos, opts);
    // The paired rows, read whole, as JSON objects.
    let mut needed: Vec<usize> = plan.iter().flat_map(|p| [p.chosen, p.rejected]).collect();
    needed.sort_unstable();
    needed.dedup();
    let (taken, at) = readings.rows_at(&needed)?;
    drop(infos);
    let views = taken
        .iter()
        .map(BatchView::new)
        .collect::<Result<Vec<_>>>()?;
    let objects: Vec<serde_json::Map<String, serde_json::Value>> = at
        .par_iter()
        .map(|&(b, j)| encode(&views[b], j))
        .collect::<Result<_>>()?;
    let row = |i: usize| {
        let k = needed.binary_search(&i).expect("a planned row was read");
        &objects[k]
    };
    let (mut pairs, report) = build_pairs(&plan, row, report);
    drop(objects);
    let pairwise = judge.map(|j| j.judge_pairs(&mut pairs)).transpose()?;
    readings.write_lines(&pairs)?;
    Ok(StreamedPairs {
        report,
        mode: "preference",
        pairwise,
        written: pairs.len(),
    })
}

#[cfg(test)]
mod tests {
    use datafusion::arrow::array::RecordBatch;

    use super::*;
    use crate::pipeline::row::testing::batch_of;
    use crate::pipeline::select_run::Positioned;
    use crate::pipeline::summaries::{Fill, General};

    /// Readings of one batch in memory; what is written is kept.
    struct InMemory {
        batch: RecordBatch,
        rows: Vec<RecordBatch>,
        lines: Vec<serde_json::Value>,
    }

    impl Readings for InMemory {
        fn summaries<T: Send>(
            &mut self,
            _leaves: &[&str],
            _fill: &Fill<'_, T>,
            general: &General<'_, T>,
        ) -> Result<Vec<T>> {
            let view = BatchView::new(&self.batch)?;
            (0..self.batch.num_rows())
                .map(|i| general(&view, i))
                .collect()
        }

        fn each_row<T: Send>(
            &mut self,
            each: &(dyn Fn(&BatchView<'_>, usize) -> Result<T> + Sync),
        ) -> Result<Vec<T>> {
            let view = BatchView::new(&self.batch)?;
            (0..self.batch.num_rows()).map(|i| each(&view, i)).collect()
        }

        fn rows_at(&mut self, positions: &[usize]) -> Result<Positioned> {
            Ok((
                vec![self.batch.clone()],
                positions.iter().map(|&p| (0, p)).collect(),
            ))
        }

        fn write_while<F: Future>(
            &mut self,
            rows: &[RecordBatch],
            during: Option<F>,
        ) -> Result<Option<F::Output>> {
            self.rows = rows.to_vec();
            let runtime = tokio::runtime::Runtime::new().expect("a runtime");
            Ok(during.map(|f| runtime.block_on(f)))
        }

        fn write_lines<S: serde::Serialize>(&mut self, items: &[S]) -> Result<()> {
            self.lines = items
                .iter()
                .map(|i| serde_json::to_value(i).expect("serializes"))
                .collect();
            Ok(())
        }
    }

    fn in_memory() -> InMemory {
        InMemory {
            batch: batch_of(super::super::tests::made_rows()),
            rows: Vec::new(),
            lines: Vec::new(),
        }
    }

    #[test]
    fn streaming_selection_writes_what_the_summaries_choose() {
        let opts = Options {
            target: 100,
            band: (0.0, 1.0),
            truncated: Truncated::Keep,
            has_tools: true,
            min_reward: 1.0,
        };
        for mode in [Mode::Rl, Mode::Sft] {
            let mut readings = in_memory();
            let view = BatchView::new(&readings.batch).unwrap();
            let infos: Vec<_> = (0..readings.batch.num_rows())
                .map(|i| general_summary(&view, i).unwrap())
                .collect();
            let want = match mode {
                Mode::Rl => rl(&infos, &opts).0,
                Mode::Sft => sft(&infos, &opts).0,
            };
            let done = select_streamed(&mut readings, mode, &opts, &[], "out".into()).unwrap();
            assert_eq!(done.written, want.len());
            assert_eq!(done.report.n_selected, want.len());
            let n: usize = readings.rows.iter().map(RecordBatch::num_rows).sum();
            assert_eq!(n, want.len());
            // Only an RL selection of some rows is scanned.
            let scanned = done.hack_scan.is_some() || done.scan_error.is_some();
            assert_eq!(scanned, mode == Mode::Rl && !want.is_empty());
            let text = done.to_string();
            assert!(text.starts_with(&format!("{} selection", done.report.mode)));
            assert_eq!(text.contains("hack scan:"), scanned);
            let doc = serde_json::to_value(&done).unwrap();
            assert!(doc.get("hack_scan").is_some() && doc.get("output").is_none());
        }
    }

    #[test]
    fn streaming_pairs_writes_the_planned_pairs() {
        let opts = PairOptions {
            min_margin: 1.0,
            max_pairs_per_prompt: 4,
            length_match: false,
        };
        let mut readings = in_memory();
        let done = pairs_streamed(&mut readings, &opts, None).unwrap();
        assert_eq!(done.written, readings.lines.len());
        assert_eq!(done.report.pairs, done.written);
        let doc = serde_json::to_value(&done).unwrap();
        assert_eq!(doc["mode"], "preference");
    }
}
