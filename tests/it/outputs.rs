//! Where outputs may go: never over an input or a folder of data, in the format their name says,
//! committed with their rejects, and never confused with the temporary files of killed runs.

use std::fmt::Write as _;
use std::path::Path;

use crate::support::{fixture, read_jsonl, refused, succeeded, wai};

fn tree(dir: &Path) -> Vec<String> {
    let mut out: Vec<String> = walk(dir)
        .into_iter()
        .map(|p| p.strip_prefix(dir).unwrap().display().to_string())
        .collect();
    out.sort();
    out
}

fn walk(dir: &Path) -> Vec<std::path::PathBuf> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        if p.is_dir() {
            out.extend(walk(&p));
        } else {
            out.push(p);
        }
    }
    out
}

#[test]
fn a_datasets_folder_never_replaces_data_unless_forced() {
    let dir = tempfile::tempdir().unwrap();
    let inner = dir.path().join("inner");
    std::fs::create_dir(&inner).unwrap();
    let rows = inner.join("rows.jsonl");
    std::fs::copy(fixture("example_scored.jsonl"), &rows).unwrap();
    std::fs::write(inner.join("notes.txt"), "mine").unwrap();
    let before = tree(dir.path());
    // The folder holding the input, the working folder, its parent, a folder of other data.
    for out in ["inner", "."] {
        refused(
            wai().current_dir(dir.path()).args([
                "export",
                "inner/rows.jsonl",
                "--no-validate",
                "--format",
                "parquet",
                "--force",
                "--out",
                out,
            ]),
            "",
        );
    }
    refused(
        wai().current_dir(&inner).args([
            "export",
            "rows.jsonl",
            "--no-validate",
            "--format",
            "parquet",
            "--out",
            "../inner",
        ]),
        "",
    );
    let data = dir.path().join("data");
    std::fs::create_dir(&data).unwrap();
    std::fs::write(data.join("keep.txt"), "keep").unwrap();
    refused(
        wai()
            .arg("export")
            .arg(&rows)
            .args(["--no-validate", "--format", "parquet", "--out"])
            .arg(&data),
        "pass --force to replace it",
    );
    assert_eq!(
        std::fs::read_to_string(data.join("keep.txt")).unwrap(),
        "keep"
    );
    let mut after = tree(dir.path());
    after.retain(|p| !p.starts_with("data"));
    assert_eq!(after, before, "nothing changed");
    // With --force the folder is replaced whole.
    succeeded(
        wai()
            .arg("export")
            .arg(&rows)
            .args(["--no-validate", "--format", "parquet", "--force", "--out"])
            .arg(&data),
    );
    assert!(!data.join("keep.txt").exists());
    assert!(data.join("data/train-00000-of-00001.parquet").exists());
    // An empty folder needs no --force.
    let empty = dir.path().join("empty");
    std::fs::create_dir(&empty).unwrap();
    succeeded(
        wai()
            .arg("export")
            .arg(&rows)
            .args(["--no-validate", "--format", "parquet", "--out"])
            .arg(&empty),
    );
}

#[test]
fn an_output_is_never_an_input_and_its_name_says_its_format() {
    let dir = tempfile::tempdir().unwrap();
    let parquet = dir.path().join("s.parquet");
    succeeded(
        wai()
            .arg("convert")
            .arg(fixture("example_scored.jsonl"))
            .arg("--out")
            .arg(&parquet),
    );
    let bytes = std::fs::read(&parquet).unwrap();
    // Writing over an input, by any command that writes rows.
    let jsonl = dir.path().join("rows.jsonl");
    std::fs::copy(fixture("example_scored.jsonl"), &jsonl).unwrap();
    refused(
        wai()
            .arg("export")
            .arg(&jsonl)
            .args(["--no-validate", "--out"])
            .arg(&jsonl),
        "is an input",
    );
    assert_eq!(
        std::fs::read(&jsonl).unwrap(),
        std::fs::read(fixture("example_scored.jsonl")).unwrap()
    );
    refused(
        wai()
            .arg("export")
            .arg(&parquet)
            .args(["--no-validate", "--out"])
            .arg(&parquet),
        "name the output `.jsonl`",
    );
    refused(
        wai().arg("select").arg(&parquet).arg("--out").arg(&parquet),
        "is an input",
    );
    refused(
        wai()
            .arg("convert")
            .arg(&parquet)
            .arg("--out")
            .arg(&parquet),
        "is an input",
    );
    assert_eq!(
        std::fs::read(&parquet).unwrap(),
        bytes,
        "the input is untouched"
    );
    // A JSON Lines output under a Parquet name.
    refused(
        wai()
            .arg("export")
            .arg(&parquet)
            .args(["--no-validate", "--out"])
            .arg(dir.path().join("train.parquet")),
        "name the output `.jsonl`",
    );
    refused(
        wai()
            .args(["select", "--mode", "preference"])
            .arg(&parquet)
            .arg("--out")
            .arg(dir.path().join("pref.parquet")),
        "name the output `.jsonl`",
    );
    refused(
        wai()
            .arg("convert")
            .arg(&parquet)
            .arg("--out")
            .arg(dir.path().join("y.parquet"))
            .args(["--to", "jsonl"]),
        "is named as Parquet but --to asks for JSON Lines",
    );
    assert!(
        !dir.path().join("train.parquet").exists() && !dir.path().join("pref.parquet").exists()
    );
}

