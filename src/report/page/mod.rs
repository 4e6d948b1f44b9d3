//! `wai report`'s page: one self-contained HTML file (inline CSS, script and SVG; nothing from
//! the network) that shows a run's numbers as charts, with a transcript browser.
//!
//! The page is made in two steps. [`Page`] gathers each section's data from the stages' own
//! reports, as their `--json` documents hold them (rows given to `wai report` are measured by the
//! same stages first), so every figure on the page is a figure a command prints. [`html`] then
//! draws it: charts as SVG ([`svg`]), tables, and the data itself embedded as JSON
//! (`<script id="wai-data" type="application/json">`), which the browser's script reads and a
//! program can too.

pub(crate) mod svg;
pub(crate) mod transcripts;

use std::collections::BTreeMap;
use std::fmt::Write as _;

use serde_json::{Value, json};

use self::svg::{Bar, Cell, Estimate, Series, escape, num, with_interval};
pub(crate) use self::transcripts::Transcripts;
use crate::error::{Error, Result};

/// The version of the embedded data's shape (`docs/commands/report.md`).
pub(crate) const DATA_VERSION: u32 = 1;

/// A section's data and where it came from (an input's name).
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub(crate) struct Sourced<T = Value> {
    /// The input it came from.
    pub source: String,
    /// The stage's report (its `--json` document's `report`).
    pub report: T,
}

/// A warning shown before the numbers.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub(crate) struct PageWarning {
    /// The input it came from.
    pub source: String,
    /// Its stable code, where the stage has one.
    pub code: Option<String>,
    /// The words.
    pub message: String,
    /// Whether it makes the run hollow (its numbers not worth reading).
    pub hollow: bool,
}

/// A lake's history: its canned queries' rows.
#[derive(Debug, Clone, Default, serde::Serialize, serde::Deserialize)]
pub(crate) struct Trend {
    /// The lake.
    pub source: String,
    /// `lake_pass_at_trend`'s rows.
    pub pass_at: Vec<Value>,
    /// `lake_compare_history`'s rows.
    pub compare: Vec<Value>,
}

/// Everything the page shows; each section only when its data is there.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub(crate) struct Page {
    /// [`DATA_VERSION`].
    pub version: u32,
    /// The page's title.
    pub title: String,
    /// The wai that made it.
    pub wai: String,
    /// The inputs, as named on the command line.
    pub inputs: Vec<String>,
    /// Warnings, the hollow ones first.
    pub warnings: Vec<PageWarning>,
    /// pass@k reports (their `slices` are the forest plots).
    pub pass_at: Vec<Sourced>,
    /// `failures_by_tool_tier`'s rows.
    pub failures: Option<Sourced<Vec<Value>>>,
    /// Markers reports.
    pub markers: Vec<Sourced>,
    /// Compare reports.
    pub compare: Vec<Sourced>,
    /// Judge-trust reports.
    pub judge_trust: Vec<Sourced>,
    /// Hack-scan reports.
    pub hack_scan: Vec<Sourced>,
    /// Decontaminate reports.
    pub decontaminate: Vec<Sourced>,
    /// Select reports.
    pub select: Vec<Sourced>,
    /// Variance reports.
    pub variance: Vec<Sourced>,
    /// A lake's history.
    pub trend: Vec<Trend>,
    /// The transcript browser's rows.
    pub transcripts: Option<Transcripts>,
    /// Documents of commands that have no section, by input.
    pub not_shown: Vec<Sourced<String>>,
}

impl Page {
    /// An empty page.
    pub(crate) fn new(title: String, inputs: Vec<String>) -> Self {
        Self {
            version: DATA_VERSION,
            title,
            wai: env!("CARGO_PKG_VERSION").to_owned(),
            inputs,
            warnings: Vec::new(),
            pass_at: Vec::new(),
            failures: None,
            markers: Vec::new(),
            compare: Vec::new(),
            judge_trust: Vec::new(),
            hack_scan: Vec::new(),
            decontaminate: Vec::new(),
            select: Vec::new(),
            variance: Vec::new(),
            trend: Vec::new(),
            transcripts: None,
            not_shown: Vec::new(),
        }
    }

    /// Adds a warning unless the page already has its words.
    pub(crate) fn warn(
        &mut self,
        source: &str,
        code: Option<String>,
        message: String,
        hollow: bool,
    ) {
        if let Some(w) = self.warnings.iter_mut().find(|w| w.message == message) {
            w.hollow |= hollow;
            return;
        }
        self.warnings.push(PageWarning {
            source: source.to_owned(),
            code,
            message,
            hollow,
        });
    }

    /// Adds the gate's report: its pass@k numbers and its warnings, the hollow ones marked.
    pub(crate) fn add_gate(&mut self, source: &str, report: &Value) {
        for w in report["warnings"].as_array().into_iter().flatten() {
            if let Some(text) = w["text"].as_str() {
                self.warn(
                    source,
                    w["kind"].as_str().map(str::to_owned),
                    text.to_owned(),
                    w["hollow"].as_bool().unwrap_or(false),
                );
            }
        }
        if report["pass_at"].is_object() {
            self.pass_at.push(Sourced {
                source: source.to_owned(),
                report: report["pass_at"].clone(),
            });
        }
    }

    /// Adds a `--json` document of an earlier command (`docs/json.md`): its report goes to the
    /// section of its command, its warnings before the numbers.
    ///
    /// # Errors
    /// Not an envelope (no `command` or `report`).
    pub(crate) fn add_document(&mut self, source: &str, doc: &Value) -> Result<()> {
        let (Some(command), Some(report)) = (doc["command"].as_str(), doc.get("report")) else {
            return Err(Error::Input {
                stage: "report".into(),
                message: format!(
                    "`{source}` is not a `--json` document of wai (an object with `command` and `report`; make one with `wai --json COMMAND ... > {source}`)"
                ),
            });
        };
        let sourced = || Sourced {
            source: source.to_owned(),
            report: report.clone(),
        };
        match command {
            "gate" | "demo" | "grade" => self.add_gate(source, report),
            "pass-at" => self.pass_at.push(sourced()),
            "markers" => self.markers.push(sourced()),
            "compare" => self.compare.push(sourced()),
            "judge-trust" => self.judge_trust.push(sourced()),
            "hack-scan" => self.hack_scan.push(sourced()),
            "decontaminate" => self.decontaminate.push(sourced()),
            "select" => self.select.push(sourced()),
            "variance" => self.variance.push(sourced()),
            other => self.not_shown.push(Sourced {
                source: source.to_owned(),
                report: other.to_owned(),
            }),
        }
        // The gate's warnings came with their hollow marks above.
        if !matches!(command, "gate" | "demo" | "grade") {
            for w in doc["warnings"].as_array().into_iter().flatten() {
                if let Some(message) = w["message"].as_str() {
                    self.warn(
                        source,
                        w["code"].as_str().map(str::to_owned),
                        message.to_owned(),
                        false,
                    );
                }
            }
        }
        Ok(())
    }

