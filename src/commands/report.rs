//! `wai report`: one self-contained HTML page of a run (`docs/commands/report.md`).

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use datafusion::prelude::SessionContext;
use serde_json::Value;

use super::{Context, Outcome};
use crate::cli::{HollowArgs, ReportArgs};
use crate::error::{Error, ExitStatus, Result};
use crate::report::envelope::{Envelope, Output};
use crate::report::page::{self, Page, Sourced, Trend, transcripts};
use crate::stages::Session;
use crate::stages::grade::warnings::{JUDGE_FAILURE_SHARE, MIN_GRADED_SHARE};
use crate::stages::pass_at::Slice;

/// A `dims` key becomes a default slice when it has this many values or fewer (and two or more).
const MAX_SLICE_VALUES: i64 = 50;
/// Default slices drawn at most.
const MAX_DEFAULT_SLICES: usize = 8;

/// What one input is.
enum Input {
    /// Scored rows (any source `wai` reads rows from).
    Rows(String),
    /// A lake folder.
    Lake(PathBuf),
    /// A `--json` document.
    Document(PathBuf),
}

fn classify(input: &str) -> Input {
    let path = Path::new(input);
    let local = !input.contains("://");
    if local && path.is_dir() && path.join("_wai").join("lake.json").is_file() {
        return Input::Lake(path.to_path_buf());
    }
    if local
        && path
            .extension()
            .is_some_and(|e| e.eq_ignore_ascii_case("json"))
    {
        return Input::Document(path.to_path_buf());
    }
    Input::Rows(input.to_owned())
}

/// Checks the options before any input is read.
fn check(args: &ReportArgs) -> Result<()> {
    let out = &args.out;
    if !out
        .extension()
        .is_some_and(|e| e.eq_ignore_ascii_case("html") || e.eq_ignore_ascii_case("htm"))
    {
        return Err(Error::Usage(format!(
            "--out must name an `.html` file, not `{}`",
            out.display()
        )));
    }
    let parent = out.parent().filter(|p| !p.as_os_str().is_empty());
    if let Some(parent) = parent
        && !parent.is_dir()
    {
        return Err(Error::io(
            parent,
            std::io::Error::new(
                std::io::ErrorKind::NotFound,
                format!(
                    "--out `{}`: its folder does not exist (make it first)",
                    out.display()
                ),
            ),
        ));
    }
    for by in &args.by {
        if by.trim().is_empty() || by == "dims." {
            return Err(Error::Usage(format!(
                "--by `{by}` names no column: give a column (`category`) or `dims.KEY`"
            )));
        }
    }
    Ok(())
}

/// Runs `wai report`.
pub(crate) fn run(ctx: &Context, args: &ReportArgs) -> Result<Outcome> {
    check(args)?;
    let mut rows = Vec::new();
    let mut lakes = Vec::new();
    let mut documents = Vec::new();
    for input in &args.inputs {
        match classify(input) {
            Input::Rows(r) => rows.push(r),
            Input::Lake(l) => lakes.push(l),
            Input::Document(d) => documents.push(d),
        }
    }
    let title = args.title.clone().unwrap_or_else(|| {
        format!(
            "wai report: {}",
            args.inputs.first().map_or("", String::as_str)
        )
    });
    let mut page = Page::new(title, args.inputs.clone());
    // Documents first: they are small, and a bad one stops the run before the rows are read.
    for path in &documents {
        let doc = read_document(path)?;
        page.add_document(&path.display().to_string(), &doc)?;
    }
    for lake in &lakes {
        page.trend.push(lake_trend(ctx, lake)?);
    }
    if !rows.is_empty() {
        add_rows(ctx, &mut page, &rows, &Settings::of(args))?;
    }
    page.finish()?;
    let written = write(&page, &args.out)?;
    let summary = page::summary(&page, written);
    let mut text = format!(
        "wrote {} ({}): {}",
        args.out.display(),
        size_words(written),
        page.sections()
            .iter()
            .map(|(_, heading)| *heading)
            .collect::<Vec<_>>()
            .join(", ")
    );
    if let Some(t) = &page.transcripts {
        let _ = write!(
            text,
            "\ntranscripts: {} of {} rows ({})",
            t.n_shown, t.n_rows, t.sampling
        );
    }
    for d in &page.not_shown {
        let _ = write!(
            text,
            "\nnote: `{}` is a `wai {}` document, which has no section of its own (its warnings are shown)",
            d.source, d.report
        );
        if d.report == "run" {
            text.push_str("; give the lake folder instead: its runs' results are drawn over time");
        }
    }
    if args.open
        && let Err(why) = open(&args.out)
    {
        let _ = write!(text, "\nnote: could not open it: {why}");
    }
    let json = Envelope::new("report", &summary)
        .inputs(&args.inputs)
        .output(Output::new(args.out.display(), "file"))
        .to_json()?;
    Ok(Outcome {
        text,
        json,
        status: ExitStatus::Success,
    })
}

