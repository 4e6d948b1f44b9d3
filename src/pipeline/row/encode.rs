//! A row of a row-schema batch → a JSON object (the reference's row format).

use datafusion::arrow::array::{
    Array, AsArray, BooleanArray, Float64Array, Int32Array, Int64Array, ListArray, MapArray,
    PrimitiveArray, RecordBatch, StringArray, StringViewArray, StructArray,
};
use datafusion::arrow::datatypes::{
    ArrowNativeType, ArrowPrimitiveType, Float64Type, Int32Type, Int64Type,
};
use serde_json::{Map, Number, Value};

use crate::error::{Error, Result};
use crate::schema::{col, row_schema};

/// Typed views of a batch's columns, downcast once per batch.
pub struct BatchView<'a> {
    task_id: &'a StringArray,
    rollout_id: &'a StringArray,
    rollout_index: &'a Int32Array,
    prompt: &'a StringArray,
    messages: &'a ListArray,
    steps: &'a ListArray,
    final_text: &'a StringArray,
    tools_used: &'a ListArray,
    reward: &'a Float64Array,
    eval_run: &'a Int32Array,
    dims: &'a MapArray,
    markers: &'a MapArray,
    gold_reward: &'a Float64Array,
    strings: Vec<(&'static str, &'a StringArray)>,
    json: Vec<(&'static str, &'a StringArray)>,
    extra: &'a StringArray,
}

/// Plain text columns written back under their own names, in this order.
const TEXT_COLUMNS: [&str; 10] = [
    col::FINISH_REASON,
    col::REASON,
    col::JUDGE_NAME,
    col::JUDGE_STATUS,
    col::GOLD_KIND,
    col::CATEGORY,
    col::MODEL_VERSION,
    col::POLICY_VERSION,
    col::WRITER_MODEL,
    col::USER_MODEL,
];

/// JSON text columns written back as JSON values.
const JSON_COLUMNS: [&str; 4] = [
    col::PRIVILEGED,
    col::JUDGE_META,
    col::LINEAGE,
    col::SAMPLING,
];

impl<'a> BatchView<'a> {
    /// Checks the batch has the row schema's columns and views them.
    pub fn new(batch: &'a RecordBatch) -> Result<Self> {
        crate::schema::check_columns(
            &batch.schema(),
            &row_schema()
                .fields()
                .iter()
                .map(|f| f.name().as_str())
                .collect::<Vec<_>>(),
            "encode",
        )?;
        let t = Typed::new(batch, "encode");
        let s = |name| t.string(name);
        Ok(Self {
            task_id: s(col::TASK_ID)?,
            rollout_id: s(col::ROLLOUT_ID)?,
            rollout_index: t.number::<Int32Type>(col::ROLLOUT_INDEX)?,
            prompt: s(col::PROMPT)?,
            messages: t.list(col::MESSAGES)?,
            steps: t.list(col::STEPS)?,
            final_text: s(col::FINAL_TEXT)?,
            tools_used: t.list(col::TOOLS_USED)?,
            reward: t.number::<Float64Type>(col::REWARD)?,
            eval_run: t.number::<Int32Type>(col::EVAL_RUN)?,
            dims: t.map(col::DIMS)?,
            markers: t.map(col::MARKERS)?,
            gold_reward: t.number::<Float64Type>(col::GOLD_REWARD)?,
            strings: TEXT_COLUMNS
                .iter()
                .map(|c| Ok((*c, s(c)?)))
                .collect::<Result<_>>()?,
            json: JSON_COLUMNS
                .iter()
                .map(|c| Ok((*c, s(c)?)))
                .collect::<Result<_>>()?,
            extra: s(col::EXTRA)?,
        })
    }
}

/// Typed columns of a row batch, for the stages that read rows straight from their columns: a
/// column that is missing or of another type is an error naming the stage, not a panic.
pub(crate) struct Typed<'a> {
    batch: &'a RecordBatch,
    stage: &'static str,
}

impl<'a> Typed<'a> {
    pub(crate) fn new(batch: &'a RecordBatch, stage: &'static str) -> Self {
        Self { batch, stage }
    }

