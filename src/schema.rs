//! The row schema (v1): one rollout per row, as one Arrow schema.
//!
//! Every stage reads and writes rows of this shape. Column names are constants in [`col`], so a
//! misspelt column is a compile error rather than a runtime surprise. The README's schema table
//! documents each column; DESIGN.md §4 is the source of truth.
//!
//! JSON text columns (`privileged`, `judge_meta`, `lineage`, `sampling`, `extra`, and the
//! `arguments`/`result` fields of steps and tool calls) hold compact JSON text; SQL reads them with
//! the JSON functions registered in the session (`json_get_str(lineage, 'source')`, ...).

use std::sync::{Arc, LazyLock};

use datafusion::arrow::datatypes::{DataType, Field, Fields, Schema, SchemaRef};

use crate::error::{Error, Result};

/// The version of the row schema this crate reads and writes.
pub const SCHEMA_VERSION: &str = "1";

/// Column names of the row schema.
pub mod col {
    /// The grouping key: `scenario_id`, else `task_id`, else `task_` + a hash of the prompt.
    pub const TASK_ID: &str = "task_id";
    /// Unique per row.
    pub const ROLLOUT_ID: &str = "rollout_id";
    /// Repeat index within the task.
    pub const ROLLOUT_INDEX: &str = "rollout_index";
    /// Replay number for re-runs of one task set.
    pub const EVAL_RUN: &str = "eval_run";
    /// The opening user message.
    pub const PROMPT: &str = "prompt";
    /// The conversation.
    pub const MESSAGES: &str = "messages";
    /// The agent's steps (tool calls, texts, user turns).
    pub const STEPS: &str = "steps";
    /// The agent's last reply.
    pub const FINAL_TEXT: &str = "final_text";
    /// Tool names in call order.
    pub const TOOLS_USED: &str = "tools_used";
    /// stop, length, tool, error.
    pub const FINISH_REASON: &str = "finish_reason";
    /// The verdict: 0/1 or a partial score; null = unjudged.
    pub const REWARD: &str = "reward";
    /// The judge's reason.
    pub const REASON: &str = "reason";
    /// Which judge gave the verdict.
    pub const JUDGE_NAME: &str = "judge_name";
    /// ok, `missing_reward`, `invalid_result`, error, timeout.
    pub const JUDGE_STATUS: &str = "judge_status";
    /// Named outcome markers (1.0 = good, null = does not apply).
    pub const MARKERS: &str = "markers";
    /// A hand label.
    pub const GOLD_REWARD: &str = "gold_reward";
    /// Where the hand label came from.
    pub const GOLD_KIND: &str = "gold_kind";
    /// Scenario dimensions and conversation axes.
    pub const DIMS: &str = "dims";
    /// A slice label.
    pub const CATEGORY: &str = "category";
    /// Provenance: the agent's model.
    pub const MODEL_VERSION: &str = "model_version";
    /// Provenance: model plus system-prompt hash.
    pub const POLICY_VERSION: &str = "policy_version";
    /// Provenance: what wrote the ask.
    pub const WRITER_MODEL: &str = "writer_model";
    /// Provenance: the simulated user.
    pub const USER_MODEL: &str = "user_model";
    /// Teacher-only context (JSON); never exported.
    pub const PRIVILEGED: &str = "privileged";
    /// The judge's extra output (JSON).
    pub const JUDGE_META: &str = "judge_meta";
    /// Free-form provenance record (JSON).
    pub const LINEAGE: &str = "lineage";
    /// Sampling settings (JSON).
    pub const SAMPLING: &str = "sampling";
    /// Every other input field (a JSON object), so nothing is lost.
    pub const EXTRA: &str = "extra";
}

/// Field names inside a `messages` element.
pub mod message {
    /// system, user, assistant, tool.
    pub const ROLE: &str = "role";
    /// The text.
    pub const CONTENT: &str = "content";
    /// The tool's name on tool messages.
    pub const NAME: &str = "name";
    /// The call a tool message answers.
    pub const TOOL_CALL_ID: &str = "tool_call_id";
    /// The calls an assistant message makes.
    pub const TOOL_CALLS: &str = "tool_calls";
}

/// Field names inside a `steps` element.
pub mod step {
    /// The tool called, on tool steps.
    pub const TOOL: &str = "tool";
    /// Canonical JSON text of the call's arguments.
    pub const ARGUMENTS: &str = "arguments";
    /// JSON text of the tool's result.
    pub const RESULT: &str = "result";
    /// Assistant text of the step.
    pub const TEXT: &str = "text";
    /// A user turn.
    pub const USER: &str = "user";
    /// Whether the step was cut by the token cap.
    pub const TRUNCATED: &str = "truncated";
    /// Sum of token log-probabilities.
    pub const LOGPROB: &str = "logprob";
    /// Token count.
    pub const N_TOKENS: &str = "n_tokens";
}

fn utf8(name: &str) -> Field {
    Field::new(name, DataType::Utf8, true)
}

/// The struct fields of one tool call: `{id, name, arguments, arguments_text}`. `arguments` is
/// canonical JSON text; `arguments_text` is set only for a call in the OpenAI wire shape
/// (`{id, type: "function", function: {name, arguments}}`): its arguments string as written.
pub fn tool_call_fields() -> Fields {
    Fields::from(vec![
        utf8("id"),
        utf8("name"),
        utf8("arguments"),
        utf8("arguments_text"),
    ])
}

