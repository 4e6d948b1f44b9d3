//! The pipeline file: its inputs, its stages (each a wai command with its flags) and its gates,
//! parsed and checked before anything is read.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use clap::{CommandFactory as _, Parser as _};
use serde_json::{Value, json};

use super::gates::{Gate, parse_gate};
use crate::cli::Cli;
use crate::error::{Error, Result};

/// A stage's table, with where each key and value was written.
type Table = BTreeMap<toml::Spanned<String>, toml::Spanned<toml::Value>>;

/// What a stage does with rows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Role {
    /// Reads the pipeline's new input files and writes rows (`ingest`, `convert`).
    Intake,
    /// Reads the new rows and writes rows under the folder it names.
    Data(&'static str),
    /// Reads the new rows and writes an export under `exports/`.
    Export,
    /// Reads rows and writes only its report.
    Measure,
    /// Reads a baseline and the new rows.
    Compare,
}

/// The commands a pipeline may run, and what each does with rows.
pub(super) const KINDS: &[(&str, Role)] = &[
    ("ingest", Role::Intake),
    ("convert", Role::Intake),
    ("grade", Role::Data("scored")),
    ("decontaminate", Role::Data("guarded")),
    ("select", Role::Data("selected")),
    ("export", Role::Export),
    ("pass-at", Role::Measure),
    ("markers", Role::Measure),
    ("gate", Role::Measure),
    ("variance", Role::Measure),
    ("judge-trust", Role::Measure),
    ("hack-scan", Role::Measure),
    ("compare", Role::Compare),
];

/// Keys of a stage table that are the pipeline's, not the command's flags.
const OWN_KEYS: &[&str] = &["run", "name", "over", "baseline"];

/// Flags the pipeline sets itself (inputs and outputs), or that would change what the run prints.
const SET_BY_RUN: &[&str] = &[
    "out",
    "to",
    "json",
    "quiet",
    "verbose",
    "help",
    "version",
    "add-counts",
    "save-counts",
    "counts-cover",
];

/// The pipeline file, as written.
#[derive(Debug, serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct File {
    /// The lake's folder (made if missing).
    lake: String,
    /// The inputs.
    input: InputSpec,
    /// The stages, in order.
    #[serde(default, rename = "stage")]
    stages: Vec<Table>,
    /// The gates.
    #[serde(default)]
    gates: Vec<toml::Spanned<String>>,
    /// How many MiB of columns the measures' shared scan may keep (0: none kept).
    #[serde(default)]
    shared_scan_mib: Option<u64>,
}

/// `[input]`.
#[derive(Debug, serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct InputSpec {
    /// Files, folders or globs.
    paths: Vec<String>,
}

/// Which rows a measure reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Over {
    /// Every row the pipeline has taken in, in every committed run and this one.
    All,
    /// This run's new rows (the default).
    New,
}

/// What a compare stage reads as its before arm.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Baseline {
    /// The previous committed run's rows (skipped when there is none).
    Previous,
    /// A named run's rows.
    Run(String),
    /// Rows at a path.
    Path(String),
}

/// One stage, checked.
#[derive(Debug, Clone)]
pub(super) struct Stage {
    pub(super) name: String,
    pub(super) kind: &'static str,
    pub(super) role: Role,
    /// The line its table starts on.
    pub(super) line: usize,
    /// Its flags, as `--key=value` words.
    pub(super) flags: Vec<String>,
    pub(super) over: Over,
    pub(super) baseline: Option<Baseline>,
    /// The export's format, to name its output.
    pub(super) export_folder: bool,
}

/// The pipeline, checked.
#[derive(Debug)]
pub(super) struct Pipeline {
    pub(super) lake: PathBuf,
    pub(super) inputs: Vec<String>,
    pub(super) stages: Vec<Stage>,
    pub(super) gates: Vec<Gate>,
    pub(super) digest: String,
    /// What the measures' shared scan may keep, in bytes (`None`: the default).
    pub(super) shared_scan: Option<u64>,
}

/// The line of byte `offset` in `text`.
fn line_of(text: &str, offset: usize) -> usize {
    memchr::memchr_iter(b'\n', &text.as_bytes()[..offset.min(text.len())]).count() + 1
}