    /// The tasks other sections link into the transcript browser (a judge's disagreements).
    pub(crate) fn linked_tasks(&self) -> Vec<String> {
        let mut tasks: Vec<String> = self
            .judge_trust
            .iter()
            .flat_map(|j| {
                j.report["disagreements"]
                    .as_array()
                    .cloned()
                    .unwrap_or_default()
            })
            .filter_map(|d| d["task"].as_str().map(str::to_owned))
            .collect();
        tasks.sort();
        tasks.dedup();
        tasks
    }

    /// The sections the page shows, as (anchor, heading), in page order.
    pub(crate) fn sections(&self) -> Vec<(&'static str, &'static str)> {
        let mut out = Vec::new();
        if !self.warnings.is_empty() {
            out.push(("warnings", "Warnings"));
        }
        if !self.pass_at.is_empty() {
            out.push(("headline", "pass@k"));
        }
        if self.pass_at.iter().any(|p| has_items(&p.report["slices"])) {
            out.push(("slices", "By slice"));
        }
        if self.failures.as_ref().is_some_and(|f| !f.report.is_empty()) {
            out.push(("failures", "Failures"));
        }
        if self.markers.iter().any(|m| {
            m.report["markers"]
                .as_object()
                .is_some_and(|o| !o.is_empty())
        }) {
            out.push(("markers", "Policy rules"));
        }
        if !self.compare.is_empty() {
            out.push(("compare", "Compare"));
        }
        if !self.variance.is_empty() {
            out.push(("variance", "Variance"));
        }
        if !self.judge_trust.is_empty() {
            out.push(("judge-trust", "Judge trust"));
        }
        if !self.hack_scan.is_empty() {
            out.push(("hack-scan", "Hack scan"));
        }
        if !self.decontaminate.is_empty() || !self.select.is_empty() {
            out.push(("funnel", "Guard and select"));
        }
        if !self.trend.is_empty() {
            out.push(("trend", "Over runs"));
        }
        if self.transcripts.is_some() {
            out.push(("transcripts", "Transcripts"));
        }
        out
    }

    /// Hollow warnings first, then in the order found; then every string the page holds (the
    /// reports, the rows, the names of the inputs, the titles) passes through the redactor, so a
    /// key a row, a file name or a server's reply quoted never reaches the page.
    ///
    /// # Errors
    /// The page does not serialize (a bug).
    pub(crate) fn finish(&mut self) -> Result<()> {
        self.warnings.sort_by_key(|w| !w.hollow);
        let bug = |e: serde_json::Error| {
            Error::Internal(format!("the report's data does not serialize: {e}"))
        };
        let mut value = serde_json::to_value(&*self).map_err(bug)?;
        crate::report::redact::redact_json(&mut value);
        *self = serde_json::from_value(value).map_err(bug)?;
        Ok(())
    }
}

fn has_items(v: &Value) -> bool {
    v.as_array().is_some_and(|a| !a.is_empty())
}

fn f(v: &Value, key: &str) -> Option<f64> {
    v.get(key).and_then(Value::as_f64)
}

fn u(v: &Value, key: &str) -> Option<u64> {
    v.get(key).and_then(Value::as_u64)
}

fn s<'a>(v: &'a Value, key: &str) -> &'a str {
    v.get(key).and_then(Value::as_str).unwrap_or_default()
}

fn ci(v: &Value, key: &str) -> Option<[f64; 2]> {
    let a = v.get(key)?.as_array()?;
    Some([a.first()?.as_f64()?, a.get(1)?.as_f64()?])
}

/// A count, or `n/a`.
fn count(n: Option<u64>) -> String {
    n.map_or_else(|| "n/a".to_owned(), |n| n.to_string())
}

/// The page's JSON, safe inside a `<script>` element: `<`, `>` and `&` as JSON escapes, so no
/// row can close the element.
fn script_json(page: &Page) -> Result<String> {
    let text = serde_json::to_string(page)
        .map_err(|e| Error::Internal(format!("the report's data does not serialize: {e}")))?;
    Ok(text
        .replace('<', "\\u003c")
        .replace('>', "\\u003e")
        .replace('&', "\\u0026")
        .replace('\u{2028}', "\\u2028")
        .replace('\u{2029}', "\\u2029"))
}

const CSS: &str = include_str!("assets/page.css");
const SCRIPT: &str = include_str!("assets/page.js");

/// The page as one HTML file.
///
/// # Errors
/// The data does not serialize (a bug).
pub(crate) fn html(page: &Page) -> Result<String> {
    let mut out = String::with_capacity(64 * 1024);
    let title = escape(&page.title);
    let _ = write!(
        out,
        "<!doctype html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><meta name=\"viewport\" content=\"width=device-width, initial-scale=1\"><meta name=\"generator\" content=\"wai {}\"><title>{title}</title><style>{CSS}</style></head><body>",
        escape(&page.wai)
    );
    let _ = write!(
        out,
        "<header><h1>{title}</h1><p class=\"meta\">wai {} · from {}</p><nav aria-label=\"sections\">",
        escape(&page.wai),
        escape(&page.inputs.join(", "))
    );
    for (anchor, heading) in page.sections() {
        let _ = write!(out, "<a href=\"#{anchor}\">{heading}</a>");
    }
    out.push_str("</nav></header><main>");
    warnings(&mut out, page);
    headline(&mut out, page);
    slices(&mut out, page);
    failures(&mut out, page);
    markers(&mut out, page);
    compare(&mut out, page);
    variance(&mut out, page);
    judge_trust(&mut out, page);
    hack_scan(&mut out, page);
    funnel(&mut out, page);
    trend(&mut out, page);
    browser(&mut out, page);
    if !page.not_shown.is_empty() {
        out.push_str(
            "<section id=\"not-shown\"><p class=\"note\">Inputs with no section of their own: ",
        );
        let names: Vec<String> = page
            .not_shown
            .iter()
            .map(|d| format!("{} (`wai {}`)", escape(&d.source), escape(&d.report)))
            .collect();
        out.push_str(&names.join(", "));
        out.push_str("; their warnings are shown above.</p></section>");
    }
    let _ = write!(
        out,
        "</main><footer>Made by wai {} from {}. Every figure is the one the stage's own command prints (pass-at, markers, compare, judge-trust, hack-scan, decontaminate, select), with its 95% interval and n. The page's data is embedded below as JSON (<code>#wai-data</code>).</footer>",
        escape(&page.wai),
        escape(&page.inputs.join(", "))
    );
    let _ = write!(
        out,
        "<script id=\"wai-data\" type=\"application/json\">{}</script><script>{SCRIPT}</script></body></html>",
        script_json(page)?
    );
    out.push('\n');
    Ok(out)
}

