//! Reading a judge's reply into the judge contract: the last complete JSON object in the text
//! decides (`{"reason": str, "score": 0|1}`, `reward` as another name for `score`, and a
//! `markers` object for rubric items), after `<think>` blocks and code fences are taken off.

use std::sync::LazyLock;

use regex::Regex;
use serde_json::Value;

/// A reason's longest length, in characters.
const REASON_CHARS: usize = 400;

/// What a reply said.
#[derive(Debug, Clone, PartialEq)]
pub struct Read {
    /// 0 or 1, when the reply gave one that reads.
    pub score: Option<f64>,
    /// Its reason (whitespace collapsed, at most 400 characters).
    pub reason: String,
    /// Rubric items it scored: `(name, 0 or 1)`.
    pub markers: Vec<(String, f64)>,
    /// The reply declines to grade.
    pub refused: bool,
}

static THINK: LazyLock<Regex> =
    LazyLock::new(|| Regex::new(r"(?is)<think>.*?</think>").expect("a valid regex"));
static SCORE_KEY: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r#""(?:score|reward)"\s*:\s*([01])(?:\.0*)?\s*(?:,|\}|$)"#).expect("a valid regex")
});
static REASON_KEY: LazyLock<Regex> =
    LazyLock::new(|| Regex::new(r#""reason"\s*:\s*("(?:[^"\\]|\\.)*")"#).expect("a valid regex"));
static REFUSAL: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r"(?i)\b(i can(?:no|')t|i cannot|i won'?t|i'm (?:sorry|unable)|i am (?:sorry|unable)|unable to (?:grade|evaluate|assess)|as an ai)\b")
        .expect("a valid regex")
});

fn collapse(s: &str) -> String {
    let joined = s.split_whitespace().collect::<Vec<_>>().join(" ");
    joined.chars().take(REASON_CHARS).collect()
}

/// A JSON object with no repeated key, or `None` when a key repeats.
fn unique_keys(v: &Value, text: &str) -> bool {
    // serde_json keeps the last of repeated keys; count the keys in the text instead.
    let Some(o) = v.as_object() else { return true };
    let mut de = serde_json::Deserializer::from_str(text);
    let raw: Result<Vec<(String, serde::de::IgnoredAny)>, _> = {
        use serde::Deserializer as _;
        struct Pairs;
        impl<'de> serde::de::Visitor<'de> for Pairs {
            type Value = Vec<(String, serde::de::IgnoredAny)>;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("an object")
            }
            fn visit_map<A: serde::de::MapAccess<'de>>(
                self,
                mut map: A,
            ) -> Result<Self::Value, A::Error> {
                let mut out = Vec::new();
                while let Some(pair) = map.next_entry()? {
                    out.push(pair);
                }
                Ok(out)
            }
        }
        de.deserialize_map(Pairs)
    };
    raw.is_ok_and(|pairs| pairs.len() == o.len())
}

/// Every complete top-level JSON object in `text`, in order (`None` for one with a repeated key).
fn objects(text: &str) -> Vec<Option<Value>> {
    let mut out = Vec::new();
    let mut at = 0;
    while let Some(off) = text[at..].find('{') {
        let start = at + off;
        let mut stream = serde_json::Deserializer::from_str(&text[start..]).into_iter::<Value>();
        match stream.next() {
            Some(Ok(v)) if v.is_object() => {
                let end = start + stream.byte_offset();
                let ok = unique_keys(&v, &text[start..end]);
                out.push(ok.then_some(v));
                at = end;
            }
            _ => at = start + 1,
        }
    }
    out
}

/// A score that reads: a number (not a bool) equal to 0 or 1.
fn binary(v: &Value) -> Option<f64> {
    let x = v.as_f64().filter(|_| v.is_number())?;
    (x == 0.0 || x == 1.0).then_some(x)
}

