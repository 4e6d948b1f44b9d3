//! The rows a report page carries for its transcript browser: all of them when they fit, else a
//! seeded sample that leans to failures, each row's long texts cut, with counts of what is not
//! shown.
//!
//! How a large run is sampled: every row falls in one stratum by its verdict (failed, passed,
//! unjudged). A run of at most `max_rows` rows is carried whole. Over it, failures get 60% of the
//! places, passes 30% and unjudged rows 10%; a stratum with fewer rows than its share leaves its
//! places to the others, in proportion to their shares. Within a stratum the rows kept are those with the smallest
//! SHA-256 of `seed|rollout_id`: the same rows for the same seed, whatever the file order,
//! partitioning or thread count. Rows of tasks another section links to (a judge's
//! disagreements) are taken first, two per task.

use std::collections::{BTreeMap, BinaryHeap, HashSet};

use datafusion::arrow::array::{Array, AsArray, RecordBatch};
use datafusion::prelude::{DataFrame, col, lit};
use serde_json::{Map, Value, json};
use sha2::{Digest, Sha256};
use std::fmt::Write as _;

use crate::error::{Error, Result};

/// How rows are chosen and cut.
#[derive(Debug, Clone)]
pub(crate) struct Options {
    /// Rows carried at most.
    pub max_rows: usize,
    /// Characters kept of each text (a prompt, a reply, a tool's arguments or result).
    pub max_chars: usize,
    /// The sampling seed.
    pub seed: u64,
    /// Tasks whose rows are taken first (two per task).
    pub linked_tasks: Vec<String>,
    /// The `dims` keys the page slices on (offered as filters).
    pub slice_keys: Vec<String>,
}

/// The verdict strata, in the order the browser lists them.
const STRATA: [&str; 3] = ["fail", "pass", "unjudged"];
/// Each stratum's share of the places when a run is sampled.
const SHARES: [f64; 3] = [0.6, 0.3, 0.1];
/// Rows of one linked task taken first.
const PER_LINKED_TASK: usize = 2;

fn stratum(reward: Option<f64>) -> usize {
    match reward {
        Some(r) if !r.is_finite() => 2,
        Some(r) if r >= 1.0 => 1,
        Some(_) => 0,
        None => 2,
    }
}

/// The places each stratum gets out of `max` when the strata hold `counts` rows.
pub(crate) fn quotas(counts: [u64; 3], max: usize) -> [usize; 3] {
    let have = counts.map(|c| usize::try_from(c).unwrap_or(usize::MAX));
    if have.iter().sum::<usize>() <= max {
        return have;
    }
    // Water-filling: the places left are shared among the strata not yet full, in proportion to
    // their shares, until every place is given (a remainder goes one by one in stratum order).
    let mut out = [0usize; 3];
    loop {
        let left = max - out.iter().sum::<usize>();
        let open: Vec<usize> = (0..3).filter(|&i| out[i] < have[i]).collect();
        if left == 0 || open.is_empty() {
            return out;
        }
        let weight: f64 = open.iter().map(|&i| SHARES[i]).sum();
        let mut given = 0;
        for &i in &open {
            #[allow(
                clippy::cast_possible_truncation,
                clippy::cast_sign_loss,
                clippy::cast_precision_loss
            )]
            let share = (left as f64 * SHARES[i] / weight).floor() as usize;
            let more = share.min(have[i] - out[i]);
            out[i] += more;
            given += more;
        }
        if given == 0 {
            for &i in &open {
                if out.iter().sum::<usize>() < max && out[i] < have[i] {
                    out[i] += 1;
                }
            }
        }
    }
}

/// A row's sampling key: the first 8 bytes of SHA-256 of `seed|rollout_id`.
fn key(seed: u64, id: &str) -> u64 {
    let mut h = Sha256::new();
    h.update(seed.to_string().as_bytes());
    h.update(b"|");
    h.update(id.as_bytes());
    let d = h.finalize();
    u64::from_be_bytes([d[0], d[1], d[2], d[3], d[4], d[5], d[6], d[7]])
}

