//! The judge contract: what a judge may return, and what a row gets from it.
//!
//! A verdict is a `reward` in [0, 1] (or a boolean), a `reason`, optional `markers` (name to a
//! number in [0, 1], null when it does not apply), and any other keys, which go to `judge_meta`.
//! A judge that fails, hangs or returns something else marks its row with a [`Status`] and a
//! reason; the reward stays null, never 0.

use serde_json::{Map, Value};

use crate::pipeline::row::kind;

/// How a row's grading went.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Status {
    /// The judge gave a reward (or said, with a reason, that none applies).
    Ok,
    /// The judge answered without a reward.
    MissingReward,
    /// The judge answered something the contract does not allow.
    InvalidResult,
    /// The judge failed (raised, crashed, exited).
    Error,
    /// The judge took longer than the per-row timeout.
    Timeout,
}

impl Status {
    /// The `judge_status` text.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Ok => "ok",
            Self::MissingReward => "missing_reward",
            Self::InvalidResult => "invalid_result",
            Self::Error => "error",
            Self::Timeout => "timeout",
        }
    }

    /// The status a `judge_status` text names.
    pub fn parse(text: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|s| s.as_str() == text)
    }

    /// Every status, in report order.
    pub const ALL: [Status; 5] = [
        Self::Ok,
        Self::MissingReward,
        Self::InvalidResult,
        Self::Error,
        Self::Timeout,
    ];
}

/// A verdict's record, borrowed ([`Verdict::record`]); its fields in the record's order.
#[derive(Debug, serde::Serialize)]
pub struct Record<'a> {
    reward: Option<f64>,
    reason: &'a str,
    status: &'a str,
    markers: &'a [(String, Option<f64>)],
    meta: &'a Map<String, Value>,
}

/// One row's verdict.
#[derive(Debug, Clone, PartialEq)]
pub struct Verdict {
    /// The reward, null unless the status is ok.
    pub reward: Option<f64>,
    /// Why.
    pub reason: String,
    /// How grading went.
    pub status: Status,
    /// Markers the judge set (merged over the row's own).
    pub markers: Vec<(String, Option<f64>)>,
    /// Everything else the judge said.
    pub meta: Map<String, Value>,
}

impl Verdict {
    /// A passing or failing verdict.
    pub fn ok(reward: f64, reason: impl Into<String>) -> Self {
        Self {
            reward: Some(reward),
            reason: reason.into(),
            status: Status::Ok,
            markers: Vec::new(),
            meta: Map::new(),
        }
    }

    /// A verdict without a reward.
    pub fn failed(status: Status, reason: impl Into<String>) -> Self {
        Self {
            reward: None,
            reason: reason.into(),
            status,
            markers: Vec::new(),
            meta: Map::new(),
        }
    }

    /// Adds a `judge_meta` key.
    #[must_use]
    pub fn with_meta(mut self, key: &str, value: Value) -> Self {
        self.meta.insert(key.to_owned(), value);
        self
    }

    /// Puts what the judge said (`meta`) before the keys this verdict already carries.
    #[must_use]
    fn under(mut self, mut meta: Map<String, Value>) -> Self {
        meta.extend(std::mem::take(&mut self.meta));
        self.meta = meta;
        self
    }

    /// A reward, if it is in [0, 1]; else `invalid_result`, keeping the value in
    /// `judge_meta.reward_out_of_range`.
    pub fn reward(x: f64, reason: impl Into<String>) -> Self {
        if x.is_finite() && (0.0..=1.0).contains(&x) {
            Self::ok(x, reason)
        } else {
            Self::failed(
                Status::InvalidResult,
                format!("reward {x} is outside [0, 1]"),
            )
            .with_meta(
                "reward_out_of_range",
                serde_json::Number::from_f64(x).map_or(Value::Null, Value::Number),
            )
        }
    }

    /// The verdict as a JSON record that [`Verdict::from_record`] reads back exactly (the
    /// verdict log of a resumable grade).
    pub fn to_record(&self) -> Value {
        serde_json::to_value(self.record()).unwrap_or(Value::Null)
    }

