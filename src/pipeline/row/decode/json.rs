//! One way of reading a parsed JSON value, whichever parser built it, so that the row rules
//! are written once: `serde_json`'s [`Value`] (rows built in memory, and JSON text the fast
//! parser leaves to it) and `sonic-rs`'s (JSON text, parsed with SIMD into an arena, about six
//! times cheaper than `serde_json`'s `Value` on row text).
//!
//! Numbers are read as `serde_json`'s [`Number`] from either parser, and every value is
//! written back as text by one writer over this trait (`canonical::write_text`), which gives
//! the bytes `serde_json`'s serializer gives, so both give the same bytes. Where
//! `sonic-rs` reads a text differently from `serde_json` (a duplicated key is kept twice, `-0`
//! loses its sign, nesting deeper than `serde_json` allows is accepted, a literal of hundreds of
//! digits is read as another float) or may (floats of 2<sup>63</sup> and over), [`plain`] says
//! so and the text goes to `serde_json`.

use serde_json::{Map, Number, Value};
use sonic_rs::{JsonContainerTrait, JsonNumberTrait, JsonType, JsonValueTrait, ValueRef};

/// What a JSON value is, with what it holds.
pub enum Node<'a, J: Json> {
    Null,
    Bool(bool),
    Number(Number),
    String(&'a str),
    Array(&'a [J]),
    Object(&'a J::Object),
}

/// The members of a JSON object, in the order of the text.
pub trait Members {
    /// The values' type.
    type Value: Json;
    /// The members in order.
    fn members(&self) -> impl Iterator<Item = (&str, &Self::Value)>;
    /// The value of `key`.
    fn member(&self, key: &str) -> Option<&Self::Value>;
    /// How many members.
    fn count(&self) -> usize;
}

/// A parsed JSON value.
pub trait Json: serde::Serialize + Sized {
    /// Its objects' type.
    type Object: Members<Value = Self>;

    /// What the value is.
    fn node(&self) -> Node<'_, Self>;

    fn is_null(&self) -> bool {
        matches!(self.node(), Node::Null)
    }

    fn is_object(&self) -> bool {
        matches!(self.node(), Node::Object(_))
    }

    fn is_boolean(&self) -> bool {
        matches!(self.node(), Node::Bool(_))
    }

    fn as_str(&self) -> Option<&str> {
        match self.node() {
            Node::String(s) => Some(s),
            _ => None,
        }
    }

    fn as_i64(&self) -> Option<i64> {
        match self.node() {
            Node::Number(n) => n.as_i64(),
            _ => None,
        }
    }

    /// The value of `key` when this is an object.
    fn get(&self, key: &str) -> Option<&Self> {
        match self.node() {
            Node::Object(o) => o.member(key),
            _ => None,
        }
    }

    /// Compact JSON text, as `serde_json` writes it.
    fn text(&self) -> String {
        // As `serde_json::to_string` starts: most texts fit, so few grow.
        let mut out = Vec::with_capacity(128);
        super::canonical::write_text(self, &mut out);
        super::canonical::utf8(out)
    }
}

/// An object's members, read once into a list. A row is looked up by several keys (`dims`,
/// `scenario_dimensions`, `eval_run`, `lineage`), each missing key a look at every member: in
/// the list a look compares plain strings, where in a `sonic-rs` object it reads each member's
/// key through the value's accessors.
pub(super) struct Listed<'a, J: Json>(Vec<(&'a str, &'a J)>);

impl<'a, J: Json> Listed<'a, J> {
    /// The members of `obj`, in order.
    pub(super) fn of<O: Members<Value = J>>(obj: &'a O) -> Self {
        let mut list = Vec::with_capacity(obj.count());
        list.extend(obj.members());
        Self(list)
    }
}

impl<J: Json> Members for Listed<'_, J> {
    type Value = J;

    fn members(&self) -> impl Iterator<Item = (&str, &J)> {
        self.0.iter().map(|(k, v)| (*k, *v))
    }

    fn member(&self, key: &str) -> Option<&J> {
        // The first: keys are distinct in both parsers' objects as the rules see them.
        self.0.iter().find(|(k, _)| *k == key).map(|(_, v)| *v)
    }

    fn count(&self) -> usize {
        self.0.len()
    }
}

impl Members for Map<String, Value> {
    type Value = Value;

    fn members(&self) -> impl Iterator<Item = (&str, &Value)> {
        self.iter().map(|(k, v)| (k.as_str(), v))
    }

    fn member(&self, key: &str) -> Option<&Value> {
        self.get(key)
    }

    fn count(&self) -> usize {
        self.len()
    }
}

impl Json for Value {
    type Object = Map<String, Value>;

    fn node(&self) -> Node<'_, Self> {
        match self {
            Value::Null => Node::Null,
            Value::Bool(b) => Node::Bool(*b),
            Value::Number(n) => Node::Number(n.clone()),
            Value::String(s) => Node::String(s),
            Value::Array(items) => Node::Array(items),
            Value::Object(map) => Node::Object(map),
        }
    }
}

