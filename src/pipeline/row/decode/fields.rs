//! Typed readings of top-level fields (keys, strings, numbers, 32-bit integers, shares) and
//! the derived `dims` and `eval_run`.

use serde_json::{Map, Value};

use super::canonical::expected;
use super::json::{Json, Members, Node};
use super::{AXES, FieldError, Res};

/// A grouping key: null and `""` fall through to the next source; numbers are ids as text (the
/// reference also lets `0` fall through, which merges task 0 of a benchmark with prompt-less rows).
pub(super) fn key_text<J: Json>(field: &str, v: &J) -> Res<Option<String>> {
    Ok(match v.node() {
        Node::Null | Node::String("") => None,
        Node::String(s) => Some(s.to_owned()),
        Node::Number(n) => Some(n.to_string()),
        _ => return Err(expected(field, "a string or a number", v)),
    })
}

pub(super) fn string<J: Json>(field: &str, v: &J) -> Res<Option<String>> {
    match v.node() {
        Node::String(s) => Ok(Some(s.to_owned())),
        _ => Err(expected(field, "a string", v)),
    }
}

pub(super) fn number<J: Json>(field: &str, v: &J) -> Res<Option<f64>> {
    match v.node() {
        Node::Number(n) => Ok(n.as_f64()),
        _ => Err(expected(field, "a number or null", v)),
    }
}

pub(super) fn int32<J: Json>(field: &str, v: &J) -> Res<Option<i32>> {
    match v.as_i64() {
        Some(i) => i32::try_from(i)
            .map(Some)
            .map_err(|_| FieldError::at(field, format!("{i} is out of range"))),
        None => Err(expected(field, "an integer", v)),
    }
}

/// A value for a `Map<Utf8, Utf8>` dimension: strings as they are, scalars as JSON text.
pub(super) fn dim_text<J: Json>(v: &J) -> Option<String> {
    match v.node() {
        Node::Null => None,
        Node::String(s) => Some(s.to_owned()),
        _ => Some(v.text()),
    }
}

pub(super) fn set_dim(dims: &mut Vec<(String, String)>, key: &str, value: String) {
    match dims.iter_mut().find(|(k, _)| k == key) {
        Some(slot) => slot.1 = value,
        None => dims.push((key.to_owned(), value)),
    }
}

/// A reward is 0 or 1, or a partial score in [0, 1] (the judge contract).
pub(super) fn check_share(field: &str, v: Option<f64>) -> Res<()> {
    match v {
        Some(x) if !(0.0..=1.0).contains(&x) => Err(FieldError::at(
            field,
            format!("{x} is outside [0, 1]: a reward is 0 or 1, or a partial score in [0, 1]"),
        )),
        _ => Ok(()),
    }
}

/// `dims` as a row's fields give it: the conversation axes (top-level keys), overridden by
/// `scenario_dimensions`, overridden by an explicit `dims` object. `None` when there are none.
pub fn derive_dims(obj: &Map<String, Value>) -> Option<Vec<(String, String)>> {
    dims_of(obj)
}

pub(super) fn dims_of<O: Members>(obj: &O) -> Option<Vec<(String, String)>> {
    let mut dims: Vec<(String, String)> = Vec::new();
    for (k, v) in obj.members() {
        if AXES.contains(&k)
            && let Some(text) = dim_text(v)
        {
            dims.push((k.to_owned(), text));
        }
    }
    for source in ["scenario_dimensions", "dims"] {
        if let Some(Node::Object(map)) = obj.member(source).map(Json::node) {
            for (k, v) in map.members() {
                if let Some(text) = dim_text(v) {
                    set_dim(&mut dims, k, text);
                }
            }
        }
    }
    (!dims.is_empty()).then_some(dims)
}

/// `eval_run` as a row's fields give it: the top-level key, else `lineage.eval_run`, else 0.
pub fn derive_eval_run(obj: &Map<String, Value>) -> i32 {
    eval_run_of(obj)
}

pub(super) fn eval_run_of<O: Members>(obj: &O) -> i32 {
    let from = |v: Option<&O::Value>| v.and_then(Json::as_i64).and_then(|i| i32::try_from(i).ok());
    from(obj.member("eval_run"))
        .or_else(|| from(obj.member("lineage").and_then(|l| l.get("eval_run"))))
        .unwrap_or(0)
}
