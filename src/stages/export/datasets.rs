//! A Hugging Face datasets folder of training rows: the Parquet schema its rows share (message
//! and tool lists as lists of JSON texts, free-form fields as JSON text, typed `arrow.json`),
//! each row as that schema holds it, and the dataset card.

use std::sync::Arc;

use datafusion::arrow::datatypes::Schema;
use serde_json::{Value, json};

/// Columns of a datasets folder that hold lists of chat messages or tool schemas: each item is
/// one JSON object, typed `arrow.json` so `datasets` (4.7.0 and later) decodes it into the
/// object it was, keys and all (a struct column would give every message every key seen in the
/// file, as nulls, which chat templates render and trainers train).
const JSON_LISTS: [&str; 6] = [
    "messages",
    "prompt",
    "completion",
    "chosen",
    "rejected",
    "tools",
];

/// Columns of a datasets folder that are numbers.
const FLOATS: [&str; 5] = [
    "reward",
    "reward_mean",
    "reward_std",
    "qwen_reward",
    "logprob",
];
const INTEGERS: [&str; 4] = ["k", "n0", "n1", "n_tokens"];

/// Columns of a datasets folder that are plain text; every other column is free-form (lineage,
/// faults, world state, ...) and holds one JSON value, typed `arrow.json`.
const TEXTS: [&str; 22] = [
    "reason",
    "prompt_text",
    "scenario_id",
    "label_source",
    "failure_class",
    "judge_status",
    "judge_name",
    "policy_version",
    "writer_model",
    "user_model",
    "tier",
    "ask_family",
    "ask",
    "stance",
    "tone",
    "texture",
    "vagueness",
    "phrasing",
    "pressure",
    "length",
    "schema_version",
    "group_id",
];

/// A training row as a datasets folder holds it (see [`JSON_LISTS`], [`TEXTS`]): message and
/// tool lists as lists of JSON texts, numbers as numbers, plain text as text, and every
/// free-form value as its JSON text, so rows of different shapes share one schema and load as
/// they were.
pub fn for_parquet(row: &serde_json::Map<String, Value>) -> serde_json::Map<String, Value> {
    row.iter()
        .map(|(k, v)| {
            let key = k.as_str();
            let v = match v {
                Value::Array(items) if JSON_LISTS.contains(&key) => {
                    Value::Array(items.iter().map(|m| Value::String(m.to_string())).collect())
                }
                Value::Number(n) if FLOATS.contains(&key) => json!(n.as_f64()),
                Value::Number(_) if INTEGERS.contains(&key) => v.clone(),
                Value::Null => Value::Null,
                Value::String(_) if TEXTS.contains(&key) => v.clone(),
                // Free-form values, and a plain-text field that is not text, as JSON text.
                other => Value::String(other.to_string()),
            };
            (k.clone(), v)
        })
        .collect()
}

/// `field` marked as Arrow's canonical JSON extension type (its text is one JSON value).
fn json_typed(field: &datafusion::arrow::datatypes::Field) -> datafusion::arrow::datatypes::Field {
    let mut meta = field.metadata().clone();
    meta.insert("ARROW:extension:name".into(), "arrow.json".into());
    field.clone().with_metadata(meta)
}

/// The datasets folder's schema: the inferred one with the message lists' items and the
/// free-form columns typed `arrow.json`.
pub fn dataset_schema(
    inferred: &datafusion::arrow::datatypes::Schema,
) -> datafusion::arrow::datatypes::Schema {
    use datafusion::arrow::datatypes::{DataType, Field};
    let fields: Vec<Field> = inferred
        .fields()
        .iter()
        .map(|f| {
            let name = f.name().as_str();
            match f.data_type() {
                DataType::List(item) if JSON_LISTS.contains(&name) => {
                    Field::new(name, DataType::List(Arc::new(json_typed(item))), true)
                }
                DataType::Utf8
                    if !TEXTS.contains(&name)
                        && !FLOATS.contains(&name)
                        && !INTEGERS.contains(&name) =>
                {
                    json_typed(f)
                }
                _ => f.as_ref().clone(),
            }
        })
        .collect();
    datafusion::arrow::datatypes::Schema::new(fields)
}