impl Members for sonic_rs::Object {
    type Value = sonic_rs::Value;

    fn members(&self) -> impl Iterator<Item = (&str, &sonic_rs::Value)> {
        self.iter()
    }

    fn member(&self, key: &str) -> Option<&sonic_rs::Value> {
        self.get(&key)
    }

    fn count(&self) -> usize {
        self.len()
    }
}

impl Json for sonic_rs::Value {
    type Object = sonic_rs::Object;

    fn node(&self) -> Node<'_, Self> {
        // One look at the value's kind (`as_ref`), not one to tell it and one more to read it.
        match self.as_ref() {
            ValueRef::Null => Node::Null,
            ValueRef::Bool(b) => Node::Bool(b),
            ValueRef::Number(n) => n
                .as_u64()
                .map(Number::from)
                .or_else(|| n.as_i64().map(Number::from))
                .or_else(|| n.as_f64().and_then(Number::from_f64))
                // Every number the parser builds is one of the three.
                .map_or(Node::Null, Node::Number),
            ValueRef::String(s) => Node::String(s),
            ValueRef::Array(a) => Node::Array(a),
            ValueRef::Object(o) => Node::Object(o),
        }
    }
}

/// Deeper than this, a text goes to `serde_json`, which refuses nesting past 127 levels.
const MAX_DEPTH: usize = 100;

/// Whether `sonic-rs` read `v` (parsed from `text`) as `serde_json` reads it: no object holds
/// a key twice, the nesting is within `serde_json`'s limit, no float is 2<sup>63</sup> or over
/// in size (what a wide integer becomes; see [`super::wide`]), a float that is 0 was not
/// written as `-0` (`sonic-rs` drops the sign) or with a negative exponent, and no float comes
/// from a run of 300 digits or more (a literal too small for a float without an exponent, or
/// one whose exponent `sonic-rs` reads only in part).
pub(super) fn plain(v: &sonic_rs::Value, text: &[u8]) -> bool {
    /// A float was read.
    const FLOAT: u8 = 1;
    /// A float of 0 was read.
    const ZERO: u8 = 2;
    /// What the walk found: `None` for a reason to go to `serde_json`, else `FLOAT | ZERO` bits.
    fn walk(v: &sonic_rs::Value, depth: usize) -> Option<u8> {
        if depth > MAX_DEPTH {
            return None;
        }
        // `get_type`, not `as_ref`: most values are strings, and `as_ref` costs a string more
        // (and a container twice).
        match v.get_type() {
            JsonType::Number => match v.as_number() {
                Some(n) if n.is_f64() => match n.as_f64() {
                    Some(0.0) => Some(FLOAT | ZERO),
                    Some(x) if x.abs() < 9.2e18 => Some(FLOAT),
                    _ => None,
                },
                _ => Some(0),
            },
            JsonType::Array => v.as_array().and_then(|items| {
                items
                    .iter()
                    .try_fold(0, |seen, i| walk(i, depth + 1).map(|s| seen | s))
            }),
            JsonType::Object => v.as_object().and_then(|o| {
                // One pass over the members: each key against the ones before it, each value
                // walked.
                let mut keys = KeySet::for_members(o.len());
                o.iter().try_fold(0, |seen, (k, m)| {
                    if keys.insert(k) {
                        walk(m, depth + 1).map(|s| seen | s)
                    } else {
                        None
                    }
                })
            }),
            _ => Some(0),
        }
    }
    match walk(v, 0) {
        None => false,
        Some(seen) => {
            (seen & FLOAT == 0 || !long_digit_run(text))
                && (seen & ZERO == 0 || !signed_zero_or_tiny(text))
        }
    }
}