    /// The record of [`Verdict::to_record`], borrowed: serialised without a copy of the meta.
    pub fn record(&self) -> Record<'_> {
        Record {
            reward: self.reward,
            reason: &self.reason,
            status: self.status.as_str(),
            markers: &self.markers,
            meta: &self.meta,
        }
    }

    /// Reads a record written by [`Verdict::to_record`]; `None` if it is not one.
    pub fn from_record(value: &Value) -> Option<Self> {
        let reward = match value.get("reward")? {
            Value::Null => None,
            r => Some(r.as_f64()?),
        };
        let markers = value
            .get("markers")?
            .as_array()?
            .iter()
            .map(|m| {
                let name = m.get(0)?.as_str()?.to_owned();
                let x = match m.get(1)? {
                    Value::Null => None,
                    x => Some(x.as_f64()?),
                };
                Some((name, x))
            })
            .collect::<Option<Vec<_>>>()?;
        Some(Self {
            reward,
            reason: value.get("reason")?.as_str()?.to_owned(),
            status: Status::parse(value.get("status")?.as_str()?)?,
            markers,
            meta: value.get("meta")?.as_object()?.clone(),
        })
    }

    /// Reads what a judge returned, by the contract.
    pub fn from_json(value: Value) -> Self {
        match value {
            Value::Bool(b) => Self::ok(f64::from(u8::from(b)), ""),
            Value::Number(n) => Self::reward(n.as_f64().unwrap_or(f64::NAN), ""),
            Value::Object(obj) => from_object(obj),
            other => Self::failed(
                Status::InvalidResult,
                format!(
                    "the judge returned {}, not a verdict object or a number",
                    kind(&other)
                ),
            )
            .with_meta("returned_type", Value::String(kind(&other).into())),
        }
    }
}

/// A marker's value if it is one (a number in [0, 1]); else the verdict that says it is not.
#[allow(
    clippy::result_large_err,
    reason = "the error is the verdict the row gets, not a failure to carry up"
)]
pub fn marker(name: &str, x: f64) -> Result<f64, Verdict> {
    if (0.0..=1.0).contains(&x) {
        Ok(x)
    } else {
        Err(not_a_marker(name, &x.to_string()))
    }
}

fn not_a_marker(name: &str, value: &str) -> Verdict {
    Verdict::failed(
        Status::InvalidResult,
        format!(
            "marker `{name}` is {value}: a marker is a number in [0, 1] (1 the good outcome) or null"
        ),
    )
}

/// Reads a marker value a judge sent: a number, a boolean (1 or 0), or null.
#[allow(
    clippy::result_large_err,
    reason = "the error is the verdict the row gets, not a failure to carry up"
)]
fn json_marker(name: &str, value: &Value) -> Result<Option<f64>, Verdict> {
    match value {
        Value::Null => Ok(None),
        Value::Bool(b) => Ok(Some(f64::from(u8::from(*b)))),
        Value::Number(n) => marker(name, n.as_f64().unwrap_or(f64::NAN)).map(Some),
        other => Err(not_a_marker(name, &other.to_string())),
    }
}

