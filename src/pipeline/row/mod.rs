//! One rollout row in memory, and its two codecs: JSON object ↔ [`Record`] ↔ Arrow columns.
//!
//! - [`decode`] turns one JSON object (a line of the reference's row format) into a [`Record`]:
//!   typed columns, derived keys, canonical tool-call arguments, and an `extra` object holding
//!   every field a column cannot give back exactly.
//! - [`Builder`] appends records and finishes them into a [`RecordBatch`] of the row schema.
//! - [`encode`] turns a row of a batch back into a JSON object.
//!
//! Losslessness: `encode(decode(x))` has every field of `x` with an equal value (numbers compare
//! as numbers; object keys in `arguments` are sorted). It may add `task_id`, `rollout_id`, and a
//! `prompt` or `tools_used` derived from `messages` or `steps`.

mod build;
mod decode;
mod encode;

pub(crate) use build::map_names;
pub use build::{BATCH_ROWS, Builder};
pub use decode::wide;
pub use decode::{
    AXES, FieldError, canonical_json, content_of, decode, decode_text, decode_text_serde,
    decode_value, derive_dims, derive_eval_run, json_eq, kind, prompt_task_id,
};
pub use encode::{BatchView, NOT_JSON_STAGE, encode, encode_keeping};
pub(crate) use encode::{
    Text, Typed, extra_beside, item_field, item_text, json_at, json_text, score,
};

/// One tool call of an assistant message.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ToolCall {
    /// The call id, when the source had one.
    pub id: Option<String>,
    /// The tool's name.
    pub name: Option<String>,
    /// Canonical JSON text of the arguments.
    pub arguments: Option<String>,
    /// The arguments string as written, for a call in the OpenAI wire shape (`{id, type:
    /// "function", function: {name, arguments}}`); set, the call encodes back in that shape.
    pub arguments_text: Option<String>,
}

/// One conversation message.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Message {
    /// system, user, assistant, tool.
    pub role: Option<String>,
    /// The text.
    pub content: Option<String>,
    /// The tool name on a tool message.
    pub name: Option<String>,
    /// The call a tool message answers.
    pub tool_call_id: Option<String>,
    /// The calls an assistant message makes.
    pub tool_calls: Option<Vec<ToolCall>>,
}

/// One agent step.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Step {
    /// The tool called.
    pub tool: Option<String>,
    /// Canonical JSON text of the arguments.
    pub arguments: Option<String>,
    /// JSON text of the result.
    pub result: Option<String>,
    /// Assistant text.
    pub text: Option<String>,
    /// A user turn.
    pub user: Option<String>,
    /// Cut by the token cap.
    pub truncated: Option<bool>,
    /// Sum of token log-probabilities.
    pub logprob: Option<f64>,
    /// Token count.
    pub n_tokens: Option<i64>,
}

/// One rollout, column by column (see the README's schema table).
#[derive(Debug, Clone, Default, PartialEq)]
#[allow(missing_docs)]
pub struct Record {
    pub task_id: String,
    /// `None` until the reader derives it (it needs the rows seen before).
    pub rollout_id: Option<String>,
    pub rollout_index: Option<i32>,
    pub eval_run: Option<i32>,
    pub prompt: Option<String>,
    pub messages: Option<Vec<Message>>,
    pub steps: Option<Vec<Step>>,
    pub final_text: Option<String>,
    pub tools_used: Option<Vec<String>>,
    pub finish_reason: Option<String>,
    pub reward: Option<f64>,
    pub reason: Option<String>,
    pub judge_name: Option<String>,
    pub judge_status: Option<String>,
    pub markers: Option<Vec<(String, Option<f64>)>>,
    pub gold_reward: Option<f64>,
    pub gold_kind: Option<String>,
    pub dims: Option<Vec<(String, String)>>,
    pub category: Option<String>,
    pub model_version: Option<String>,
    pub policy_version: Option<String>,
    pub writer_model: Option<String>,
    pub user_model: Option<String>,
    pub privileged: Option<String>,
    pub judge_meta: Option<String>,
    pub lineage: Option<String>,
    pub sampling: Option<String>,
    pub extra: Option<String>,
}

/// Test helpers: rows as a batch, as ingest would store them (the shared ones live in
/// [`crate::testing`]).
#[cfg(test)]
pub(crate) mod testing {
    use datafusion::arrow::array::RecordBatch;

    pub(crate) use crate::testing::{ROW_FIXTURES, batch_of, fixture};

    /// `batch` with its text as views, as `Reader::read_leaves` and `Reader::read_views` give
    /// rows to the column paths.
    pub(crate) fn with_text_views(batch: &RecordBatch) -> RecordBatch {
        crate::pipeline::io::conform_to(
            batch,
            "test",
            &crate::pipeline::read::row_schema_with_views(),
        )
        .expect("views")
    }
}