    fn column(&self, name: &str) -> Result<&'a dyn Array> {
        self.batch
            .column_by_name(name)
            .map(AsRef::as_ref)
            .ok_or_else(|| Error::missing_column(self.stage, name, &self.batch.schema()))
    }

    /// A text column.
    pub(crate) fn string(&self, name: &str) -> Result<&'a StringArray> {
        self.column(name)?
            .as_string_opt::<i32>()
            .ok_or_else(|| Error::Internal(format!("`{name}` is not text")))
    }

    /// A text column of either layout, plain strings or views.
    pub(crate) fn text(&self, name: &str) -> Result<Text<'a>> {
        Text::of(self.column(name)?).ok_or_else(|| Error::Internal(format!("`{name}` is not text")))
    }

    /// A list column.
    pub(crate) fn list(&self, name: &str) -> Result<&'a ListArray> {
        self.column(name)?
            .as_list_opt::<i32>()
            .ok_or_else(|| Error::Internal(format!("`{name}` is not a list")))
    }

    /// A map column.
    pub(crate) fn map(&self, name: &str) -> Result<&'a MapArray> {
        self.column(name)?
            .as_map_opt()
            .ok_or_else(|| Error::Internal(format!("`{name}` is not a map")))
    }

    /// A number column of type `T`.
    pub(crate) fn number<T: ArrowPrimitiveType>(
        &self,
        name: &str,
    ) -> Result<&'a PrimitiveArray<T>> {
        self.column(name)?
            .as_primitive_opt::<T>()
            .ok_or_else(|| Error::Internal(format!("`{name}` is not {}", T::DATA_TYPE)))
    }
}

/// Field `name` of the items of `list` (a list of structs), as `A`.
pub(crate) fn item_field<'b, A: Array + 'static>(list: &'b ListArray, name: &str) -> Result<&'b A> {
    list.values()
        .as_struct_opt()
        .and_then(|s| s.column_by_name(name))
        .and_then(|a| a.as_any().downcast_ref::<A>())
        .ok_or_else(|| {
            Error::Internal(format!(
                "no `{name}` of the expected type in a nested column"
            ))
        })
}

/// Text field `name` of the items of `list` (a list of structs), of either layout.
pub(crate) fn item_text<'b>(list: &'b ListArray, name: &str) -> Result<Text<'b>> {
    list.values()
        .as_struct_opt()
        .and_then(|s| s.column_by_name(name))
        .and_then(|a| Text::of(a.as_ref()))
        .ok_or_else(|| Error::Internal(format!("no text `{name}` in a nested column")))
}

/// A text column in either of Arrow's layouts: plain strings (offsets into one buffer), or views
/// into the decoded pages, as `Reader::read_leaves` and `Reader::read_views` give them (no copy
/// of the text at all).
#[derive(Clone, Copy)]
pub(crate) enum Text<'a> {
    Plain(&'a StringArray),
    View(&'a StringViewArray),
}

impl<'a> Text<'a> {
    /// `a` as text, when it is text.
    pub(crate) fn of(a: &'a dyn Array) -> Option<Self> {
        a.as_string_opt::<i32>()
            .map(Self::Plain)
            .or_else(|| a.as_string_view_opt().map(Self::View))
    }

    /// Row `i` (`None` when null).
    pub(crate) fn get(self, i: usize) -> Option<&'a str> {
        match self {
            Self::Plain(a) => a.is_valid(i).then(|| a.value(i)),
            Self::View(a) => a.is_valid(i).then(|| a.value(i)),
        }
    }

    /// Row `i` is not null.
    pub(crate) fn is_valid(self, i: usize) -> bool {
        match self {
            Self::Plain(a) => a.is_valid(i),
            Self::View(a) => a.is_valid(i),
        }
    }

    /// Row `i`, `""` when null.
    pub(crate) fn value(self, i: usize) -> &'a str {
        self.get(i).unwrap_or("")
    }
}