/// What the sample holds against the run.
#[derive(Debug, Clone, Default, serde::Serialize, serde::Deserialize)]
pub(crate) struct Counts {
    /// Rows in the run, by stratum (`fail`, `pass`, `unjudged`).
    pub total: BTreeMap<String, u64>,
    /// Rows carried, by stratum.
    pub shown: BTreeMap<String, u64>,
}

/// The transcripts section's data.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub(crate) struct Transcripts {
    /// Rows in the run.
    pub n_rows: u64,
    /// Rows the page carries.
    pub n_shown: u64,
    /// By stratum.
    pub counts: Counts,
    /// How the rows were chosen, in words.
    pub sampling: String,
    /// The `dims` keys offered as filters.
    pub slice_keys: Vec<String>,
    /// Characters kept of each text.
    pub max_chars: usize,
    /// The rows, failures first.
    pub rows: Vec<Value>,
}

/// The chosen rows' ids: a bounded heap per stratum of the smallest keys.
struct Chooser {
    quotas: [usize; 3],
    heaps: [BinaryHeap<(u64, String)>; 3],
}

impl Chooser {
    /// Offers row `id` of stratum `s` with sampling key `k`; a row whose id the heap holds
    /// already (the same key) takes no second place.
    fn offer(&mut self, s: usize, k: u64, id: &str) {
        let heap = &mut self.heaps[s];
        let fits = heap.len() < self.quotas[s];
        if !fits && heap.peek().is_none_or(|(top, _)| k >= *top) {
            return;
        }
        if heap.iter().any(|(held, h)| *held == k && h == id) {
            return;
        }
        if !fits {
            heap.pop();
        }
        heap.push((k, id.to_owned()));
    }
}

fn ids_rewards_tasks(
    batch: &RecordBatch,
) -> Result<(
    &datafusion::arrow::array::StringArray,
    &datafusion::arrow::array::Float64Array,
    &datafusion::arrow::array::StringArray,
)> {
    let bad =
        || Error::Internal("the rows table's id, reward or task column has another type".into());
    Ok((
        batch.column(0).as_string_opt::<i32>().ok_or_else(bad)?,
        batch
            .column(1)
            .as_primitive_opt::<datafusion::arrow::datatypes::Float64Type>()
            .ok_or_else(bad)?,
        batch.column(2).as_string_opt::<i32>().ok_or_else(bad)?,
    ))
}

