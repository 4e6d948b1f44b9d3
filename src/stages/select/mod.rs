//! Select the rows worth training on.
//!
//! - **RL** keeps whole mixed groups. The gates run in the reference's code order, each
//!   reporting what it dropped: privileged leaks, truncation marking, row gates (incomplete
//!   junk, do-nothing, unusable labels; a verified zero is always kept), duplicates within a
//!   prompt, truncated rows, unanimous and collapsed groups, the difficulty band. Then groups are
//!   ordered (bucketed by the fault they met, one ask per distinct pass rate in turn) and taken
//!   whole until the target.
//! - **SFT** keeps passing demonstrations: one per prompt, then one of each distinct behaviour
//!   before any repeat.
//!
//! Selection works on a compact summary of each row ([`RowInfo`]), made from the row in the
//! reference's format; the caller writes the chosen rows.

use std::collections::BTreeMap;

use serde::Serialize;

mod columns;
mod order;
mod pairs;
mod rl;
mod sft;
mod stage;
mod stream;
mod summary;
mod text;

#[cfg(test)]
use columns::row_infos;
pub use columns::{LEAVES, fill_summaries, general_summary};
pub use order::training_order;
pub use pairs::{PairOptions, PairReport, PairRow, Pairing, build_pairs, pair_row, plan_pairs};
pub use rl::rl;
pub use sft::sft;
pub use stage::{Inputs, Mode, SelectStage, Selection, scan_selection};
pub use stream::{ScanSummary, Streamed, StreamedPairs, pairs_streamed, select_streamed};
pub use summary::{RowInfo, row_info};

/// What to do with truncated rows.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Truncated {
    /// Drop them.
    Drop,
    /// Keep them as riders that do not vote.
    Keep,
    /// Keep them with reward 0.
    Penalize,
}

/// Selection settings.
#[derive(Debug, Clone)]
pub struct Options {
    /// Rows wanted.
    pub target: usize,
    /// The difficulty band on per-task pass rate (RL).
    pub band: (f64, f64),
    /// Truncated rows (RL).
    pub truncated: Truncated,
    /// The agent has tools (the do-nothing gate).
    pub has_tools: bool,
    /// Lowest reward of a demonstration (SFT).
    pub min_reward: f64,
}

impl crate::stages::Options for Options {
    fn check(&self) -> crate::Result<()> {
        let (lo, hi) = self.band;
        if !(0.0..=1.0).contains(&lo) || !(0.0..=1.0).contains(&hi) || lo > hi {
            return Err(crate::Error::option(
                "band",
                format!("LO,HI are pass rates with LO <= HI, not {lo},{hi}"),
            ));
        }
        Ok(())
    }
}

/// A leaked row in the report.
#[derive(Debug, Clone, Serialize)]
pub struct Leak {
    /// Its scenario.
    pub scenario_id: String,
    /// Its rollout.
    pub rollout_index: Option<i64>,
    /// The quoted text (80 characters).
    pub needle: String,
}

