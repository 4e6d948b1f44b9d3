//! What an export reports: the counts, the gates that failed, the warnings, and who reads the
//! file and how it must be told to train what the counts say.

use std::fmt::Write as _;
use std::path::Path;

use serde::Serialize;

use super::{Format, MaskMode, Options, Tally};

/// A gate that failed: a stable code and what failed (`code: ...`, first row named).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Failure {
    /// `tool_call_roundtrip_invalid`, `privileged_leak`, `no_preference_pairs`.
    pub code: &'static str,
    /// The sentence, starting with the code.
    pub message: String,
}

/// What a caller adds to a warning's sentence to say how to act on it (in its own words: a
/// command names its flags).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Hint {
    /// The lines were kept although a gate failed (`no_validate`): said before the sentence.
    NoValidate,
    /// Export only the passes (select's SFT mode).
    SelectPasses,
    /// Give the tool schemas (`tools`).
    Tools,
    /// Give the system prompt (`system_prompt`).
    SystemPrompt,
    /// Export in the TRL format for TRL (`format`).
    TrlFormat,
}

/// A warning: a stable code, a sentence, and how to act on it where the caller says so.
#[derive(Debug, Clone, PartialEq)]
pub struct Warning {
    /// A stable id.
    pub code: &'static str,
    /// The sentence (without the hint).
    pub message: String,
    /// The hint the caller words.
    pub hint: Option<Hint>,
}

impl Warning {
    fn new(code: &'static str, message: String, hint: Option<Hint>) -> Self {
        Self {
            code,
            message,
            hint,
        }
    }

    /// The sentence with its hint: `before` and `after` are what the caller says for it.
    pub fn sentence(&self, before: &str, after: &str) -> String {
        format!("{before}{}{after}", self.message)
    }
}

/// The gates and warnings of a run: the failures, and what to say of the rows kept.
pub(crate) fn kept_failures(failures: &[Failure], opts: &Options) -> Vec<Warning> {
    if !opts.no_validate {
        return Vec::new();
    }
    failures
        .iter()
        .map(|f| Warning::new(f.code, f.message.clone(), Some(Hint::NoValidate)))
        .collect()
}

/// Calls checked by the round-trip gate, and how arguments are written.
#[derive(Debug, Clone, Serialize)]
pub struct RoundTrip {
    /// Calls checked.
    pub checked: u64,
    /// Calls whose arguments do not round-trip.
    pub invalid: u64,
    /// `dict` (TRL) or `json_string` (OpenAI).
    pub encoding: &'static str,
}

/// Who reads the file and how.
#[derive(Debug, Clone, Serialize)]
pub struct Trainer {
    /// The trainer and what it trains.
    pub reads: &'static str,
    /// What TRL would train of an OpenAI file.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub trl: Option<&'static str>,
    /// The trainer's settings that make it train what the counts say.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub config: Option<TrainerConfig>,
}

/// The one TRL setting that matters.
#[derive(Debug, Clone, Serialize)]
pub struct TrainerConfig {
    /// Prompt/completion rows.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub completion_only_loss: Option<bool>,
    /// Conversational rows.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub assistant_only_loss: Option<bool>,
}

/// Rows whose trailing turns were cut, and the turns.
#[derive(Debug, Clone, Serialize)]
pub struct TrailingCut {
    /// Rows.
    pub rows: u64,
    /// Turns.
    pub turns: u64,
}

/// The leak gate's counts.
#[derive(Debug, Clone, Serialize)]
pub struct Leaks {
    /// Some row had a privileged block.
    pub checked: bool,
    /// Rows checked.
    pub n_checked: u64,
    /// Rows that leak.
    pub n_leaked: u64,
}

/// Rewards of the rows read.
#[derive(Debug, Clone, Serialize)]
pub struct Rewards {
    /// 0.5 or more.
    pub n_pass: u64,
    /// Below 0.5.
    pub n_fail: u64,
    /// None.
    pub n_ungraded: u64,
}