/// The rows of `rows` the page carries, shaped for the browser.
///
/// # Errors
/// The rows have no `rollout_id` or `task_id`; a query fails.
pub(crate) async fn collect(rows: DataFrame, opts: &Options) -> Result<Transcripts> {
    use datafusion::arrow::datatypes::DataType;
    let present: Vec<String> = rows
        .schema()
        .fields()
        .iter()
        .map(|f| f.name().clone())
        .collect();
    for needed in ["rollout_id", "task_id"] {
        if !present.iter().any(|c| c == needed) {
            return Err(Error::MissingColumn {
                stage: "report".into(),
                column: needed.into(),
                found: present.clone(),
            });
        }
    }
    // The key columns as one type whatever wrote the file (a reward of int64, ids of
    // large strings); a file without rewards is all unjudged.
    let reward = if present.iter().any(|c| c == "reward") {
        datafusion::prelude::cast(col("reward"), DataType::Float64)
    } else {
        datafusion::prelude::cast(
            lit(datafusion::scalar::ScalarValue::Null),
            DataType::Float64,
        )
    };
    let keys = rows
        .clone()
        .select(vec![
            datafusion::prelude::cast(col("rollout_id"), DataType::Utf8).alias("rollout_id"),
            reward.alias("reward"),
            datafusion::prelude::cast(col("task_id"), DataType::Utf8).alias("task_id"),
        ])?
        .collect()
        .await?;
    let mut counts = [0u64; 3];
    for batch in &keys {
        let (_, rewards, _) = ids_rewards_tasks(batch)?;
        for i in 0..batch.num_rows() {
            counts[stratum(reward_at(rewards, i))] += 1;
        }
    }
    let n_rows: u64 = counts.iter().sum();
    // A run that fits is carried whole; a larger one is sampled by id.
    let whole = usize::try_from(n_rows).is_ok_and(|n| n <= opts.max_rows);
    let wanted = if whole {
        Some(rows)
    } else {
        let chosen = choose(&keys, counts, opts)?;
        (!chosen.is_empty())
            .then(|| {
                rows.filter(col("rollout_id").in_list(chosen.iter().map(lit).collect(), false))
            })
            .transpose()?
    };
    drop(keys);
    let batches = match wanted {
        Some(frame) => {
            let columns: Vec<_> = COLUMNS
                .iter()
                .filter(|c| present.iter().any(|p| p == *c))
                .map(|c| col(*c))
                .collect();
            frame.select(columns)?.collect().await?
        }
        None => Vec::new(),
    };
    let mut shaped: Vec<Value> = json_rows(&batches)?
        .iter()
        .map(|row| shape(row, opts.max_chars))
        .collect();
    drop(batches);
    // An order that is a function of the rows alone (not of file or batch order): by stratum,
    // task, repeat and id, then by the whole row for rows that share an id.
    shaped.sort_by_cached_key(|row| (order_key(row), row.to_string()));
    // Rows that share an id (two inputs whose derived ids clash) are told apart by a key the
    // browser links by; a sample holds at most `max_rows` of them.
    if !whole {
        shaped.truncate(opts.max_rows);
    }
    assign_keys(&mut shaped);
    let mut shown = [0u64; 3];
    for row in &shaped {
        shown[stratum(row["reward"].as_f64())] += 1;
    }
    let sampling = if whole {
        "every row of the run".to_owned()
    } else {
        sampling_words(opts)
    };
    let by = |c: [u64; 3]| {
        STRATA
            .iter()
            .zip(c)
            .map(|(s, n)| ((*s).to_owned(), n))
            .collect::<BTreeMap<_, _>>()
    };
    Ok(Transcripts {
        n_rows,
        n_shown: shaped.len() as u64,
        counts: Counts {
            total: by(counts),
            shown: by(shown),
        },
        sampling,
        slice_keys: opts.slice_keys.clone(),
        max_chars: opts.max_chars,
        rows: shaped,
    })
}

/// Gives each row its `key`: its id, or `ID#2`, `ID#3` for later rows that share it.
fn assign_keys(rows: &mut [Value]) {
    let mut seen: std::collections::HashMap<String, usize> = std::collections::HashMap::new();
    for row in rows {
        let id = row["id"].as_str().unwrap_or_default().to_owned();
        let n = seen.entry(id.clone()).or_insert(0);
        *n += 1;
        row["key"] = Value::from(if *n == 1 { id } else { format!("{id}#{n}") });
    }
}

/// How a sampled run's rows were chosen, in words.
fn sampling_words(opts: &Options) -> String {
    format!(
        "a sample seeded with {} that gives failures 60% of the {} places, passes 30% and unjudged rows 10% (a stratum with fewer rows leaves its places to the others){}",
        opts.seed,
        opts.max_rows,
        if opts.linked_tasks.is_empty() {
            String::new()
        } else {
            format!(
                "; rows of the {} tasks other sections link to were taken first",
                opts.linked_tasks.len()
            )
        }
    )
}

/// A row's reward as the strata read it: a null or a value that is not finite (NaN, ±inf, which
/// the page's JSON cannot hold) is no verdict.
fn reward_at(rewards: &datafusion::arrow::array::Float64Array, i: usize) -> Option<f64> {
    (rewards.is_valid(i) && rewards.value(i).is_finite()).then(|| rewards.value(i))
}