/// Whether `text` holds a run of 300 ASCII digits or more. A run of that length starting at or
/// after `start` covers byte `start + 299`, so one byte in 300 is looked at where digits are
/// rare (row text), not every byte.
fn long_digit_run(text: &[u8]) -> bool {
    const RUN: usize = 300;
    // No run of RUN digits starts before `start`.
    let mut start = 0;
    while start + RUN <= text.len() {
        let probe = start + RUN - 1;
        if !text[probe].is_ascii_digit() {
            start = probe + 1;
            continue;
        }
        // The run through the probe: back to its first digit (not before `start`), then on.
        let mut from = probe;
        while from > start && text[from - 1].is_ascii_digit() {
            from -= 1;
        }
        let mut end = probe + 1;
        while end < text.len() && end - from < RUN && text[end].is_ascii_digit() {
            end += 1;
        }
        if end - from >= RUN {
            return true;
        }
        // `text[end]` is no digit, and every run starting from `start` through it is shorter.
        start = end + 1;
    }
    false
}

/// Whether `text` may hold a number written `-0...` or with a negative exponent: a `-0` at the
/// start or after `:`, `,` or `[` (white space between), or `e-`/`E-` after a digit. Inside a string such a
/// sequence only sends the line to `serde_json`.
fn signed_zero_or_tiny(text: &[u8]) -> bool {
    memchr::memchr_iter(b'-', text).any(|i| {
        let next = text.get(i + 1).copied();
        let before = text[..i].iter().rev().find(|b| !b.is_ascii_whitespace());
        let exponent = i > 1 && matches!(text[i - 1], b'e' | b'E') && text[i - 2].is_ascii_digit();
        exponent || (next == Some(b'0') && matches!(before, None | Some(b':' | b',' | b'[')))
    })
}