/// A usage error naming the pipeline file and a line.
pub(super) fn at(file: &Path, line: usize, message: impl std::fmt::Display) -> Error {
    Error::Usage(format!("{}, line {line}: {message}", file.display()))
}

/// The flags `kind` takes: each long name and whether it is a switch (takes no value).
fn flags_of(kind: &str) -> Vec<(String, bool)> {
    let cli = Cli::command();
    let Some(sub) = cli.find_subcommand(kind) else {
        return Vec::new();
    };
    sub.get_arguments()
        .filter_map(|a| {
            let long = a.get_long()?;
            let switch = matches!(
                a.get_action(),
                clap::ArgAction::SetTrue | clap::ArgAction::SetFalse | clap::ArgAction::Count
            );
            Some((long.to_owned(), switch))
        })
        .collect()
}

/// A TOML value as the words of a flag's value, or why it cannot be one.
fn words(value: &toml::Value) -> std::result::Result<Vec<String>, &'static str> {
    match value {
        toml::Value::String(s) => Ok(vec![s.clone()]),
        toml::Value::Integer(i) => Ok(vec![i.to_string()]),
        toml::Value::Float(f) => Ok(vec![f.to_string()]),
        toml::Value::Boolean(b) => Ok(vec![b.to_string()]),
        toml::Value::Array(items) => {
            let mut out = Vec::new();
            for item in items {
                if matches!(item, toml::Value::Array(_) | toml::Value::Table(_)) {
                    return Err("an array of arrays or tables is no flag's value");
                }
                out.extend(words(item)?);
            }
            Ok(out)
        }
        toml::Value::Table(_) => Err("a table is no flag's value"),
        toml::Value::Datetime(_) => Err("a date is no flag's value: quote it"),
    }
}

/// Parses and checks `text`, the pipeline file at `file`: every key known, every stage's flags
/// accepted by its command, every gate naming a stage. Nothing is read or written.
pub(super) fn parse(file: &Path, text: &str) -> Result<Pipeline> {
    let spec: File = toml::from_str(text)
        .map_err(|e| Error::Usage(format!("{}: {}", file.display(), e.to_string().trim_end())))?;
    if spec.input.paths.is_empty() {
        return Err(Error::Usage(format!(
            "{}: `[input] paths` names no file: give the files, folders or globs to read",
            file.display()
        )));
    }
    let mut stages: Vec<Stage> = Vec::new();
    for table in &spec.stages {
        let stage = parse_stage(file, text, table, &stages)?;
        stages.push(stage);
    }
    if stages.is_empty() {
        return Err(Error::Usage(format!(
            "{}: no `[[stage]]`: a pipeline runs at least one",
            file.display()
        )));
    }
    // Every stage's command line is parsed now: a bad flag value fails before any work.
    for stage in &stages {
        let out = output_of(stage, "RUN");
        let before = (stage.role == Role::Compare).then_some("BEFORE");
        let argv = command_line(stage, &[], &["IN".into()], out.as_deref(), before);
        if let Err(e) = Cli::try_parse_from(&argv) {
            let first = e.to_string();
            let first = first
                .lines()
                .next()
                .unwrap_or("")
                .trim_start_matches("error: ");
            return Err(at(
                file,
                stage.line,
                format!("stage `{}`: {first}", stage.name),
            ));
        }
    }
    let mut gates = Vec::new();
    for gate in &spec.gates {
        gates.push(parse_gate(gate.get_ref(), &stages).map_err(|why| {
            at(
                file,
                line_of(text, gate.span().start),
                format!("gate `{}`: {why}", gate.get_ref()),
            )
        })?);
    }
    // The history key: what the stages do to which inputs (the gates only judge, so editing one
    // keeps the history).
    let described: Vec<Value> = stages
        .iter()
        .map(|s| {
            json!({"name": s.name, "kind": s.kind, "flags": s.flags,
                   "over": format!("{:?}", s.over), "baseline": format!("{:?}", s.baseline)})
        })
        .collect();
    let digest = crate::stages::simulate::hash::sha256_hex(
        &json!({"inputs": spec.input.paths, "stages": described}).to_string(),
    );
    Ok(Pipeline {
        lake: PathBuf::from(&spec.lake),
        shared_scan: spec.shared_scan_mib.map(|m| m.saturating_mul(1 << 20)),
        inputs: spec.input.paths,
        stages,
        gates,
        digest,
    })
}