/// What an export of rows reports.
#[derive(Debug, Clone, Serialize)]
pub struct Report {
    /// Training rows written.
    pub n: u64,
    /// Rows read.
    pub rows_read: u64,
    /// `openai`, `trl` or `parquet` (a datasets folder of TRL rows).
    pub format: &'static str,
    /// Training rows with a system prompt.
    pub with_system: u64,
    /// Training rows with tool schemas.
    pub with_tools: u64,
    /// Groups stamped.
    pub groups: usize,
    /// The round-trip gate.
    pub tool_call_roundtrip: RoundTrip,
    /// What the loss covers, in words.
    pub mask_mode: &'static str,
    /// Each assistant turn in a row of its own.
    pub unrolled: bool,
    /// The tool-output cap.
    pub max_tool_output_chars: Option<usize>,
    /// Tool outputs cut.
    pub tool_output_truncated: u64,
    /// Characters cut from them.
    pub tool_output_chars_cut: u64,
    /// Assistant turns trained.
    pub trained_messages: u64,
    /// Assistant turns masked.
    pub masked_messages: u64,
    /// Assistant turns TRL's `SFTTrainer` would train.
    pub trl_trained_messages: u64,
    /// Who reads the file.
    pub trainer: Trainer,
    /// Turns cut after the last assistant turn.
    pub trailing_turns_cut: TrailingCut,
    /// The leak gate.
    pub privileged_leaks: Leaks,
    /// The rewards read.
    pub rewards: Rewards,
    /// Rows with nothing to train, not written.
    pub no_completion_dropped: u64,
    /// The gates that failed (the caller keeps the lines only under `no_validate`).
    #[serde(skip)]
    pub failures: Vec<Failure>,
    /// The warnings.
    #[serde(skip)]
    pub warnings: Vec<Warning>,
}

impl Report {
    /// The report of `t`.
    pub fn of(t: &Tally, opts: &Options) -> Self {
        let failures = failures(t);
        let mut warnings = kept_failures(&failures, opts);
        warnings.extend(warnings_of(t, opts));
        Self {
            n: t.written,
            rows_read: t.rows,
            format: match (opts.datasets, opts.format) {
                (true, _) => "parquet",
                (false, Format::Openai) => "openai",
                (false, Format::Trl) => "trl",
            },
            with_system: t.with_system,
            with_tools: t.with_tools,
            groups: t.group_ids.len(),
            tool_call_roundtrip: RoundTrip {
                checked: t.calls,
                invalid: t.invalid_calls,
                encoding: if opts.format == Format::Trl {
                    "dict"
                } else {
                    "json_string"
                },
            },
            mask_mode: mask_text(opts),
            unrolled: opts.unroll,
            max_tool_output_chars: opts.max_tool_output_chars,
            tool_output_truncated: t.outputs_cut,
            tool_output_chars_cut: t.chars_cut,
            trained_messages: t.trained,
            masked_messages: t.masked,
            trl_trained_messages: t.trl_trained,
            trainer: trainer(opts),
            trailing_turns_cut: TrailingCut {
                rows: t.trailing_rows,
                turns: t.trailing_turns,
            },
            privileged_leaks: Leaks {
                checked: t.privileged_checked > 0,
                n_checked: t.privileged_checked,
                n_leaked: t.leaks,
            },
            rewards: Rewards {
                n_pass: t.pass,
                n_fail: t.fail,
                n_ungraded: t.ungraded,
            },
            no_completion_dropped: t.no_completion,
            failures,
            warnings,
        }
    }

    /// The gates that failed, joined, when they stop the run (`no_validate` unset).
    pub fn gate_failures(&self, opts: &Options) -> Option<String> {
        (!opts.no_validate && !self.failures.is_empty()).then(|| {
            self.failures
                .iter()
                .map(|f| f.message.as_str())
                .collect::<Vec<_>>()
                .join("; ")
        })
    }