impl<'a> From<&'a StringArray> for Text<'a> {
    fn from(a: &'a StringArray) -> Self {
        Self::Plain(a)
    }
}

/// Row `i` of a text column (`None` when null).
pub(crate) fn text<'a>(a: impl Into<Text<'a>>, i: usize) -> Option<&'a str> {
    a.into().get(i)
}

/// A score as the reference writes it: an integer when it is one.
pub(crate) fn score(v: f64) -> Value {
    if v.fract() == 0.0 && v.is_finite() && v.abs() < 9.0e15 {
        #[allow(clippy::cast_possible_truncation)]
        Value::Number(Number::from(v as i64))
    } else {
        Number::from_f64(v).map_or(Value::Null, Value::Number)
    }
}

fn float(v: f64) -> Value {
    Number::from_f64(v).map_or(Value::Null, Value::Number)
}

/// The stage of the data error a JSON text column that holds no JSON makes: a reader that knows
/// which file the rows came from names it ([`crate::pipeline::read::Reader`]).
pub const NOT_JSON_STAGE: &str = "decode";

/// A JSON text column `what` whose value is not JSON: the file's fault (wai writes only JSON
/// there, so only a file written by something else holds it), a data error.
fn not_json(what: &str, e: &serde_json::Error) -> Error {
    Error::Input {
        stage: NOT_JSON_STAGE.into(),
        message: format!("the `{what}` column holds text that is not JSON ({e})"),
    }
}

fn parse(text: &str, what: &str) -> Result<Value> {
    serde_json::from_str(text).map_err(|e| not_json(what, &e))
}

/// The JSON of `text`, a value of the JSON text column `what` (named in the error).
pub(crate) fn json_text(text: &str, what: &str) -> Result<Value> {
    parse(text, what)
}

/// The JSON in row `i` of the JSON text column `what` (`None` when null).
pub(crate) fn json_at<'a>(a: impl Into<Text<'a>>, i: usize, what: &str) -> Result<Option<Value>> {
    text(a, i).map(|t| json_text(t, what)).transpose()
}

/// Row `i`'s `extra` fields, for a reader that takes the fields `read` from their own columns;
/// `None` when `extra` is not an object or holds one of `read` (an `extra` field wins over its
/// column, so that column would not say what the row says). No `extra` is an empty map.
pub(crate) fn extra_beside<'a>(
    extra: impl Into<Text<'a>>,
    i: usize,
    read: &[&str],
) -> Result<Option<Map<String, Value>>> {
    match json_at(extra, i, col::EXTRA)? {
        None => Ok(Some(Map::new())),
        Some(Value::Object(m)) if !m.keys().any(|k| read.contains(&k.as_str())) => Ok(Some(m)),
        Some(_) => Ok(None),
    }
}

fn struct_text(s: &StructArray, field: usize, i: usize) -> Option<&str> {
    text(s.column(field).as_string::<i32>(), i)
}

fn encode_messages(list: &ListArray, row: usize) -> Result<Value> {
    let offsets = list.value_offsets();
    let (start, end) = (offsets[row].as_usize(), offsets[row + 1].as_usize());
    let items = list.values().as_struct();
    let calls = items.column(4).as_list::<i32>();
    let call_items = calls.values().as_struct();
    let mut out = Vec::with_capacity(end - start);
    for i in start..end {
        let mut m = Map::new();
        for (f, name) in ["role", "content", "name", "tool_call_id"]
            .iter()
            .enumerate()
        {
            match struct_text(items, f, i) {
                Some(t) => {
                    m.insert((*name).to_owned(), Value::String(t.to_owned()));
                }
                // A message with tool calls and no text: the OpenAI convention.
                None if f == 1 && calls.is_valid(i) => {
                    m.insert("content".into(), Value::Null);
                }
                None => {}
            }
        }
        if calls.is_valid(i) {
            let co = calls.value_offsets();
            let mut cs = Vec::new();
            for c in co[i].as_usize()..co[i + 1].as_usize() {
                let mut call = Map::new();
                if let Some(id) = struct_text(call_items, 0, c) {
                    call.insert("id".into(), Value::String(id.to_owned()));
                }
                let name = struct_text(call_items, 1, c).map(|n| Value::String(n.to_owned()));
                if let Some(text) = struct_text(call_items, 3, c) {
                    // The OpenAI wire shape, its arguments string as written.
                    call.insert("type".into(), Value::String("function".into()));
                    let mut function = Map::new();
                    if let Some(name) = name {
                        function.insert("name".into(), name);
                    }
                    function.insert("arguments".into(), Value::String(text.to_owned()));
                    call.insert("function".into(), Value::Object(function));
                } else {
                    if let Some(name) = name {
                        call.insert("name".into(), name);
                    }
                    if let Some(args) = struct_text(call_items, 2, c) {
                        call.insert(
                            "arguments".into(),
                            parse(args, "messages.tool_calls.arguments")?,
                        );
                    }
                }
                cs.push(Value::Object(call));
            }
            m.insert("tool_calls".into(), Value::Array(cs));
        }
        out.push(Value::Object(m));
    }
    Ok(Value::Array(out))
}

