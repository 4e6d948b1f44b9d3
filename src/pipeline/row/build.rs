//! [`Record`]s → a [`RecordBatch`] of the row schema.

use std::sync::Arc;

use datafusion::arrow::array::{
    ArrayBuilder, ArrayRef, BooleanBuilder, Float64Builder, Int32Builder, Int64Builder, ListArray,
    ListBuilder, MapBuilder, MapFieldNames, RecordBatch, StringArray, StringBuilder, StructArray,
};
use datafusion::arrow::buffer::{NullBuffer, OffsetBuffer};
use datafusion::arrow::datatypes::Field;

use super::{Message, Record, Step};
use crate::error::{Error, Result};
use crate::schema::{self, row_schema};

/// Rows per record batch.
pub const BATCH_ROWS: usize = 8192;

/// Finishes a string column and leaves the builder sized for the next batch like this one, so
/// batches after the first append without growing (and copying) their buffers.
fn finish_sized(b: &mut StringBuilder) -> StringArray {
    let (items, bytes) = (b.len(), b.values_slice().len());
    let array = b.finish();
    *b = StringBuilder::with_capacity(items, bytes);
    array
}

struct ListShape {
    offsets: Vec<i32>,
}

impl ListShape {
    fn new() -> Self {
        Self { offsets: vec![0] }
    }

    fn push(&mut self, len: Option<usize>) -> Result<()> {
        let last = *self.offsets.last().unwrap_or(&0);
        let len = i32::try_from(len.unwrap_or(0))
            .map_err(|_| Error::Internal("list longer than i32::MAX".into()))?;
        let next = last
            .checked_add(len)
            .ok_or_else(|| Error::Internal("list offsets overflow i32 in one batch".into()))?;
        self.offsets.push(next);
        Ok(())
    }

    fn finish(&mut self, item: Arc<Field>, values: ArrayRef, valid: &[bool]) -> Result<ArrayRef> {
        let offsets = OffsetBuffer::new(std::mem::replace(&mut self.offsets, vec![0]).into());
        let nulls = NullBuffer::from(valid.to_vec());
        Ok(Arc::new(ListArray::try_new(
            item,
            offsets,
            values,
            Some(nulls),
        )?))
    }
}

#[derive(Default)]
struct ToolCalls {
    id: StringBuilder,
    name: StringBuilder,
    arguments: StringBuilder,
    arguments_text: StringBuilder,
}

struct Messages {
    shape: ListShape,
    valid: Vec<bool>,
    role: StringBuilder,
    content: StringBuilder,
    name: StringBuilder,
    tool_call_id: StringBuilder,
    calls_shape: ListShape,
    calls_valid: Vec<bool>,
    calls: ToolCalls,
}

impl Messages {
    fn new() -> Self {
        Self {
            shape: ListShape::new(),
            valid: Vec::new(),
            role: StringBuilder::new(),
            content: StringBuilder::new(),
            name: StringBuilder::new(),
            tool_call_id: StringBuilder::new(),
            calls_shape: ListShape::new(),
            calls_valid: Vec::new(),
            calls: ToolCalls::default(),
        }
    }

    fn push(&mut self, messages: Option<&Vec<Message>>) -> Result<()> {
        self.shape.push(messages.map(Vec::len))?;
        self.valid.push(messages.is_some());
        for m in messages.into_iter().flatten() {
            self.role.append_option(m.role.as_deref());
            self.content.append_option(m.content.as_deref());
            self.name.append_option(m.name.as_deref());
            self.tool_call_id.append_option(m.tool_call_id.as_deref());
            self.calls_shape.push(m.tool_calls.as_ref().map(Vec::len))?;
            self.calls_valid.push(m.tool_calls.is_some());
            for c in m.tool_calls.iter().flatten() {
                self.calls.id.append_option(c.id.as_deref());
                self.calls.name.append_option(c.name.as_deref());
                self.calls.arguments.append_option(c.arguments.as_deref());
                self.calls
                    .arguments_text
                    .append_option(c.arguments_text.as_deref());
            }
        }
        Ok(())
    }

    fn finish(&mut self) -> Result<ArrayRef> {
        let call_fields = schema::tool_call_fields();
        let calls = StructArray::try_new(
            call_fields.clone(),
            vec![
                Arc::new(finish_sized(&mut self.calls.id)) as ArrayRef,
                Arc::new(finish_sized(&mut self.calls.name)),
                Arc::new(finish_sized(&mut self.calls.arguments)),
                Arc::new(finish_sized(&mut self.calls.arguments_text)),
            ],
            None,
        )?;
        let calls_valid = std::mem::take(&mut self.calls_valid);
        let calls = self.calls_shape.finish(
            Arc::new(Field::new_struct("item", call_fields, true)),
            Arc::new(calls),
            &calls_valid,
        )?;
        let fields = schema::message_fields();
        let values = StructArray::try_new(
            fields.clone(),
            vec![
                Arc::new(finish_sized(&mut self.role)) as ArrayRef,
                Arc::new(finish_sized(&mut self.content)),
                Arc::new(finish_sized(&mut self.name)),
                Arc::new(finish_sized(&mut self.tool_call_id)),
                calls,
            ],
            None,
        )?;
        let valid = std::mem::take(&mut self.valid);
        self.shape.finish(
            Arc::new(Field::new_struct("item", fields, true)),
            Arc::new(values),
            &valid,
        )
    }
}