    /// The summary for a person: what was exported, to `out` when given, with the metadata file
    /// beside it when there is one.
    pub fn summary(&self, out: Option<&Path>, meta: Option<&Path>) -> String {
        let to = out
            .map(|o| format!(" to `{}`", o.display()))
            .unwrap_or_default();
        let mut text = format!(
            "exported {} rows ({} read){to} as {}: {} with a system prompt, {} with tools, {} groups; {} tool calls round-trip ({} invalid); {} assistant turns trained and {} masked; leaks {} of {} checked; rewards: {} pass, {} fail, {} ungraded",
            self.n,
            self.rows_read,
            self.format,
            self.with_system,
            self.with_tools,
            self.groups,
            self.tool_call_roundtrip.checked,
            self.tool_call_roundtrip.invalid,
            self.trained_messages,
            self.masked_messages,
            self.privileged_leaks.n_leaked,
            self.privileged_leaks.n_checked,
            self.rewards.n_pass,
            self.rewards.n_fail,
            self.rewards.n_ungraded
        );
        if let Some(meta) = meta {
            let _ = write!(
                text,
                "\n  each row's reward, reason and provenance: `{}`, line for line",
                meta.display()
            );
        }
        if self.tool_output_truncated > 0 {
            let _ = write!(
                text,
                "\n  {} tool outputs cut ({} characters)",
                self.tool_output_truncated, self.tool_output_chars_cut
            );
        }
        text
    }
}

impl std::fmt::Display for Report {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.summary(None, None))
    }
}

/// The gates: calls whose arguments do not round-trip, rows that quote their privileged context.
fn failures(t: &Tally) -> Vec<Failure> {
    let mut failures = Vec::new();
    if t.invalid_calls > 0 {
        failures.push(Failure {
            code: "tool_call_roundtrip_invalid",
            message: format!(
                "tool_call_roundtrip_invalid: {} of {} tool calls do not parse back to structured arguments (first: row `{}`); training on them teaches string-wrapped arguments",
                t.invalid_calls,
                t.calls,
                t.first_invalid.as_deref().unwrap_or("?")
            ),
        });
    }
    if t.leaks > 0 {
        failures.push(Failure {
            code: "privileged_leak",
            message: format!(
                "privileged_leak: {} of {} rows quote their own privileged context in what is exported (a turn, a call, the reason or a field; first: row `{}`: \"{}\"); training on them teaches the answer key",
                t.leaks,
                t.privileged_checked,
                t.first_leak.as_ref().map_or("?", |l| l.0.as_str()),
                t.first_leak.as_ref().map_or("", |l| l.1.as_str())
            ),
        });
    }
    failures
}

/// What to say of the rows written.
fn warnings_of(t: &Tally, opts: &Options) -> Vec<Warning> {
    let mut w = Vec::new();
    if t.truncated > 0 {
        w.push(Warning::new("token_cap_targets", format!(
            "{} row(s) ended on the token cap (finish_reason length) and are exported as targets",
            t.truncated
        ), None));
    }
    if t.fail > 0 && !opts.unroll {
        w.push(Warning::new(
            "failing_targets",
            format!(
                "{} of {} rows have a reward below 0.5 and are exported as SFT targets",
                t.fail, t.rows
            ),
            Some(Hint::SelectPasses),
        ));
    }
    if t.eval_sourced > 0 {
        w.push(Warning::new("eval_rewards", format!(
            "{} row(s) carry rewards from an eval (lineage.source == \"eval\"); training on them turns the held-out scorer into the reward model",
            t.eval_sourced
        ), None));
    }
    if t.calls_tools > 0 && opts.tools.is_none() {
        w.push(Warning::new(
            "no_tool_schemas",
            format!(
                "{} row(s) call tools but the file has no tool schemas",
                t.calls_tools
            ),
            Some(Hint::Tools),
        ));
    }
    if t.has_policy_sha > 0 && opts.system_prompt.is_none() {
        w.push(Warning::new("no_system_prompt", format!(
            "{} row(s) were made under a system prompt (lineage.system_prompt_sha) and the file has none",
            t.has_policy_sha
        ), Some(Hint::SystemPrompt)));
    }
    if t.no_completion > 0 {
        w.push(Warning::new("no_completion_dropped", format!(
            "{} row(s) have no assistant turn to train (after the prompt) and were not written (no_completion_dropped; first: row `{}`)",
            t.no_completion,
            t.first_no_completion.as_deref().unwrap_or("?")
        ), None));
    }
    if t.trailing_rows > 0 {
        w.push(Warning::new("trailing_turns_cut", format!(
            "{} row(s) ended on a tool or user turn after the last assistant turn: those {} turn(s) were cut, so each conversation ends on what the policy wrote (first: row `{}`)",
            t.trailing_rows,
            t.trailing_turns,
            t.first_trailing.as_deref().unwrap_or("?")
        ), None));
    }
    if opts.format == Format::Openai && t.trl_trained != t.trained {
        w.push(Warning::new("trl_reads_no_weight", format!(
            "TRL reads no `weight`: loaded into TRL's SFTTrainer this file trains all {} assistant turns, not the {} the weights select",
            t.trl_trained, t.trained
        ), Some(Hint::TrlFormat)));
    }
    w
}

