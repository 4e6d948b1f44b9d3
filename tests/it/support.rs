//! Helpers shared by the integration tests.

use std::path::{Path, PathBuf};

use assert_cmd::Command;
use serde_json::Value;

/// The `wai` binary, with a quiet, colourless environment.
pub(crate) fn wai() -> Command {
    let mut cmd = Command::cargo_bin("wai").expect("the wai binary is built");
    cmd.env_remove("RUST_LOG").env("NO_COLOR", "1");
    cmd
}

/// A fixture under `tests/fixtures/`.
pub(crate) fn fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures")
        .join(name)
}

/// The reference's measure-side test vectors (`tests/fixtures/vectors_measure.json`).
pub(crate) fn vectors() -> Value {
    serde_json::from_str(&std::fs::read_to_string(fixture("vectors_measure.json")).unwrap())
        .unwrap()
}

/// `items` as JSON Lines text: one per line, each line ended.
pub(crate) fn jsonl(items: impl IntoIterator<Item = impl std::fmt::Display>) -> String {
    use std::fmt::Write as _;
    items.into_iter().fold(String::new(), |mut text, item| {
        let _ = writeln!(text, "{item}");
        text
    })
}

/// Writes `rows` as JSONL to `path`.
pub(crate) fn write_rows(path: &Path, rows: &[Value]) {
    std::fs::write(path, jsonl(rows)).unwrap();
}

/// Reads a JSONL file into values.
pub(crate) fn read_jsonl(path: &Path) -> Vec<Value> {
    std::fs::read_to_string(path)
        .expect("readable")
        .lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| serde_json::from_str(l).expect("valid JSON"))
        .collect()
}

pub(crate) use wai::pipeline::row::json_eq;

/// Generates `rows` synthetic rows with `wai gen` into `path`.
pub(crate) fn gen_rows(path: &Path, rows: u64, seed: u64) {
    wai()
        .args([
            "gen",
            "--rows",
            &rows.to_string(),
            "--seed",
            &seed.to_string(),
            "--gold",
            "0.2",
            "--shortcut",
            "absolutely",
            "--out",
        ])
        .arg(path)
        .assert()
        .success();
}

/// Replaces a temp dir path with `[TMP]` for snapshots.
pub(crate) fn redact(text: &str, dir: &Path) -> String {
    text.replace(&dir.display().to_string(), "[TMP]")
}

/// Runs `cmd`, checks it succeeded (else fails with its stderr), and returns its output.
pub(crate) fn succeeded(cmd: &mut Command) -> std::process::Output {
    let out = cmd.output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

/// Runs `cmd` and checks it was refused as a usage error (exit 64) with `needle` in its stderr.
pub(crate) fn refused(cmd: &mut Command, needle: &str) {
    let out = cmd.output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(64), "{err}");
    assert!(err.contains(needle), "{err}");
}

/// The `--json` envelope's JSON Schema (`docs/json.schema.json`).
static ENVELOPE: std::sync::LazyLock<jsonschema::Validator> = std::sync::LazyLock::new(|| {
    let text = include_str!("../../docs/json.schema.json");
    jsonschema::validator_for(&serde_json::from_str(text).unwrap()).unwrap()
});

/// Parses `stdout` as a `--json` document and holds it to the envelope's schema.
pub(crate) fn envelope(stdout: &[u8]) -> Value {
    let doc: Value = serde_json::from_slice(stdout)
        .unwrap_or_else(|e| panic!("not JSON ({e}): {}", String::from_utf8_lossy(stdout)));
    let errors: Vec<String> = ENVELOPE
        .iter_errors(&doc)
        .map(|e| format!("{} at {}", e, e.instance_path()))
        .collect();
    assert!(
        errors.is_empty(),
        "not a --json envelope: {errors:?}\n{doc}"
    );
    doc
}

/// Runs `cmd` (a `wai --json ...` command), checks it succeeded and printed an envelope, and
/// returns the envelope.
pub(crate) fn json_of(cmd: &mut Command) -> Value {
    envelope(&succeeded(cmd).stdout)
}

/// Runs `cmd` (a `wai --json ...` command) as [`json_of`] does, and returns its report.
pub(crate) fn report_of(cmd: &mut Command) -> Value {
    json_of(cmd)["report"].take()
}

/// Runs `wai sql ARGS --format jsonl --table TABLE`, checks it succeeded, and parses the rows.
pub(crate) fn sql_jsonl(args: &[&str], table: &Path) -> Vec<Value> {
    let out = succeeded(
        wai()
            .arg("sql")
            .args(args)
            .args(["--format", "jsonl", "--table"])
            .arg(table),
    );
    String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}