/// The ids of the rows to carry when the run is sampled: linked tasks' first, then each
/// stratum's quota of smallest keys. `counts` is the rows per stratum. Rows without an id
/// cannot be fetched and are not chosen; an id that several rows share is chosen once.
fn choose(keys: &[RecordBatch], counts: [u64; 3], opts: &Options) -> Result<Vec<String>> {
    // Rows of linked tasks first: the two with the smallest keys per task.
    let linked: HashSet<&str> = opts.linked_tasks.iter().map(String::as_str).collect();
    let mut per_task: BTreeMap<String, BinaryHeap<(u64, String, usize)>> = BTreeMap::new();
    if !linked.is_empty() {
        for batch in keys {
            let (ids, rewards, tasks) = ids_rewards_tasks(batch)?;
            for i in 0..batch.num_rows() {
                if ids.is_null(i) || tasks.is_null(i) || !linked.contains(tasks.value(i)) {
                    continue;
                }
                let heap = per_task.entry(tasks.value(i).to_owned()).or_default();
                let id = ids.value(i);
                if heap.iter().any(|(_, held, _)| held == id) {
                    continue;
                }
                let s = stratum(reward_at(rewards, i));
                heap.push((key(opts.seed, id), id.to_owned(), s));
                if heap.len() > PER_LINKED_TASK {
                    heap.pop();
                }
            }
        }
    }
    let mut first: HashSet<String> = HashSet::new();
    let mut first_by = [0u64; 3];
    for (_, id, s) in per_task
        .into_values()
        .flat_map(BinaryHeap::into_vec)
        .take(opts.max_rows)
    {
        first_by[s] += 1;
        first.insert(id);
    }
    let rest = [0, 1, 2].map(|s| counts[s].saturating_sub(first_by[s]));
    let quotas = quotas(rest, opts.max_rows - first.len().min(opts.max_rows));
    let mut chooser = Chooser {
        quotas,
        heaps: Default::default(),
    };
    for batch in keys {
        let (ids, rewards, _) = ids_rewards_tasks(batch)?;
        for i in 0..batch.num_rows() {
            if ids.is_null(i) {
                continue;
            }
            let id = ids.value(i);
            if first.contains(id) {
                continue;
            }
            chooser.offer(stratum(reward_at(rewards, i)), key(opts.seed, id), id);
        }
    }
    let mut chosen: Vec<String> = first.into_iter().collect();
    for heap in chooser.heaps {
        chosen.extend(heap.into_vec().into_iter().map(|(_, id)| id));
    }
    chosen.sort();
    chosen.dedup();
    Ok(chosen)
}

/// The columns a row view shows.
const COLUMNS: [&str; 17] = [
    "rollout_id",
    "task_id",
    "rollout_index",
    "prompt",
    "final_text",
    "steps",
    "messages",
    "reward",
    "reason",
    "judge_name",
    "judge_status",
    "markers",
    "dims",
    "extra",
    "lineage",
    "model_version",
    "finish_reason",
];

/// The batches' rows as JSON objects (arrow's JSON writer: maps as objects, nulls left out).
pub(crate) fn json_rows(batches: &[RecordBatch]) -> Result<Vec<Map<String, Value>>> {
    let mut buf = Vec::new();
    {
        let mut w = datafusion::arrow::json::ArrayWriter::new(&mut buf);
        for batch in batches {
            w.write(batch)?;
        }
        w.finish()?;
    }
    if buf.is_empty() {
        return Ok(Vec::new());
    }
    serde_json::from_slice(&buf)
        .map_err(|e| Error::Internal(format!("rows written as JSON do not read back: {e}")))
}

/// Failures first, then unjudged rows, then passes; within, by task and repeat.
fn order_key(row: &Value) -> (usize, String, i64, String) {
    let rank = match stratum(row["reward"].as_f64()) {
        0 => 0,
        2 => 1,
        _ => 2,
    };
    (
        rank,
        row["task"].as_str().unwrap_or_default().to_owned(),
        row["index"].as_i64().unwrap_or(-1),
        row["id"].as_str().unwrap_or_default().to_owned(),
    )
}

/// Cuts texts to a budget, counting what was cut.
struct Cutter {
    max: usize,
    cut: usize,
}

impl Cutter {
    fn text(&mut self, s: &str) -> String {
        // A secret is taken out before the cut, so no prefix of one survives it.
        let s = crate::report::redact::redact(s);
        let n = s.chars().count();
        if n <= self.max {
            return s.into_owned();
        }
        self.cut += n - self.max;
        let mut out: String = s.chars().take(self.max).collect();
        let _ = write!(out, " … ({} more characters)", n - self.max);
        out
    }

    /// A JSON text column's value, pretty-printed when it parses, cut.
    fn json_text(&mut self, s: &str) -> String {
        let pretty = serde_json::from_str::<Value>(s)
            .ok()
            .and_then(|v| serde_json::to_string_pretty(&v).ok())
            .unwrap_or_else(|| s.to_owned());
        self.text(&pretty)
    }
}