/// What the loss covers, in words.
fn mask_text(opts: &Options) -> &'static str {
    match (opts.format, opts.unroll, opts.mask_mode) {
        (Format::Trl, true, _) => "unrolled: each row trains its completion, one assistant turn",
        (Format::Trl, false, MaskMode::Final) => {
            "final: each row trains its completion, the last assistant turn"
        }
        (Format::Trl, false, MaskMode::Assistant) => "assistant: every assistant turn",
        (Format::Openai, true, _) => "unrolled: each row trains its last assistant turn (weight 1)",
        (Format::Openai, false, MaskMode::Final) => "final: the last assistant turn (weight 1)",
        (Format::Openai, false, MaskMode::Assistant) => {
            "assistant: every assistant turn (weight 1)"
        }
    }
}

/// Who reads the file, and how it must be told to train what the counts say.
fn trainer(opts: &Options) -> Trainer {
    match (
        opts.format,
        opts.unroll || opts.mask_mode == MaskMode::Final,
    ) {
        (Format::Openai, _) => Trainer {
            reads: "OpenAI chat fine-tuning: the assistant messages whose weight is 1",
            trl: Some(
                "TRL's SFTTrainer reads no weight: with assistant_only_loss=True it trains every assistant turn (trl_trained_messages)",
            ),
            config: None,
        },
        (Format::Trl, true) => Trainer {
            reads: "TRL SFTTrainer, conversational prompt/completion rows: the completion (completion_only_loss, its default)",
            trl: None,
            config: Some(TrainerConfig {
                completion_only_loss: Some(true),
                assistant_only_loss: None,
            }),
        },
        (Format::Trl, false) => Trainer {
            reads: "TRL SFTTrainer, conversational messages rows: the assistant turns, with assistant_only_loss=True and a chat template that marks them with {% generation %}; without it every token trains",
            trl: None,
            config: Some(TrainerConfig {
                completion_only_loss: None,
                assistant_only_loss: Some(true),
            }),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_failed_gate_stops_the_run_unless_the_rows_are_kept() {
        let t = Tally {
            rows: 2,
            calls: 3,
            invalid_calls: 1,
            first_invalid: Some("r1".into()),
            fail: 1,
            ..Tally::default()
        };
        let opts = Options::default();
        let r = Report::of(&t, &opts);
        assert_eq!(r.failures.len(), 1);
        assert!(
            r.gate_failures(&opts)
                .unwrap()
                .contains("1 of 3 tool calls")
        );
        assert!(r.warnings.iter().all(|w| w.hint != Some(Hint::NoValidate)));
        let kept = Options {
            no_validate: true,
            ..Options::default()
        };
        let r = Report::of(&t, &kept);
        assert!(r.gate_failures(&kept).is_none());
        assert_eq!(r.warnings[0].code, "tool_call_roundtrip_invalid");
        assert_eq!(r.warnings[0].hint, Some(Hint::NoValidate));
        assert_eq!(r.warnings[1].code, "failing_targets");
    }

    #[test]
    fn the_report_keeps_its_keys_in_order() {
        let r = Report::of(&Tally::default(), &Options::default());
        let v = serde_json::to_value(&r).unwrap();
        let keys: Vec<&str> = v.as_object().unwrap().keys().map(String::as_str).collect();
        assert_eq!(keys[..4], ["n", "rows_read", "format", "with_system"]);
        assert_eq!(keys.last(), Some(&"no_completion_dropped"));
        assert_eq!(
            v["trainer"]["trl"].as_str().map(|s| s.starts_with("TRL's")),
            Some(true)
        );
        assert!(
            r.to_string()
                .starts_with("exported 0 rows (0 read) as openai:")
        );
    }
}