/// `1.2 MB`, `34 KB`.
fn size_words(bytes: usize) -> String {
    #[allow(clippy::cast_precision_loss)]
    let b = bytes as f64;
    if b >= 1e6 {
        format!("{:.1} MB", b / 1e6)
    } else {
        format!("{:.0} KB", (b / 1e3).max(1.0))
    }
}

/// Writes the page whole or not at all; returns its size.
pub(crate) fn write(page: &Page, out: &Path) -> Result<usize> {
    let html = page::html(page)?;
    crate::pipeline::shards::write_text(out, &html)?;
    Ok(html.len())
}

/// Opens `path` with the system's opener.
fn open(path: &Path) -> std::result::Result<(), String> {
    let opener = if cfg!(target_os = "macos") {
        "open"
    } else {
        "xdg-open"
    };
    std::process::Command::new(opener)
        .arg(path)
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .map(drop)
        .map_err(|e| format!("`{opener}` did not start ({e})"))
}

fn read_document(path: &Path) -> Result<Value> {
    let text = std::fs::read_to_string(path).map_err(|e| Error::read(path, e))?;
    serde_json::from_str(&text).map_err(|e| Error::Input {
        stage: "report".into(),
        message: format!(
            "`{}` line {} column {}: not a JSON document ({e}); `wai report` reads `.json` files as the `--json` documents of wai commands, rows as `.jsonl` or `.parquet`",
            path.display(),
            e.line(),
            e.column()
        ),
    })
}

/// The options the rows' sections take.
pub(crate) struct Settings {
    /// `--by`.
    pub by: Vec<String>,
    /// `--max-rows`.
    pub max_rows: usize,
    /// `--max-chars`.
    pub max_chars: usize,
    /// `--seed`.
    pub seed: u64,
}

impl Settings {
    fn of(args: &ReportArgs) -> Self {
        Self {
            by: args.by.clone(),
            max_rows: args.max_rows,
            max_chars: usize::try_from(args.max_chars).unwrap_or(usize::MAX),
            seed: args.seed,
        }
    }

    /// The settings `wai demo` draws its page with.
    pub(crate) fn demo(seed: u64) -> Self {
        Self {
            by: Vec::new(),
            max_rows: 1000,
            max_chars: 2000,
            seed,
        }
    }
}

/// The `dims` keys to slice on when `--by` names none: those with 2 to [`MAX_SLICE_VALUES`]
/// values, `tier` first, at most [`MAX_DEFAULT_SLICES`].
async fn default_slices(context: &SessionContext) -> Result<Vec<String>> {
    let rows = query_rows(
        context,
        "SELECT e['key'] AS key, count(DISTINCT e['value']) AS n \
         FROM (SELECT unnest(map_entries(dims)) AS e FROM rows WHERE dims IS NOT NULL) \
         GROUP BY 1",
    )
    .await?;
    let mut keys: Vec<String> = Vec::new();
    for row in rows {
        let n = row.get("n").and_then(Value::as_i64).unwrap_or(0);
        if let Some(key) = row.get("key").and_then(Value::as_str)
            && (2..=MAX_SLICE_VALUES).contains(&n)
        {
            keys.push(key.to_owned());
        }
    }
    keys.sort_by_key(|k| (k != "tier", k.clone()));
    keys.truncate(MAX_DEFAULT_SLICES);
    Ok(keys.into_iter().map(|k| format!("dims.{k}")).collect())
}

