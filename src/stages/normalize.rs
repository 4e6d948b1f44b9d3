//! Text normalised for comparing: white space collapsed to single spaces, trimmed, and
//! lowercased, in one pass. The leak check reads its needles and texts this way, and selection
//! hashes replies this way to find duplicates.

/// `s` with white space collapsed to single spaces, trimmed, and lowercased, in one pass.
pub(crate) fn normalize(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    push_normalized(s, &mut out);
    out
}

/// Appends `s` normalized as [`normalize`] does (a separating space first when `out` is not
/// empty and `s` has a word).
pub(crate) fn push_normalized(s: &str, out: &mut String) {
    if s.is_ascii() {
        // Already single-spaced and trimmed (the common case): a copy, lowercased.
        let b = s.as_bytes();
        if !b.is_empty()
            && b[0] != b' '
            && b[b.len() - 1] != b' '
            && memchr::memchr3(b'\t', b'\n', b'\r', b).is_none()
            && memchr::memchr(0x0c, b).is_none()
            && memchr::memmem::find(b, b"  ").is_none()
        {
            if !out.is_empty() {
                out.push(' ');
            }
            let at = out.len();
            out.push_str(s);
            out[at..].make_ascii_lowercase();
            return;
        }
        // Byte by byte.
        out.reserve(s.len() + 1);
        let mut space = !out.is_empty();
        for &b in s.as_bytes() {
            if b.is_ascii_whitespace() {
                space = !out.is_empty();
            } else {
                if space {
                    out.push(' ');
                    space = false;
                }
                out.push(char::from(b.to_ascii_lowercase()));
            }
        }
        return;
    }
    let mut space = !out.is_empty();
    let mut started = false;
    for c in s.chars() {
        if c.is_whitespace() {
            space = started || space;
            continue;
        }
        if space && !out.is_empty() {
            out.push(' ');
        }
        space = false;
        started = true;
        if c.is_ascii() {
            out.push(c.to_ascii_lowercase());
        } else {
            out.extend(c.to_lowercase());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn normalizing_collapses_space_and_case() {
        assert_eq!(normalize("  A\tb \n\n C  "), "a b c");
        assert_eq!(normalize("Ünïcode  ÉTÉ"), "ünïcode été");
        let mut s = String::from("x");
        push_normalized("  Y z ", &mut s);
        assert_eq!(s, "x y z");
        push_normalized("   ", &mut s);
        assert_eq!(s, "x y z");
        // Already single-spaced: copied and lowercased.
        push_normalized("Ab C", &mut s);
        assert_eq!(s, "x y z ab c");
        assert_eq!(normalize("Ab C"), "ab c");
    }
}
