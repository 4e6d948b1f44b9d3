//! A small JSON Lines file read whole: each non-blank line parsed, a bad line named by its file
//! and line number.

use std::path::Path;

use serde_json::Value;

use crate::error::{Error, Result};

/// Passes each non-blank line of the file `input` to `each` as JSON, with its 1-based line
/// number; a line that is not JSON, or that `each` refuses (saying why), is a bad row.
///
/// # Errors
/// The file cannot be read, or a line is bad.
pub fn each_line(
    input: &str,
    each: &mut dyn FnMut(u64, Value) -> std::result::Result<(), String>,
) -> Result<()> {
    let path = Path::new(input);
    let text = crate::pipeline::world_files::read_text(path)?;
    for (n, line) in text.lines().enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        let bad = |message: String| Error::BadRow {
            file: input.to_owned(),
            line: n as u64 + 1,
            field: None,
            message,
        };
        let value: Value = serde_json::from_str(line).map_err(|e| bad(format!("not JSON: {e}")))?;
        each(n as u64 + 1, value).map_err(bad)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bad_lines_are_named() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("p.jsonl");
        std::fs::write(&path, "{\"a\":1}\n\n[2]\nnope\n").unwrap();
        let input = path.display().to_string();
        let mut seen = Vec::new();
        let err = each_line(&input, &mut |n, v| {
            seen.push((n, v));
            Ok(())
        })
        .unwrap_err();
        assert_eq!(seen.len(), 2);
        assert_eq!(seen[1].0, 3);
        assert!(err.to_string().contains("line 4") && err.to_string().contains("not JSON"));
        let err = each_line(&input, &mut |_, _| Err("no".into())).unwrap_err();
        assert!(err.to_string().contains("line 1: no"), "{err}");
    }
}
