//! Secrets out of every message: error texts, log lines and reports pass through [`redact`]
//! before they are printed, whatever a server sent back.
//!
//! Three rules, in order:
//! 1. Every configured secret is replaced by `[redacted]`: the value of each environment
//!    variable whose name ends in `_KEY`, `_TOKEN`, `_SECRET`, `_PASSWORD` or `_PASS` (so
//!    `OPENAI_API_KEY`, `ANTHROPIC_API_KEY`, `AWS_SECRET_ACCESS_KEY`, `AWS_SESSION_TOKEN`,
//!    `HF_TOKEN`, ...) and of a few known names, and the password of every URL with
//!    credentials in the environment or on the command line. Values under
//!    [`MIN_SECRET_CHARS`] characters are left alone: a short word would blank out ordinary
//!    text, and no real key is that short.
//! 2. `Bearer <token>` and `Basic <credentials>` become `Bearer [redacted]` and `Basic
//!    [redacted]`, and API-key-shaped words (`sk-...`) become `[redacted]`.
//! 3. URL credentials `scheme://user:password@` become `scheme://user:[redacted]@`.

use std::borrow::Cow;
use std::sync::LazyLock;

use regex::Regex;
use serde_json::Value;

/// What replaces a secret.
pub const REDACTED: &str = "[redacted]";
/// The shortest value treated as a secret.
pub const MIN_SECRET_CHARS: usize = 8;
/// Name endings of variables that hold secrets.
const SECRET_SUFFIXES: &[&str] = &["_KEY", "_TOKEN", "_SECRET", "_PASSWORD", "_PASS"];
/// Secret variables whose names do not end that way.
const SECRET_NAMES: &[&str] = &[
    "AWS_SECRET_ACCESS_KEY",
    "AWS_SESSION_TOKEN",
    "GOOGLE_SERVICE_ACCOUNT_KEY",
    "AZURE_STORAGE_ACCOUNT_KEY",
    "AZURE_STORAGE_SAS_KEY",
    "HF_TOKEN",
    "HUGGING_FACE_HUB_TOKEN",
    "GITHUB_TOKEN",
    "PGPASSWORD",
];

static URL_CREDENTIALS: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r"(?i)\b([a-z][a-z0-9+.\-]*://)([^/\s:@]*):([^/\s@]+)@").expect("a valid regex")
});
static BEARER: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r"(?i)\b(bearer|basic)(\s+)([A-Za-z0-9._~+/=\-]+)").expect("a valid regex")
});
static KEY_SHAPED: LazyLock<Regex> =
    LazyLock::new(|| Regex::new(r"\bsk-[A-Za-z0-9_\-]{8,}").expect("a valid regex"));

/// The configured secrets, longest first (so a secret that holds another goes whole).
static SECRETS: LazyLock<Vec<String>> = LazyLock::new(|| {
    let mut out: Vec<String> = Vec::new();
    for (name, value) in std::env::vars_os() {
        let (name, value) = (name.to_string_lossy(), value.to_string_lossy().into_owned());
        let upper = name.to_ascii_uppercase();
        if SECRET_SUFFIXES.iter().any(|s| upper.ends_with(s))
            || SECRET_NAMES.contains(&upper.as_str())
        {
            out.push(value.trim().to_owned());
        }
        out.extend(url_passwords(&value));
    }
    for arg in std::env::args_os() {
        out.extend(url_passwords(&arg.to_string_lossy()));
    }
    out.retain(|s| s.chars().count() >= MIN_SECRET_CHARS);
    out.sort_by(|a, b| b.len().cmp(&a.len()).then_with(|| a.cmp(b)));
    out.dedup();
    out
});

/// The passwords of the URLs with credentials in `text`, and each `user:password` as HTTP basic
/// authentication sends it (base64), which a server may quote back.
fn url_passwords(text: &str) -> Vec<String> {
    URL_CREDENTIALS
        .captures_iter(text)
        .flat_map(|c| {
            let user = c.get(2).map_or("", |m| m.as_str());
            let password = c.get(3).map_or("", |m| m.as_str());
            [
                password.to_owned(),
                base64(format!("{user}:{password}").as_bytes()),
            ]
        })
        .collect()
}

/// Standard base64 with padding.
fn base64(bytes: &[u8]) -> String {
    const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::with_capacity(bytes.len().div_ceil(3) * 4);
    for chunk in bytes.chunks(3) {
        let b = [
            chunk[0],
            *chunk.get(1).unwrap_or(&0),
            *chunk.get(2).unwrap_or(&0),
        ];
        let n = (u32::from(b[0]) << 16) | (u32::from(b[1]) << 8) | u32::from(b[2]);
        for i in 0..4 {
            if i <= chunk.len() {
                out.push(char::from(ALPHABET[((n >> (18 - 6 * i)) & 63) as usize]));
            } else {
                out.push('=');
            }
        }
    }
    out
}

