//! Numbers no 64-bit type holds ("wide" numbers): an integer literal outside the range of `i64`
//! and `u64` (`18446744073709551616`), or a number whose value overflows an `f64` (`1e400`) or
//! underflows it to zero (`1e-400`). `serde_json` reads the first as a rounded float, the second
//! as an error and the third as `0.0`; wai never changes a number silently, so a row that holds
//! one takes the path here: a field without a column keeps the number's text verbatim in `extra`,
//! and a field with a column refuses it, naming the field.
//!
//! The common case pays one walk over the parsed value ([`suspicious`]): only a float that is 0
//! or at least 2^63 in size can have come from a wide literal, and only then is the text scanned.

use std::ops::Range;

use serde_json::{Map, Value};

/// Top-level members as their verbatim JSON text, by name.
pub type Verbatim = Vec<(String, String)>;

/// One wide number literal in a JSON text.
#[derive(Debug, Clone, PartialEq)]
pub struct Wide {
    /// The top-level key it sits under (`None` when the text is not an object).
    pub key: Option<String>,
    /// Its dotted path, as decode names fields: `reward`, `steps[0].logprob`, `meta.size`.
    pub path: String,
    /// The literal's bytes.
    pub literal: Range<usize>,
    /// The bytes of the whole top-level member value it sits in.
    pub value: Range<usize>,
}

/// Whether `v` holds a number that may have been read from a wide literal: a float that is 0,
/// or at least 2^63 in size (a wide integer becomes such a float).
pub fn suspicious(v: &Value) -> bool {
    match v {
        Value::Number(n) => n
            .as_f64()
            .is_some_and(|x| n.is_f64() && (x == 0.0 || x.abs() >= 9.2e18)),
        Value::Array(items) => items.iter().any(suspicious),
        Value::Object(map) => map.values().any(suspicious),
        _ => false,
    }
}

/// Whether `literal` (a JSON number's text) is wide.
fn is_wide(literal: &[u8]) -> bool {
    let Ok(text) = std::str::from_utf8(literal) else {
        return false;
    };
    if !text.contains(['.', 'e', 'E']) {
        return text.parse::<i64>().is_err() && text.parse::<u64>().is_err();
    }
    let Ok(x) = text.parse::<f64>() else {
        return false;
    };
    let mantissa = text.split(['e', 'E']).next().unwrap_or("");
    x.is_infinite() || (x == 0.0 && mantissa.bytes().any(|b| matches!(b, b'1'..=b'9')))
}

/// The deepest nesting scanned; `serde_json` refuses deeper texts anyway.
const MAX_DEPTH: usize = 256;

enum Seg {
    Key(String),
    Index(usize),
}

struct Scan<'a> {
    t: &'a [u8],
    i: usize,
    path: Vec<Seg>,
    found: Vec<Wide>,
}