/// The struct fields of one message.
pub fn message_fields() -> Fields {
    Fields::from(vec![
        utf8(message::ROLE),
        utf8(message::CONTENT),
        utf8(message::NAME),
        utf8(message::TOOL_CALL_ID),
        Field::new(
            message::TOOL_CALLS,
            DataType::List(Arc::new(Field::new_struct(
                "item",
                tool_call_fields(),
                true,
            ))),
            true,
        ),
    ])
}

/// The struct fields of one step.
pub fn step_fields() -> Fields {
    Fields::from(vec![
        utf8(step::TOOL),
        utf8(step::ARGUMENTS),
        utf8(step::RESULT),
        utf8(step::TEXT),
        utf8(step::USER),
        Field::new(step::TRUNCATED, DataType::Boolean, true),
        Field::new(step::LOGPROB, DataType::Float64, true),
        Field::new(step::N_TOKENS, DataType::Int64, true),
    ])
}

/// The entries field of a `Map<Utf8, V>` column. The entry names are `key` and `value`, as
/// DataFusion's map functions (`map_entries`, `map_keys`) and Parquet's map type expect.
pub fn map_entries(value: DataType) -> Arc<Field> {
    Arc::new(Field::new(
        "entries",
        DataType::Struct(Fields::from(vec![
            Field::new("key", DataType::Utf8, false),
            Field::new("value", value, true),
        ])),
        false,
    ))
}

fn list_of_struct(name: &str, fields: Fields) -> Field {
    Field::new(
        name,
        DataType::List(Arc::new(Field::new_struct("item", fields, true))),
        true,
    )
}

static ROW_SCHEMA: LazyLock<SchemaRef> = LazyLock::new(|| {
    Arc::new(Schema::new(vec![
        Field::new(col::TASK_ID, DataType::Utf8, false),
        Field::new(col::ROLLOUT_ID, DataType::Utf8, false),
        Field::new(col::ROLLOUT_INDEX, DataType::Int32, true),
        Field::new(col::EVAL_RUN, DataType::Int32, true),
        utf8(col::PROMPT),
        list_of_struct(col::MESSAGES, message_fields()),
        list_of_struct(col::STEPS, step_fields()),
        utf8(col::FINAL_TEXT),
        Field::new(
            col::TOOLS_USED,
            DataType::List(Arc::new(Field::new("item", DataType::Utf8, true))),
            true,
        ),
        utf8(col::FINISH_REASON),
        Field::new(col::REWARD, DataType::Float64, true),
        utf8(col::REASON),
        utf8(col::JUDGE_NAME),
        utf8(col::JUDGE_STATUS),
        Field::new(
            col::MARKERS,
            DataType::Map(map_entries(DataType::Float64), false),
            true,
        ),
        Field::new(col::GOLD_REWARD, DataType::Float64, true),
        utf8(col::GOLD_KIND),
        Field::new(
            col::DIMS,
            DataType::Map(map_entries(DataType::Utf8), false),
            true,
        ),
        utf8(col::CATEGORY),
        utf8(col::MODEL_VERSION),
        utf8(col::POLICY_VERSION),
        utf8(col::WRITER_MODEL),
        utf8(col::USER_MODEL),
        utf8(col::PRIVILEGED),
        utf8(col::JUDGE_META),
        utf8(col::LINEAGE),
        utf8(col::SAMPLING),
        utf8(col::EXTRA),
    ]))
});

/// The row schema, v1.
pub fn row_schema() -> SchemaRef {
    Arc::clone(&ROW_SCHEMA)
}

/// Checks that `found` has every column `needed` with the row schema's type, and fails with a
/// message that names the missing column and the columns there are.
pub fn check_columns(found: &Schema, needed: &[&str], stage: &str) -> Result<()> {
    let want = row_schema();
    for name in needed {
        let Ok(field) = found.field_with_name(name) else {
            return Err(Error::missing_column(stage, *name, found));
        };
        if let Ok(expected) = want.field_with_name(name)
            && expected.data_type() != field.data_type()
        {
            return Err(Error::Input {
                stage: stage.to_owned(),
                message: format!(
                    "column `{name}` has type {}, expected {}",
                    field.data_type(),
                    expected.data_type()
                ),
            });
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_column_constant_is_in_the_schema() {
        let schema = row_schema();
        for name in [
            col::TASK_ID,
            col::ROLLOUT_ID,
            col::MESSAGES,
            col::STEPS,
            col::MARKERS,
            col::DIMS,
            col::EXTRA,
        ] {
            assert!(schema.field_with_name(name).is_ok(), "{name}");
        }
        assert_eq!(schema.fields().len(), 28);
    }

    #[test]
    fn check_columns_names_what_is_missing() {
        let schema = Schema::new(vec![Field::new("grp", DataType::Utf8, true)]);
        let err = check_columns(&schema, &[col::REWARD], "pass_at").unwrap_err();
        assert_eq!(
            err.to_string(),
            "stage `pass_at`: missing column `reward`; found `grp`"
        );
    }
}
