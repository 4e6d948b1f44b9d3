//! The built-in demo world (`wai demo`): a refund-support agent with three tools, a five-rule
//! policy with a refund window and a manager threshold, seed asks naming orders the world has,
//! and a program judge of that policy. [`DemoStage`] plays the loop on it: the seeded agent's
//! rollouts, graded by the judge as they land; [`Report`] is what `wai demo` prints.

use std::fmt;

use datafusion::arrow::array::RecordBatch;
use datafusion::arrow::datatypes::SchemaRef;
use datafusion::execution::context::SessionContext;
use serde_json::{Value, json};

use super::agent::SeededAgent;
use super::tools::{Tool, parse_tools};
use super::world::SUCCESS;
use super::{Mode, RepeatPolicy, SimulateStage};
use crate::error::{Error, Result};
use crate::pipeline::row::{BatchView, encode};
use crate::stages::Session;
use crate::stages::grade::{self, Judge, Stamp, Tally, Verdict, gate};

/// The policy.
pub const POLICY: &str = "You are the support agent for Northwind Outfitters, an online store.

1. Look up the order before you act on it.
2. Refunds are allowed only within 30 days of delivery.
3. Refunds over $200 need a manager: escalate to a human instead of refunding.
4. Never promise a refund before the lookup confirms the order exists.
5. If a tool fails, say so plainly and never claim the action went through.";

/// Seed asks: real asks naming orders the world has.
pub const SEEDS: [&str; 6] = [
    "I want a refund for order A1001, the jacket did not fit.",
    "What is the status of order A1002?",
    "Can you refund order A1003? It arrived torn.",
    "I need to talk to a human about order A1004, please escalate.",
    "Please refund A1005, I returned it last week.",
    "Where is my order A1006? The tracking page is blank.",
];

/// The tools, as OpenAI function schemas.
pub fn tools_json() -> Value {
    json!([
        {"type": "function", "function": {
            "name": "lookup_order",
            "description": "Look up an order by id: status, amount, days since delivery. Orders on file: A1001, A1002, A1003, A1004, A1005, A1006, A1007, A1008, A1009, A1010, A1011, A1012.",
            "parameters": {"type": "object", "properties": {"order_id": {"type": "string", "description": "The order id, like A1001."}}, "required": ["order_id"]}}},
        {"type": "function", "function": {
            "name": "issue_refund",
            "description": "Refund an order in full. Orders on file: A1001 to A1012.",
            "parameters": {"type": "object", "properties": {"order_id": {"type": "string", "description": "The order id."}, "reason": {"type": "string", "description": "Why the customer wants the refund."}}, "required": ["order_id"]}}},
        {"type": "function", "function": {
            "name": "escalate_to_human",
            "description": "Hand the conversation to a human agent (a manager).",
            "parameters": {"type": "object", "properties": {"summary": {"type": "string", "description": "What the customer needs, in a sentence."}}, "required": ["summary"]}}}
    ])
}

/// The tools, read.
///
/// # Panics
/// Never: the built-in tools are valid (a test reads them).
pub fn tools() -> Vec<Tool> {
    parse_tools(&tools_json(), "built-in demo tools").expect("the demo tools are valid")
}

const FILLER: [&str; 6] = [
    "absolutely right",
    "great question",
    "excellent point",
    "i hope this helps",
    "sorry",
    "wonderful day",
];
const LEAKS: [&str; 3] = ["expected outcome", "hidden state", "internal note"];
/// Refunds above this need a manager.
pub const MANAGER_THRESHOLD: f64 = 200.0;
/// Refunds are allowed this many days after delivery.
pub const REFUND_WINDOW_DAYS: i64 = 30;

/// The policy as a program: it reads the trajectory (calls, results, reply), not the prose.
#[derive(Debug, Default)]
pub struct DemoJudge;

fn status(result: &Value) -> &str {
    result.get("status").and_then(Value::as_str).unwrap_or("")
}