/// What selection did.
#[derive(Debug, Clone, Serialize)]
pub struct Report {
    /// rl or sft.
    pub mode: &'static str,
    /// Rows read.
    pub n: usize,
    /// Rows dropped for quoting their privileged context.
    pub privileged_leaks_dropped: usize,
    /// The first leaks.
    pub leaks: Vec<Leak>,
    /// Rows dropped by each row gate.
    pub gates: BTreeMap<String, usize>,
    /// Rows after the row gates.
    pub n_after_gates: usize,
    /// Duplicates dropped, and the asks they came from.
    pub duplicates_dropped: usize,
    /// Asks with a duplicate.
    pub duplicate_asks: usize,
    /// Identical trajectories with different rewards (judge noise).
    pub conflicting_rewards: usize,
    /// Truncated rows dropped / kept / penalized.
    pub truncated: BTreeMap<String, usize>,
    /// Groups dropped as unanimous (collapsed ones included).
    pub unanimous_groups_dropped: usize,
    /// Groups that only became unanimous after duplicates and truncation went.
    pub collapsed_groups_dropped: usize,
    /// Tasks dropped by the band: too easy, too hard.
    pub band_dropped: BTreeMap<String, usize>,
    /// The band.
    pub band: (f64, f64),
    /// Groups selected, by the fault their first row met.
    pub fault_kinds: BTreeMap<String, usize>,
    /// Rows selected.
    pub n_selected: usize,
    /// Groups selected.
    pub groups_selected: usize,
    /// SFT: rows that did not pass.
    pub n_not_pass: usize,
    /// SFT: junk among the passes.
    pub n_junk: usize,
    /// SFT: one per prompt.
    pub n_eligible: usize,
    /// SFT: distinct behaviours among the eligible rows, and among the selected.
    pub behaviors: (usize, usize),
    /// SFT: completions per prompt (max, mean, median) and prompts with one.
    pub completions_per_prompt: (usize, f64, f64, usize),
    /// The target.
    pub target: usize,
    /// SFT: the lowest reward of a demonstration.
    pub min_reward: f64,
    /// Selected rows with eval-sourced rewards.
    pub eval_sourced: usize,
    /// What a person should know (an option named by its key in backticks: `` `band` ``, `` `repeats` `` (of the simulation)).
    pub warnings: Vec<String>,
}