struct Steps {
    shape: ListShape,
    valid: Vec<bool>,
    tool: StringBuilder,
    arguments: StringBuilder,
    result: StringBuilder,
    text: StringBuilder,
    user: StringBuilder,
    truncated: BooleanBuilder,
    logprob: Float64Builder,
    n_tokens: Int64Builder,
}

impl Steps {
    fn new() -> Self {
        Self {
            shape: ListShape::new(),
            valid: Vec::new(),
            tool: StringBuilder::new(),
            arguments: StringBuilder::new(),
            result: StringBuilder::new(),
            text: StringBuilder::new(),
            user: StringBuilder::new(),
            truncated: BooleanBuilder::new(),
            logprob: Float64Builder::new(),
            n_tokens: Int64Builder::new(),
        }
    }

    fn push(&mut self, steps: Option<&Vec<Step>>) -> Result<()> {
        self.shape.push(steps.map(Vec::len))?;
        self.valid.push(steps.is_some());
        for s in steps.into_iter().flatten() {
            self.tool.append_option(s.tool.as_deref());
            self.arguments.append_option(s.arguments.as_deref());
            self.result.append_option(s.result.as_deref());
            self.text.append_option(s.text.as_deref());
            self.user.append_option(s.user.as_deref());
            self.truncated.append_option(s.truncated);
            self.logprob.append_option(s.logprob);
            self.n_tokens.append_option(s.n_tokens);
        }
        Ok(())
    }

    fn finish(&mut self) -> Result<ArrayRef> {
        let fields = schema::step_fields();
        let values = StructArray::try_new(
            fields.clone(),
            vec![
                Arc::new(finish_sized(&mut self.tool)) as ArrayRef,
                Arc::new(finish_sized(&mut self.arguments)),
                Arc::new(finish_sized(&mut self.result)),
                Arc::new(finish_sized(&mut self.text)),
                Arc::new(finish_sized(&mut self.user)),
                Arc::new(self.truncated.finish()),
                Arc::new(self.logprob.finish()),
                Arc::new(self.n_tokens.finish()),
            ],
            None,
        )?;
        let valid = std::mem::take(&mut self.valid);
        self.shape.finish(
            Arc::new(Field::new_struct("item", fields, true)),
            Arc::new(values),
            &valid,
        )
    }
}

pub(crate) fn map_names() -> MapFieldNames {
    MapFieldNames {
        entry: "entries".into(),
        key: "key".into(),
        value: "value".into(),
    }
}

/// Appends [`Record`]s and finishes them into row-schema batches.
pub struct Builder {
    len: usize,
    task_id: StringBuilder,
    rollout_id: StringBuilder,
    rollout_index: Int32Builder,
    eval_run: Int32Builder,
    prompt: StringBuilder,
    messages: Messages,
    steps: Steps,
    final_text: StringBuilder,
    tools_used: ListBuilder<StringBuilder>,
    finish_reason: StringBuilder,
    reward: Float64Builder,
    reason: StringBuilder,
    judge_name: StringBuilder,
    judge_status: StringBuilder,
    markers: MapBuilder<StringBuilder, Float64Builder>,
    gold_reward: Float64Builder,
    gold_kind: StringBuilder,
    dims: MapBuilder<StringBuilder, StringBuilder>,
    category: StringBuilder,
    model_version: StringBuilder,
    policy_version: StringBuilder,
    writer_model: StringBuilder,
    user_model: StringBuilder,
    privileged: StringBuilder,
    judge_meta: StringBuilder,
    lineage: StringBuilder,
    sampling: StringBuilder,
    extra: StringBuilder,
}

impl Default for Builder {
    fn default() -> Self {
        Self::new()
    }
}

impl Builder {
    /// An empty builder.
    pub fn new() -> Self {
        Self {
            len: 0,
            task_id: StringBuilder::new(),
            rollout_id: StringBuilder::new(),
            rollout_index: Int32Builder::new(),
            eval_run: Int32Builder::new(),
            prompt: StringBuilder::new(),
            messages: Messages::new(),
            steps: Steps::new(),
            final_text: StringBuilder::new(),
            tools_used: ListBuilder::new(StringBuilder::new()),
            finish_reason: StringBuilder::new(),
            reward: Float64Builder::new(),
            reason: StringBuilder::new(),
            judge_name: StringBuilder::new(),
            judge_status: StringBuilder::new(),
            markers: MapBuilder::new(
                Some(map_names()),
                StringBuilder::new(),
                Float64Builder::new(),
            ),
            gold_reward: Float64Builder::new(),
            gold_kind: StringBuilder::new(),
            dims: MapBuilder::new(
                Some(map_names()),
                StringBuilder::new(),
                StringBuilder::new(),
            ),
            category: StringBuilder::new(),
            model_version: StringBuilder::new(),
            policy_version: StringBuilder::new(),
            writer_model: StringBuilder::new(),
            user_model: StringBuilder::new(),
            privileged: StringBuilder::new(),
            judge_meta: StringBuilder::new(),
            lineage: StringBuilder::new(),
            sampling: StringBuilder::new(),
            extra: StringBuilder::new(),
        }
    }