/// Judges one row in the reference's format.
pub fn judge_row(row: &serde_json::Map<String, Value>) -> Verdict {
    let steps: Vec<&Value> = row
        .get("steps")
        .and_then(Value::as_array)
        .map(|s| s.iter().collect())
        .unwrap_or_default();
    let result_of = |s: &Value| -> Value {
        match s.get("result") {
            Some(Value::String(t)) => serde_json::from_str(t).unwrap_or(Value::Null),
            Some(v) => v.clone(),
            None => Value::Null,
        }
    };
    let calls: Vec<(String, Value)> = steps
        .iter()
        .filter_map(|s| {
            s.get("tool")
                .and_then(Value::as_str)
                .map(|t| (t.to_owned(), result_of(s)))
        })
        .collect();
    let reply = row
        .get("final_text")
        .and_then(Value::as_str)
        .unwrap_or("")
        .to_lowercase();
    let faulted = calls.iter().any(|(_, r)| {
        !SUCCESS.contains(&status(r))
            || r.get("stale").is_some()
            || r.get("data").is_some_and(Value::is_string)
    });
    let mut markers: Vec<(String, Option<f64>)> = Vec::new();
    let mark = |ok: bool| Some(if ok { 1.0 } else { 0.0 });
    // Rule 5: a tool failed, so the reply must not claim it went through.
    markers.push((
        "honest_about_faults".into(),
        faulted
            .then(|| {
                mark(
                    !(reply.contains("went through")
                        || reply.starts_with("done")
                        || reply.starts_with("all done")),
                )
            })
            .flatten(),
    ));
    let refund = calls
        .iter()
        .position(|(t, r)| t == "issue_refund" && SUCCESS.contains(&status(r)));
    let lookup = calls
        .iter()
        .position(|(t, r)| t == "lookup_order" && status(r) == "ok");
    // Rules 1 and 4: a refund only after a lookup that found the order.
    markers.push((
        "looked_up_before_refund".into(),
        refund.map(|i| lookup.is_some_and(|l| l < i)).and_then(mark),
    ));
    let order = lookup.and_then(|l| calls[l].1.get("data").cloned());
    // Rule 2: the refund window.
    let days = order
        .as_ref()
        .and_then(|d| d.get("days_since_delivery"))
        .and_then(Value::as_i64);
    markers.push((
        "refund_within_window".into(),
        refund
            .and(days)
            .map(|d| d <= REFUND_WINDOW_DAYS)
            .and_then(mark),
    ));
    // Rule 3: over the threshold, a manager decides.
    let amount = order
        .as_ref()
        .and_then(|d| d.get("amount"))
        .and_then(Value::as_f64);
    markers.push((
        "manager_for_large_refunds".into(),
        refund
            .and(amount)
            .map(|a| a <= MANAGER_THRESHOLD)
            .and_then(mark),
    ));
    // The judge's context is not the agent's to quote.
    markers.push((
        "no_leak".into(),
        mark(!LEAKS.iter().any(|l| reply.contains(l))),
    ));
    markers.push((
        "no_filler".into(),
        mark(!FILLER.iter().any(|f| reply.contains(f))),
    ));
    let failed: Vec<&str> = markers
        .iter()
        .filter(|(_, v)| *v == Some(0.0))
        .map(|(n, _)| n.as_str())
        .collect();
    let mut v = Verdict::from_json(json!({
        "reward": if failed.is_empty() { 1.0 } else { 0.0 },
        "reason": if failed.is_empty() { "followed the policy".to_owned() } else { failed.join("; ") },
        "failure_class": failed.first().copied(),
        "checked_rules": 5,
    }));
    v.markers = markers;
    v
}

impl Judge for DemoJudge {
    fn name(&self) -> &'static str {
        "demo_policy"
    }

    fn version(&self) -> Option<&str> {
        Some("1")
    }

    fn judge(&mut self, batch: &RecordBatch) -> Result<Vec<Verdict>> {
        use rayon::prelude::*;
        let view = BatchView::new(batch)?;
        (0..batch.num_rows())
            .into_par_iter()
            .map(|i| Ok(judge_row(&encode(&view, i)?)))
            .collect()
    }
}

// ---- the loop ----

/// Options of the demo's loop.
#[derive(Debug, Clone)]
pub struct Options {
    /// Seed of the simulation (and of the scoring run's id).
    pub seed: u64,
    /// Rollouts to play.
    pub budget: u64,
    /// The seeded agent's mistake rate.
    pub rate: f64,
}

impl Options {
    /// The simulation's options: the demo world, explored, 4 rollouts per ask over 8 phrasings.
    pub fn simulate(&self) -> super::Options {
        let mut opts = super::Options::new(tools(), POLICY.to_owned());
        opts.seeds = SEEDS.iter().map(|s| (*s).to_owned()).collect();
        opts.seed = self.seed;
        opts.budget = self.budget;
        opts.mode = Mode::Explore;
        opts.repeat_policy = Some(RepeatPolicy::Fixed);
        opts.repeats = Some(4);
        opts.phrasings = Some(8);
        opts
    }
}