fn section_open(out: &mut String, anchor: &str, heading: &str) {
    let _ = write!(
        out,
        "<section id=\"{anchor}\" class=\"{anchor}\"><h2>{heading}</h2>"
    );
}

fn source_line(out: &mut String, source: &str, many: bool) {
    if many {
        let _ = write!(out, "<h3>{}</h3>", escape(source));
    }
}

fn warnings(out: &mut String, page: &Page) {
    if page.warnings.is_empty() {
        return;
    }
    section_open(out, "warnings", "Warnings: read these before the numbers");
    out.push_str("<ul>");
    for w in &page.warnings {
        let _ = write!(
            out,
            "<li{}><span class=\"code\">{}{}</span>{}</li>",
            if w.hollow { " class=\"hollow\"" } else { "" },
            if w.hollow { "hollow · " } else { "" },
            escape(w.code.as_deref().unwrap_or("warning")),
            escape(&w.message)
        );
    }
    out.push_str("</ul></section>");
}

fn card(out: &mut String, name: &str, value: Option<f64>, interval: Option<[f64; 2]>, n: &str) {
    let _ = write!(
        out,
        "<div class=\"card\"><div class=\"name\">{}</div><div class=\"big\">{}</div><div class=\"ci\">{}</div><div class=\"n\">{}</div></div>",
        escape(name),
        value.map_or_else(|| "n/a".to_owned(), num),
        interval.map_or_else(
            || "no interval".to_owned(),
            |[lo, hi]| format!("95% interval [{}, {}]", num(lo), num(hi))
        ),
        escape(n)
    );
}

fn headline(out: &mut String, page: &Page) {
    if page.pass_at.is_empty() {
        return;
    }
    section_open(out, "headline", "pass@1, pass^k and pass@k");
    let many = page.pass_at.len() > 1;
    for p in &page.pass_at {
        source_line(out, &p.source, many);
        let results = p.report["results"].as_array().cloned().unwrap_or_default();
        let Some(first) = results.first() else {
            out.push_str("<p class=\"note\">No row has a binary verdict: there is no pass@1.</p>");
            continue;
        };
        out.push_str("<div class=\"cards\">");
        card(
            out,
            "pass@1",
            f(first, "pass_at_1"),
            ci(first, "ci95"),
            &format!(
                "n = {} tasks, {} rows",
                count(u(first, "n_groups")),
                count(u(first, "n_rows"))
            ),
        );
        for r in &results {
            let k = u(r, "k").unwrap_or(0);
            if k < 2 {
                continue;
            }
            let at_k = format!(
                "n = {} tasks with {k}+ repeats",
                count(u(r, "n_groups_at_k"))
            );
            card(
                out,
                &format!("pass^{k} (all {k} pass)"),
                f(r, "pass_pow_k"),
                ci(r, "pass_pow_k_ci95"),
                &at_k,
            );
            card(
                out,
                &format!("pass@{k} (any of {k} passes)"),
                f(r, "pass_at_k"),
                ci(r, "pass_at_k_ci95"),
                &at_k,
            );
        }
        out.push_str("</div>");
        for r in &results {
            let note = s(r, "note");
            if !note.is_empty() {
                let _ = write!(
                    out,
                    "<p class=\"note\">k={}: {}</p>",
                    count(u(r, "k")),
                    escape(note)
                );
            }
        }
        // The note says it already, but for the reference's interval (`--interval percentile`).
        if first["interval_approximate"].as_bool() == Some(true)
            && s(first, "interval") == "percentile"
        {
            let _ = write!(
                out,
                "<p class=\"note\">interval approximate: {} tasks (the coverage study finds intervals under 93% below 20 tasks).</p>",
                count(u(first, "n_groups"))
            );
        }
        if let Some(n) = u(first, "n_unjudged").filter(|n| *n > 0) {
            let _ = write!(
                out,
                "<p class=\"note\">{n} rows without a reward (unjudged) are not counted.</p>"
            );
        }
        let _ = write!(
            out,
            "<p class=\"note\">Intervals: {} over tasks, seed {}.</p>",
            escape(s(first, "interval")),
            count(u(&p.report, "seed"))
        );
    }
    out.push_str("</section>");
}

fn slices(out: &mut String, page: &Page) {
    if !page.pass_at.iter().any(|p| has_items(&p.report["slices"])) {
        return;
    }
    section_open(out, "slices", "pass@1 by slice");
    let many = page.pass_at.len() > 1;
    for p in &page.pass_at {
        let Some(all) = p.report["slices"].as_array() else {
            continue;
        };
        source_line(out, &p.source, many);
        let overall = p.report["results"].get(0).and_then(|r| f(r, "pass_at_1"));
        // The slice keys in the report's order (`tier` first by default).
        let mut by: Vec<(&str, Vec<Estimate>)> = Vec::new();
        for slice in all {
            let Some(r) = slice["results"].get(0) else {
                continue;
            };
            let key = s(slice, "by");
            let at = by.iter().position(|(k, _)| *k == key).unwrap_or_else(|| {
                by.push((key, Vec::new()));
                by.len() - 1
            });
            by[at].1.push(Estimate {
                label: s(slice, "value").to_owned(),
                value: f(r, "pass_at_1"),
                interval: ci(r, "ci95"),
                n: format!("{} tasks", count(u(r, "n_groups"))),
                key: format!("{}={}", s(slice, "by"), s(slice, "value")),
            });
        }
        for (name, mut rows) in by {
            rows.sort_by(|a, b| {
                b.value
                    .unwrap_or(-1.0)
                    .total_cmp(&a.value.unwrap_or(-1.0))
                    .then_with(|| a.label.cmp(&b.label))
            });
            let _ = write!(
                out,
                "<h3>pass@1 by {} <span class=\"muted\">({} slices, the dashed line is the overall pass@1)</span></h3>",
                escape(name),
                rows.len()
            );
            let _ = write!(
                out,
                "<div class=\"forest-plot\" data-by=\"{}\">",
                escape(name)
            );
            out.push_str(&svg::forest(
                &rows,
                (0.0, 1.0),
                overall.map(|o| (o, "overall pass@1")),
                None,
                &format!("pass@1 by {name}, with 95% intervals"),
            ));
            out.push_str("</div>");
        }
    }
    out.push_str("</section>");
}