fn encode_steps(list: &ListArray, row: usize) -> Result<Value> {
    let offsets = list.value_offsets();
    let (start, end) = (offsets[row].as_usize(), offsets[row + 1].as_usize());
    let items = list.values().as_struct();
    let truncated: &BooleanArray = items.column(5).as_boolean();
    let logprob: &Float64Array = items.column(6).as_primitive::<Float64Type>();
    let n_tokens: &Int64Array = items.column(7).as_primitive::<Int64Type>();
    let mut out = Vec::with_capacity(end - start);
    for i in start..end {
        let mut s = Map::new();
        if let Some(t) = struct_text(items, 0, i) {
            s.insert("tool".into(), Value::String(t.to_owned()));
        }
        if let Some(t) = struct_text(items, 1, i) {
            s.insert("arguments".into(), parse(t, "steps.arguments")?);
        }
        if let Some(t) = struct_text(items, 2, i) {
            s.insert("result".into(), parse(t, "steps.result")?);
        }
        if let Some(t) = struct_text(items, 3, i) {
            s.insert("text".into(), Value::String(t.to_owned()));
        }
        if let Some(t) = struct_text(items, 4, i) {
            s.insert("user".into(), Value::String(t.to_owned()));
        }
        if truncated.is_valid(i) {
            s.insert("truncated".into(), Value::Bool(truncated.value(i)));
        }
        if logprob.is_valid(i) {
            s.insert("logprob".into(), float(logprob.value(i)));
        }
        if n_tokens.is_valid(i) {
            s.insert("n_tokens".into(), Value::Number(n_tokens.value(i).into()));
        }
        out.push(Value::Object(s));
    }
    Ok(Value::Array(out))
}

/// Encodes row `i` of the viewed batch as a JSON object: identity first, then every non-null
/// column under its own name, then the `extra` fields (which win over a column of the same name,
/// since they hold what the column could not give back exactly). `dims` and `eval_run` are not
/// written when the other fields derive them again (the usual case: their sources are in `extra`).
pub fn encode(v: &BatchView<'_>, i: usize) -> Result<Map<String, Value>> {
    Ok(encode_keeping(v, i)?.0)
}

/// [`encode`], and the `extra` members that hold a number no 64-bit type holds (see
/// [`super::wide`]) as their verbatim JSON text: a writer that writes those texts in place of the
/// members' values gives the row back exactly (the map holds them with such numbers as 0).
pub fn encode_keeping(
    v: &BatchView<'_>,
    i: usize,
) -> Result<(Map<String, Value>, super::wide::Verbatim)> {
    encode_row(v, i).map_err(|e| match e {
        Error::Input { stage, message } if stage == NOT_JSON_STAGE => Error::Input {
            stage,
            message: format!("row `{}`: {message}", v.rollout_id.value(i)),
        },
        other => other,
    })
}

