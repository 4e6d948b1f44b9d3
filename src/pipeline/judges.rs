//! Judges and agents from their specs: `verify:FILE.toml`, `sql:EXPR`, `sql:FILE.sql`,
//! `cmd:COMMAND` (the files they name read here), and the worker pool command judges and agents
//! run in.

use std::path::Path;
use std::time::Duration;

use std::path::PathBuf;
use std::sync::Arc;

use crate::cli::{JudgePool, ModelArgs};
use crate::error::{Error, Result};
use crate::models::{Model, ModelSpec};
use crate::pipeline::context::Context;
use crate::stages::grade::Judge;
use crate::stages::grade::command::{self, CommandJudge};
use crate::stages::grade::llm::pairwise::{self, PairwiseJudge};
use crate::stages::grade::llm::{self, LlmJudge, Rubric};
use crate::stages::grade::sql::{self as sql_judge, ExpressionJudge, QueryJudge};
use crate::stages::grade::verify::VerifierJudge;

/// A judge spec's kind and text, the text read from a file when it names one (and that file).
///
/// # Errors
/// No kind, an unknown kind, or an unreadable file.
pub(crate) fn parse_spec(spec: &str) -> Result<(&str, String, Option<String>)> {
    let (kind, body) = spec.split_once(':').ok_or_else(|| {
        Error::Usage(format!(
            "the judge `{spec}` has no kind: write `verify:FILE.toml`, `sql:EXPR`, `sql:FILE.sql`, `cmd:COMMAND` or `llm:MODEL-SPEC` (e.g. `llm:openai:gpt-4.1-mini`)"
        ))
    })?;
    let body = body.trim();
    let file = match kind {
        "verify" => Some(body.to_owned()),
        "sql"
            if Path::new(body)
                .extension()
                .is_some_and(|e| e.eq_ignore_ascii_case("sql"))
                && Path::new(body).is_file() =>
        {
            Some(body.to_owned())
        }
        "sql" | "cmd" | "llm" => None,
        other => {
            return Err(Error::Usage(format!(
                "unknown judge kind `{other}` in `{spec}`: use `verify:`, `sql:`, `cmd:` or `llm:`"
            )));
        }
    };
    let text = match &file {
        Some(path) => crate::pipeline::world_files::read_text(Path::new(path))?,
        None => body.to_owned(),
    };
    Ok((kind, text, file))
}

/// How command judges and agents run, checked: workers, the per-row timeout and the variables
/// passed on to them.
#[derive(Debug, Clone)]
#[allow(
    clippy::struct_field_names,
    reason = "`workers.workers` is how many: the pool's own word"
)]
pub(crate) struct Workers {
    pub(crate) workers: usize,
    pub(crate) timeout: Duration,
    pub(crate) forward: Vec<String>,
    /// How LLM judges call their models and grade.
    pub(crate) models: Models,
}

/// How models are called and LLM judges grade, checked.
#[derive(Debug, Clone, Default)]
pub(crate) struct Models {
    pub(crate) settings: crate::models::Settings,
    pub(crate) judge: llm::Options,
    /// Whether `--model-timeout` was given (a model agent's calls take another default).
    pub(crate) timeout_given: bool,
}

impl Models {
    /// What of these settings decides a verdict (for the verdict log's digest): the judge's
    /// options, not how the calls are made.
    pub(crate) fn digest(&self) -> String {
        let j = &self.judge;
        format!(
            "llm {:?} {} {} {} {:?} {:?}",
            j.rubric.as_ref().map(|r| &r.text),
            j.use_privileged,
            j.payload_chars,
            j.max_tokens,
            j.policy,
            j.tools
        )
    }

    /// Sets the rubric from `--rubric` (text, or a file it names).
    ///
    /// # Errors
    /// The file cannot be read.
    pub(crate) fn with_rubric(mut self, rubric: Option<&str>) -> Result<Self> {
        if let Some(r) = rubric {
            let text = if Path::new(r).is_file() {
                crate::pipeline::world_files::read_text(Path::new(r))?
            } else {
                r.to_owned()
            };
            if text.trim().is_empty() {
                return Err(Error::Usage("--rubric is empty".into()));
            }
            self.judge.rubric = Some(Rubric::parse(&text));
        }
        Ok(self)
    }