fn failures(out: &mut String, page: &Page) {
    let Some(failures) = page.failures.as_ref().filter(|f| !f.report.is_empty()) else {
        return;
    };
    section_open(out, "failures", "Failures by tool and tier");
    let rows = &failures.report;
    // Tools by failures (most first), tiers by name with `(none)` last.
    let mut tools: Vec<(String, u64)> = Vec::new();
    let mut tiers: Vec<String> = Vec::new();
    for r in rows {
        let tool = s(r, "tool").to_owned();
        let n = u(r, "failures").unwrap_or(0);
        match tools.iter_mut().find(|(t, _)| *t == tool) {
            Some((_, total)) => *total += n,
            None => tools.push((tool, n)),
        }
        let tier = s(r, "tier").to_owned();
        if !tiers.contains(&tier) {
            tiers.push(tier);
        }
    }
    tools.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
    tiers.sort_by_key(|t| (t == "(none)", t.clone()));
    let tool_names: Vec<String> = tools.into_iter().map(|(t, _)| t).collect();
    let cells: Vec<Cell> = rows
        .iter()
        .filter_map(|r| {
            let row = tool_names.iter().position(|t| t == s(r, "tool"))?;
            let col = tiers.iter().position(|t| t == s(r, "tier"))?;
            let rate = f(r, "fail_rate").unwrap_or(0.0);
            Some(Cell {
                row,
                col,
                share: rate,
                text: format!(
                    "{} · {}/{}",
                    num(rate),
                    count(u(r, "failures")),
                    count(u(r, "rollouts"))
                ),
                title: format!(
                    "{} × {}: fail rate {} (95% Wilson interval), {} failures of {} rollouts over {} tasks",
                    s(r, "tool"),
                    s(r, "tier"),
                    with_interval(f(r, "fail_rate"), f(r, "fail_low").zip(f(r, "fail_high")).map(|(lo, hi)| [lo, hi])),
                    count(u(r, "failures")),
                    count(u(r, "rollouts")),
                    count(u(r, "tasks"))
                ),
            })
        })
        .collect();
    out.push_str("<p class=\"note\">Each cell: the share of judged rollouts that failed, then failures/rollouts; darker is higher. Hover for the 95% Wilson interval and the tasks behind it (the interval treats rollouts as independent).</p>");
    out.push_str(&svg::heat_map(
        &tool_names,
        &tiers,
        &cells,
        "failure rate by tool and tier",
    ));
    out.push_str("</section>");
}

fn markers(out: &mut String, page: &Page) {
    let present: Vec<&Sourced> = page
        .markers
        .iter()
        .filter(|m| {
            m.report["markers"]
                .as_object()
                .is_some_and(|o| !o.is_empty())
        })
        .collect();
    if present.is_empty() {
        return;
    }
    section_open(out, "markers", "Policy rules (markers)");
    out.push_str("<p class=\"note\">Each rule's mean over tasks (1 = kept), with its 95% interval; lowest first.</p>");
    for m in &present {
        source_line(out, &m.source, present.len() > 1);
        let mut rows: Vec<Estimate> = m.report["markers"]
            .as_object()
            .into_iter()
            .flatten()
            .map(|(name, v)| Estimate {
                label: name.clone(),
                value: f(v, "mean"),
                interval: ci(v, "ci95"),
                n: format!(
                    "{} tasks, {} rows",
                    count(u(v, "n_tasks")),
                    count(u(v, "n_rows"))
                ),
                key: name.clone(),
            })
            .collect();
        rows.sort_by(|a, b| {
            a.value
                .unwrap_or(2.0)
                .total_cmp(&b.value.unwrap_or(2.0))
                .then_with(|| a.label.cmp(&b.label))
        });
        out.push_str(&svg::forest(
            &rows,
            (0.0, 1.0),
            None,
            None,
            "policy rule means with 95% intervals",
        ));
        for (name, v) in m.report["markers"].as_object().into_iter().flatten() {
            for key in ["warning", "note"] {
                if let Some(text) = v[key].as_str() {
                    let _ = write!(
                        out,
                        "<p class=\"note\">{}: {}</p>",
                        escape(name),
                        escape(text)
                    );
                }
            }
        }
    }
    out.push_str("</section>");
}

/// A symmetric domain around zero that holds every interval and the band.
fn delta_domain(rows: &[Estimate], band: Option<f64>) -> (f64, f64) {
    let mut m = band.unwrap_or(0.0);
    for r in rows {
        if let Some([lo, hi]) = r.interval {
            m = m.max(lo.abs()).max(hi.abs());
        }
        if let Some(v) = r.value {
            m = m.max(v.abs());
        }
    }
    let m = (m * 1.15).clamp(0.05, 1.0);
    (-m, m)
}

fn verdict_class(ok: Option<bool>) -> &'static str {
    match ok {
        Some(true) => "good",
        Some(false) => "bad",
        None => "",
    }
}