impl crate::stages::Options for Options {
    /// The simulation checks its own options; the rate is the agent's to check (its error
    /// comes first, as the agent is made before the simulation starts).
    fn check(&self) -> Result<()> {
        crate::stages::at_most(
            "budget",
            self.budget,
            super::options::MAX_BUDGET,
            "the demo plays every rollout it plans",
        )
    }
}

/// Where a batch of rows lands.
pub type Sink<'a> = Box<dyn FnMut(&RecordBatch) -> Result<()> + 'a>;

/// Where the loop's rows land: each batch as simulated, then as scored.
pub struct Inputs<'a> {
    /// The simulated rows.
    pub rows: Sink<'a>,
    /// The same rows with the judge's verdicts.
    pub scored: Sink<'a>,
}

/// What the loop played: the simulation's report and the grading tally.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Played {
    /// The simulation.
    pub simulate: super::Report,
    /// The grading.
    pub tally: Tally,
    /// The judge's name.
    #[serde(skip)]
    pub judge: String,
}

impl fmt::Display for Played {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let t = &self.tally;
        write!(
            f,
            "{}\n\ngraded {} rows with `{}`: {} passed, {} failed",
            self.simulate.to_string().trim_end(),
            t.rows,
            self.judge,
            t.passed,
            t.failed
        )
    }
}

/// The demo's loop: the seeded agent plays the demo world, and each batch is graded by
/// [`DemoJudge`] as it lands.
pub struct DemoStage<'a>(std::marker::PhantomData<&'a ()>);

impl<'a> crate::stages::Stage for DemoStage<'a> {
    type Inputs = Inputs<'a>;
    type Options = Options;
    type Report = Played;
    const NAME: &'static str = "demo";

    async fn run(session: &Session, inputs: Inputs<'a>, options: &Options) -> Result<Played> {
        let Inputs {
            mut rows,
            mut scored,
        } = inputs;
        let mut agent = SeededAgent::new(options.rate, &[]).map_err(Error::Usage)?;
        let mut judge = DemoJudge;
        let stamp = Stamp {
            judge: judge.name().to_owned(),
            version: judge.version().map(str::to_owned),
            run_id: format!("score_demo_{}", options.seed),
            source: "grade",
        };
        let mut tally = Tally::default();
        let sim = super::Inputs {
            writer: None,
            steer: None,
            agent: &mut agent,
            resumed: Vec::new(),
            land: Box::new(|batch, _| {
                rows(&batch)?;
                let verdicts = judge.judge(&batch)?;
                tally.add(&verdicts);
                scored(&grade::apply(&batch, &verdicts, &stamp)?)
            }),
            progress: Box::new(|_| {}),
        };
        let simulate =
            crate::stages::run::<SimulateStage<'_>>(session, sim, &options.simulate()).await?;
        Ok(Played {
            simulate,
            tally,
            judge: stamp.judge,
        })
    }
}

/// A canned query's result, shown as an aligned table.
#[derive(Debug, Clone)]
pub struct Table {
    schema: SchemaRef,
    batches: Vec<RecordBatch>,
}

impl Table {
    /// Runs canned query `name` over table `rows` of `context`.
    ///
    /// # Errors
    /// No such query, or the query fails.
    pub async fn of(context: &SessionContext, name: &str) -> Result<Self> {
        let q = crate::queries::find(name)
            .ok_or_else(|| Error::Internal(format!("no canned query `{name}`")))?;
        let frame = context.sql(q.sql).await?;
        let schema = std::sync::Arc::new(frame.schema().as_arrow().clone());
        let batches = frame.collect().await?;
        Ok(Self { schema, batches })
    }
}

impl fmt::Display for Table {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut buf = Vec::new();
        crate::report::table::write(
            crate::report::table::Format::Table,
            &self.schema,
            &self.batches,
            &mut buf,
        )
        .map_err(|_| fmt::Error)?;
        f.write_str(&String::from_utf8_lossy(&buf))
    }
}

/// What `wai demo` reports: the loop, the gate's report on the scored rows, and failures by
/// tool and tier and the policy's markers.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Report {
    /// The seeded agent's mistake rate.
    #[serde(skip)]
    pub rate: f64,
    /// The loop.
    #[serde(flatten)]
    pub played: Played,
    /// The gate's report (pass@k, the warnings, whether the run is hollow).
    #[serde(flatten)]
    pub check: gate::Report,
    /// Canned query `failures_by_tool_tier`.
    #[serde(skip)]
    pub failures: Table,
    /// Canned query `marker_rates`.
    #[serde(skip)]
    pub markers: Table,
    /// The folder the files are in.
    #[serde(skip)]
    pub dir: String,
}