/// The reply `text`, read.
pub fn read(text: &str) -> Read {
    let cleaned = THINK.replace_all(text, "");
    let mut t = cleaned.trim();
    for fence in ["```json", "```JSON", "```"] {
        if let Some(rest) = t.strip_prefix(fence) {
            t = rest.trim_start();
            break;
        }
    }
    let t = t.strip_suffix("```").unwrap_or(t).trim();
    let mut out = Read {
        score: None,
        reason: String::new(),
        markers: Vec::new(),
        refused: false,
    };
    if t.is_empty() {
        return out;
    }
    let found = objects(t);
    if let Some(last) = found.last() {
        if let Some(o) = last.as_ref().and_then(Value::as_object) {
            if let Some(r) = o.get("reason").and_then(Value::as_str) {
                out.reason = collapse(r);
            }
            let score = o.get("score");
            let reward = o.get("reward");
            out.score = match (score, reward) {
                (Some(s), Some(r)) => binary(s).filter(|x| binary(r) == Some(*x)),
                (Some(s), None) | (None, Some(s)) => binary(s),
                (None, None) => None,
            };
            if let Some(m) = o.get("markers").and_then(Value::as_object) {
                out.markers = m
                    .iter()
                    .filter_map(|(k, v)| Some((k.clone(), binary(v)?)))
                    .collect();
            }
        }
    } else {
        out.score = match serde_json::from_str::<Value>(t) {
            Ok(v) if v.is_number() => binary(&v),
            _ => SCORE_KEY.captures(t).and_then(|c| c[1].parse().ok()),
        };
    }
    if out.reason.is_empty()
        && let Some(c) = REASON_KEY.captures(t)
        && let Ok(Value::String(r)) = serde_json::from_str::<Value>(&c[1])
    {
        out.reason = collapse(&r);
    }
    out.refused = out.score.is_none() && found.is_empty() && REFUSAL.is_match(t);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn score(text: &str) -> (Option<f64>, String) {
        let r = read(text);
        (r.score, r.reason)
    }

    #[test]
    fn the_reference_examples_read_the_same() {
        assert_eq!(
            score(r#"{"reason": "ok", "score": 1}"#),
            (Some(1.0), "ok".into())
        );
        assert_eq!(
            score(r#"<think>hmm {"score":0}</think>{"reason":"fine","score":1}"#),
            (Some(1.0), "fine".into())
        );
        assert_eq!(
            score("```json\n{\"reason\": \"r\", \"score\": 0}\n```"),
            (Some(0.0), "r".into())
        );
        for none in [
            r#"{"score": "1"}"#,
            r#"{"score": true}"#,
            r#"{"score": 0.5}"#,
            r#"{"score":1,"reward":0}"#,
            r#"{"score":1,"score":0}"#,
            r#"{"score":1} trailing {"note":"x"}"#,
            "score: 1",
            "true",
        ] {
            assert_eq!(read(none).score, None, "{none}");
        }
        assert_eq!(
            score(r#"Example {"score":0} ... final {"reason":"r","score":1}"#),
            (Some(1.0), "r".into())
        );
        assert_eq!(score("1").0, Some(1.0));
        assert_eq!(score("0.0").0, Some(0.0));
        assert_eq!(score(r#"{"reason":"r","score":1"#), (Some(1.0), "r".into()));
        assert_eq!(
            score(r#"{"reason":"r","reward":1}"#),
            (Some(1.0), "r".into())
        );
    }

    #[test]
    fn a_refusal_and_rubric_markers_are_told_apart() {
        let r = read("I'm sorry, but I can't grade this conversation.");
        assert!(r.refused && r.score.is_none());
        assert!(!read("the agent did fine").refused);
        let r = read(
            r#"{"reason": "r", "score": 1, "markers": {"verified_identity": 1, "cited_policy": 0, "bad": "x"}}"#,
        );
        assert_eq!(
            r.markers,
            vec![
                ("verified_identity".into(), 1.0),
                ("cited_policy".into(), 0.0)
            ]
        );
        assert!(read("NaN").score.is_none());
    }
}