impl Scan<'_> {
    fn ws(&mut self) {
        while self.t.get(self.i).is_some_and(u8::is_ascii_whitespace) {
            self.i += 1;
        }
    }

    /// Skips a string starting at its opening quote; returns its bytes, quotes included.
    fn string(&mut self) -> Option<Range<usize>> {
        let start = self.i;
        self.i += 1;
        loop {
            let at = self.i + memchr::memchr2(b'"', b'\\', self.t.get(self.i..)?)?;
            if self.t[at] == b'\\' {
                self.i = at + 2;
            } else {
                self.i = at + 1;
                return Some(start..self.i);
            }
        }
    }

    fn path_text(&self) -> String {
        let mut out = String::new();
        for seg in &self.path {
            match seg {
                Seg::Key(k) if out.is_empty() => out.push_str(k),
                Seg::Key(k) => {
                    out.push('.');
                    out.push_str(k);
                }
                Seg::Index(i) => {
                    out.push('[');
                    out.push_str(&i.to_string());
                    out.push(']');
                }
            }
        }
        out
    }

    /// Scans one value; `None` on text that is not JSON (the scan stops there).
    fn value(&mut self, depth: usize) -> Option<()> {
        self.ws();
        match *self.t.get(self.i)? {
            b'{' if depth < MAX_DEPTH => self.object(depth),
            b'[' if depth < MAX_DEPTH => {
                self.i += 1;
                let mut n = 0;
                loop {
                    self.ws();
                    match *self.t.get(self.i)? {
                        b']' => {
                            self.i += 1;
                            return Some(());
                        }
                        b',' => self.i += 1,
                        _ => {
                            self.path.push(Seg::Index(n));
                            self.value(depth + 1)?;
                            self.path.pop();
                            n += 1;
                        }
                    }
                }
            }
            b'"' => self.string().map(drop),
            b'-' | b'0'..=b'9' => {
                let start = self.i;
                while self
                    .t
                    .get(self.i)
                    .is_some_and(|b| matches!(b, b'0'..=b'9' | b'-' | b'+' | b'.' | b'e' | b'E'))
                {
                    self.i += 1;
                }
                if is_wide(&self.t[start..self.i]) {
                    let key = match self.path.first() {
                        Some(Seg::Key(k)) => Some(k.clone()),
                        _ => None,
                    };
                    self.found.push(Wide {
                        key,
                        path: self.path_text(),
                        literal: start..self.i,
                        value: start..self.i,
                    });
                }
                Some(())
            }
            b if b.is_ascii_alphabetic() => {
                while self.t.get(self.i).is_some_and(u8::is_ascii_alphabetic) {
                    self.i += 1;
                }
                Some(())
            }
            _ => None,
        }
    }

    fn object(&mut self, depth: usize) -> Option<()> {
        self.i += 1;
        loop {
            self.ws();
            match *self.t.get(self.i)? {
                b'}' => {
                    self.i += 1;
                    return Some(());
                }
                b',' => self.i += 1,
                b'"' => {
                    let key = self.string()?;
                    let key = serde_json::from_slice::<String>(&self.t[key]).ok()?;
                    self.ws();
                    if self.t.get(self.i) != Some(&b':') {
                        return None;
                    }
                    self.i += 1;
                    self.ws();
                    let (start, before) = (self.i, self.found.len());
                    self.path.push(Seg::Key(key));
                    self.value(depth + 1)?;
                    self.path.pop();
                    if depth == 0 {
                        for w in &mut self.found[before..] {
                            w.value = start..self.i;
                        }
                    }
                }
                _ => return None,
            }
        }
    }
}

/// The wide number literals of a JSON text, in text order.
pub fn scan(text: &[u8]) -> Vec<Wide> {
    let mut s = Scan {
        t: text,
        i: 0,
        path: Vec::new(),
        found: Vec::new(),
    };
    let _ = s.value(0);
    s.found
}

/// `text` with each wide literal replaced by `0` and spaces (same length, so error columns stay
/// true), for a parser that refuses or rounds them.
pub fn blanked(text: &[u8], wide: &[Wide]) -> Vec<u8> {
    let mut out = text.to_vec();
    for w in wide {
        out[w.literal.clone()].fill(b' ');
        out[w.literal.start] = b'0';
    }
    out
}