fn compare(out: &mut String, page: &Page) {
    if page.compare.is_empty() {
        return;
    }
    section_open(out, "compare", "Compare: before and after, task by task");
    for c in &page.compare {
        let r = &c.report;
        source_line(out, &c.source, true);
        let ok = r["ok"].as_bool();
        let _ = write!(
            out,
            "<p>Verdict: <span class=\"verdict-word {}\">{}</span> · gate {} · {} paired tasks ({} unpaired)</p>",
            verdict_class(ok),
            escape(s(r, "headline_word")),
            match ok {
                Some(true) => "passes",
                Some(false) => "fails",
                None => "not decided",
            },
            count(u(r, "n_paired_tasks")),
            count(u(r, "n_unpaired_tasks"))
        );
        let band = f(r, "noise_band");
        let mut rows = Vec::new();
        out.push_str("<table><thead><tr><th>metric</th><th>before</th><th>after</th><th>delta [95% interval]</th><th>p</th><th>tasks</th><th>noise band</th><th>word</th></tr></thead><tbody>");
        for (metric, m) in r["metrics"].as_object().into_iter().flatten() {
            let _ = write!(
                out,
                "<tr><td>{}</td><td class=\"num\">{}</td><td class=\"num\">{}</td><td class=\"num\">{}</td><td class=\"num\">{}</td><td class=\"num\">{}</td><td class=\"num\">{}</td><td>{}</td></tr>",
                escape(metric),
                f(m, "mean_a").map_or_else(|| "n/a".into(), num),
                f(m, "mean_b").map_or_else(|| "n/a".into(), num),
                with_interval(f(m, "delta"), ci(m, "ci95")),
                f(m, "p_value").map_or_else(|| "n/a".into(), num),
                count(u(m, "n_paired")),
                f(m, "noise_band").map_or_else(|| "none".into(), |b| format!("±{}", num(b))),
                escape(s(m, "word"))
            );
            rows.push(Estimate {
                label: format!("{metric} ({})", s(m, "word").replace('_', " ")),
                value: f(m, "delta"),
                interval: ci(m, "ci95"),
                n: format!("{} tasks", count(u(m, "n_paired"))),
                key: metric.clone(),
            });
        }
        out.push_str("</tbody></table>");
        if !rows.is_empty() {
            let domain = delta_domain(&rows, band);
            out.push_str("<p class=\"note\">Paired deltas (after − before) with 95% intervals; the shaded band is the noise band a change must clear.</p>");
            out.push_str(&svg::forest(
                &rows,
                domain,
                Some((0.0, "no change")),
                band.map(|b| [-b, b]),
                "paired deltas per metric with the noise band",
            ));
        }
        if let Some(groups) = r["groups"].as_object().filter(|g| !g.is_empty()) {
            let mut rows: Vec<Estimate> = groups
                .iter()
                .map(|(value, g)| Estimate {
                    label: value.clone(),
                    value: f(g, "delta"),
                    interval: ci(g, "ci95"),
                    n: format!("{} tasks", count(u(g, "n_paired"))),
                    key: value.clone(),
                })
                .collect();
            rows.sort_by(|a, b| a.value.unwrap_or(0.0).total_cmp(&b.value.unwrap_or(0.0)));
            let _ = write!(
                out,
                "<h4>{} by {}</h4>",
                escape(s(r, "headline_metric")),
                escape(s(r, "by"))
            );
            let domain = delta_domain(&rows, band);
            out.push_str(&svg::forest(
                &rows,
                domain,
                Some((0.0, "no change")),
                band.map(|b| [-b, b]),
                "paired deltas per slice",
            ));
        }
        let causes: Vec<&str> = r["not_comparable"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(Value::as_str)
            .collect();
        if !causes.is_empty() {
            let _ = write!(
                out,
                "<p class=\"note\">Not comparable: {}.</p>",
                escape(&causes.join(", "))
            );
        }
        if let Some(rule) = r["noise_rule"].as_str() {
            let _ = write!(out, "<p class=\"note\">{}</p>", escape(rule));
        }
    }
    out.push_str("</section>");
}

fn variance(out: &mut String, page: &Page) {
    if page.variance.is_empty() {
        return;
    }
    section_open(out, "variance", "Variance across runs");
    for v in &page.variance {
        let r = &v.report;
        source_line(out, &v.source, true);
        let _ = write!(
            out,
            "<p>{} over {} runs: mean {}, run-to-run std {}, noise band ±{} ({} df) · {}</p>",
            escape(s(r, "metric")),
            count(u(r, "n_runs")),
            f(r, "mean").map_or_else(|| "n/a".into(), num),
            f(r, "run_std").map_or_else(|| "n/a".into(), num),
            f(r, "noise_band").map_or_else(|| "n/a".into(), num),
            count(u(r, "noise_band_df")),
            escape(s(r, "stability"))
        );
    }
    out.push_str("</section>");
}

fn agreement_line(a: &Value) -> String {
    format!(
        "agreement {} · kappa {} · n {}",
        with_interval(f(a, "agreement"), ci(a, "ci95")),
        with_interval(f(a, "kappa"), ci(a, "kappa_ci95")),
        count(u(a, "n"))
    )
}

fn judge_trust(out: &mut String, page: &Page) {
    if page.judge_trust.is_empty() {
        return;
    }
    let linked = page.transcripts.is_some();
    section_open(
        out,
        "judge-trust",
        "Judge trust: the judge against hand labels",
    );
    for j in &page.judge_trust {
        let r = &j.report;
        source_line(out, &j.source, true);
        let _ = write!(
            out,
            "<p>Verdict: <span class=\"verdict-word {}\">{}</span> · {} labelled rows of {}</p>",
            verdict_class(r["ok"].as_bool()),
            escape(s(r, "headline")),
            count(u(r, "n_labeled")),
            count(u(r, "n_rows"))
        );
        let a = &r["agreement"];
        if a.is_object() {
            let _ = write!(
                out,
                "<p>{} (95% intervals: Wilson on agreement, Fleiss, Cohen and Everitt on kappa)</p>",
                escape(&agreement_line(a))
            );
            let c = &a["confusion"];
            let _ = write!(
                out,
                "<table class=\"confusion\"><thead><tr><th></th><th>judge: pass</th><th>judge: fail</th></tr></thead><tbody><tr><th>label: pass</th><td class=\"num\">{}</td><td class=\"num\">{}</td></tr><tr><th>label: fail</th><td class=\"num\">{}</td><td class=\"num\">{}</td></tr></tbody></table>",
                count(u(c, "tp")),
                count(u(c, "fn")),
                count(u(c, "fp")),
                count(u(c, "tn"))
            );
        }
        if let Some(halves) = r["held_out_halves"].as_object() {
            out.push_str("<h4>Held-out halves</h4><ul>");
            for (name, h) in halves {
                let _ = write!(
                    out,
                    "<li>half {}: {}</li>",
                    escape(name),
                    escape(&agreement_line(h))
                );
            }
            out.push_str("</ul>");
        }
        if let Some(ls) = r["length_sensitivity"].as_object() {
            out.push_str("<h4>Length sensitivity</h4><ul>");
            for side in ["gold_1", "gold_0"] {
                let v = &ls[side];
                let words = if let Some(note) = v["note"].as_str() {
                    format!("{} rows: {note}", count(u(v, "n")))
                } else {
                    format!(
                        "{} rows: the judge passes {} of short replies and {} of long ones (median {} characters), gap {} (p {})",
                        count(u(v, "n")),
                        f(v, "judge_pass_short").map_or_else(|| "n/a".into(), num),
                        f(v, "judge_pass_long").map_or_else(|| "n/a".into(), num),
                        f(v, "median_chars").map_or_else(|| "n/a".into(), num),
                        f(v, "gap_long_minus_short").map_or_else(|| "n/a".into(), num),
                        f(v, "p_value").map_or_else(|| "n/a".into(), num)
                    )
                };
                let label = if side == "gold_1" {
                    "labelled pass"
                } else {
                    "labelled fail"
                };
                let _ = write!(out, "<li>{label}: {}</li>", escape(&words));
            }
            out.push_str("</ul>");
        }
        let dis = r["disagreements"].as_array().cloned().unwrap_or_default();
        if !dis.is_empty() {
            let _ = write!(
                out,
                "<h4>Disagreements ({} shown)</h4><div class=\"scroll\"><table class=\"disagreements\"><thead><tr><th>task</th><th>label</th><th>judge</th><th>reason</th><th>reply</th></tr></thead><tbody>",
                dis.len()
            );
            for d in &dis {
                let task = escape(s(d, "task"));
                let task_cell = if linked {
                    format!(
                        "<a class=\"task-link\" href=\"#task={}\">{task}</a>",
                        escape(&percent_encode(s(d, "task")))
                    )
                } else {
                    task
                };
                let _ = write!(
                    out,
                    "<tr><td>{task_cell}</td><td class=\"num\">{}</td><td class=\"num\">{}</td><td>{}</td><td>{}</td></tr>",
                    count(u(d, "gold")),
                    count(u(d, "judge")),
                    escape(s(d, "reason")),
                    escape(s(d, "final_text"))
                );
            }
            out.push_str("</tbody></table></div>");
        }
    }
    out.push_str("</section>");
}

/// `text` as a URL fragment component (what `decodeURIComponent` reads back).
fn percent_encode(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for b in text.bytes() {
        if b.is_ascii_alphanumeric() || b"-_.!~*'()".contains(&b) {
            out.push(char::from(b));
        } else {
            let _ = write!(out, "%{b:02X}");
        }
    }
    out
}

fn hack_scan(out: &mut String, page: &Page) {
    if page.hack_scan.is_empty() {
        return;
    }
    section_open(out, "hack-scan", "Hack scan: what the reward teaches");
    for h in &page.hack_scan {
        let r = &h.report;
        source_line(out, &h.source, true);
        let regime = s(r, "regime");
        let _ = write!(
            out,
            "<p>Regime: <span class=\"verdict-word {}\">{}</span> · {} features, {} above the permutation floor {} ({} permutations) · {} rows in {} groups of more than one rollout</p>",
            if regime == "reward_hack" { "bad" } else { "" },
            escape(regime),
            count(u(r, "n_features")),
            count(u(r, "n_above_floor")),
            f(r, "tau").map_or_else(|| "n/a".into(), num),
            count(u(r, "n_perm")),
            count(u(r, "n_graded")),
            count(u(r, "n_groups_multi"))
        );
        let features = r["features"].as_array().cloned().unwrap_or_default();
        let tau = f(r, "tau");
        let m = features
            .iter()
            .filter_map(|x| f(x, "rho"))
            .fold(tau.unwrap_or(0.0), |m, v| m.max(v.abs()));
        let m = (m * 1.15).clamp(0.1, 1.0);
        let rows: Vec<Bar> = features
            .iter()
            .map(|x| {
                let rho = f(x, "rho").unwrap_or(0.0);
                let above = x["above_floor"].as_bool() == Some(true);
                Bar {
                    label: s(x, "name").to_owned(),
                    value: rho,
                    text: format!(
                        "ρ {}{} · n {}",
                        num(rho),
                        if above { " (above floor)" } else { "" },
                        count(u(x, "n_obs"))
                    ),
                    title: format!(
                        "{}: within-task ρ {}, pooled {}, {} observations; {}",
                        s(x, "name"),
                        num(rho),
                        f(x, "pooled").map_or_else(|| "n/a".into(), num),
                        count(u(x, "n_obs")),
                        if above {
                            "above the permutation floor"
                        } else {
                            "under the permutation floor (noise)"
                        }
                    ),
                    strong: above,
                }
            })
            .collect();
        if !rows.is_empty() {
            out.push_str("<p class=\"note\">Features of the replies ranked by their within-task rank correlation with the reward; the dashed lines are the permutation floor (|ρ| under it is noise).</p>");
            out.push_str(&svg::bars(
                &rows,
                (-m, m),
                tau,
                "features by within-task correlation with the reward",
            ));
        }
    }
    out.push_str("</section>");
}

/// A funnel's steps: what came in, what each gate dropped, what was left.
fn funnel_steps(r: &Value) -> (String, u64, Vec<(String, u64)>, Option<u64>) {
    let n = |k: &str| u(r, k).unwrap_or(0);
    if r.get("n_contaminated").is_some() {
        let steps = [
            ("same task as an eval item", "n_same_task"),
            ("exact match", "n_exact"),
            ("near match (n-grams)", "n_near"),
            ("semantic match", "n_semantic"),
        ]
        .iter()
        .map(|(label, key)| ((*label).to_owned(), n(key)))
        .collect();
        return ("decontaminate".into(), n("n"), steps, u(r, "n_kept"));
    }
    let mode = s(r, "mode");
    if mode == "preference" {
        let seen = n("prompts_seen");
        let steps = vec![(
            "prompts without a contrast".to_owned(),
            seen.saturating_sub(n("prompts_with_contrast")),
        )];
        return (
            "select (preference: prompts)".into(),
            seen,
            steps,
            u(r, "prompts_with_contrast"),
        );
    }
    let mut steps = vec![("privileged leaks".to_owned(), n("privileged_leaks_dropped"))];
    for (label, key) in [
        ("does nothing", "do_nothing"),
        ("incomplete or junk", "incomplete_junk"),
        ("unusable label", "unusable_label"),
    ] {
        if let Some(v) = u(&r["gates"], key) {
            steps.push((label.to_owned(), v));
        }
    }
    if mode == "sft" {
        steps.push(("not passing".to_owned(), n("n_not_pass")));
        steps.push(("junk".to_owned(), n("n_junk")));
    }
    steps.push(("duplicates".to_owned(), n("duplicates_dropped")));
    if let Some(t) = u(&r["truncated"], "dropped") {
        steps.push(("truncated".to_owned(), t));
    }
    steps.push(("unanimous groups".to_owned(), n("unanimous_groups_dropped")));
    steps.push((
        "too easy".to_owned(),
        u(&r["band_dropped"], "too_easy").unwrap_or(0),
    ));
    steps.push((
        "too hard".to_owned(),
        u(&r["band_dropped"], "too_hard").unwrap_or(0),
    ));
    let name = match u(r, "target") {
        Some(target) => format!("select ({mode}, --target {target})"),
        None => format!("select ({mode})"),
    };
    (name, n("n"), steps, u(r, "n_selected"))
}

fn funnel(out: &mut String, page: &Page) {
    if page.decontaminate.is_empty() && page.select.is_empty() {
        return;
    }
    section_open(out, "funnel", "Guard and select: what each gate dropped");
    for d in page.decontaminate.iter().chain(&page.select) {
        let (name, n, steps, kept) = funnel_steps(&d.report);
        let _ = write!(
            out,
            "<h3>{} <span class=\"muted\">({})</span></h3>",
            escape(&name),
            escape(&d.source)
        );
        let mut left = n;
        let mut bars = vec![Bar {
            label: "in".into(),
            value: n as f64,
            text: format!("{n} rows"),
            title: format!("{n} rows in"),
            strong: false,
        }];
        for (label, dropped) in steps.into_iter().filter(|(_, d)| *d > 0) {
            left = left.saturating_sub(dropped);
            bars.push(Bar {
                text: format!("{left} left (−{dropped})"),
                title: format!("{label}: {dropped} dropped, {left} left"),
                label,
                value: left as f64,
                strong: false,
            });
        }
        if let Some(kept) = kept {
            if kept < left {
                // What the named gates do not account for: select's cut to its target (whole
                // groups), or a gate the report does not itemise.
                let label = if d.report.get("target").is_some() {
                    "cut to the target"
                } else {
                    "other gates"
                };
                bars.push(Bar {
                    label: label.into(),
                    value: kept as f64,
                    text: format!("{kept} left (−{})", left - kept),
                    title: format!("{label}: {} dropped", left - kept),
                    strong: false,
                });
            }
            bars.push(Bar {
                label: "kept".into(),
                value: kept as f64,
                text: format!(
                    "{kept} kept ({})",
                    svg::num(if n > 0 { kept as f64 / n as f64 } else { 0.0 })
                ),
                title: format!("{kept} of {n} kept"),
                strong: true,
            });
        }
        out.push_str(&svg::bars(
            &bars,
            (0.0, (n as f64).max(1.0)),
            None,
            &format!("{name}: rows left after each gate"),
        ));
    }
    out.push_str("</section>");
}

fn trend(out: &mut String, page: &Page) {
    if page.trend.is_empty() {
        return;
    }
    section_open(out, "trend", "Over runs");
    for t in &page.trend {
        source_line(out, &t.source, page.trend.len() > 1);
        // Runs in time order, named by their start (`12-06 03:15`); one line per slice (per
        // stage and slice when several stages measure), pass@1 once per run.
        let mut runs: Vec<String> = Vec::new();
        let mut labels: Vec<String> = Vec::new();
        let stages: std::collections::BTreeSet<&str> =
            t.pass_at.iter().map(|r| s(r, "stage")).collect();
        let mut lines: BTreeMap<String, Vec<svg::Point>> = BTreeMap::new();
        for r in &t.pass_at {
            let run = s(r, "run_id").to_owned();
            let i = runs.iter().position(|x| *x == run).unwrap_or_else(|| {
                runs.push(run.clone());
                let time = s(r, "run_time");
                labels.push(
                    time.get(5..16)
                        .map_or_else(|| run.clone(), |t| t.replace('T', " ")),
                );
                runs.len() - 1
            });
            let name = if stages.len() > 1 {
                format!("{} {}", s(r, "stage"), s(r, "slice"))
            } else {
                s(r, "slice").to_owned()
            };
            let points = lines.entry(name.clone()).or_default();
            if points.iter().any(|p| p.0 == i) {
                continue;
            }
            let (Some(v), lo, hi) = (f(r, "pass_at_1"), f(r, "ci_low"), f(r, "ci_high")) else {
                continue;
            };
            let interval = lo.zip(hi).map(|(a, b)| [a, b]);
            points.push((
                i,
                v,
                interval,
                format!(
                    "{name}, run {run} ({}): pass@1 {} (n = {} tasks)",
                    s(r, "run_time"),
                    with_interval(Some(v), interval),
                    count(u(r, "n_groups"))
                ),
            ));
        }
        // Small multiples, one panel a line, each with its interval band: the overall line
        // first, then the slices with the most runs; nine panels at most.
        let mut series: Vec<Series> = lines
            .into_iter()
            .map(|(name, points)| Series { name, points })
            .collect();
        series.sort_by_key(|x| {
            (
                !x.name.ends_with("(all)"),
                std::cmp::Reverse(x.points.len()),
            )
        });
        let hidden = series.len().saturating_sub(9);
        series.truncate(9);
        if !series.is_empty() {
            let _ = write!(
                out,
                "<h3>pass@1 over {} runs <span class=\"muted\">(each panel one slice, its 95% interval shaded; hover a point for its numbers and n)</span></h3><div class=\"panels\">",
                runs.len()
            );
            for line in &series {
                let _ = write!(
                    out,
                    "<figure class=\"panel\"><figcaption>{}</figcaption>",
                    escape(&line.name)
                );
                out.push_str(&svg::trend(
                    &labels,
                    std::slice::from_ref(line),
                    (0.0, 1.0),
                    &format!("pass@1 of {} over runs with 95% intervals", line.name),
                ));
                out.push_str("</figure>");
            }
            out.push_str("</div>");
            if hidden > 0 {
                let _ = write!(
                    out,
                    "<p class=\"note\">{hidden} more slices are in the lake (`wai sql --lake LAKE --query lake_pass_at_trend`).</p>"
                );
            }
        }
        if !t.compare.is_empty() {
            out.push_str("<h3>Compare verdicts over runs</h3><table><thead><tr><th>run</th><th>time</th><th>stage</th><th>verdict</th><th>gate</th><th>metric</th><th>delta [95% interval]</th><th>paired tasks</th></tr></thead><tbody>");
            for r in &t.compare {
                let interval = f(r, "target_ci_low")
                    .zip(f(r, "target_ci_high"))
                    .map(|(a, b)| [a, b]);
                let _ = write!(
                    out,
                    "<tr><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td class=\"num\">{}</td><td class=\"num\">{}</td></tr>",
                    escape(s(r, "run_id")),
                    escape(s(r, "run_time")),
                    escape(s(r, "stage")),
                    escape(s(r, "headline_word")),
                    match r["ok"].as_bool() {
                        Some(true) => "passes",
                        Some(false) => "fails",
                        None => "n/a",
                    },
                    escape(s(r, "headline_metric")),
                    with_interval(f(r, "target_delta"), interval),
                    count(u(r, "n_paired_tasks"))
                );
            }
            out.push_str("</tbody></table>");
        }
    }
    out.push_str("</section>");
}

fn browser(out: &mut String, page: &Page) {
    let Some(t) = &page.transcripts else {
        return;
    };
    section_open(out, "transcripts", "Transcripts");
    let total = |k: &str| t.counts.total.get(k).copied().unwrap_or(0);
    let shown = |k: &str| t.counts.shown.get(k).copied().unwrap_or(0);
    let _ = write!(
        out,
        "<p class=\"note\" id=\"t-sampling\">This page holds {} of {} rows ({} of {} failures, {} of {} passes, {} of {} unjudged): {}. Texts are cut at {} characters.</p>",
        t.n_shown,
        t.n_rows,
        shown("fail"),
        total("fail"),
        shown("pass"),
        total("pass"),
        shown("unjudged"),
        total("unjudged"),
        escape(&t.sampling),
        t.max_chars
    );
    out.push_str(concat!(
        "<div class=\"controls\">",
        "<input id=\"t-search\" type=\"search\" placeholder=\"Search prompts, replies, reasons, ids\" aria-label=\"search transcripts\">",
        "<select id=\"t-verdict\" aria-label=\"verdict\"><option value=\"\">any verdict</option><option value=\"fail\">fail</option><option value=\"pass\">pass</option><option value=\"unjudged\">unjudged</option></select>",
        "<select id=\"t-tool\" aria-label=\"tool\"><option value=\"\">any tool</option></select>",
        "<select id=\"t-tier\" aria-label=\"tier\"><option value=\"\">any tier</option></select>",
        "<select id=\"t-slice\" aria-label=\"slice\"><option value=\"\">any slice</option></select>",
        "<select id=\"t-status\" aria-label=\"judge status\"><option value=\"\">any judge status</option></select>",
        "<select id=\"t-marker\" aria-label=\"broken rule\"><option value=\"\">any rule</option></select>",
        "</div><p class=\"muted\" id=\"t-count\" aria-live=\"polite\"></p>",
        "<div class=\"browser\"><div><ul id=\"t-list\"></ul><button id=\"t-more\" type=\"button\" hidden>show more</button></div>",
        "<div id=\"t-row\" hidden></div></div>",
        "<noscript><p>The transcript browser needs JavaScript; the rows are in the page's data (#wai-data).</p></noscript>"
    ));
    out.push_str("</section>");
}

/// What the command reports about the page it wrote.
pub(crate) fn summary(page: &Page, bytes: usize) -> Value {
    json!({
        "sections": page.sections().iter().map(|(a, _)| *a).collect::<Vec<_>>(),
        "bytes": bytes,
        "warnings": page.warnings.len(),
        "hollow": page.warnings.iter().any(|w| w.hollow),
        "transcripts": page.transcripts.as_ref().map(|t| json!({
            "rows": t.n_rows,
            "shown": t.n_shown,
            "sampling": t.sampling,
        })),
        "not_shown": page.not_shown.iter().map(|d| json!({"input": d.source, "command": d.report})).collect::<Vec<_>>(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn doc(command: &str, report: &Value) -> Value {
        json!({"version": 2, "command": command, "inputs": [], "outputs": [], "elapsed_s": 0.1,
               "warnings": [{"code": "c", "message": format!("{command} says so")}], "report": report})
    }

    #[test]
    fn documents_go_to_their_sections_and_warnings_come_first() {
        let mut page = Page::new("t".into(), vec!["a.json".into()]);
        page.add_document(
            "c.json",
            &doc(
                "compare",
                &json!({"ok": false, "headline_word": "FAIL", "metrics": {}}),
            ),
        )
        .unwrap();
        page.add_document(
            "g.json",
            &doc(
                "gate",
                &json!({"pass_at": {"results": [], "slices": []}, "warnings": [{"kind": "no_rows", "text": "no rows", "hollow": true}], "hollow": true}),
            ),
        )
        .unwrap();
        page.add_document("s.json", &doc("sql", &json!({})))
            .unwrap();
        page.finish().unwrap();
        assert_eq!(page.compare.len(), 1);
        assert_eq!(page.pass_at.len(), 1);
        assert_eq!(page.warnings[0].message, "no rows");
        assert!(page.warnings[0].hollow);
        assert_eq!(page.not_shown[0].report, "sql");
        let anchors: Vec<&str> = page.sections().iter().map(|(a, _)| *a).collect();
        assert_eq!(anchors, ["warnings", "headline", "compare"]);
        let e = page
            .add_document("x.json", &json!({"rows": 1}))
            .unwrap_err();
        assert!(
            e.to_string()
                .contains("`x.json` is not a `--json` document"),
            "{e}"
        );
    }

    #[test]
    fn the_embedded_data_cannot_close_its_script_element() {
        let mut page = Page::new("</script><script>alert(1)</script>".into(), vec![]);
        page.warn("x", None, "a </script> b & c".into(), false);
        let html = html(&page).unwrap();
        assert_eq!(
            html.matches("</script>").count(),
            2,
            "only the page's own two"
        );
        assert!(
            html.contains("<title>&lt;/script&gt;&lt;script&gt;alert(1)&lt;/script&gt;</title>")
        );
        let start = html
            .find("<script id=\"wai-data\" type=\"application/json\">")
            .unwrap();
        let body = &html[start..];
        let json_text = &body[body.find('>').unwrap() + 1..body.find("</script>").unwrap()];
        let back: Value = serde_json::from_str(json_text).unwrap();
        assert_eq!(back["warnings"][0]["message"], "a </script> b & c");
    }

    #[test]
    fn a_select_funnel_ends_at_what_was_kept() {
        let r = json!({"mode": "rl", "n": 100, "privileged_leaks_dropped": 2,
            "gates": {"do_nothing": 3, "incomplete_junk": 0, "unusable_label": 5},
            "duplicates_dropped": 10, "unanimous_groups_dropped": 20,
            "band_dropped": {"too_easy": 4, "too_hard": 6}, "n_selected": 45});
        let (name, n, steps, kept) = funnel_steps(&r);
        assert_eq!((name.as_str(), n, kept), ("select (rl)", 100, Some(45)));
        let dropped: u64 = steps.iter().map(|(_, d)| d).sum();
        assert_eq!(n - dropped, 50);
        let mut page = Page::new("t".into(), vec![]);
        page.select.push(Sourced {
            source: "s".into(),
            report: r,
        });
        let html = html(&page).unwrap();
        // 50 left after the named gates, 45 kept: the gap is drawn as "other gates".
        assert!(html.contains("other gates: 5 dropped"), "{html}");
        assert!(html.contains("45 of 100 kept"));
    }

    #[test]
    fn fragments_are_percent_encoded() {
        assert_eq!(percent_encode("task 1/ä"), "task%201%2F%C3%A4");
    }
}