/// The dataset card (`README.md`) of a folder of `shards` shards with `schema`, loaded from
/// `shown` (the folder as the user named it).
pub fn card(schema: &Schema, shards: usize, shown: &std::path::Path) -> String {
    // The features are read from the Parquet schema by `datasets`; the card names the columns
    // and says how to train on them.
    let columns: Vec<String> = schema
        .fields()
        .iter()
        .map(|f| format!("`{}` ({})", f.name(), hf_type(f)))
        .collect();
    let (shape, trainer) = if schema.field_with_name("completion").is_ok() {
        (
            "conversational prompt/completion rows (`prompt` and `completion` are lists of chat messages; the completion is the one assistant turn trained)",
            "`SFTTrainer` trains the completion (its default `completion_only_loss`)",
        )
    } else {
        (
            "conversational rows (`messages` is a list of chat messages)",
            "`SFTTrainer` with `SFTConfig(assistant_only_loss=True)` trains the assistant turns (the chat template must mark them with `{% generation %}`); without it every token trains",
        )
    };
    format!(
        "---\nconfigs:\n- config_name: default\n  data_files:\n  - split: train\n    path: data/train-*\n---\n\n# Training rows exported by wai\n\nTRL {shape}, with their reward and provenance, in {} shard(s). Tool calls are `{{id, type: \"function\", function: {{name, arguments}}}}` with `arguments` as objects, as chat templates render them; `tools` is a list of `{{type: \"function\", function: {{name, description, parameters}}}}` to pass as `apply_chat_template(messages, tools=row[\"tools\"])`.\n\nMessages, tools and the free-form columns are typed JSON (Arrow's `arrow.json`), so each loads as the object it was: `datasets` 4.8.0 or later is needed (older versions refuse the type).\n\nColumns: {}.\n\nLoad with `datasets.load_dataset(\"{}\", split=\"train\")`; {trainer}.\n",
        shards,
        columns.join(", "),
        shown.display()
    )
}

fn hf_type(f: &datafusion::arrow::datatypes::Field) -> String {
    use datafusion::arrow::datatypes::DataType as D;
    let is_json = |f: &datafusion::arrow::datatypes::Field| {
        f.metadata().get("ARROW:extension:name").map(String::as_str) == Some("arrow.json")
    };
    if is_json(f) {
        return "json".into();
    }
    match f.data_type() {
        D::List(item) if is_json(item) => "list of json".into(),
        D::Utf8 | D::LargeUtf8 => "string".into(),
        D::Int64 => "int64".into(),
        D::Float64 => "float64".into(),
        D::Boolean => "bool".into(),
        D::List(_) | D::LargeList(_) => "list".into(),
        D::Struct(_) => "struct".into(),
        other => format!("{other}").to_lowercase(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use datafusion::arrow::datatypes::{DataType, Field};

    #[test]
    fn free_form_values_become_json_text_and_lists_json_items() {
        let row = json!({"messages": [{"role": "user", "content": "hi"}], "reward": 1,
            "k": 3, "reason": "ok", "lineage": {"a": 1}, "tier": 2, "x": null});
        let out = for_parquet(row.as_object().unwrap());
        assert_eq!(
            out["messages"],
            json!([r#"{"role":"user","content":"hi"}"#])
        );
        assert_eq!(out["reward"], json!(1.0));
        assert_eq!(out["k"], json!(3));
        assert_eq!(out["reason"], json!("ok"));
        assert_eq!(out["lineage"], json!(r#"{"a":1}"#));
        assert_eq!(out["tier"], json!("2"));
        assert!(out["x"].is_null());
    }

    #[test]
    fn the_schema_types_json_columns_and_the_card_names_them() {
        let inferred = Schema::new(vec![
            Field::new(
                "messages",
                DataType::List(Arc::new(Field::new("item", DataType::Utf8, true))),
                true,
            ),
            Field::new("reason", DataType::Utf8, true),
            Field::new("lineage", DataType::Utf8, true),
            Field::new("reward", DataType::Float64, true),
        ]);
        let schema = dataset_schema(&inferred);
        let card = card(&schema, 2, std::path::Path::new("ds"));
        assert!(
            card.contains(
                "`messages` (list of json), `reason` (string), `lineage` (json), `reward` (float64)"
            ),
            "{card}"
        );
        assert!(card.contains("in 2 shard(s)") && card.contains("load_dataset(\"ds\""));
    }
}