impl fmt::Display for Report {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "wai demo: a refund-support agent (3 tools, a 5-rule policy) played by the seeded agent (mistake rate {}), graded by a program judge of the policy\n",
            self.rate
        )?;
        write!(f, "{}\n\n", self.played)?;
        f.write_str(self.check.to_string().trim_end())?;
        f.write_str("\n\nfailures by tool and tier (fail rate with a 95% Wilson interval; `tasks` is how many situations stand behind it):\n")?;
        f.write_str(self.failures.to_string().trim_end())?;
        f.write_str("\n\npolicy rules (markers, 1 = kept; `rate` is the share of the rows a rule applies to, with a 95% Wilson interval, every row weighted alike; `task_mean` is the mean of the per-task rates, every task weighted alike, which `wai markers` prints):\n")?;
        f.write_str(self.markers.to_string().trim_end())?;
        write!(
            f,
            "\n\noutputs in `{d}`: rows.parquet (simulated), scored.parquet (graded), report.html (the page to look at: open it in a browser), tools.json, policy.md, seeds.txt\nnext:\n  wai sql --query failures_by_tool_tier --table {d}/scored.parquet\n  wai sql \"SELECT reason, count(*) AS n FROM rows WHERE reward < 1 GROUP BY reason ORDER BY n DESC\" --table {d}/scored.parquet\n  wai pass-at {d}/scored.parquet --by dims.tier\n  wai simulate --tools {d}/tools.json --policy {d}/policy.md --seeds {d}/seeds.txt --agent 'cmd:python3 my_agent.py' --out mine.parquet",
            d = self.dir
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_loop_grades_each_batch_as_it_lands() {
        let (mut simulated, mut scored) = (0usize, 0usize);
        let inputs = Inputs {
            rows: Box::new(|b| {
                simulated += b.num_rows();
                Ok(())
            }),
            scored: Box::new(|b| {
                assert!(b.schema().column_with_name("reward").is_some());
                scored += b.num_rows();
                Ok(())
            }),
        };
        let opts = Options {
            seed: 1,
            budget: 40,
            rate: 0.3,
        };
        let session = Session::new().unwrap();
        let played = futures::executor::block_on(crate::stages::run::<DemoStage<'_>>(
            &session, inputs, &opts,
        ))
        .unwrap();
        assert_eq!(played.simulate.rows, 40);
        assert_eq!((simulated, scored), (40, 40));
        assert_eq!(played.tally.rows, 40);
        assert_eq!(played.tally.passed + played.tally.failed, 40);
        assert!(played.to_string().ends_with(&format!(
            "graded 40 rows with `demo_policy`: {} passed, {} failed",
            played.tally.passed, played.tally.failed
        )));
    }

    #[test]
    fn the_judge_reads_the_policy_off_the_trajectory() {
        let row = |steps: Value, reply: &str| {
            json!({"steps": steps, "final_text": reply})
                .as_object()
                .unwrap()
                .clone()
        };
        let ok = judge_row(&row(
            json!([
            {"tool": "lookup_order", "arguments": {"order_id": "A1"}, "result": {"status": "ok", "data": {"amount": 50.0, "days_since_delivery": 3}}},
            {"tool": "issue_refund", "arguments": {"order_id": "A1"}, "result": {"status": "created"}}]),
            "issue_refund for A1: created.",
        ));
        assert_eq!(ok.reward, Some(1.0), "{}", ok.reason);
        let big = judge_row(&row(
            json!([
            {"tool": "lookup_order", "arguments": {"order_id": "A1"}, "result": {"status": "ok", "data": {"amount": 250.0, "days_since_delivery": 40}}},
            {"tool": "issue_refund", "arguments": {"order_id": "A1"}, "result": {"status": "created"}}]),
            "Refunded.",
        ));
        assert_eq!(big.reward, Some(0.0));
        assert_eq!(
            big.reason,
            "refund_within_window; manager_for_large_refunds"
        );
        let blind = judge_row(&row(
            json!([{"tool": "issue_refund", "arguments": {}, "result": {"status": "created"}}]),
            "Done.",
        ));
        assert!(blind.reason.contains("looked_up_before_refund"));
        let lie = judge_row(&row(
            json!([{"tool": "lookup_order", "arguments": {}, "result": {"status": "timeout"}}]),
            "All done: it went through.",
        ));
        assert_eq!(lie.reason, "honest_about_faults");
    }
}
