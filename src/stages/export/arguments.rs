//! Tool-call arguments as the reference reads them.

use serde_json::{Value, json};

/// `value` decoded while it is a JSON string (up to three times), as the reference reads
/// arguments: a dict stays a dict, a string that does not decode stays a string.
pub(super) fn decode_args(v: &Value) -> Value {
    let mut cur = v.clone();
    for _ in 0..3 {
        match &cur {
            Value::String(s) => match serde_json::from_str::<Value>(s) {
                Ok(x) => cur = x,
                Err(_) => break,
            },
            _ => break,
        }
    }
    if cur.is_null() { json!({}) } else { cur }
}
