//! JSON strings written byte for byte as `serde_json` writes them, eight bytes at a time.

/// The first of the eight bytes of `w` (little end first) that needs escaping in a JSON
/// string: a control character (below 0x20), `"` or `\`. The bit tricks "has a byte less than
/// n" and "has a zero byte" can mark a byte above the first one wrongly (a borrow runs up), never
/// one below it, so the lowest mark is exact; bytes of 0x80 and over are never marked.
fn first_escape(w: u64) -> Option<usize> {
    const ONES: u64 = 0x0101_0101_0101_0101;
    const HIGH: u64 = 0x8080_8080_8080_8080;
    let zero = |x: u64| x.wrapping_sub(ONES) & !x & HIGH;
    let control = w.wrapping_sub(ONES * 0x20) & !w & HIGH;
    let marks = control | zero(w ^ (ONES * u64::from(b'"'))) | zero(w ^ (ONES * u64::from(b'\\')));
    (marks != 0).then(|| marks.trailing_zeros() as usize / 8)
}

/// Whether no byte of `s` needs escaping in a JSON string, eight bytes at a time: such a string
/// is written as it is between quotes (row text is mostly such short strings, for which finding
/// that at once is cheaper than [`push_json_string`]'s run by run).
pub(crate) fn needs_no_escape(s: &str) -> bool {
    let (words, rest) = s.as_bytes().as_chunks::<8>();
    words
        .iter()
        .all(|w| first_escape(u64::from_le_bytes(*w)).is_none())
        && !rest.iter().any(|b| matches!(b, 0..=0x1f | b'"' | b'\\'))
}

/// Appends `s` as a JSON string, byte for byte as `serde_json` writes it: `"` and `\`
/// escaped, the control characters below 0x20 as `\b \t \n \f \r` or `\u00xx`
/// (lowercase hex), everything else (DEL and non-ASCII included) as it is. Text is read eight
/// bytes at a time, going straight to the next byte to escape: `serde_json`'s byte-at-a-time
/// loop was about a quarter of an export's instructions.
pub(crate) fn push_json_string(out: &mut Vec<u8>, s: &str) {
    out.reserve(s.len() + 2);
    out.push(b'"');
    escaped(s, |piece| out.extend_from_slice(piece.as_bytes()));
    out.push(b'"');
}

/// [`push_json_string`] to a text writer (a `String`, an Arrow string builder).
///
/// # Errors
/// The writer's.
pub(crate) fn write_json_string(out: &mut impl std::fmt::Write, s: &str) -> std::fmt::Result {
    out.write_char('"')?;
    let mut done = Ok(());
    escaped(s, |piece| {
        if done.is_ok() {
            done = out.write_str(piece);
        }
    });
    done?;
    out.write_char('"')
}

/// Gives `put` the pieces of `s` escaped as a JSON string's inside (without its quotes): runs of
/// `s` that need no escape, and the escapes between them.
fn escaped(s: &str, mut put: impl FnMut(&str)) {
    const HEX: [&str; 16] = [
        "0", "1", "2", "3", "4", "5", "6", "7", "8", "9", "a", "b", "c", "d", "e", "f",
    ];
    let b = s.as_bytes();
    let (mut start, mut i) = (0, 0);
    while i < b.len() {
        match b.get(i..i + 8) {
            Some(word) => match first_escape(u64::from_le_bytes(word.try_into().unwrap_or([0; 8])))
            {
                None => {
                    i += 8;
                    continue;
                }
                Some(k) => i += k,
            },
            // The last bytes, one at a time.
            None => {
                if !matches!(b[i], 0..=0x1f | b'"' | b'\\') {
                    i += 1;
                    continue;
                }
            }
        }
        // An ASCII byte: `start..i` ends on a character's boundary.
        let c = b[i];
        put(&s[start..i]);
        match c {
            b'"' => put("\\\""),
            b'\\' => put("\\\\"),
            b'\n' => put("\\n"),
            b'\r' => put("\\r"),
            b'\t' => put("\\t"),
            0x08 => put("\\b"),
            0x0c => put("\\f"),
            _ => {
                put("\\u00");
                put(HEX[usize::from(c >> 4)]);
                put(HEX[usize::from(c & 0xf)]);
            }
        }
        i += 1;
        start = i;
    }
    put(&s[start..]);
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::{needs_no_escape, push_json_string, write_json_string};

    /// `s` written both ways, which must agree.
    fn ours(s: &str) -> String {
        let mut out = Vec::new();
        push_json_string(&mut out, s);
        let bytes = String::from_utf8(out).expect("UTF-8");
        let mut text = String::new();
        write_json_string(&mut text, s).expect("written");
        assert_eq!(bytes, text, "{s:?}");
        bytes
    }

    #[test]
    fn strings_are_written_as_serde_json_writes_them() {
        let mut every_byte = String::new();
        for c in 0u8..=0x7f {
            every_byte.push(char::from(c));
        }
        for s in [
            String::new(),
            every_byte.clone(),
            format!("{every_byte}{every_byte}"),
            "plain text that runs past eight bytes".into(),
            "é\"ü\\\u{1f}\u{7f}\u{2028}日本".into(),
            "1234567\"".into(),
            "12345678\n".into(),
            "\u{0}".repeat(17),
        ] {
            assert_eq!(ours(&s), serde_json::to_string(&s).expect("JSON"), "{s:?}");
        }
    }

    /// What `needs_no_escape` is held to: `serde_json` writes the string as it is, quoted.
    fn as_it_is(s: &str) -> bool {
        serde_json::to_string(s).expect("JSON") == format!("\"{s}\"")
    }

    #[test]
    fn a_byte_to_escape_is_seen_at_every_offset() {
        for len in 1..=24 {
            for at in 0..len {
                for special in ['\u{0}', '\u{1f}', '"', '\\'] {
                    let mut s: Vec<char> = vec!['a'; len];
                    s[at] = special;
                    let s: String = s.into_iter().collect();
                    assert!(!needs_no_escape(&s), "{s:?}");
                }
                // Bytes either side of the ranges, DEL and text beyond ASCII need none.
                let mut s: Vec<char> = vec!['a'; len];
                for (i, c) in [' ', '!', '#', '[', ']', '\u{7f}', 'é', '\u{a2}', '\u{dc}']
                    .into_iter()
                    .enumerate()
                {
                    s[(at + i) % len] = c;
                }
                let s: String = s.into_iter().collect();
                assert!(needs_no_escape(&s), "{s:?}");
                assert!(as_it_is(&s), "{s:?}");
            }
        }
        assert!(needs_no_escape(""));
    }

    proptest! {
        #[test]
        fn any_string_is_written_as_serde_json_writes_it(s in "(\\PC|[\\x00-\\x1f\"\\\\\\x7f])*") {
            prop_assert_eq!(ours(&s), serde_json::to_string(&s).expect("JSON"));
            prop_assert_eq!(needs_no_escape(&s), as_it_is(&s));
        }

        #[test]
        fn long_plain_runs_need_no_escape(
            s in "[ -~&&[^\"\\\\]]{8,40}([\\x00-\\x1f\"\\\\]|é)?[ -~&&[^\"\\\\]]{0,20}"
        ) {
            prop_assert_eq!(needs_no_escape(&s), as_it_is(&s));
        }
    }
}