/// `text` with the configured secrets, bearer tokens, key-shaped words and URL passwords
/// replaced by `[redacted]`.
pub fn redact(text: &str) -> Cow<'_, str> {
    redact_with(text, &SECRETS)
}

fn redact_with<'a>(text: &'a str, secrets: &[String]) -> Cow<'a, str> {
    let mut out = Cow::Borrowed(text);
    for secret in secrets {
        if out.contains(secret.as_str()) {
            out = Cow::Owned(out.replace(secret.as_str(), REDACTED));
        }
    }
    if BEARER.is_match(&out) {
        // A token, not an English word ("the bearer of"): it holds a digit or a symbol.
        let replaced = BEARER.replace_all(&out, |c: &regex::Captures<'_>| {
            let token = c.get(3).map_or("", |m| m.as_str());
            if token.chars().any(|ch| !ch.is_ascii_alphabetic()) {
                format!("{}{}{REDACTED}", &c[1], &c[2])
            } else {
                c[0].to_owned()
            }
        });
        if let Cow::Owned(r) = replaced
            && r != *out
        {
            out = Cow::Owned(r);
        }
    }
    for (re, with) in [
        (&*KEY_SHAPED, REDACTED.to_owned()),
        (&*URL_CREDENTIALS, format!("${{1}}${{2}}:{REDACTED}@")),
    ] {
        if re.is_match(&out) {
            out = Cow::Owned(re.replace_all(&out, with.as_str()).into_owned());
        }
    }
    out
}

/// Redacts every string (and key) in `value`.
pub fn redact_json(value: &mut Value) {
    match value {
        Value::String(s) => {
            if let Cow::Owned(r) = redact(s) {
                *s = r;
            }
        }
        Value::Array(items) => items.iter_mut().for_each(redact_json),
        Value::Object(map) => {
            let needs_key = map.keys().any(|k| matches!(redact(k), Cow::Owned(_)));
            if needs_key {
                let old = std::mem::take(map);
                for (k, mut v) in old {
                    redact_json(&mut v);
                    map.insert(redact(&k).into_owned(), v);
                }
            } else {
                map.values_mut().for_each(redact_json);
            }
        }
        _ => {}
    }
}

/// A writer that redacts what passes through it (the log's stderr).
pub struct Redacting<W>(pub W);

impl<W: std::io::Write> std::io::Write for Redacting<W> {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let text = String::from_utf8_lossy(buf);
        self.0.write_all(redact(&text).as_bytes())?;
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        self.0.flush()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn secrets_tokens_and_url_passwords_are_redacted() {
        let secrets = vec!["k3y-live-0123456789".to_owned()];
        let text = "HTTP 401: {\"error\": \"key k3y-live-0123456789 rejected; got Authorization: Bearer abc.DEF-123\"} at https://alice:hunter2pass@api.example.com/v1 (also sk-proj-AbCdEf0123456789)";
        let out = redact_with(text, &secrets);
        assert_eq!(
            out,
            "HTTP 401: {\"error\": \"key [redacted] rejected; got Authorization: Bearer [redacted]\"} at https://alice:[redacted]@api.example.com/v1 (also [redacted])"
        );
        // Nothing to hide: the text is borrowed as it was.
        assert!(matches!(
            redact_with("the bearer of plain text, http://host/x", &secrets),
            Cow::Borrowed(_)
        ));
    }

    #[test]
    fn basic_credentials_are_known_in_base64() {
        assert_eq!(base64(b"alice:hunter2-pass"), "YWxpY2U6aHVudGVyMi1wYXNz");
        assert_eq!(base64(b"ab"), "YWI=");
        assert_eq!(
            url_passwords("http://alice:hunter2-pass@h/"),
            ["hunter2-pass", "YWxpY2U6aHVudGVyMi1wYXNz"]
        );
    }

    #[test]
    fn json_strings_are_redacted_in_place() {
        let mut v = serde_json::json!({"url": "http://u:longpassword@h/", "n": 1, "list": ["Bearer xyz.123"]});
        redact_json(&mut v);
        assert_eq!(
            v,
            serde_json::json!({"url": "http://u:[redacted]@h/", "n": 1, "list": ["Bearer [redacted]"]})
        );
    }
}
