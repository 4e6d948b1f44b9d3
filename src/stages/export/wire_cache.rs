//! What an export's column path keeps from the rows it has written (rows of a task sit together
//! and share their privileged context, lineage and often their call arguments).

use serde_json::Value;

use super::arguments::decode_args;
use crate::error::{Error, Result};
use crate::pipeline::row::{Text, json_text};
use crate::stages::leak::NeedleCache;

/// What the last rows gave, for a reader that goes through rows in order (rows of a task sit
/// together and share their privileged context, lineage and often their call arguments).
#[derive(Default)]
pub struct WireCache {
    pub(super) needles: NeedleCache,
    /// The last lineage and sampling texts, parsed and written.
    pub(super) lineage: LastJson,
    pub(super) sampling: LastJson,
    /// Call arguments to their wire string and whether they are an object, from
    /// `arguments_text` (0) and from `arguments` (1); cleared when one grows past
    /// [`WireCache::ARGS`].
    args: [foldhash::HashMap<String, (String, bool)>; 2],
}

impl WireCache {
    const ARGS: usize = 4096;

    /// The wire string of a call's arguments and whether they are an object.
    pub(super) fn args(&mut self, from_text: bool, raw: Option<&str>) -> Result<(String, bool)> {
        let Some(raw) = raw else {
            let v = decode_args(&Value::Null);
            return Ok((v.to_string(), v.is_object()));
        };
        let seen = &mut self.args[usize::from(!from_text)];
        if let Some((wire, object)) = seen.get(raw) {
            return Ok((wire.clone(), *object));
        }
        let v = if from_text {
            decode_args(&Value::String(raw.to_owned()))
        } else {
            decode_args(&json_text(raw, "tool_calls.arguments")?)
        };
        let object = v.is_object();
        let wire = match v {
            Value::String(s) => s,
            other => other.to_string(),
        };
        if seen.len() >= Self::ARGS {
            seen.clear();
        }
        seen.insert(raw.to_owned(), (wire.clone(), object));
        Ok((wire, object))
    }
}

/// A JSON text column's value in the last row read, parsed and written once for a run of rows
/// with the same text (rows of a task share their lineage and sampling): parsing and writing
/// them for each row was 2.5% of an export's instructions.
#[derive(Default)]
pub(super) struct LastJson {
    text: Option<String>,
    pub(super) value: Value,
    /// `value` as JSON (`serde_json`'s bytes, as the row would write it).
    pub(super) written: Vec<u8>,
    /// Lineage only: `source` is `"eval"`, `system_prompt_sha` is set.
    pub(super) eval_sourced: bool,
    pub(super) policy_sha: bool,
}

impl LastJson {
    /// Row `i` of the JSON text column `what` (`None` when null).
    pub(super) fn at(&mut self, a: Text<'_>, i: usize, what: &str) -> Result<Option<&Self>> {
        let Some(t) = a.get(i) else {
            return Ok(None);
        };
        if self.text.as_deref() != Some(t) {
            let value = json_text(t, what)?;
            self.written = serde_json::to_vec(&value)
                .map_err(|e| Error::Internal(format!("writing a row: {e}")))?;
            self.eval_sourced = value.get("source").and_then(Value::as_str) == Some("eval");
            self.policy_sha = value.get("system_prompt_sha").is_some();
            self.value = value;
            self.text = Some(t.to_owned());
        }
        Ok(Some(self))
    }

    /// The value, unless it is JSON `null`.
    pub(super) fn non_null(this: Option<&Self>) -> Option<&Self> {
        this.filter(|j| !j.value.is_null())
    }
}

#[cfg(test)]
mod tests {
    use super::LastJson;
    use crate::pipeline::row::Text;
    use datafusion::arrow::array::{StringArray, StringViewArray};

    #[test]
    fn last_json_follows_the_text_row_by_row() {
        let texts = vec![
            Some(r#"{"source":"eval","system_prompt_sha":"ab"}"#),
            Some(r#"{"source":"eval","system_prompt_sha":"ab"}"#),
            Some(r#"{ "source" : "sim" }"#),
            None,
            Some("null"),
            Some(r#"{"source":"eval","system_prompt_sha":"ab"}"#),
        ];
        let eval = Some((
            r#"{"source":"eval","system_prompt_sha":"ab"}"#.to_owned(),
            true,
            true,
            true,
        ));
        let want = vec![
            eval.clone(),
            eval.clone(),
            // Written as serde_json writes the value, not as the text was.
            Some((r#"{"source":"sim"}"#.to_owned(), false, false, true)),
            None,
            Some(("null".to_owned(), false, false, false)),
            eval,
        ];
        let plain = StringArray::from(texts.clone());
        let views = StringViewArray::from(texts.clone());
        for column in [Text::Plain(&plain), Text::View(&views)] {
            let mut last = LastJson::default();
            let mut seen = Vec::new();
            for i in 0..texts.len() {
                let j = last.at(column, i, "lineage").expect("JSON");
                seen.push(j.map(|j| {
                    (
                        String::from_utf8(j.written.clone()).expect("UTF-8"),
                        j.eval_sourced,
                        j.policy_sha,
                        LastJson::non_null(Some(j)).is_some(),
                    )
                }));
            }
            assert_eq!(seen, want);
            let bad = StringArray::from(vec!["{"]);
            assert!(last.at(Text::Plain(&bad), 0, "lineage").is_err());
        }
    }
}