    /// Sets the tools the judge is shown from a tools file.
    ///
    /// # Errors
    /// The file cannot be read or is not a JSON list.
    pub(crate) fn with_tools(mut self, tools: Option<&Path>) -> Result<Self> {
        if let Some(path) = tools {
            let text = crate::pipeline::world_files::read_text(path)?;
            let list: Vec<serde_json::Value> =
                serde_json::from_str(&text).map_err(|e| Error::Input {
                    stage: "grade".into(),
                    message: format!(
                        "`{}` is not a JSON list of tool schemas: {e}",
                        path.display()
                    ),
                })?;
            self.judge.tools = list;
        }
        Ok(self)
    }
}

/// The model settings of `args`, checked.
///
/// # Errors
/// A value out of range, or a policy file that cannot be read.
pub(crate) fn models(args: &ModelArgs) -> Result<Models> {
    if let Some(t) = args.model_timeout
        && !(t.is_finite() && t > 0.0)
    {
        return Err(Error::Usage(format!(
            "--model-timeout must be a number of seconds above 0, not {t}"
        )));
    }
    if args.concurrency == 0 || args.concurrency > 4096 {
        return Err(Error::Usage(format!(
            "--concurrency must be between 1 and 4096, not {}",
            args.concurrency
        )));
    }
    if !(args.retry_wait.is_finite() && (0.0..=60.0).contains(&args.retry_wait)) {
        return Err(Error::Usage(format!(
            "--retry-wait must be a number of seconds in [0, 60], not {}",
            args.retry_wait
        )));
    }
    if args.retries > 20 {
        return Err(Error::Usage(format!(
            "--retries must be at most 20, not {}",
            args.retries
        )));
    }
    let policy = crate::pipeline::world_files::read_policy(args.judge_policy.as_deref())?;
    let cache: Option<PathBuf> = if args.no_cache {
        None
    } else {
        Some(
            args.cache
                .clone()
                .unwrap_or_else(crate::models::cache::default_dir),
        )
    };
    let judge = llm::Options {
        rubric: None,
        use_privileged: args.use_privileged,
        payload_chars: args.payload_chars,
        max_tokens: args.max_tokens,
        policy,
        tools: Vec::new(),
    };
    crate::stages::Options::check(&judge)?;
    Ok(Models {
        settings: crate::models::Settings {
            concurrency: args.concurrency,
            timeout: Duration::from_secs_f64(args.model_timeout.unwrap_or(JUDGE_TIMEOUT_S)),
            retries: args.retries,
            max_calls: args.max_calls,
            max_cost_tokens: args.max_cost_tokens,
            cache,
            allow_http: args.allow_http,
            backoff: Duration::from_secs_f64(args.retry_wait),
            ..crate::models::Settings::default()
        },
        judge,
        timeout_given: args.model_timeout.is_some(),
    })
}

/// How long a judge's call may take by default, in seconds.
pub const JUDGE_TIMEOUT_S: f64 = 120.0;

impl Workers {
    /// The pool options for `command` in `role`.
    pub(crate) fn options(&self, command: String, role: &'static str) -> command::Options {
        command::Options {
            command,
            workers: self.workers,
            timeout: self.timeout,
            role,
            forward: self.forward.clone(),
        }
    }
}

/// The most worker processes a pool starts.
pub const MAX_WORKERS: usize = 256;

/// The worker settings of `pool`, checked.
///
/// # Errors
/// No workers or more than [`MAX_WORKERS`], a timeout that is not a number of seconds above 0, a
/// bad `--env` name.
pub(crate) fn pool(pool: &JudgePool) -> Result<Workers> {
    if !(pool.timeout.is_finite() && pool.timeout > 0.0) {
        return Err(Error::Usage(format!(
            "--timeout must be a number of seconds above 0, not {}",
            pool.timeout
        )));
    }
    if pool.workers == 0 {
        return Err(Error::Usage("--workers must be at least 1".into()));
    }
    if pool.workers > MAX_WORKERS {
        return Err(Error::Usage(format!(
            "--workers must be at most {MAX_WORKERS}, not {}: each is a process of its own",
            crate::stages::grouped(pool.workers as u64)
        )));
    }
    crate::pipeline::pipe::check_forward(&pool.env)?;
    Ok(Workers {
        workers: pool.workers,
        timeout: Duration::from_secs_f64(pool.timeout),
        forward: pool.env.iter().filter(|n| !n.is_empty()).cloned().collect(),
        models: models(&pool.models)?,
    })
}