/// The value of `key` in `table`.
fn get<'t>(table: &'t Table, key: &str) -> Option<&'t toml::Spanned<toml::Value>> {
    table
        .iter()
        .find(|(k, _)| k.get_ref() == key)
        .map(|(_, v)| v)
}

/// A stage's own keys: which rows a measure reads (`over`) and a compare's `baseline`.
fn own_options(
    file: &Path,
    text: &str,
    table: &Table,
    line: usize,
    kind: &str,
    role: Role,
) -> Result<(Over, Option<Baseline>)> {
    let over = match get(table, "over") {
        None => Over::New,
        Some(v) => match v.get_ref().as_str() {
            Some("all") if role == Role::Measure => Over::All,
            Some("new") if role == Role::Measure => Over::New,
            _ if role != Role::Measure => {
                return Err(at(
                    file,
                    line_of(text, v.span().start),
                    format!("`over` is for measures; `{kind}` reads this run's new rows"),
                ));
            }
            _ => {
                return Err(at(
                    file,
                    line_of(text, v.span().start),
                    "`over` is \"new\" (this run's rows, the default) or \"all\" (every row so far)",
                ));
            }
        },
    };
    let baseline = match (get(table, "baseline"), role) {
        (Some(v), Role::Compare) => {
            let Some(s) = v.get_ref().as_str() else {
                return Err(at(
                    file,
                    line_of(text, v.span().start),
                    "`baseline` must be a string",
                ));
            };
            Some(if s == "previous" {
                Baseline::Previous
            } else if let Some(id) = s.strip_prefix("run:") {
                Baseline::Run(id.to_owned())
            } else {
                Baseline::Path(s.to_owned())
            })
        }
        (None, Role::Compare) => {
            return Err(at(
                file,
                line,
                "a compare stage needs `baseline`: \"previous\" (the last run's rows), \"run:RUN_ID\" or rows' PATH",
            ));
        }
        (Some(v), _) => {
            return Err(at(
                file,
                line_of(text, v.span().start),
                format!("`baseline` is for compare stages, not `{kind}`"),
            ));
        }
        (None, _) => None,
    };
    Ok((over, baseline))
}

/// One `[[stage]]` table, checked: its command, name, own keys and flags.
fn parse_stage(file: &Path, text: &str, table: &Table, stages: &[Stage]) -> Result<Stage> {
    let line = table
        .keys()
        .map(|k| line_of(text, k.span().start))
        .min()
        .unwrap_or(1);
    let Some(run) = get(table, "run") else {
        return Err(at(file, line, "a `[[stage]]` needs `run = \"COMMAND\"`"));
    };
    let Some(run_name) = run.get_ref().as_str() else {
        return Err(at(
            file,
            line_of(text, run.span().start),
            "`run` must be a string",
        ));
    };
    let Some(&(kind, role)) = KINDS.iter().find(|(k, _)| *k == run_name) else {
        let names: Vec<String> = KINDS.iter().map(|(k, _)| format!("`{k}`")).collect();
        return Err(at(
            file,
            line_of(text, run.span().start),
            format!(
                "no stage `{run_name}`: a stage runs one of {}",
                names.join(", ")
            ),
        ));
    };
    let name = match get(table, "name") {
        Some(v) => v.get_ref().as_str().map(str::to_owned).ok_or_else(|| {
            at(
                file,
                line_of(text, v.span().start),
                "`name` must be a string",
            )
        })?,
        None => kind.replace('-', "_"),
    };
    if name.is_empty() || !name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_') {
        return Err(at(
            file,
            line,
            format!("the stage name `{name}` must be letters, digits and `_` (gates name it)"),
        ));
    }
    if stages.iter().any(|s| s.name == name) {
        return Err(at(
            file,
            line,
            format!("two stages are named `{name}`: give one `name = \"...\"`"),
        ));
    }
    let (over, baseline) = own_options(file, text, table, line, kind, role)?;
    let (flags, export_folder) = stage_flags(file, text, table, kind)?;
    Ok(Stage {
        name,
        kind,
        role,
        line,
        flags,
        over,
        baseline,
        export_folder,
    })
}

