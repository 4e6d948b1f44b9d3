//! Where an output may go: never over an input, never over a folder that holds data unless the
//! user says so, never under a name that says another format. Commands check their outputs with
//! these before they read a row, so a refused run has done no work and changed nothing.

use std::path::{Path, PathBuf};

use crate::error::{Error, Result};
use crate::pipeline::source::{Input, Location};

/// `path` made absolute with its links resolved, for a path that may not exist yet (its
/// nearest existing ancestor is resolved and the rest appended).
fn resolved(path: &Path) -> PathBuf {
    let absolute = if path.is_absolute() {
        path.to_path_buf()
    } else {
        std::env::current_dir()
            .unwrap_or_else(|_| PathBuf::from("."))
            .join(path)
    };
    let mut rest = Vec::new();
    let mut at = absolute.as_path();
    loop {
        if let Ok(real) = at.canonicalize() {
            let mut out = real;
            for part in rest.iter().rev() {
                out.push(part);
            }
            return out;
        }
        match (at.parent(), at.file_name()) {
            (Some(parent), Some(name)) => {
                rest.push(name.to_owned());
                at = parent;
            }
            _ => return absolute,
        }
    }
}

/// Refuses `out` when it is one of `inputs` (the same file) or a folder that holds one: the run
/// would write over what it reads.
pub fn not_an_input(out: &Path, inputs: &[Input]) -> Result<()> {
    let target = resolved(out);
    for input in inputs {
        let Location::Local(path) = &input.location else {
            continue;
        };
        let path = resolved(path);
        if path == target {
            return Err(Error::Usage(format!(
                "the output `{}` is an input: write it elsewhere (nothing was read or written)",
                out.display()
            )));
        }
        if path.starts_with(&target) {
            return Err(Error::Usage(format!(
                "the output `{}` holds the input `{}`: write it elsewhere (nothing was read or written)",
                out.display(),
                input.display
            )));
        }
    }
    Ok(())
}

/// Checks a run's rows output and its rejects file: neither is an input (or holds one), and the
/// rejects are not the main output (committed last, they would replace it).
pub fn rows_apart(out: &Path, rejects: Option<&Path>, inputs: &[Input]) -> Result<()> {
    not_an_input(out, inputs)?;
    let Some(rejects) = rejects else {
        return Ok(());
    };
    not_an_input(rejects, inputs)?;
    if resolved(rejects) == resolved(out) {
        return Err(Error::Usage(format!(
            "--rejects `{}` is the output: name it apart",
            rejects.display()
        )));
    }
    Ok(())
}

/// Checks the name of an output that is JSON Lines whatever it is called: `.jsonl`, `.ndjson`
/// or `.json`; a `.parquet` name (or any other) would say a format the file is not in.
pub fn jsonl_name(out: &Path, what: &str) -> Result<()> {
    let name = out.to_string_lossy().to_ascii_lowercase();
    if [".jsonl", ".ndjson", ".json"]
        .iter()
        .any(|ext| name.ends_with(ext))
    {
        return Ok(());
    }
    Err(Error::Usage(format!(
        "{what} is JSON Lines: name the output `.jsonl`, not `{}`",
        out.display()
    )))
}

/// Checks a folder output (built elsewhere and moved into place whole): it may not be or hold
/// the working folder, and an existing folder with anything in it (or a file) is replaced only
/// with `force`.
pub fn folder(out: &Path, force: bool) -> Result<()> {
    let target = resolved(out);
    let here = resolved(Path::new("."));
    if here.starts_with(&target) {
        return Err(Error::Usage(format!(
            "the output folder `{}` holds the working folder: name a new folder",
            out.display()
        )));
    }
    let holds_something = match std::fs::read_dir(out) {
        Ok(mut entries) => entries.next().is_some(),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => false,
        // A file, or a folder we cannot list.
        Err(_) => out.exists(),
    };
    if holds_something && !force {
        return Err(Error::Usage(format!(
            "the output `{}` exists and is not an empty folder: pass --force to replace it (its contents are deleted), or name a new folder",
            out.display()
        )));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn local(path: &Path) -> Input {
        Input {
            display: path.display().to_string(),
            location: Location::Local(path.to_path_buf()),
            format: crate::pipeline::source::Format::Jsonl,
            size: None,
        }
    }

    #[test]
    fn outputs_never_land_on_inputs() {
        let dir = tempfile::tempdir().expect("a temp dir");
        let input = dir.path().join("rows.jsonl");
        std::fs::write(&input, "{}\n").expect("written");
        let inputs = [local(&input)];
        assert!(not_an_input(&input, &inputs).is_err());
        // The same file by another path.
        let other = dir.path().join(".").join("rows.jsonl");
        assert!(not_an_input(&other, &inputs).is_err());
        // A folder that holds it.
        assert!(not_an_input(dir.path(), &inputs).is_err());
        assert!(not_an_input(&dir.path().join("out.jsonl"), &inputs).is_ok());
        assert!(not_an_input(&dir.path().join("new/deeper/out"), &inputs).is_ok());
    }

    #[test]
    fn folders_are_replaced_only_when_asked() {
        let dir = tempfile::tempdir().expect("a temp dir");
        let out = dir.path().join("ds");
        assert!(folder(&out, false).is_ok(), "a new folder");
        std::fs::create_dir(&out).expect("made");
        assert!(folder(&out, false).is_ok(), "an empty folder");
        std::fs::write(out.join("keep.txt"), "x").expect("written");
        assert!(folder(&out, false).is_err());
        assert!(folder(&out, true).is_ok());
        let file = dir.path().join("file");
        std::fs::write(&file, "x").expect("written");
        assert!(folder(&file, false).is_err());
        // The working folder and its parents are never an output.
        assert!(folder(Path::new("."), true).is_err());
        assert!(folder(Path::new(".."), true).is_err());
    }

    #[test]
    fn a_jsonl_output_is_named_so() {
        assert!(jsonl_name(Path::new("a/b.jsonl"), "x").is_ok());
        assert!(jsonl_name(Path::new("b.JSON"), "x").is_ok());
        assert!(jsonl_name(Path::new("b.parquet"), "x").is_err());
        assert!(jsonl_name(Path::new("b"), "x").is_err());
    }
}
