//! Stable draws: every choice the simulator makes about a situation is a pure function of
//! SHA-256 over fixed strings (the seed, ids, indices), so it does not depend on threads, batch
//! sizes or the order work finishes in.

use sha2::{Digest, Sha256};

/// Lowercase hex SHA-256 of `text`.
pub fn sha256_hex(text: &str) -> String {
    hex(&Sha256::digest(text.as_bytes()))
}

/// `bytes` in lowercase hex.
pub fn hex(bytes: &[u8]) -> String {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    let mut out = String::with_capacity(2 * bytes.len());
    for &b in bytes {
        out.push(char::from(HEX[usize::from(b >> 4)]));
        out.push(char::from(HEX[usize::from(b & 15)]));
    }
    out
}

/// A 64-bit draw from `parts` joined by `|`.
pub fn draw(parts: &[&str]) -> u64 {
    let mut h = Sha256::new();
    for (i, p) in parts.iter().enumerate() {
        if i > 0 {
            h.update(b"|");
        }
        h.update(p.as_bytes());
    }
    let d = h.finalize();
    u64::from_be_bytes([d[0], d[1], d[2], d[3], d[4], d[5], d[6], d[7]])
}

/// Index `h % len`, for picking from `len` items by a hash.
pub fn pick_index(h: u64, len: usize) -> usize {
    // `h % len` is below `len`, so it fits a usize.
    usize::try_from(h % len as u64).unwrap_or(0)
}

/// Index `u * len` (`u` a share in [0, 1)), at most `len - 1`, for picking from `len` items.
pub fn share_index(u: f64, len: usize) -> usize {
    #[allow(
        clippy::cast_possible_truncation,
        clippy::cast_sign_loss,
        reason = "u is a share in [0, 1), so u * len is a small non-negative number"
    )]
    let i = (u * len as f64) as usize;
    i.min(len.saturating_sub(1))
}

/// A uniform draw in (0, 1) from `parts`.
pub fn uniform(parts: &[&str]) -> f64 {
    // 53 bits, shifted off zero.
    ((draw(parts) >> 11) as f64 + 0.5) / (1u64 << 53) as f64
}

/// The reference's `(int(hex[:8], 16) + 1) / (16**8 + 2)`.
pub fn unit8(hex: &str) -> f64 {
    (u64::from_str_radix(&hex[..8], 16).unwrap_or(0) as f64 + 1.0) / (16f64.powi(8) + 2.0)
}

/// A JSON string as Python's `json.dumps` writes it (ASCII only).
pub fn py_json_str(s: &str, out: &mut String) {
    use std::fmt::Write;
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            '\u{8}' => out.push_str("\\b"),
            '\u{c}' => out.push_str("\\f"),
            c if (c as u32) < 0x20 || (c as u32) > 0x7e => {
                let mut buf = [0u16; 2];
                for unit in c.encode_utf16(&mut buf) {
                    let _ = write!(out, "\\u{unit:04x}");
                }
            }
            c => out.push(c),
        }
    }
    out.push('"');
}

/// A flat string map as `json.dumps(d, sort_keys=True)` writes it.
pub fn py_json_sorted(pairs: &[(&str, &str)]) -> String {
    let mut sorted: Vec<&(&str, &str)> = pairs.iter().collect();
    sorted.sort_by(|a, b| a.0.cmp(b.0));
    let mut out = String::from("{");
    for (i, (k, v)) in sorted.iter().enumerate() {
        if i > 0 {
            out.push_str(", ");
        }
        py_json_str(k, &mut out);
        out.push_str(": ");
        py_json_str(v, &mut out);
    }
    out.push('}');
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn python_json_escapes() {
        let mut s = String::new();
        py_json_str("café \"x\"\n😀", &mut s);
        assert_eq!(s, r#""caf\u00e9 \"x\"\n\ud83d\ude00""#);
        assert_eq!(
            py_json_sorted(&[("b", "1"), ("a", "2")]),
            r#"{"a": "2", "b": "1"}"#
        );
        assert!(uniform(&["x"]) > 0.0 && uniform(&["x"]) < 1.0);
        assert_ne!(draw(&["a", "b"]), draw(&["ab"]));
    }
}