/// A JSON text without the white space outside its strings.
pub fn compact(raw: &[u8]) -> String {
    let mut out = Vec::with_capacity(raw.len());
    let mut i = 0;
    while i < raw.len() {
        let b = raw[i];
        if b == b'"' {
            let mut s = Scan {
                t: raw,
                i,
                path: Vec::new(),
                found: Vec::new(),
            };
            let end = s.string().map_or(raw.len(), |r| r.end);
            out.extend_from_slice(&raw[i..end]);
            i = end;
        } else {
            if !b.is_ascii_whitespace() {
                out.push(b);
            }
            i += 1;
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// The top-level members of `text` that hold a wide number, as compact verbatim JSON text.
pub fn verbatim_members(text: &[u8], wide: &[Wide]) -> Verbatim {
    let mut out: Verbatim = Vec::new();
    for w in wide {
        let Some(key) = &w.key else { continue };
        let raw = compact(&text[w.value.clone()]);
        match out.iter_mut().find(|(k, _)| k == key) {
            Some(slot) => slot.1 = raw,
            None => out.push((key.clone(), raw)),
        }
    }
    out
}

/// The compact JSON text of an object, with the members named in `verbatim` written as their
/// given text: `serde_json`'s own bytes for every other member.
pub fn object_text(map: &Map<String, Value>, verbatim: &[(String, String)]) -> String {
    let mut out = String::from("{");
    for (i, (k, v)) in map.iter().enumerate() {
        if i > 0 {
            out.push(',');
        }
        out.push_str(&Value::String(k.clone()).to_string());
        out.push(':');
        match verbatim.iter().find(|(name, _)| name == k) {
            Some((_, raw)) => out.push_str(raw),
            None => out.push_str(&v.to_string()),
        }
    }
    out.push('}');
    out
}

/// Parses a JSON text that may hold wide numbers: the value (wide literals read as 0) and the
/// top-level members that hold them, verbatim.
///
/// # Errors
/// The parser's, for a text that is not JSON.
pub fn parse_keeping(text: &[u8]) -> serde_json::Result<(Value, Verbatim)> {
    let wide = match serde_json::from_slice::<Value>(text) {
        Ok(v) if !suspicious(&v) => return Ok((v, Vec::new())),
        Ok(v) => {
            let wide = scan(text);
            if wide.is_empty() {
                return Ok((v, Vec::new()));
            }
            wide
        }
        Err(e) => {
            let wide = scan(text);
            if wide.is_empty() {
                return Err(e);
            }
            wide
        }
    };
    let value = serde_json::from_slice(&blanked(text, &wide))?;
    Ok((value, verbatim_members(text, &wide)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wide_literals_are_found_with_their_paths() {
        let text = br#"{"a": 18446744073709551615, "b": {"c": [1, 18446744073709551616]},
            "d": 1e-400, "e": -1e400, "f": 0.0, "g": -0.0, "h": 1e-300, "i": "1e400",
            "j": -9223372036854775809, "k": 0e-999}"#;
        let found = scan(text);
        let paths: Vec<&str> = found.iter().map(|w| w.path.as_str()).collect();
        assert_eq!(paths, ["b.c[1]", "d", "e", "j"]);
        assert_eq!(found[0].key.as_deref(), Some("b"));
        assert_eq!(
            &text[found[0].value.clone()],
            br#"{"c": [1, 18446744073709551616]}"#
        );
        let (value, verbatim) = parse_keeping(text).expect("parsed");
        assert_eq!(value["e"], 0);
        assert_eq!(
            verbatim,
            [
                (
                    "b".to_owned(),
                    r#"{"c":[1,18446744073709551616]}"#.to_owned()
                ),
                ("d".to_owned(), "1e-400".to_owned()),
                ("e".to_owned(), "-1e400".to_owned()),
                ("j".to_owned(), "-9223372036854775809".to_owned()),
            ]
        );
        let Value::Object(map) = value else {
            panic!("an object")
        };
        let text = object_text(&map, &verbatim);
        assert!(text.starts_with(r#"{"a":18446744073709551615,"b":{"c":[1,18446744073709551616]},"d":1e-400,"e":-1e400,"f":0.0,"g":-0.0,"#), "{text}");
    }

    #[test]
    fn ordinary_numbers_take_the_common_path() {
        let text = br#"{"a": 1.5, "b": [0, 1, 2], "c": "x"}"#;
        assert!(!suspicious(&serde_json::from_slice(text).unwrap()));
        let (_, verbatim) = parse_keeping(br#"{"a": 0.0}"#).unwrap();
        assert!(verbatim.is_empty());
        assert!(parse_keeping(b"{\"a\": 1e400, ").is_err());
    }
}