/// Measures `rows` as the stages do and adds what they report: the gate's pass@k with slices and
/// warnings, failures by tool and tier, markers, and the transcript browser's rows.
///
/// # Errors
/// The rows do not read; a stage fails.
pub(crate) fn add_rows(
    ctx: &Context,
    page: &mut Page,
    rows: &[String],
    settings: &Settings,
) -> Result<()> {
    let source = rows.join(", ");
    let (context, _scratch) = super::rows_session(ctx, rows)?;
    // Rows from another writer may lack the optional columns: a section whose columns are not
    // there is left out, not failed.
    let columns: Vec<String> = ctx.runtime.block_on(async {
        let frame = context.table("rows").await?;
        Ok::<_, Error>(
            frame
                .schema()
                .fields()
                .iter()
                .map(|f| f.name().clone())
                .collect(),
        )
    })?;
    let has = |c: &str| columns.iter().any(|x| x == c);
    let by = if !settings.by.is_empty() {
        settings.by.clone()
    } else if has("dims") {
        ctx.runtime.block_on(default_slices(&context))?
    } else {
        Vec::new()
    };
    add_pass_at(ctx, &context, page, &source, settings.seed, &by, &has)?;
    let with_failures = ["dims", "tools_used", "reward"].iter().all(|c| has(c));
    let with_markers = has("markers");
    let (failures, markers) = ctx.runtime.block_on(async {
        let failures = if with_failures {
            canned_rows(&context, "failures_by_tool_tier").await?
        } else {
            Vec::new()
        };
        if !with_markers {
            return Ok::<_, Error>((failures, None));
        }
        let frame = context.table("rows").await?;
        let opts = crate::stages::markers::Options {
            names: Vec::new(),
            seed: settings.seed,
            draws: crate::stats::bootstrap::DRAWS,
            interval: crate::stats::interval::Method::default(),
        };
        let markers = crate::stages::run::<crate::stages::markers::MarkersStage>(
            &Session::from_context(context.clone()),
            crate::stages::markers::Inputs { rows: frame },
            &opts,
        )
        .await?;
        Ok((failures, Some(markers)))
    })?;
    page.failures = Some(Sourced {
        source: source.clone(),
        report: failures,
    });
    if let Some(markers) = markers {
        page.markers.push(Sourced {
            source: source.clone(),
            report: to_value(&markers)?,
        });
    }
    if settings.max_rows > 0 {
        let opts = transcripts::Options {
            max_rows: settings.max_rows,
            max_chars: settings.max_chars,
            seed: settings.seed,
            linked_tasks: page.linked_tasks(),
            slice_keys: by
                .iter()
                .filter_map(|b| b.strip_prefix("dims.").map(str::to_owned))
                .collect(),
        };
        let t = ctx.runtime.block_on(async {
            let frame = context.table("rows").await?;
            transcripts::collect(frame, &opts).await
        })?;
        page.transcripts = Some(t);
    }
    Ok(())
}