fn str_of<'a>(row: &'a Map<String, Value>, key: &str) -> Option<&'a str> {
    row.get(key).and_then(Value::as_str)
}

/// A JSON text column parsed, or `None`.
fn parsed(row: &Map<String, Value>, key: &str) -> Option<Value> {
    str_of(row, key)
        .and_then(|s| serde_json::from_str::<Value>(s).ok())
        .filter(|v| !v.is_null())
}

/// Whether a tool result reports an error, and the fault it names: a `fault` key, or the
/// `status` of an error (the mock world answers a scheduled fault with `{"status": "timeout",
/// "error": ...}`), which [`shape`] keeps only when the row lists it among its injected faults.
fn fault_of(result: &Value) -> (bool, Option<String>) {
    let Some(obj) = result.as_object() else {
        return (false, None);
    };
    let status = obj.get("status").and_then(Value::as_str);
    let error = obj.get("error").is_some_and(|e| !e.is_null()) || status == Some("error");
    let fault = obj
        .get("fault")
        .and_then(Value::as_str)
        .or(status.filter(|s| error && !matches!(*s, "error" | "ok")))
        .map(str::to_owned);
    (error || obj.get("fault").is_some(), fault)
}

/// A tool call as a turn; its result and whether it reports an error come with it.
fn tool_turn(cut: &mut Cutter, tool: &str, args: Option<&str>, result: Option<&str>) -> Value {
    let (error, fault) = result
        .and_then(|r| serde_json::from_str::<Value>(r).ok())
        .as_ref()
        .map_or((false, None), fault_of);
    json!({
        "kind": "tool",
        "tool": tool,
        "args": args.map_or_else(String::new, |a| cut.json_text(a)),
        "result": result.map(|r| cut.json_text(r)),
        "error": error,
        "fault": fault,
    })
}

/// The turns of a row's `steps`: each tool call with its result, the agent's and the person's
/// words, in order.
fn step_turns(steps: &[Value], cut: &mut Cutter, tools: &mut Vec<String>) -> Vec<Value> {
    let mut turns = Vec::new();
    for step in steps {
        let text = |key: &str| {
            step.get(key)
                .and_then(Value::as_str)
                .filter(|t| !t.is_empty())
        };
        if let Some(tool) = text("tool") {
            turns.push(tool_turn(cut, tool, text("arguments"), text("result")));
            if !tools.iter().any(|t| t == tool) {
                tools.push(tool.to_owned());
            }
        }
        if let Some(t) = text("text") {
            turns.push(json!({"kind": "agent", "text": cut.text(t)}));
        }
        if let Some(t) = text("user") {
            turns.push(json!({"kind": "user", "text": cut.text(t)}));
        }
    }
    turns
}

/// The turns of a row with `messages` and no steps: after the opening ask, each assistant
/// message's words and tool calls, each tool message's result put on the call it answers (by
/// `tool_call_id`, else the first call still without one), and the person's later words.
fn message_turns(messages: &[Value], cut: &mut Cutter, tools: &mut Vec<String>) -> Vec<Value> {
    let mut turns: Vec<Value> = Vec::new();
    let mut call_ids: Vec<Option<String>> = Vec::new();
    let mut opened = false;
    for m in messages {
        let field = |key: &str| m.get(key).and_then(Value::as_str).unwrap_or_default();
        let (role, content) = (field("role"), field("content"));
        match role {
            "user" if !opened => opened = true,
            "user" => {
                turns.push(json!({"kind": "user", "text": cut.text(content)}));
                call_ids.push(None);
            }
            "assistant" => {
                if !content.is_empty() {
                    turns.push(json!({"kind": "agent", "text": cut.text(content)}));
                    call_ids.push(None);
                }
                for call in m
                    .get("tool_calls")
                    .and_then(Value::as_array)
                    .into_iter()
                    .flatten()
                {
                    let tool = call.get("name").and_then(Value::as_str).unwrap_or("tool");
                    let args = call.get("arguments").and_then(Value::as_str);
                    turns.push(tool_turn(cut, tool, args, None));
                    call_ids.push(call.get("id").and_then(Value::as_str).map(str::to_owned));
                    if !tools.iter().any(|t| t == tool) {
                        tools.push(tool.to_owned());
                    }
                }
            }
            "tool" => {
                let id = m.get("tool_call_id").and_then(Value::as_str);
                let open_call =
                    |i: &usize| turns[*i]["kind"] == "tool" && turns[*i]["result"].is_null();
                let at = (0..turns.len())
                    .filter(open_call)
                    .find(|i| id.is_some() && call_ids[*i].as_deref() == id)
                    .or_else(|| (0..turns.len()).find(open_call));
                let answered = tool_turn(cut, field("name"), None, Some(content));
                if let Some(i) = at {
                    let args = turns[i]["args"].take();
                    let tool = turns[i]["tool"].take();
                    turns[i] = answered;
                    turns[i]["args"] = args;
                    turns[i]["tool"] = tool;
                } else {
                    turns.push(answered);
                    call_ids.push(None);
                }
            }
            _ => {}
        }
    }
    turns
}

