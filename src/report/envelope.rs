//! The `--json` document every command prints: one typed envelope around the command's report.
//!
//! ```json
//! {"version": 2, "command": "pass-at", "inputs": ["runs/*.parquet"], "outputs": [],
//!  "elapsed_s": 0.21, "warnings": [], "report": {...}}
//! ```
//!
//! `docs/json.md` documents it and `docs/json.schema.json` is its JSON Schema; a test holds
//! every command's `--json` to the schema.

use serde::Serialize;

/// The envelope's version: 2 put each command's report under `report` (version 1 spread its
/// keys beside `version` and `command`).
pub const VERSION: u32 = 2;

/// A command's `--json` document.
#[derive(Debug, Clone, Serialize)]
pub struct Envelope<R> {
    /// [`VERSION`].
    pub version: u32,
    /// The command (`pass-at`; a subcommand joined by a dash: `labels-attach`).
    pub command: String,
    /// What it read, as named on the command line (after glob expansion where it reads files).
    pub inputs: Vec<String>,
    /// What it wrote.
    pub outputs: Vec<Output>,
    /// Wall time from start to report, in seconds.
    pub elapsed_s: f64,
    /// Warnings, each a sentence for a person and, where the command gives one, a stable code.
    pub warnings: Vec<Warning>,
    /// The command's own report.
    pub report: R,
}

/// A warning: what is wrong and how to fix it, with a stable code where there is one.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Warning {
    /// A stable id (`no_tool_called`, `few_tasks`), for programs to match on.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub code: Option<String>,
    /// The sentence.
    pub message: String,
}

impl From<&str> for Warning {
    fn from(message: &str) -> Self {
        Self {
            code: None,
            message: message.to_owned(),
        }
    }
}

impl From<String> for Warning {
    fn from(message: String) -> Self {
        Self {
            code: None,
            message,
        }
    }
}

impl Warning {
    /// A warning with a code.
    pub fn coded(code: impl Into<String>, message: impl Into<String>) -> Self {
        Self {
            code: Some(code.into()),
            message: message.into(),
        }
    }
}

/// One thing a command wrote.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Output {
    /// Where.
    pub path: String,
    /// What: `rows`, `rejects`, `folder`, `file`, `checkpoint`, `log`.
    pub kind: &'static str,
    /// How many rows (or records) it holds, where that is a count of rows.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rows: Option<u64>,
}

impl Output {
    /// An output of `kind` at `path`.
    pub fn new(path: impl std::fmt::Display, kind: &'static str) -> Self {
        Self {
            path: path.to_string(),
            kind,
            rows: None,
        }
    }

    /// The same, holding `rows` rows.
    #[must_use]
    pub fn rows(mut self, rows: u64) -> Self {
        self.rows = Some(rows);
        self
    }
}

impl<R> Envelope<R> {
    /// The envelope of `command` around `report`, with no inputs, outputs or warnings yet
    /// (`elapsed_s` is filled in by the caller that timed the run).
    pub fn new(command: impl Into<String>, report: R) -> Self {
        Self {
            version: VERSION,
            command: command.into(),
            inputs: Vec::new(),
            outputs: Vec::new(),
            elapsed_s: 0.0,
            warnings: Vec::new(),
            report,
        }
    }

    /// With these inputs.
    #[must_use]
    pub fn inputs<S: std::fmt::Display>(mut self, inputs: impl IntoIterator<Item = S>) -> Self {
        self.inputs = inputs.into_iter().map(|s| s.to_string()).collect();
        self
    }

    /// With this output added.
    #[must_use]
    pub fn output(mut self, output: Output) -> Self {
        self.outputs.push(output);
        self
    }

    /// With these warnings added.
    #[must_use]
    pub fn warnings<W: Into<Warning>>(mut self, warnings: impl IntoIterator<Item = W>) -> Self {
        self.warnings.extend(warnings.into_iter().map(Into::into));
        self
    }
}

impl<R: Serialize> Envelope<R> {
    /// The envelope as the JSON document a command prints.
    ///
    /// # Errors
    /// The report does not serialize (a map with non-string keys): a bug.
    pub fn to_json(&self) -> crate::Result<serde_json::Value> {
        serde_json::to_value(self)
            .map_err(|e| crate::Error::Internal(format!("a report does not serialize: {e}")))
    }

    /// The envelope with its report as a JSON value (what [`crate::commands`] hands to `main`).
    ///
    /// # Errors
    /// The report does not serialize (a map with non-string keys): a bug.
    pub fn erased(self) -> crate::Result<Envelope<serde_json::Value>> {
        let report = serde_json::to_value(&self.report)
            .map_err(|e| crate::Error::Internal(format!("a report does not serialize: {e}")))?;
        Ok(Envelope {
            version: self.version,
            command: self.command,
            inputs: self.inputs,
            outputs: self.outputs,
            elapsed_s: self.elapsed_s,
            warnings: self.warnings,
            report,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_report_goes_under_its_own_key() {
        let doc = Envelope::new("gate", serde_json::json!({"pass_at_1": 0.5}))
            .inputs(["a.parquet"])
            .output(Output::new("b.parquet", "rows").rows(3))
            .warnings(["few tasks"])
            .erased()
            .unwrap();
        let v = serde_json::to_value(&doc).unwrap();
        assert_eq!(v["version"], 2);
        assert_eq!(v["command"], "gate");
        assert_eq!(v["report"]["pass_at_1"], 0.5);
        assert_eq!(v["outputs"][0]["rows"], 3);
        assert_eq!(v["warnings"][0]["message"], "few tasks");
        assert!(v.get("pass_at_1").is_none());
    }
}