    /// Rows appended since the last [`Builder::finish`].
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether no row was appended since the last [`Builder::finish`].
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Appends one record. Its `rollout_id` must be set.
    pub fn push(&mut self, r: &Record) -> Result<()> {
        let rollout_id = r.rollout_id.as_deref().ok_or_else(|| {
            Error::Internal("record appended before its rollout_id was set".into())
        })?;
        self.task_id.append_value(&r.task_id);
        self.rollout_id.append_value(rollout_id);
        self.rollout_index.append_option(r.rollout_index);
        self.eval_run.append_option(r.eval_run);
        self.prompt.append_option(r.prompt.as_deref());
        self.messages.push(r.messages.as_ref())?;
        self.steps.push(r.steps.as_ref())?;
        self.final_text.append_option(r.final_text.as_deref());
        match &r.tools_used {
            Some(tools) => {
                for t in tools {
                    self.tools_used.values().append_value(t);
                }
                self.tools_used.append(true);
            }
            None => self.tools_used.append(false),
        }
        self.finish_reason.append_option(r.finish_reason.as_deref());
        self.reward.append_option(r.reward);
        self.reason.append_option(r.reason.as_deref());
        self.judge_name.append_option(r.judge_name.as_deref());
        self.judge_status.append_option(r.judge_status.as_deref());
        match &r.markers {
            Some(markers) => {
                for (name, value) in markers {
                    self.markers.keys().append_value(name);
                    self.markers.values().append_option(*value);
                }
                self.markers.append(true)?;
            }
            None => self.markers.append(false)?,
        }
        self.gold_reward.append_option(r.gold_reward);
        self.gold_kind.append_option(r.gold_kind.as_deref());
        match &r.dims {
            Some(dims) => {
                for (k, v) in dims {
                    self.dims.keys().append_value(k);
                    self.dims.values().append_value(v);
                }
                self.dims.append(true)?;
            }
            None => self.dims.append(false)?,
        }
        self.category.append_option(r.category.as_deref());
        self.model_version.append_option(r.model_version.as_deref());
        self.policy_version
            .append_option(r.policy_version.as_deref());
        self.writer_model.append_option(r.writer_model.as_deref());
        self.user_model.append_option(r.user_model.as_deref());
        self.privileged.append_option(r.privileged.as_deref());
        self.judge_meta.append_option(r.judge_meta.as_deref());
        self.lineage.append_option(r.lineage.as_deref());
        self.sampling.append_option(r.sampling.as_deref());
        self.extra.append_option(r.extra.as_deref());
        self.len += 1;
        Ok(())
    }

    /// Finishes the rows appended so far into one batch and starts afresh.
    pub fn finish(&mut self) -> Result<RecordBatch> {
        self.len = 0;
        let columns: Vec<ArrayRef> = vec![
            Arc::new(finish_sized(&mut self.task_id)),
            Arc::new(finish_sized(&mut self.rollout_id)),
            Arc::new(self.rollout_index.finish()),
            Arc::new(self.eval_run.finish()),
            Arc::new(finish_sized(&mut self.prompt)),
            self.messages.finish()?,
            self.steps.finish()?,
            Arc::new(finish_sized(&mut self.final_text)),
            Arc::new(self.tools_used.finish()),
            Arc::new(finish_sized(&mut self.finish_reason)),
            Arc::new(self.reward.finish()),
            Arc::new(finish_sized(&mut self.reason)),
            Arc::new(finish_sized(&mut self.judge_name)),
            Arc::new(finish_sized(&mut self.judge_status)),
            Arc::new(self.markers.finish()),
            Arc::new(self.gold_reward.finish()),
            Arc::new(finish_sized(&mut self.gold_kind)),
            Arc::new(self.dims.finish()),
            Arc::new(finish_sized(&mut self.category)),
            Arc::new(finish_sized(&mut self.model_version)),
            Arc::new(finish_sized(&mut self.policy_version)),
            Arc::new(finish_sized(&mut self.writer_model)),
            Arc::new(finish_sized(&mut self.user_model)),
            Arc::new(finish_sized(&mut self.privileged)),
            Arc::new(finish_sized(&mut self.judge_meta)),
            Arc::new(finish_sized(&mut self.lineage)),
            Arc::new(finish_sized(&mut self.sampling)),
            Arc::new(finish_sized(&mut self.extra)),
        ];
        Ok(RecordBatch::try_new(row_schema(), columns)?)
    }
}