/// The gate's pass@k (with `by`'s slices) and warnings, or pass@k alone with a warning when the
/// rows lack the columns the gate's warnings read.
fn add_pass_at(
    ctx: &Context,
    context: &SessionContext,
    page: &mut Page,
    source: &str,
    seed: u64,
    by: &[String],
    has: &dyn Fn(&str) -> bool,
) -> Result<()> {
    let hollow = HollowArgs {
        tools: None,
        no_tools: false,
        max_judge_failures: JUDGE_FAILURE_SHARE,
        min_graded: MIN_GRADED_SHARE,
        k: Vec::new(),
        seed,
    };
    let mut opts = super::gate::validate(&hollow, None)?;
    opts.by = by.iter().map(|b| Slice::parse(b)).collect();
    let missing: Vec<&str> = crate::stages::grade::gate::GATE_COLUMNS
        .iter()
        .copied()
        .filter(|c| !has(c))
        .collect();
    if missing.is_empty() {
        let gate = super::gate::report(ctx, context, &opts)?;
        page.add_gate(source, &to_value(&gate)?);
    } else {
        // Rows another writer made without the columns the gate's warnings read: pass@k alone,
        // and a warning that says what was not checked.
        let pass_opts = crate::stages::pass_at::Options {
            k: Vec::new(),
            seed,
            by: opts.by.clone(),
            ..crate::stages::pass_at::Options::default()
        };
        let report = ctx.runtime.block_on(async {
            let frame = context.table("rows").await?;
            crate::stages::run::<crate::stages::pass_at::PassAtStage>(
                &Session::from_context(context.clone()),
                crate::stages::pass_at::Inputs::new(frame),
                &pass_opts,
            )
            .await
        })?;
        page.pass_at.push(Sourced {
            source: source.to_owned(),
            report: to_value(&report)?,
        });
        page.warn(
            source,
            Some("not_checked".into()),
            format!(
                "the rows have no {} column, so the warnings that make a run hollow (`wai gate`) were not checked",
                crate::report::backticked(&missing, "")
            ),
            false,
        );
    }
    Ok(())
}

/// The rows `sql` gives over `context`, as JSON objects.
async fn query_rows(
    context: &SessionContext,
    sql: &str,
) -> Result<Vec<serde_json::Map<String, Value>>> {
    let batches = context.sql(sql).await?.collect().await?;
    transcripts::json_rows(&batches)
}

/// The rows canned query `name` gives over `context`, as JSON values.
async fn canned_rows(context: &SessionContext, name: &str) -> Result<Vec<Value>> {
    let q = crate::queries::find(name)
        .ok_or_else(|| Error::Internal(format!("no canned query `{name}`")))?;
    Ok(query_rows(context, q.sql)
        .await?
        .into_iter()
        .map(Value::Object)
        .collect())
}

fn to_value<T: serde::Serialize>(report: &T) -> Result<Value> {
    serde_json::to_value(report)
        .map_err(|e| Error::Internal(format!("a report does not serialize: {e}")))
}

/// A lake's history: the canned trend queries over its results tables.
fn lake_trend(ctx: &Context, root: &Path) -> Result<Trend> {
    let context = crate::pipeline::session::new_context(None)?;
    let scratch = super::scratch()?;
    let tables = super::sql::lake_tables(ctx, &context, root, scratch.path())?;
    let mut trend = Trend {
        source: root.display().to_string(),
        ..Trend::default()
    };
    for (table, query, into) in [
        ("results_pass_at", "lake_pass_at_trend", &mut trend.pass_at),
        (
            "results_compare",
            "lake_compare_history",
            &mut trend.compare,
        ),
    ] {
        if !tables.iter().any(|t| t == table) {
            continue;
        }
        *into = ctx.runtime.block_on(canned_rows(&context, query))?;
    }
    if trend.pass_at.is_empty() && trend.compare.is_empty() {
        return Err(Error::Input {
            stage: "report".into(),
            message: format!(
                "the lake `{}` holds no committed pass-at or compare results yet: run a pipeline with a pass-at stage (`wai run PIPELINE.toml`) first",
                root.display()
            ),
        });
    }
    Ok(trend)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn inputs_are_told_apart_by_what_they_are() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(dir.path().join("lake/_wai")).unwrap();
        std::fs::write(dir.path().join("lake/_wai/lake.json"), "{}").unwrap();
        let lake = dir.path().join("lake").display().to_string();
        assert!(matches!(classify(&lake), Input::Lake(_)));
        assert!(matches!(classify("compare.JSON"), Input::Document(_)));
        assert!(matches!(classify("rows.jsonl"), Input::Rows(_)));
        assert!(matches!(classify("s3://b/x.json"), Input::Rows(_)));
        assert!(matches!(
            classify(&dir.path().display().to_string()),
            Input::Rows(_)
        ));
    }

    #[test]
    fn sizes_read_as_words() {
        assert_eq!(size_words(1_234_567), "1.2 MB");
        assert_eq!(size_words(34_000), "34 KB");
        assert_eq!(size_words(12), "1 KB");
    }
}