fn encode_row(v: &BatchView<'_>, i: usize) -> Result<(Map<String, Value>, super::wide::Verbatim)> {
    let mut verbatim = Vec::new();
    let mut out = Map::new();
    out.insert(
        col::TASK_ID.into(),
        Value::String(v.task_id.value(i).to_owned()),
    );
    out.insert(
        col::ROLLOUT_ID.into(),
        Value::String(v.rollout_id.value(i).to_owned()),
    );
    if v.rollout_index.is_valid(i) {
        out.insert(
            col::ROLLOUT_INDEX.into(),
            Value::Number(v.rollout_index.value(i).into()),
        );
    }
    if let Some(p) = text(v.prompt, i) {
        out.insert(col::PROMPT.into(), Value::String(p.to_owned()));
    }
    if v.messages.is_valid(i) {
        out.insert(col::MESSAGES.into(), encode_messages(v.messages, i)?);
    }
    if v.steps.is_valid(i) {
        out.insert(col::STEPS.into(), encode_steps(v.steps, i)?);
    }
    if let Some(t) = text(v.final_text, i) {
        out.insert(col::FINAL_TEXT.into(), Value::String(t.to_owned()));
    }
    if v.tools_used.is_valid(i) {
        let tools = v.tools_used.value(i);
        let tools = tools.as_string::<i32>();
        out.insert(
            col::TOOLS_USED.into(),
            Value::Array(
                tools
                    .iter()
                    .map(|t| t.map_or(Value::Null, |t| Value::String(t.into())))
                    .collect(),
            ),
        );
    }
    if v.reward.is_valid(i) {
        out.insert(col::REWARD.into(), score(v.reward.value(i)));
    }
    for &(name, a) in &v.strings {
        if let Some(t) = text(a, i) {
            out.insert(name.into(), Value::String(t.to_owned()));
        }
    }
    if v.markers.is_valid(i) {
        let offsets = v.markers.value_offsets();
        let keys = v.markers.keys().as_string::<i32>();
        let values = v.markers.values().as_primitive::<Float64Type>();
        let mut m = Map::new();
        for j in offsets[i].as_usize()..offsets[i + 1].as_usize() {
            let value = if values.is_valid(j) {
                float(values.value(j))
            } else {
                Value::Null
            };
            m.insert(keys.value(j).to_owned(), value);
        }
        out.insert(col::MARKERS.into(), Value::Object(m));
    }
    if v.gold_reward.is_valid(i) {
        out.insert(col::GOLD_REWARD.into(), score(v.gold_reward.value(i)));
    }
    for &(name, a) in &v.json {
        if let Some(t) = text(a, i) {
            out.insert(name.into(), parse(t, name)?);
        }
    }
    if let Some(t) = text(v.extra, i) {
        let (extra, wide) =
            super::wide::parse_keeping(t.as_bytes()).map_err(|e| not_json(col::EXTRA, &e))?;
        verbatim = wide;
        match extra {
            Value::Object(extra) => {
                for (k, value) in extra {
                    out.insert(k, value);
                }
            }
            _ => {
                return Err(Error::Input {
                    stage: NOT_JSON_STAGE.into(),
                    message: "the `extra` column holds JSON that is not an object".into(),
                });
            }
        }
    }
    // Derived columns are written only when the fields above would not derive them again.
    if v.dims.is_valid(i) {
        let offsets = v.dims.value_offsets();
        let keys = v.dims.keys().as_string::<i32>();
        let values = v.dims.values().as_string::<i32>();
        let dims: Vec<(String, String)> = (offsets[i].as_usize()..offsets[i + 1].as_usize())
            .map(|j| (keys.value(j).to_owned(), values.value(j).to_owned()))
            .collect();
        if super::derive_dims(&out).as_ref() != Some(&dims) {
            let obj = dims
                .into_iter()
                .map(|(k, v)| (k, Value::String(v)))
                .collect();
            out.insert(col::DIMS.into(), Value::Object(obj));
        }
    }
    if v.eval_run.is_valid(i) && v.eval_run.value(i) != super::derive_eval_run(&out) {
        out.insert(
            col::EVAL_RUN.into(),
            Value::Number(v.eval_run.value(i).into()),
        );
    }
    Ok((out, verbatim))
}
