//! The study's rows as Markdown tables: one table per (family, quantity, parameter), a line per
//! (shape, k, method), a column per task count.

use std::fmt::Write as _;

use super::{Row, TASKS};
use crate::stats::interval::RELIABLE_TASKS;

/// Whether a quantity is a coverage (bold outside 93–98%) rather than an event rate.
fn is_coverage(quantity: &str) -> bool {
    !matches!(
        quantity,
        "p<0.05 under the null" | "noise band false alarm" | "moved under no change"
    )
}

fn title(r: &Row) -> String {
    match r.family {
        "compare" => format!("compare, {} (effect {})", r.quantity, r.param),
        "noise" => format!(
            "compare, {} ({} eval runs a side)",
            r.quantity, r.runs_per_arm
        ),
        "agreement" => "judge-trust, agreement (Wilson, z = 1.96)".to_owned(),
        "marker" => "markers, marker mean".to_owned(),
        _ => format!("pass-at, {}", r.quantity),
    }
}

fn entry(r: &Row) -> String {
    let Some(c) = r.rate else {
        return "–".to_owned();
    };
    let mut notes = Vec::new();
    let none = r.runs - r.printed;
    if none > 0 {
        let share = f64::from(none) / f64::from(r.runs) * 100.0;
        notes.push(format!("{share:.0}% none"));
    }
    // Under RELIABLE_TASKS every line of a method that warns carries the task-count warning, so
    // only the share from there up is worth a note.
    if r.warned > 0 && r.tasks >= RELIABLE_TASKS {
        let share = f64::from(r.warned) / f64::from(r.printed) * 100.0;
        // Neither "0%" nor "100%" unless it is.
        notes.push(if share < 1.0 {
            "<1% warned".to_owned()
        } else if share > 99.0 && r.warned < r.printed {
            ">99% warned".to_owned()
        } else {
            format!("{share:.0}% warned")
        });
    }
    let mut text = format!("{:.1}", c * 100.0);
    if !notes.is_empty() {
        let _ = write!(text, " ({})", notes.join(", "));
    }
    if !is_coverage(r.quantity) || (0.93..=0.98).contains(&c) {
        text
    } else if 2 * u64::from(r.warned) >= u64::from(r.printed) {
        // Outside 93–98%, but most runs' lines say the interval is approximate.
        format!("*{text}*")
    } else {
        format!("**{text}**")
    }
}

/// The rows as Markdown: coverage (or event rate) in percent; where a 95% interval covers under
/// 93% or over 98%, bold when most runs print it without a warning, italic when most runs' lines
/// say it is approximate; `(x% none)` where some runs print no interval, `(x% warned)` (from
/// [`RELIABLE_TASKS`] tasks) where some lines carry the warning.
pub fn markdown(rows: &[Row]) -> String {
    let mut out = String::new();
    let mut groups: Vec<(String, Vec<&Row>)> = Vec::new();
    for r in rows {
        let t = title(r);
        match groups.iter_mut().find(|(g, _)| *g == t) {
            Some((_, v)) => v.push(r),
            None => groups.push((t, vec![r])),
        }
    }
    for (t, rs) in groups {
        let _ = writeln!(out, "#### {t}\n");
        let runs = rs.iter().map(|r| r.runs).min().unwrap_or(0);
        let runs_max = rs.iter().map(|r| r.runs).max().unwrap_or(0);
        let runs_text = if runs == runs_max {
            format!("{runs} runs a cell")
        } else {
            format!("{runs} to {runs_max} runs a cell")
        };
        let _ = writeln!(out, "Percent of runs, {runs_text}.\n");
        let lead = if rs[0].family == "agreement" {
            "agreement rate"
        } else {
            "shape | k | method"
        };
        let cols: Vec<String> = TASKS.iter().map(usize::to_string).collect();
        let _ = writeln!(out, "| {lead} | {} |", cols.join(" | "));
        let dashes = lead.split('|').count() + TASKS.len();
        let _ = writeln!(out, "|{}", "---|".repeat(dashes));
        let mut lines: Vec<(String, Vec<&Row>)> = Vec::new();
        for r in rs {
            let head = if r.family == "agreement" {
                format!("{}", r.param)
            } else {
                format!("{} | {} | {}", r.shape, r.k, r.method)
            };
            match lines.iter_mut().find(|(h, _)| *h == head) {
                Some((_, v)) => v.push(r),
                None => lines.push((head, vec![r])),
            }
        }
        for (head, cells) in lines {
            let vals: Vec<String> = TASKS
                .iter()
                .map(|n| {
                    cells
                        .iter()
                        .find(|r| r.tasks == *n)
                        .map_or_else(String::new, |r| entry(r))
                })
                .collect();
            let _ = writeln!(out, "| {head} | {} |", vals.join(" | "));
        }
        out.push('\n');
    }
    out
}