fn empty_report(mode: &'static str, n: usize, opts: &Options) -> Report {
    Report {
        min_reward: opts.min_reward,
        mode,
        n,
        privileged_leaks_dropped: 0,
        leaks: Vec::new(),
        gates: BTreeMap::new(),
        n_after_gates: 0,
        duplicates_dropped: 0,
        duplicate_asks: 0,
        conflicting_rewards: 0,
        truncated: BTreeMap::new(),
        unanimous_groups_dropped: 0,
        collapsed_groups_dropped: 0,
        band_dropped: BTreeMap::new(),
        band: opts.band,
        fault_kinds: BTreeMap::new(),
        n_selected: 0,
        groups_selected: 0,
        n_not_pass: 0,
        n_junk: 0,
        n_eligible: 0,
        behaviors: (0, 0),
        completions_per_prompt: (0, 0.0, 0.0, 0),
        target: opts.target,
        eval_sourced: 0,
        warnings: Vec::new(),
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::rl::{Runs, text_hash};
    use super::summary::*;
    use super::*;
    use crate::pipeline::row::testing::{ROW_FIXTURES, batch_of, fixture};
    use crate::stages::simulate::hash::sha256_hex;
    use serde_json::Value;

    /// Rows are put in runs by what they say, in row order, whether their hashes are the texts'
    /// own or all collide (then the texts tell them apart).
    #[test]
    fn runs_hold_the_rows_that_say_the_same_in_row_order() {
        let texts = ["b", "a", "b", "c", "a", "b", "d"];
        let of: Vec<usize> = (0..texts.len()).collect();
        let same = |a: usize, b: usize| texts[a].cmp(texts[b]);
        let runs_of = |runs: &Runs| {
            let mut r: Vec<Vec<usize>> = runs.iter().map(<[usize]>::to_vec).collect();
            r.sort();
            r
        };
        let want = vec![vec![0, 2, 5], vec![1, 4], vec![3], vec![6]];
        let own = Runs::of(&of, |i| text_hash(texts[i], 0), same);
        assert_eq!(runs_of(&own), want);
        let colliding = Runs::of(&of, |_| 7, same);
        assert_eq!(runs_of(&colliding), want);
        // Some collide, some do not.
        let mixed = Runs::of(&of, |i| u64::from(texts[i] > "a"), same);
        assert_eq!(runs_of(&mixed), want);
        // Only the rows asked for.
        let part = Runs::of(&[2, 3, 5], |_| 1, same);
        assert_eq!(runs_of(&part), vec![vec![2, 5], vec![3]]);
        // A run by its number is the run the iterator gives.
        for (r, run) in own.iter().enumerate() {
            assert_eq!(own.run(r), run);
        }
    }

    /// A row without a signature gets the reference's stand-in, `sha256_hex("calls|dozens")`
    /// cut to 12 digits, whatever its calls and length.
    #[test]
    fn stand_in_signatures_are_the_hash_of_calls_and_length() {
        for (tools, dozens) in [
            (vec![], 0),
            (vec!["check_status"], 3),
            (vec!["lookup_order", "issue_refund", "lookup_order"], 12_345),
            (vec!["", "ünïcode"], usize::MAX),
        ] {
            let want = sha256_hex(&format!("{}|{}", tools.join(","), dozens))[..12].to_owned();
            assert_eq!(
                stand_in_signature(&tools, dozens),
                want,
                "{tools:?} {dozens}"
            );
        }
    }

    /// The two readings of `read_summaries` (a few columns of every row, then the rows the
    /// column path leaves over, whole) give every row of every fixture file its general summary.
    fn summaries_read_from_files_equal_the_general_ones() {
        use crate::pipeline::io::{OnBadRow, ParquetSink, Sink};
        use crate::pipeline::source::{Format, Input, Location};
        let dir = tempfile::tempdir().expect("temp dir");
        let mut inputs = Vec::new();
        let mut want = Vec::new();
        let mut general = 0;
        for (k, (name, rows)) in [("made", made_rows())]
            .into_iter()
            .chain(ROW_FIXTURES.into_iter().map(|f| (f, fixture(f))))
            .enumerate()
        {
            let batch = batch_of(rows);
            general += row_infos(&batch).expect("summaries").1;
            want.extend(columns::general_infos(&batch).expect("summaries"));
            let path = dir.path().join(format!("{k}.parquet"));
            // The first file also has a column of its own that cannot hold nulls (as files
            // from other writers may): it cannot be left out, so that file is read whole.
            let batch = if k == 0 {
                use datafusion::arrow::array::{ArrayRef, Int64Array, RecordBatch};
                use datafusion::arrow::datatypes::{DataType, Field, Schema};
                let mut fields: Vec<Field> = batch
                    .schema()
                    .fields()
                    .iter()
                    .map(|f| f.as_ref().clone())
                    .collect();
                fields.push(Field::new("id", DataType::Int64, false));
                let mut columns = batch.columns().to_vec();
                let n = i64::try_from(batch.num_rows()).expect("small");
                columns.push(std::sync::Arc::new(Int64Array::from_iter_values(0..n)) as ArrayRef);
                RecordBatch::try_new(std::sync::Arc::new(Schema::new(fields)), columns)
                    .expect("batch")
            } else {
                batch
            };
            if k % 2 == 0 {
                let mut sink = Box::new(ParquetSink::create(&path, batch.schema()).expect("sink"));
                sink.write(&batch).expect("written");
                sink.finish().expect("finished");
            } else {
                // Row groups of 7 rows, in batches of 3: several groups are summarized at once,
                // on the decoding threads, each batch in its place.
                let props = datafusion::parquet::file::properties::WriterProperties::builder()
                    .set_max_row_group_row_count(Some(7))
                    .build();
                let file = std::fs::File::create(&path).expect("file");
                let mut w = datafusion::parquet::arrow::ArrowWriter::try_new(
                    file,
                    batch.schema(),
                    Some(props),
                )
                .expect("writer");
                for at in (0..batch.num_rows()).step_by(3) {
                    w.write(&batch.slice(at, 3.min(batch.num_rows() - at)))
                        .expect("written");
                }
                w.close().expect("closed");
            }
            inputs.push(Input {
                display: name.to_owned(),
                location: Location::Local(path),
                format: Format::Parquet,
                size: None,
            });
        }
        // Some rows need the second, whole reading.
        assert!(general > 0);
        let runtime = tokio::runtime::Runtime::new().expect("runtime");
        let mut reader = crate::pipeline::read::Reader::new(
            runtime.handle().clone(),
            OnBadRow::Fail,
            Box::new(|_| {}),
        );
        let (got, counts) = crate::pipeline::summaries::read_summaries(
            &mut reader,
            &inputs,
            &LEAVES,
            &fill_summaries,
            &general_summary,
        )
        .expect("read");
        assert_eq!(counts.len(), inputs.len());
        assert_eq!(counts.iter().sum::<usize>(), want.len());
        assert_eq!(got.len(), want.len());
        for (i, (a, b)) in got.iter().zip(&want).enumerate() {
            assert_eq!(a, b, "row {i}");
        }
    }

    /// Rows made to reach every gate the fixtures do not: truncation four ways, harness text,
    /// markup, a long unfinished reply with and without `overlong`, an eval source, a leak in a
    /// middle turn, a planned fault, a bare question back.
    pub(crate) fn made_rows() -> Vec<Value> {
        let long = "word ".repeat(130);
        let msgs = |reply: &str| {
            serde_json::json!([{"role": "user", "content": "Refund A1001 please"},
                {"role": "assistant", "content": "Let me check The Entity Does Not Exist here.", "tool_calls": [{"id": "c1", "name": "lookup", "arguments": {"id": "A1001"}}]},
                {"role": "tool", "content": "{\"status\": \"timeout\"}", "tool_call_id": "c1"},
                {"role": "assistant", "content": reply}])
        };
        let base = |i: usize, reply: &str| {
            serde_json::json!({"task_id": format!("t{}", i % 3), "prompt": "Refund A1001 please", "messages": msgs(reply),
                "steps": [{"tool": "lookup", "arguments": {"id": "A1001"}, "result": {"status": "timeout"}}],
                "final_text": reply, "reward": (i % 2) as f64, "finish_reason": "stop",
                "privileged": {"reference": "the entity does not exist here", "hidden_state": ["x"]}})
        };
        let mut rows = Vec::new();
        for (i, reply) in [
            "Done.",
            &long,
            "see the scene brief",
            "<tool_call>{}</tool_call>",
            "Why?",
            "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa",
            "",
        ]
        .into_iter()
        .enumerate()
        {
            rows.push(base(i, reply));
        }
        let mut r = base(7, &long);
        r["overlong"] = Value::Bool(true);
        rows.push(r);
        let mut r = base(8, "Done.");
        r["finish_reason"] = "length".into();
        rows.push(r);
        let mut r = base(9, "Done.");
        r["reason"] = "Reply was CUT OFF".into();
        r["lineage"] = serde_json::json!({"source": "eval"});
        rows.push(r);
        let mut r = base(10, "Done.");
        r["steps"][0]["truncated"] = Value::Bool(true);
        r["faults"] = serde_json::json!({"lookup": {"mode": "stale"}});
        r["steps"][0]["result"] = serde_json::json!({"status": "ok"});
        r["scenario_id"] = serde_json::json!(42);
        rows.push(r);
        let mut r = base(11, "Done.");
        r["privileged"] = serde_json::json!("not an object");
        r["reward"] = serde_json::json!(0.5);
        r["label_source"] = "gold".into();
        rows.push(r);
        // A thinking block, a call without an id and with string arguments, a tool turn that
        // names no call, a system turn.
        rows.push(serde_json::json!({"task_id": "t0", "prompt": "Where is A1?", "final_text": "<think>plan</think> It shipped.",
            "messages": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Where is A1?"},
                {"role": "assistant", "content": null, "tool_calls": [{"type": "function", "function": {"name": "lookup", "arguments": "{\"id\": \"A1\"}"}}]},
                {"role": "tool", "content": "{\"status\": \"ok\", \"data\": \"shipped on Monday\"}"},
                {"role": "assistant", "content": "<think>plan</think> It shipped."}],
            "reward": 1, "lineage": {"source": "eval", "system_prompt_sha": "abc"}, "tools_used": ["lookup"]}));
        rows
    }

    #[test]
    fn fast_text_helpers_agree_with_their_plain_forms() {
        let plain_repeat = |s: &str| {
            let mut best = 0;
            let mut run = 0;
            let mut prev = None;
            for c in s.chars() {
                run = if Some(c) == prev { run + 1 } else { 1 };
                prev = Some(c);
                best = best.max(run);
            }
            best >= 30
        };
        for s in [
            String::new(),
            "a".repeat(29),
            "a".repeat(30),
            format!("b{}b", "a".repeat(29)),
            format!("{}{}", "x".repeat(17), "y".repeat(30)),
            format!("{}{}z", "x".repeat(14), "y".repeat(31)),
            format!("é{}", "a".repeat(30)),
            " a\tb\x0bc \x0cd\r\n e  ".into(),
            "\u{2003}two\u{a0}words\u{85}".into(),
            // Separators Python splits on but `split_whitespace` does not.
            "\x1ca\x1fb c".into(),
            "   ".into(),
            "x".into(),
            "\x08tab\x0e".into(),
        ] {
            assert_eq!(repeats_30(&s), plain_repeat(&s), "{s:?}");
            assert_eq!(word_count(&s), s.split_whitespace().count(), "{s:?}");
        }
        // Longer texts of every kind of white space, and a separator it does not split on.
        let mut state = 7u64;
        for len in 0..300 {
            let text: String = (0..len)
                .map(|_| {
                    state = state
                        .wrapping_mul(6_364_136_223_846_793_005)
                        .wrapping_add(1);
                    [' ', '\t', '\n', 'a', 'b', '\x0b', '\x0c', '\r', 'c', '\x1c']
                        [(state >> 60) as usize % 10]
                })
                .collect();
            assert_eq!(
                word_count(&text),
                text.split_whitespace().count(),
                "{text:?}"
            );
        }
        // Every ASCII byte is white space exactly when its character is.
        for b in 0..128u8 {
            assert_eq!(white(b), char::from(b).is_whitespace(), "{b:#x}");
        }
        assert_eq!(norm_hash("A  b\tC"), norm_hash("a b c"));
        assert_ne!(norm_hash("a b c"), norm_hash("a bc"));
    }

    #[test]
    fn column_summaries_equal_the_general_ones_on_every_fixture() {
        let mut fast_rows = 0;
        let mut seen = std::collections::BTreeSet::new();
        for (fixture, rows) in [("made", made_rows())]
            .into_iter()
            .chain(ROW_FIXTURES.into_iter().map(|f| (f, fixture(f))))
        {
            let batch = batch_of(rows);
            let (fast, general) = row_infos(&batch).expect("summaries");
            let slow = columns::general_infos(&batch).expect("summaries");
            assert_eq!(fast.len(), slow.len());
            for (i, (a, b)) in fast.iter().zip(&slow).enumerate() {
                assert_eq!(a, b, "{fixture} row {i}");
            }
            fast_rows += batch.num_rows() - general;
            for r in &fast {
                seen.extend(r.junk);
                seen.extend(r.leak.as_ref().map(|_| "leak"));
                seen.extend(r.truncated.then_some("truncated"));
                seen.extend(r.eval_sourced.then_some("eval"));
            }
        }
        // The column path is the one taken, not only the fallback.
        assert!(fast_rows > 400, "{fast_rows} rows took the column path");
        // Every shape a conversation comes in: only the rows whose columns do not say what the
        // row says take the object path.
        let (rows, object_rows) = crate::stages::conversation::shape_rows();
        let batch = batch_of(rows);
        let (fast, general) = row_infos(&batch).expect("summaries");
        assert_eq!(fast, columns::general_infos(&batch).expect("summaries"));
        assert_eq!(general, object_rows);
        summaries_read_from_files_equal_the_general_ones();
        // What the rows reach, so the equality above covers it.
        for what in [
            "leak",
            "truncated",
            "eval",
            "harness text",
            "raw tool markup",
            "long unfinished reply",
            "a character repeated 30 times",
            "empty final reply",
        ] {
            assert!(seen.contains(what), "no row reached {what}: {seen:?}");
        }
    }
}