/// A stage's flags (`--key=value` words) from its table's keys other than the pipeline's own,
/// and whether it exports a folder.
fn stage_flags(file: &Path, text: &str, table: &Table, kind: &str) -> Result<(Vec<String>, bool)> {
    let known = flags_of(kind);
    let mut flags = Vec::new();
    let mut export_folder = false;
    for (key, value) in table {
        let key_text = key.get_ref().as_str();
        if OWN_KEYS.contains(&key_text) {
            continue;
        }
        let key_line = line_of(text, key.span().start);
        let long = key_text.replace('_', "-");
        if SET_BY_RUN.contains(&long.as_str()) {
            return Err(at(
                file,
                key_line,
                format!(
                    "`{key_text}` is set by the pipeline (a stage's inputs and outputs live in the lake)"
                ),
            ));
        }
        if matches!(long.as_str(), "cluster" | "cluster-split") {
            return Err(at(
                file,
                key_line,
                format!(
                    "`{key_text}` is the whole run's: give it to `wai run` (`--cluster`, or `WAI_CLUSTER`)"
                ),
            ));
        }
        if matches!(key_text, "gates" | "lake") {
            return Err(at(
                file,
                key_line,
                format!(
                    "`{key_text}` is read as the last stage's option here: TOML puts a key after a `[[stage]]` header in that stage, so write `{key_text}` at the top of the file, before the first table"
                ),
            ));
        }
        let Some((_, switch)) = known.iter().find(|(l, _)| *l == long) else {
            return Err(at(
                file,
                key_line,
                format!(
                    "`{key_text}` is not an option of `wai {kind}` (`wai {kind} --help` lists them)"
                ),
            ));
        };
        let values = words(value.get_ref())
            .map_err(|why| at(file, key_line, format!("`{key_text}`: {why}")))?;
        if *switch {
            match value.get_ref() {
                toml::Value::Boolean(true) => flags.push(format!("--{long}")),
                toml::Value::Boolean(false) => {}
                _ => {
                    return Err(at(
                        file,
                        key_line,
                        format!("`{key_text}` is a switch: true or false"),
                    ));
                }
            }
            continue;
        }
        if kind == "export" && long == "format" && values.iter().any(|v| v == "parquet") {
            export_folder = true;
        }
        flags.extend(values.into_iter().map(|v| format!("--{long}={v}")));
    }
    Ok((flags, export_folder))
}

/// The command line `stage` runs, with the flags the run adds (`extra`: stored counts), its
/// inputs, its output and a compare's before arm.
pub(super) fn command_line(
    stage: &Stage,
    extra: &[String],
    inputs: &[String],
    out: Option<&str>,
    before: Option<&str>,
) -> Vec<String> {
    let mut argv = vec!["wai".to_owned(), stage.kind.to_owned()];
    argv.extend(stage.flags.iter().cloned());
    argv.extend(extra.iter().cloned());
    if let Some(out) = out {
        argv.push(format!("--out={out}"));
    }
    if stage.kind == "export" && stage.export_folder {
        argv.push("--force".into());
    }
    argv.push("--".into());
    if let Some(before) = before {
        argv.push(before.to_owned());
    }
    argv.extend(inputs.iter().cloned());
    argv
}

/// The file a stage writes this run, relative to the lake.
pub(super) fn output_of(stage: &Stage, run_id: &str) -> Option<String> {
    match stage.role {
        Role::Intake => Some(format!("rows/run={run_id}/{}.parquet", stage.name)),
        Role::Data(folder) => Some(format!("{folder}/run={run_id}/{}.parquet", stage.name)),
        Role::Export if stage.export_folder => Some(format!("exports/run={run_id}/{}", stage.name)),
        Role::Export => Some(format!("exports/run={run_id}/{}.jsonl", stage.name)),
        Role::Measure | Role::Compare => None,
    }
}

/// `word` as a POSIX shell reads it back: as it is when it is plain, else in single quotes.
pub(super) fn quoted(word: &str) -> String {
    let plain = !word.is_empty()
        && word
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"_./=:@,+-%".contains(&b));
    if plain {
        word.to_owned()
    } else {
        format!("'{}'", word.replace('\'', "'\\''"))
    }
}

#[cfg(test)]
mod tests {
    use super::super::gates::{holds, lookup, parse_gate};
    use super::*;

    fn parsed(text: &str) -> Result<Pipeline> {
        parse(Path::new("p.toml"), text)
    }