/// A judge from `spec` that grades rows batch by row batch: a verifier file, a SQL expression or
/// a command. A SQL query judge reads a whole table at once, so it is refused here with the kinds
/// that work.
///
/// # Errors
/// A bad spec, an unreadable file, or a judge that does not start.
pub(crate) fn row_judge(spec: &str, workers: &Workers) -> Result<Box<dyn Judge>> {
    let (kind, text, file) = parse_spec(spec)?;
    let stem = |fallback: &str| {
        file.as_ref()
            .and_then(|p| Path::new(p).file_stem())
            .map_or(fallback.to_owned(), |s| s.to_string_lossy().into_owned())
    };
    Ok(match kind {
        "verify" => {
            let origin = file.clone().unwrap_or_default();
            Box::new(VerifierJudge::parse(&text, &origin, &stem("verify"))?)
        }
        "sql" if sql_judge::is_query(&text) => {
            return Err(Error::Usage(format!(
                "the judge `{spec}` is a SQL query, which grades a whole table at once and cannot re-judge edited rows: use `sql:EXPR`, `verify:FILE.toml` or `cmd:COMMAND`"
            )));
        }
        "sql" => Box::new(ExpressionJudge::new(
            format!("sql:{}", stem("expr")),
            &text,
        )?),
        "llm" => {
            let spec = ModelSpec::parse(&text)?;
            let model = Model::new(spec, workers.models.settings.clone())?;
            Box::new(LlmJudge::new(
                Arc::new(model),
                workers.models.judge.clone(),
            )?)
        }
        _ => Box::new(CommandJudge::start(workers.options(text, "judge"))?),
    })
}

/// The pairwise judge `spec` names (`pairwise:MODEL-SPEC`), calling as `models` says.
///
/// # Errors
/// A spec of another kind or a bad model spec (usage errors), or options out of range.
pub(crate) fn pairwise_judge(
    spec: &str,
    models: &Models,
    swap: bool,
    keep_agreed: bool,
) -> Result<PairwiseJudge> {
    let Some(model) = spec.strip_prefix("pairwise:") else {
        return Err(Error::Usage(format!(
            "`--judge {spec}` is not a pairwise judge: select's preference pairs take `--judge pairwise:MODEL-SPEC` (e.g. `pairwise:openai:gpt-4.1-mini`)"
        )));
    };
    let model = Model::new(ModelSpec::parse(model)?, models.settings.clone())?;
    let j = &models.judge;
    PairwiseJudge::new(
        Arc::new(model),
        pairwise::Options {
            policy: j.policy.clone(),
            tools: j.tools.clone(),
            use_privileged: j.use_privileged,
            payload_chars: j.payload_chars,
            max_tokens: j.max_tokens,
            swap,
            keep_agreed,
            ..pairwise::Options::default()
        },
    )
}

/// Judges, in spec order.
pub(crate) type Judges = Vec<Box<dyn Judge>>;

/// The judges of `specs` and the text each names, in order; a SQL query judge runs here, over
/// every row of `inputs`, before any row is graded, within `limits` (its memory and timeout).
///
/// # Errors
/// A bad spec, an unreadable file, a query that fails, or a judge that does not start.
pub(crate) fn panel(
    ctx: &Context,
    specs: &[String],
    inputs: &[String],
    workers: &Workers,
    limits: &crate::pipeline::limits::Limits,
) -> Result<(Judges, Vec<String>)> {
    let mut judges: Vec<Box<dyn Judge>> = Vec::new();
    let mut texts = Vec::new();
    let mut query_session = None;
    for spec in specs {
        let (kind, text, file) = parse_spec(spec)?;
        texts.push(text.clone());
        let judge: Box<dyn Judge> = match kind {
            "sql" if sql_judge::is_query(&text) => {
                if query_session.is_none() {
                    query_session = Some(crate::pipeline::tables::limited_rows_session(
                        ctx, inputs, limits,
                    )?);
                }
                let (context, _) = query_session
                    .as_ref()
                    .ok_or_else(|| Error::Internal("no query session".into()))?;
                let stem = file
                    .as_ref()
                    .and_then(|p| Path::new(p).file_stem())
                    .map_or("query".to_owned(), |s| s.to_string_lossy().into_owned());
                let name = format!("sql:{stem}");
                let run = QueryJudge::run(name, &text, context);
                let ran = ctx.runtime.block_on(async {
                    match limits.timeout {
                        Some(t) => tokio::time::timeout(t, run)
                            .await
                            .unwrap_or_else(|_| Err(crate::pipeline::limits::over_time(limits))),
                        None => run.await,
                    }
                });
                Box::new(ran.map_err(|e| crate::pipeline::limits::over_memory(e, limits))?)
            }
            _ => row_judge(spec, workers)?,
        };
        judges.push(judge);
    }
    Ok((judges, texts))
}