/// The keys of one object seen so far: on the stack for objects of up to 32 members (rows and
/// what they nest), without allocating; in a hash set past that. A key is compared in full only
/// with the keys of its length, first and last byte (its tag): a row's keys rarely share all
/// three, so most checks compare two integers.
#[allow(
    clippy::large_enum_variant,
    reason = "the small set is meant to live on the stack: boxed, it would allocate per object"
)]
enum KeySet<'a> {
    Small {
        tags: [u64; KeySet::SMALL],
        keys: [&'a str; KeySet::SMALL],
        len: usize,
    },
    Many(std::collections::HashSet<&'a str>),
}

impl<'a> KeySet<'a> {
    const SMALL: usize = 32;

    /// An empty set for an object of `n` members.
    fn for_members(n: usize) -> Self {
        if n <= Self::SMALL {
            Self::Small {
                tags: [0; Self::SMALL],
                keys: [""; Self::SMALL],
                len: 0,
            }
        } else {
            Self::Many(std::collections::HashSet::with_capacity(n))
        }
    }

    /// A key's length, first and last byte: equal keys have equal tags.
    fn tag(key: &str) -> u64 {
        let bytes = key.as_bytes();
        let ends = match (bytes.first(), bytes.last()) {
            (Some(&first), Some(&last)) => u64::from(first) << 8 | u64::from(last),
            _ => 0,
        };
        (key.len() as u64) << 16 | ends
    }

    /// Whether `key` was not seen before (it is now).
    fn insert(&mut self, key: &'a str) -> bool {
        match self {
            Self::Small { tags, keys, len } => {
                let tag = Self::tag(key);
                let seen = &tags[..*len];
                if seen.contains(&tag)
                    && seen
                        .iter()
                        .zip(&keys[..*len])
                        .any(|(t, k)| *t == tag && *k == key)
                {
                    return false;
                }
                // Never past the end: the set was made for the object's member count.
                match (tags.get_mut(*len), keys.get_mut(*len)) {
                    (Some(t), Some(k)) => {
                        *t = tag;
                        *k = key;
                        *len += 1;
                        true
                    }
                    _ => false,
                }
            }
            Self::Many(set) => set.insert(key),
        }
    }
}

/// Whether every key of `o` is there once.
#[cfg(test)]
fn distinct_keys(o: &sonic_rs::Object) -> bool {
    let mut keys = KeySet::for_members(o.len());
    o.iter().all(|(k, _)| keys.insert(k))
}

#[cfg(test)]
pub(super) mod tests {
    use proptest::prelude::*;
    use rand::{Rng, SeedableRng};
    use rand_chacha::ChaCha8Rng;
    use serde_json::{Value, json};
    use sonic_rs::JsonContainerTrait;

    use super::super::{decode_text, decode_text_serde};
    use super::plain;

    /// Whether the fast parser takes `text` (so a test of it is not vacuous).
    fn fast(text: &[u8]) -> bool {
        sonic_rs::from_slice::<sonic_rs::Value>(text).is_ok_and(|v| plain(&v, text))
    }

    #[test]
    fn every_fixture_line_decodes_alike_by_both_parsers() {
        let dir = format!("{}/tests/fixtures", env!("CARGO_MANIFEST_DIR"));
        let (mut lines, mut fast_lines) = (0, 0);
        let mut files = vec![std::path::PathBuf::from(&dir)];
        while let Some(path) = files.pop() {
            if path.is_dir() {
                files.extend(
                    std::fs::read_dir(&path)
                        .expect("dir")
                        .map(|e| e.expect("entry").path()),
                );
                continue;
            }
            if path.extension().is_none_or(|e| e != "jsonl") {
                continue;
            }
            let text = std::fs::read(&path).expect("fixture");
            for line in text.split(|b| *b == b'\n').filter(|l| !l.is_empty()) {
                lines += 1;
                fast_lines += usize::from(fast(line));
                assert_eq!(
                    decode_text(line),
                    decode_text_serde(line),
                    "{}: {}",
                    path.display(),
                    String::from_utf8_lossy(line)
                );
            }
        }
        assert!(lines > 500, "{lines} lines");
        assert!(
            fast_lines * 10 > lines * 9,
            "{fast_lines} of {lines} on the fast path"
        );
    }

    #[test]
    fn long_digit_runs_are_found_wherever_they_sit() {
        /// Every byte looked at, the rule the skipping scan is held to.
        fn naive(text: &[u8]) -> bool {
            let mut run = 0usize;
            text.iter().any(|b| {
                run = if b.is_ascii_digit() { run + 1 } else { 0 };
                run >= 300
            })
        }
        let mut rng = ChaCha8Rng::seed_from_u64(7);
        let mut found = 0;
        for _ in 0..2000 {
            let len = rng.random_range(0..1500);
            // Runs of digits of random lengths around 300, between other bytes.
            let mut text = Vec::with_capacity(len);
            while text.len() < len {
                let run = rng.random_range(0..320);
                text.extend(std::iter::repeat_n(b'7', run));
                text.push(if rng.random() { b',' } else { b'x' });
            }
            text.truncate(len);
            assert_eq!(super::long_digit_run(&text), naive(&text), "{text:?}");
            found += usize::from(naive(&text));
        }
        assert!(
            found > 50,
            "{found} texts with a run: the test must see both answers"
        );
        for n in [299, 300, 301] {
            let run = "1".repeat(n);
            for text in [
                run.clone(),
                format!("x{run}"),
                format!("{run}x"),
                format!("ab{run}cd"),
            ] {
                assert_eq!(super::long_digit_run(text.as_bytes()), n >= 300, "{text}");
            }
        }
    }

    #[test]
    fn duplicate_keys_are_seen_in_small_and_large_objects() {
        for n in [2, 31, 32, 33, 60] {
            let mut members: Vec<String> = (0..n).map(|i| format!("\"k{i}\":{i}")).collect();
            let once = format!("{{{}}}", members.join(","));
            let v: sonic_rs::Value = sonic_rs::from_str(&once).expect("JSON");
            assert!(super::distinct_keys(v.as_object().expect("object")), "{n}");
            members.push("\"k0\":0".to_owned());
            let twice = format!("{{{}}}", members.join(","));
            let v: sonic_rs::Value = sonic_rs::from_str(&twice).expect("JSON");
            assert!(!super::distinct_keys(v.as_object().expect("object")), "{n}");
        }
    }

    #[test]
    fn what_sonic_reads_otherwise_goes_to_serde_json() {
        let deep = format!(
            "{{\"prompt\":\"p\",\"x\":{}{}}}",
            "[".repeat(120),
            "]".repeat(120)
        );
        let deeper = format!(
            "{{\"prompt\":\"p\",\"x\":{}{}}}",
            "[".repeat(130),
            "]".repeat(130)
        );
        let tiny = format!("{{\"prompt\":\"p\",\"x\":0.{}1}}", "0".repeat(400));
        let tiny_reward = format!("{{\"prompt\":\"p\",\"reward\":0.{}1}}", "0".repeat(400));
        let long_exponent = format!(
            "{{\"prompt\":\"p\",\"reward\":1{}e-10000}}",
            "0".repeat(1000)
        );
        let long_mantissa = format!("{{\"prompt\":\"p\",\"x\":0.{}1e10000}}", "0".repeat(1000));
        let sent_on: [&[u8]; 12] = [
            br#"{"prompt":"p","reward":0,"prompt":"q"}"#,
            br#"{"prompt":"p","steps":[{"tool":"t","arguments":{"a":1,"a":2}}]}"#,
            br#"{"prompt":"p","x":-0}"#,
            br#"{"prompt":"p","x":[1, -0.0],"reward":1}"#,
            br#"{"prompt":"p","x":1e-400,"reward":1}"#,
            br#"{"prompt":"p","x":18446744073709551616}"#,
            // Beyond a 64-bit float: kept verbatim in `extra` (see `wide`).
            br#"{"prompt":"p","x":1e400}"#,
            deep.as_bytes(),
            // Literals of hundreds of digits, which sonic-rs reads as other floats.
            tiny.as_bytes(),
            tiny_reward.as_bytes(),
            long_exponent.as_bytes(),
            long_mantissa.as_bytes(),
        ];
        for text in sent_on {
            assert!(!fast(text), "{}", String::from_utf8_lossy(text));
            assert_eq!(decode_text(text), decode_text_serde(text));
        }
        // What both refuse, serde_json explains.
        for text in [
            &b"{\"prompt\":\"\xff\"}"[..],
            br#"{"prompt":"\ud800"}"#,
            br#"{"prompt":"p","reward":1e400}"#,
            br#"{"prompt":"p"} x"#,
            br#"{"prompt":"p",}"#,
            deeper.as_bytes(),
        ] {
            let got = decode_text(text);
            assert_eq!(got, decode_text_serde(text));
            assert!(got.is_err(), "{}", String::from_utf8_lossy(text));
        }
        // A float 0 written plainly, and `-0` or `e-` in a string, stay on the fast path.
        for text in [
            &br#"{"prompt":"p","reward":0.0,"x":[0.0, 1.5]}"#[..],
            br#"{"prompt":"on 2026-01-05 at -0","reward":0.0}"#,
        ] {
            assert!(fast(text), "{}", String::from_utf8_lossy(text));
            assert_eq!(decode_text(text), decode_text_serde(text));
        }
        assert!(!fast(br#"{"prompt":"p","reward":0.0,"x":"a: -0"}"#));
        // A text that is a `-0` alone (not a row, but the writer's test reads such values).
        assert!(!fast(b"-0.0"));
        assert!(!fast(b" -0"));
        // Escapes as Python writes them, on the fast path.
        let escaped = br#"{"prompt":"caf\u00e9 \ud83d\ude00 \/ \t","steps":[{"tool":"t","arguments":{"q":"\u00e9"},"result":"\n"}],"lineage":{"k":"\u001f"}}"#;
        assert!(fast(escaped));
        assert_eq!(decode_text(escaped), decode_text_serde(escaped));
        assert_eq!(
            decode_text(escaped).expect("row").prompt.as_deref(),
            Some("café 😀 / \t")
        );
        // A sign, a wide literal and a duplicate are read as serde_json reads them.
        let r = decode_text(br#"{"prompt":"p","x":-0,"y":1.5,"x":-0.0}"#).expect("row");
        assert_eq!(r.extra.as_deref(), Some(r#"{"x":-0.0,"y":1.5}"#));
    }

    /// Strings heavy in what needs an escape (control characters, quotes, backslashes, DEL,
    /// text beyond ASCII), or long runs with nothing to escape and at most one that does.
    fn any_text() -> impl Strategy<Value = String> {
        prop_oneof![
            "([a-z ]|\\PC|[\\x00-\\x1f\"\\\\\\x7f]){0,40}",
            "[ -~&&[^\"\\\\]]{8,40}([\\x00-\\x1f\"\\\\]|é)?[ -~&&[^\"\\\\]]{0,20}",
        ]
    }

    /// A JSON value of any shape, a few levels deep, its leaves including the numbers and
    /// strings the two parsers might read differently (and the writer might write otherwise).
    pub(in super::super) fn any_value() -> impl Strategy<Value = Value> {
        let leaf = prop_oneof![
            Just(Value::Null),
            any::<bool>().prop_map(Value::Bool),
            any::<i64>().prop_map(|i| json!(i)),
            any::<u64>().prop_map(|u| json!(u)),
            any::<f64>()
                .prop_filter("finite", |f| f.is_finite())
                .prop_map(|f| json!(f)),
            prop_oneof![Just(0.5), Just(1e-7), Just(2.5e300), Just(-1.25)].prop_map(|f| json!(f)),
            any_text().prop_map(Value::String),
        ];
        leaf.prop_recursive(4, 24, 5, |inner| {
            prop_oneof![
                prop::collection::vec(inner.clone(), 0..5).prop_map(Value::Array),
                prop::collection::vec((any_text(), inner), 0..5)
                    .prop_map(|m| Value::Object(m.into_iter().collect())),
            ]
        })
    }

    /// A row: the columns' keys with values of the right shape or of any shape.
    fn any_row() -> impl Strategy<Value = Value> {
        let keys = prop::sample::select(vec![
            "prompt",
            "final_text",
            "task_id",
            "scenario_id",
            "reward",
            "markers",
            "steps",
            "messages",
            "tools_used",
            "lineage",
            "dims",
            "scenario_dimensions",
            "tier",
            "eval_run",
            "rollout_index",
            "schema_version",
            "arm",
            "extra_field",
        ]);
        let step = (
            prop::option::of("[a-z_]{1,8}"),
            any_value(),
            any_value(),
            prop::option::of("\\PC{0,12}"),
        )
            .prop_map(|(tool, arguments, result, text)| {
                json!({"tool": tool, "arguments": arguments, "result": result, "text": text})
            });
        let value = prop_oneof![
            any_value(),
            "\\PC{0,20}".prop_map(Value::String),
            prop::collection::vec(step, 0..4).prop_map(Value::Array),
            prop_oneof![Just(json!(0)), Just(json!(1)), Just(json!(0.5))],
        ];
        prop::collection::vec((keys, value), 1..10)
            .prop_map(|m| Value::Object(m.into_iter().map(|(k, v)| (k.to_owned(), v)).collect()))
    }

    proptest! {
        #[test]
        fn any_row_decodes_alike_by_both_parsers(row in any_row(), pretty in any::<bool>()) {
            let text = if pretty {
                serde_json::to_string_pretty(&row).expect("JSON")
            } else {
                serde_json::to_string(&row).expect("JSON")
            };
            prop_assert_eq!(decode_text(text.as_bytes()), decode_text_serde(text.as_bytes()));
        }
    }
}