    const GOOD: &str = r#"
lake = "lake"
gates = ["pass_at.pass_at_1 >= 0.5", "hack_scan.regime != 'reward_hack'"]
[input]
paths = ["in/*.jsonl"]

[[stage]]
run = "grade"
judge = ["sql:CASE WHEN final_text LIKE '%refund%' THEN 1 ELSE 0 END"]

[[stage]]
run = "pass-at"
by = ["dims.tier"]

[[stage]]
run = "hack-scan"
"#;

    #[test]
    fn a_pipeline_file_becomes_command_lines() {
        let p = parsed(GOOD).expect("parses");
        assert_eq!(p.stages.len(), 3);
        assert_eq!(p.stages[1].name, "pass_at");
        let argv = command_line(&p.stages[1], &[], &["a.parquet".into()], None, None);
        assert_eq!(
            argv,
            ["wai", "pass-at", "--by=dims.tier", "--", "a.parquet"]
        );
        assert_eq!(p.gates.len(), 2);
    }

    #[test]
    fn an_unknown_key_is_named_with_its_line() {
        let bad = GOOD.replace("by = [", "byy = [");
        let e = parsed(&bad).expect_err("refused").to_string();
        assert!(
            e.contains("line 13") && e.contains("`byy` is not an option of `wai pass-at`"),
            "{e}"
        );
        let bad = GOOD.replace("[input]", "lakes = 1\n[input]");
        let e = parsed(&bad).expect_err("refused").to_string();
        assert!(e.contains("lakes") && e.contains("line 4"), "{e}");
        let bad = GOOD.replace("run = \"hack-scan\"", "run = \"hack-scan\"\nout = \"x\"");
        assert!(
            parsed(&bad)
                .expect_err("refused")
                .to_string()
                .contains("set by the pipeline")
        );
        let bad = GOOD.replace(
            "run = \"hack-scan\"",
            "run = \"hack-scan\"\ncluster = \"http://w1:7070\"",
        );
        let e = parsed(&bad).expect_err("refused").to_string();
        assert!(e.contains("line 17") && e.contains("whole run's"), "{e}");
    }

    #[test]
    fn a_bad_flag_value_and_a_gate_on_no_stage_fail_before_any_work() {
        let bad = GOOD.replace(
            "run = \"hack-scan\"",
            "run = \"hack-scan\"\nseed = \"many\"",
        );
        let e = parsed(&bad).expect_err("refused").to_string();
        assert!(
            e.contains("stage `hack_scan`") && e.contains("line 16"),
            "{e}"
        );
        let bad = GOOD.replace("pass_at.pass_at_1", "pasat.pass_at_1");
        let e = parsed(&bad).expect_err("refused").to_string();
        assert!(e.contains("no stage `pasat`"), "{e}");
    }

    #[test]
    fn gates_read_the_report_and_the_overall_result() {
        let p = parsed(GOOD).expect("parses");
        let report =
            json!({"results": [{"pass_at_1": 0.6, "ci95": [0.5, 0.7]}], "regime": "train"});
        let g = &p.gates[0];
        let v = lookup(&report, &g.path).cloned().unwrap_or_default();
        assert!(holds(g, &v));
        let g = parse_gate("pass_at.ci95.0 > 0.55", &p.stages).expect("gate");
        assert!(!holds(&g, lookup(&report, &g.path).unwrap_or(&Value::Null)));
        let g = &p.gates[1];
        assert!(holds(g, lookup(&report, &g.path).unwrap_or(&Value::Null)));
        assert!(!holds(g, &json!("reward_hack")));
        // A field the report lacks fails the gate: it does not pass by default.
        let g = parse_gate("pass_at.nothing >= 0", &p.stages).expect("gate");
        assert!(!holds(&g, lookup(&report, &g.path).unwrap_or(&Value::Null)));
        assert!(!holds(
            &parse_gate("hack_scan.regime != x", &p.stages).expect("g"),
            &Value::Null
        ));
    }

    #[test]
    fn the_plan_quotes_words_a_shell_would_split() {
        assert_eq!(quoted("--by=dims.tier"), "--by=dims.tier");
        assert_eq!(quoted("--judge=sql:a > 1"), "'--judge=sql:a > 1'");
        assert_eq!(quoted("it's"), "'it'\\''s'");
    }
}