fn from_object(mut obj: Map<String, Value>) -> Verdict {
    let reason = match obj.shift_remove("reason") {
        None | Some(Value::Null) => String::new(),
        Some(Value::String(s)) => s,
        Some(other) => other.to_string(),
    };
    let reward = obj
        .shift_remove("reward")
        .map(|r| ("reward", r))
        .or_else(|| obj.shift_remove("score").map(|s| ("score", s)));
    let markers = obj.shift_remove("markers");
    // Everything else is meta; a nested `judge_meta` object is flattened in.
    let mut meta = Map::new();
    for (k, v) in obj {
        match (k.as_str(), v) {
            ("judge_meta", Value::Object(inner)) => meta.extend(inner),
            (_, v) => {
                meta.insert(k, v);
            }
        }
    }
    let or = |reason: String, fallback: &str| {
        if reason.is_empty() {
            fallback.to_owned()
        } else {
            reason
        }
    };
    // A judge that says it failed has failed, whatever reward it sent along.
    let error = match meta.get("error") {
        None | Some(Value::Null) => None,
        Some(Value::String(s)) if s.is_empty() => None,
        Some(Value::String(s)) => Some(s.clone()),
        Some(other) => Some(other.to_string()),
    };
    let mut verdict = match (error, reward) {
        (Some(error), _) => return Verdict::failed(Status::Error, or(reason, &error)).under(meta),
        (None, None) => {
            let mut keys: Vec<Value> = meta.keys().cloned().map(Value::String).collect();
            keys.sort_by(|a, b| a.as_str().cmp(&b.as_str()));
            return Verdict::failed(
                Status::MissingReward,
                or(reason, "the judge returned no `reward`"),
            )
            .under(meta)
            .with_meta("returned_keys", Value::Array(keys));
        }
        // An explicit null: the judge declines to score this row, and says why.
        (None, Some((_, Value::Null))) => {
            return Verdict::failed(
                Status::MissingReward,
                or(reason, "the judge returned `reward: null`"),
            )
            .under(meta);
        }
        (None, Some((_, Value::Bool(b)))) => {
            Verdict::ok(f64::from(u8::from(b)), reason).under(meta)
        }
        (None, Some((_, Value::Number(n)))) => {
            Verdict::reward(n.as_f64().unwrap_or(f64::NAN), reason).under(meta)
        }
        (None, Some((key, other))) => {
            return Verdict::failed(
                Status::InvalidResult,
                format!("`{key}` is {}, not a number", kind(&other)),
            )
            .under(meta)
            .with_meta("reward_type", Value::String(kind(&other).into()));
        }
    };
    if verdict.status != Status::Ok {
        return verdict;
    }
    match markers {
        None | Some(Value::Null) => {}
        Some(Value::Object(m)) => {
            for (name, value) in m {
                match json_marker(&name, &value) {
                    Ok(x) => verdict.markers.push((name, x)),
                    Err(bad) => return bad.under(verdict.meta),
                }
            }
        }
        Some(other) => {
            return Verdict::failed(
                Status::InvalidResult,
                format!(
                    "`markers` is {}, not an object of name to number",
                    kind(&other)
                ),
            )
            .under(verdict.meta);
        }
    }
    verdict
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn read(v: Value) -> Verdict {
        Verdict::from_json(v)
    }

    #[test]
    fn rewards_by_the_contract() {
        assert_eq!(read(json!(true)).reward, Some(1.0));
        assert_eq!(read(json!(0.25)).reward, Some(0.25));
        let v = read(json!({"reward": 1, "reason": "refund allowed", "policy": "30d"}));
        assert_eq!(
            (v.reward, v.status, v.reason.as_str()),
            (Some(1.0), Status::Ok, "refund allowed")
        );
        assert_eq!(v.meta, *json!({"policy": "30d"}).as_object().unwrap());
        assert_eq!(read(json!({"score": false})).reward, Some(0.0));
        let flat = read(json!({"reward": 0, "judge_meta": {"a": 1}, "b": 2}));
        assert_eq!(flat.meta, *json!({"a": 1, "b": 2}).as_object().unwrap());
    }

    #[test]
    fn broken_verdicts_are_marked_never_zero() {
        let cases = [
            (json!(1.5), Status::InvalidResult),
            (json!({"reward": -0.1}), Status::InvalidResult),
            (json!({"reward": "1"}), Status::InvalidResult),
            (json!({"reward": [1]}), Status::InvalidResult),
            (json!({"reason": "no idea"}), Status::MissingReward),
            (
                json!({"reward": null, "reason": "n/a"}),
                Status::MissingReward,
            ),
            (json!("pass"), Status::InvalidResult),
            (json!(null), Status::InvalidResult),
            (json!({"error": "ValueError: boom"}), Status::Error),
            (
                json!({"reward": 0, "error": "LLM call failed"}),
                Status::Error,
            ),
            (
                json!({"reward": 1, "markers": {"polite": "yes"}}),
                Status::InvalidResult,
            ),
            (
                json!({"reward": 1, "markers": {"polite": 2}}),
                Status::InvalidResult,
            ),
            (json!({"reward": 1, "markers": [1]}), Status::InvalidResult),
        ];
        for (input, status) in cases {
            let v = read(input.clone());
            assert_eq!(v.status, status, "{input}");
            assert_eq!(v.reward, None, "{input}");
            assert!(!v.reason.is_empty(), "{input}: a reason says why");
        }
        assert_eq!(
            read(json!({"error": "ValueError: boom"})).reason,
            "ValueError: boom"
        );
        assert_eq!(
            read(json!({"reason": "x", "n": 1})).meta["returned_keys"],
            json!(["n"])
        );
    }

    #[test]
    fn markers_are_numbers_or_null() {
        let v = read(
            json!({"reward": 1, "markers": {"polite": true, "refund_ok": 0.0, "escalated": null}}),
        );
        assert_eq!(
            v.markers,
            vec![
                ("polite".to_owned(), Some(1.0)),
                ("refund_ok".to_owned(), Some(0.0)),
                ("escalated".to_owned(), None)
            ]
        );
        assert!(v.meta.is_empty(), "markers are not copied into judge_meta");
    }
}