/// One row as the browser reads it (see `docs/commands/report.md`, "The transcript browser").
fn shape(row: &Map<String, Value>, max_chars: usize) -> Value {
    let mut cut = Cutter {
        max: max_chars,
        cut: 0,
    };
    let mut tools = Vec::new();
    let steps = row
        .get("steps")
        .and_then(Value::as_array)
        .filter(|s| !s.is_empty());
    let mut turns = match (steps, row.get("messages").and_then(Value::as_array)) {
        (Some(steps), _) => step_turns(steps, &mut cut, &mut tools),
        (None, Some(messages)) => message_turns(messages, &mut cut, &mut tools),
        (None, None) => Vec::new(),
    };
    let markers = row.get("markers").cloned().unwrap_or(Value::Null);
    let failed_markers: Vec<String> = markers
        .as_object()
        .map(|m| {
            m.iter()
                .filter(|(_, v)| v.as_f64().is_some_and(|x| x < 1.0))
                .map(|(k, _)| k.clone())
                .collect()
        })
        .unwrap_or_default();
    let extra = parsed(row, "extra");
    let faults = extra
        .as_ref()
        .and_then(|e| e.get("faults_injected"))
        .filter(|f| f.as_array().is_some_and(|a| !a.is_empty()) || f.is_object())
        .cloned();
    // A result's status names a fault only when the row says the world injected it.
    let injected: Vec<&str> = faults
        .as_ref()
        .and_then(Value::as_array)
        .map(|a| a.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default();
    for turn in &mut turns {
        let named = turn["fault"]
            .as_str()
            .is_some_and(|f| injected.contains(&f));
        if !named {
            turn["fault"] = Value::Null;
        }
    }
    let final_text = str_of(row, "final_text").map(|s| cut.text(s));
    let prompt = str_of(row, "prompt").map(|s| cut.text(s));
    let reason = str_of(row, "reason").map(|s| cut.text(s));
    json!({
        "id": str_of(row, "rollout_id"),
        "task": str_of(row, "task_id"),
        "index": row.get("rollout_index"),
        "reward": row.get("reward"),
        "status": str_of(row, "judge_status"),
        "judge": str_of(row, "judge_name"),
        "reason": reason,
        "prompt": prompt,
        "final": final_text,
        "turns": turns,
        "tools": tools,
        "markers": markers,
        "failed_markers": failed_markers,
        "dims": row.get("dims").cloned().unwrap_or_else(|| json!({})),
        "faults": faults,
        "lineage": parsed(row, "lineage"),
        "model": str_of(row, "model_version"),
        "finish": str_of(row, "finish_reason"),
        "clipped": cut.cut,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_small_run_is_carried_whole_and_a_large_one_leans_to_failures() {
        assert_eq!(quotas([3, 4, 0], 10), [3, 4, 0]);
        assert_eq!(quotas([1000, 1000, 1000], 100), [60, 30, 10]);
        // A stratum with fewer rows than its share leaves its places to the others, in
        // proportion to their shares.
        assert_eq!(quotas([1170, 2830, 0], 1000), [667, 333, 0]);
        assert_eq!(quotas([5, 1000, 1000], 100), [5, 72, 23]);
        assert_eq!(quotas([5, 20, 1000], 100), [5, 20, 75]);
        assert_eq!(quotas([1000, 0, 0], 100), [100, 0, 0]);
        assert_eq!(quotas([1, 1, 1], 2).iter().sum::<usize>(), 2);
    }

    #[test]
    fn the_sampling_key_is_a_function_of_seed_and_id() {
        assert_eq!(key(0, "a"), key(0, "a"));
        assert_ne!(key(0, "a"), key(1, "a"));
        assert_ne!(key(0, "a"), key(0, "b"));
    }

    #[test]
    fn a_row_is_shaped_with_its_tool_calls_faults_and_cut_texts() {
        let row: Map<String, Value> = serde_json::from_value(json!({
            "rollout_id": "r1", "task_id": "t1", "rollout_index": 2, "prompt": "refund order 12",
            "final_text": "x".repeat(50), "reward": 0.0, "judge_status": "ok", "reason": "no lookup",
            "steps": [
                {"tool": "lookup_order", "arguments": "{\"id\":12}", "result": "{\"status\":\"timeout\",\"error\":\"request timed out\"}"},
                {"tool": "issue_refund", "arguments": "{}", "result": "{\"status\":\"denied\",\"error\":\"no\"}"},
                {"text": "checking"},
                {"user": "hurry"}
            ],
            "markers": {"no_leak": 1.0, "looked_up": 0.0, "manager": null},
            "dims": {"tier": "ordinary"},
            "extra": "{\"faults_injected\":[\"timeout\"]}",
            "lineage": "{\"eval_run\":0}"
        }))
        .unwrap();
        let v = shape(&row, 20);
        assert_eq!(v["id"], "r1");
        assert_eq!(v["turns"][0]["tool"], "lookup_order");
        assert_eq!(v["turns"][0]["fault"], "timeout");
        assert_eq!(v["turns"][0]["error"], true);
        assert!(
            v["turns"][0]["args"]
                .as_str()
                .unwrap()
                .contains("\"id\": 12")
        );
        // An error the row does not list as injected is an error, not a fault.
        assert_eq!(v["turns"][1]["error"], true);
        assert_eq!(v["turns"][1]["fault"], Value::Null);
        assert_eq!(v["turns"][2]["kind"], "agent");
        assert_eq!(v["turns"][3]["kind"], "user");
        assert_eq!(v["tools"], json!(["lookup_order", "issue_refund"]));
        assert_eq!(v["failed_markers"], json!(["looked_up"]));
        assert_eq!(v["faults"], json!(["timeout"]));
        assert_eq!(v["lineage"]["eval_run"], 0);
        assert!(
            v["final"]
                .as_str()
                .unwrap()
                .ends_with("(30 more characters)")
        );
        assert!(v["clipped"].as_u64().unwrap() >= 30);
    }

    #[test]
    fn a_chat_row_without_steps_shows_its_messages() {
        let row: Map<String, Value> = serde_json::from_value(json!({
            "rollout_id": "r", "task_id": "t", "prompt": "hi",
            "messages": [
                {"role": "system", "content": "be nice"},
                {"role": "user", "content": "hi"},
                {"role": "assistant", "content": "", "tool_calls": [{"id": "c1", "name": "search", "arguments": "{\"q\":1}"}]},
                {"role": "tool", "tool_call_id": "c1", "content": "{\"status\":\"error\"}"},
                {"role": "assistant", "content": "done"}
            ]
        }))
        .unwrap();
        let v = shape(&row, 100);
        let kinds: Vec<&str> = v["turns"]
            .as_array()
            .unwrap()
            .iter()
            .map(|t| t["kind"].as_str().unwrap())
            .collect();
        // The tool's answer is put on the call it answers.
        assert_eq!(kinds, ["tool", "agent"]);
        assert_eq!(v["turns"][0]["tool"], "search");
        assert!(v["turns"][0]["args"].as_str().unwrap().contains("\"q\": 1"));
        assert!(v["turns"][0]["result"].as_str().unwrap().contains("error"));
        assert_eq!(v["turns"][0]["error"], true);
    }
}