/// A small real filesystem (tmpfs) mounted at `at`, unmounted when dropped; `None` (the test
/// skips) where this user cannot mount one. CI runs as root and must.
struct Tmpfs(std::path::PathBuf);

impl Tmpfs {
    fn mount(at: &Path, size: &str) -> Option<Self> {
        std::fs::create_dir_all(at).unwrap();
        let mounted = std::process::Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={size}"), "tmpfs"])
            .arg(at)
            .status()
            .is_ok_and(|s| s.success());
        if !mounted {
            assert!(
                std::env::var_os("CI").is_none(),
                "CI runs as root and must be able to mount a small tmpfs"
            );
            #[allow(clippy::print_stderr, reason = "a skipped test says why")]
            {
                eprintln!("skipped: cannot mount a tmpfs here (not root)");
            }
            return None;
        }
        Some(Self(at.to_path_buf()))
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let _ = std::process::Command::new("umount").arg(&self.0).status();
    }
}

/// A full disk: every writer exits 74 naming the file it could not write, and leaves nothing.
#[test]
fn a_full_disk_is_an_io_error_naming_the_file() {
    let dir = tempfile::tempdir().unwrap();
    let full = dir.path().join("full");
    let Some(_fs) = Tmpfs::mount(&full, "64k") else {
        return;
    };
    let big = dir.path().join("big.parquet");
    crate::support::gen_rows(&big, 5_000, 3);
    for (args, out) in [
        (vec!["convert"], "rows.parquet"),
        (vec!["convert"], "rows.jsonl"),
        (vec!["select"], "picked.parquet"),
        (vec!["export", "--no-validate"], "train.jsonl"),
    ] {
        let target = full.join(out);
        let failed = wai()
            .args(&args)
            .arg(&big)
            .arg("--out")
            .arg(&target)
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&failed.stderr);
        assert_eq!(failed.status.code(), Some(74), "{args:?} {out}: {err}");
        assert!(
            err.contains("No space left on device") && err.contains("full/"),
            "{args:?} {out}: {err}"
        );
        assert!(
            tree(&full).is_empty(),
            "{args:?} {out}: left {:?}",
            tree(&full)
        );
    }
}

/// A full disk where the rejects go: the main output is not committed either.
#[test]
fn an_output_is_committed_with_its_rejects_or_not_at_all() {
    let dir = tempfile::tempdir().unwrap();
    let full = dir.path().join("full");
    let Some(_fs) = Tmpfs::mount(&full, "16k") else {
        return;
    };
    // Fill it.
    let _ = std::fs::write(full.join("filler"), vec![b'x'; 64 * 1024]);
    // Rows with many bad lines, whose rejects do not fit.
    let mut text = std::fs::read_to_string(fixture("example_rows.jsonl")).unwrap();
    for i in 0..200 {
        let _ = writeln!(
            text,
            "{{\"task_id\": {i}, \"reward\": \"not a number {}\"}}",
            "x".repeat(200)
        );
    }
    let input = dir.path().join("rows.jsonl");
    std::fs::write(&input, text).unwrap();
    let out = dir.path().join("out.parquet");
    let failed = wai()
        .arg("convert")
        .arg(&input)
        .arg("--out")
        .arg(&out)
        .arg("--rejects")
        .arg(full.join("rejects.jsonl"))
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&failed.stderr);
    assert!(!failed.status.success(), "{err}");
    assert!(err.contains("rejects.jsonl"), "names the file: {err}");
    assert!(
        !out.exists(),
        "the main output was committed without its rejects"
    );
    let left: Vec<String> = tree(dir.path())
        .into_iter()
        .filter(|p| {
            #[allow(
                clippy::case_sensitive_file_extension_comparisons,
                reason = "wai names its temporary files in lower case"
            )]
            p.ends_with(".tmp")
        })
        .collect();
    assert!(left.is_empty(), "temporary files left: {left:?}");
}

#[test]
fn temporary_files_of_killed_runs_are_not_rows_and_are_cleaned() {
    let dir = tempfile::tempdir().unwrap();
    let runs = dir.path().join("runs");
    std::fs::create_dir(&runs).unwrap();
    std::fs::copy(fixture("example_scored.jsonl"), runs.join("a.jsonl")).unwrap();
    // What a killed `wai convert --out runs/b.jsonl` leaves: a temporary file of rows.
    let stale = runs.join(".b.jsonl.Ab12Cd.tmp");
    std::fs::copy(fixture("example_scored.jsonl"), &stale).unwrap();
    let fresh = runs.join(".b.jsonl.Zz99Yy.tmp");
    std::fs::write(&fresh, "{}\n").unwrap();
    let two_days = std::time::SystemTime::now() - std::time::Duration::from_hours(48);
    std::fs::File::options()
        .write(true)
        .open(&stale)
        .unwrap()
        .set_modified(two_days)
        .unwrap();
    let glob = format!("{}/*", runs.display());
    let r = crate::support::report_of(wai().args(["--json", "pass-at", &glob]));
    assert_eq!(r["results"][0]["n_rows"], 200, "only a.jsonl is read: {r}");
    // The next write beside them removes the stale one, not the fresh one (a live run's).
    succeeded(
        wai()
            .arg("convert")
            .arg(runs.join("a.jsonl"))
            .arg("--out")
            .arg(runs.join("b.jsonl")),
    );
    assert!(!stale.exists(), "the stale temporary file is gone");
    assert!(fresh.exists(), "a recent one may be a live run's");
    assert_eq!(read_jsonl(&runs.join("b.jsonl")).len(), 200);
}

/// A file moved over an input while select reads it: select either read the new file both
/// times (the swap came first) or refuses, never a selection made from two files.
#[test]
fn select_refuses_an_input_swapped_while_it_reads() {
    let dir = tempfile::tempdir().unwrap();
    let a = dir.path().join("a.parquet");
    let b = dir.path().join("b.parquet");
    crate::support::gen_rows(&a, 60_000, 1);
    crate::support::gen_rows(&b, 60_000, 2);
    let input = dir.path().join("rows.parquet");
    let out = dir.path().join("picked.parquet");
    let mut swapped_in_time = 0;
    for delay_ms in [200u64, 600] {
        std::fs::copy(&a, &input).unwrap();
        let staged = dir.path().join("staged.parquet");
        std::fs::copy(&b, &staged).unwrap();
        let child = std::process::Command::new(assert_cmd::cargo::cargo_bin("wai"))
            .args(["--json", "select"])
            .arg(&input)
            .args(["--target", "2000", "--out"])
            .arg(&out)
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        std::thread::sleep(std::time::Duration::from_millis(delay_ms));
        std::fs::rename(&staged, &input).unwrap();
        let done = child.wait_with_output().unwrap();
        let err = String::from_utf8_lossy(&done.stderr);
        if done.status.success() {
            // Read whole from one file: the same selection as from b alone.
            let alone = dir.path().join("alone.parquet");
            succeeded(
                wai()
                    .arg("select")
                    .arg(&b)
                    .args(["--target", "2000", "--out"])
                    .arg(&alone),
            );
            assert_eq!(std::fs::read(&out).unwrap(), std::fs::read(&alone).unwrap());
        } else {
            assert_eq!(done.status.code(), Some(65), "{err}");
            assert!(err.contains("changed while it was being read"), "{err}");
            swapped_in_time += 1;
        }
    }
    eprintln!("{swapped_in_time} of 2 swaps landed mid-run");
}

/// The rejects file is an output too: never an input, never the main output.
#[test]
fn rejects_never_land_on_an_input_or_the_output() {
    let dir = tempfile::tempdir().unwrap();
    let input = dir.path().join("rows.jsonl");
    std::fs::copy(fixture("example_scored.jsonl"), &input).unwrap();
    let out = dir.path().join("out.parquet");
    for rejects in [&input, &out] {
        refused(
            wai()
                .arg("convert")
                .arg(&input)
                .arg("--out")
                .arg(&out)
                .arg("--rejects")
                .arg(rejects),
            "",
        );
    }
    assert_eq!(
        std::fs::read(&input).unwrap(),
        std::fs::read(fixture("example_scored.jsonl")).unwrap()
    );
    assert!(!out.exists());
    // `wai sql --out` is no way around it either.
    let parquet = dir.path().join("rows.parquet");
    succeeded(wai().arg("convert").arg(&input).arg("--out").arg(&parquet));
    refused(
        wai()
            .arg("sql")
            .arg("SELECT * FROM rows WHERE reward = 1")
            .args(["--format", "parquet", "--table"])
            .arg(&parquet)
            .arg("--out")
            .arg(&parquet),
        "is an input",
    );
}
