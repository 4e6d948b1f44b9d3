//! The batch job and its lake: `run`, `lake`.

use clap::{Args, Subcommand};
use std::path::PathBuf;

/// `wai run`.
#[derive(Debug, Args)]
pub(crate) struct RunArgs {
    /// The pipeline file (TOML: `lake`, `[input] paths`, `[[stage]]` tables, `gates`; see
    /// docs/lake.md).
    #[arg(value_name = "PIPELINE")]
    pub pipeline: PathBuf,
    /// Print the plan (the new files, what each stage reads and writes, its command line) and
    /// do nothing.
    #[arg(long)]
    pub dry_run: bool,
    /// Run even when no input file is new (the measures over every row so far, again).
    #[arg(long)]
    pub again: bool,
    /// Drop this pipeline's stopped run, if one is pending, and start a new one (its files
    /// stay, never published).
    #[arg(long)]
    pub restart: bool,
    /// Where DataFusion plans run.
    #[command(flatten)]
    pub cluster: crate::cli::ClusterArgs,
}

/// `wai lake`.
#[derive(Debug, Subcommand)]
pub(crate) enum LakeCommand {
    /// Make an empty lake in a new or empty folder (`wai run` makes one too).
    Init(LakeDirArgs),
    /// What a lake holds: its runs, their stages and gates, and any run left pending.
    Status(LakeDirArgs),
    /// Pack the small Parquet files runs wrote (rows, scored, guarded, selected, results) into
    /// files of about a target size, atomically; readers find every run's rows as before.
    Compact(LakeCompactArgs),
}

/// `wai lake compact`.
#[derive(Debug, Args)]
pub(crate) struct LakeCompactArgs {
    /// The lake's folder.
    #[arg(value_name = "LAKE")]
    pub lake: PathBuf,
    /// The size of the files to make, in MiB: files under half of it are packed, in run order,
    /// into files of at most this much.
    #[arg(long, default_value_t = 128, value_name = "MIB",
          value_parser = clap::value_parser!(u64).range(1..=65_536))]
    pub target_mib: u64,
    /// Print what would be packed, and change nothing.
    #[arg(long)]
    pub dry_run: bool,
}

/// A lake's folder.
#[derive(Debug, Args)]
pub(crate) struct LakeDirArgs {
    /// The lake's folder.
    #[arg(value_name = "LAKE")]
    pub lake: PathBuf,
}

/// `wai worker`.
#[derive(Debug, Args)]
pub(crate) struct WorkerArgs {
    /// The address to listen on, HOST:PORT (port 0 takes a free port; the `listening` line says
    /// which). Anyone who reaches it can run queries over what this process can read: bind it to
    /// a private network.
    #[arg(long, value_name = "HOST:PORT", default_value = "127.0.0.1:7070")]
    pub listen: String,
    /// Testing: the version to report instead of this wai's.
    #[arg(long, hide = true, value_name = "VERSION")]
    pub report_version: Option<String>,
    /// Testing: end the process (abort) when the first plan fragment arrives.
    #[arg(long, hide = true)]
    pub die_on_task: bool,
}

/// `wai collect`.
#[derive(Debug, Args)]
#[allow(clippy::struct_excessive_bools, reason = "independent switches")]
pub(crate) struct CollectArgs {
    /// The lake to land rows in (made if missing): `collected/date=DAY/part-*.parquet`.
    #[arg(long, value_name = "DIR")]
    pub lake: PathBuf,
    /// The address to serve OTLP/HTTP on (port 0: any free port, named in the first log line).
    #[arg(long, default_value = "127.0.0.1:4318", value_name = "HOST:PORT")]
    pub listen: String,
    /// A file holding the bearer token every request must carry (`Authorization: Bearer ...`).
    #[arg(long, value_name = "FILE")]
    pub token_file: Option<PathBuf>,
    /// Listen on a non-loopback address without a token.
    #[arg(long)]
    pub insecure: bool,
    /// Serve TLS with this certificate chain (PEM); needs `--tls-key`.
    #[arg(long, value_name = "PEM", requires = "tls_key")]
    pub tls_cert: Option<PathBuf>,
    /// The TLS private key (PEM); needs `--tls-cert`.
    #[arg(long, value_name = "PEM", requires = "tls_cert")]
    pub tls_key: Option<PathBuf>,
    /// A conversation nothing has joined for this long is written as rows.
    #[arg(long, default_value = "30s", value_name = "DURATION", value_parser = duration)]
    pub idle: std::time::Duration,
    /// A conversation open this long is written even if spans still come.
    #[arg(long, default_value = "1h", value_name = "DURATION", value_parser = duration)]
    pub max_open: std::time::Duration,
    /// The most bytes held between acknowledgement and their row partition; past it, requests
    /// are answered 503 with `Retry-After`.
    #[arg(long, default_value = "256MB", value_name = "SIZE", value_parser = crate::pipeline::limits::parse_size)]
    pub max_buffer: u64,
    /// The largest request body, compressed or not (larger: 413).
    #[arg(long, default_value = "16MB", value_name = "SIZE", value_parser = crate::pipeline::limits::parse_size)]
    pub max_body: u64,
    /// How long a client may take to send its request headers (and a TLS handshake).
    #[arg(long, default_value = "10s", value_name = "DURATION", value_parser = duration)]
    pub header_timeout: std::time::Duration,
    /// How long a client may take to send its body.
    #[arg(long, default_value = "30s", value_name = "DURATION", value_parser = duration)]
    pub body_timeout: std::time::Duration,
    /// Keep the raw spans: written log segments go to `raw/otlp/` (valid `wai ingest` input).
    #[arg(long)]
    pub keep_raw: bool,
    /// Stop (exit 0) once spans came, all of them are written, and nothing came for `--idle`.
    #[arg(long)]
    pub once: bool,
    /// `OTel`: the span attribute holding the reward.
    #[arg(long, default_value = "whileai.reward", value_name = "ATTR")]
    pub reward_attr: String,
    /// `OTel`: the span attribute holding the task id (else the prompt keys the task).
    #[arg(long, default_value = "whileai.task_id", value_name = "ATTR")]
    pub task_attr: String,
}

/// A duration: `30s`, `500ms`, `2m`, `1h`, or a number of seconds.
fn duration(s: &str) -> Result<std::time::Duration, String> {
    let t = s.trim();
    let split = t
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(t.len());
    let (number, unit) = t.split_at(split);
    let scale = match unit.trim() {
        "" | "s" => 1.0,
        "ms" => 0.001,
        "m" | "min" => 60.0,
        "h" => 3600.0,
        _ => {
            return Err(format!(
                "`{s}` is not a duration: write 30s, 500ms, 2m or 1h"
            ));
        }
    };
    let x: f64 = number
        .parse()
        .map_err(|_| format!("`{s}` is not a duration: write 30s, 500ms, 2m or 1h"))?;
    let secs = x * scale;
    if !(0.001..=31_536_000.0).contains(&secs) {
        return Err(format!("`{s}` must be at least 1ms and at most a year"));
    }
    Ok(std::time::Duration::from_secs_f64(secs))
}

/// `wai report`.
#[derive(Debug, Args)]
pub(crate) struct ReportArgs {
    /// Scored rows (files, folders, globs, URLs), lake folders, or `--json` documents (`.json`).
    #[arg(required = true, value_name = "INPUT")]
    pub inputs: Vec<String>,
    /// The page to write (`.html`); written whole or not at all.
    #[arg(long, value_name = "FILE")]
    pub out: PathBuf,
    /// Slices of pass@1 drawn as forest plots: a column or `dims.KEY` (repeatable). Default:
    /// every `dims` key with 2 to 50 values.
    #[arg(long, value_name = "COLUMN|dims.KEY")]
    pub by: Vec<String>,
    /// Rows the transcript browser carries; a larger run is sampled (failures first, seeded).
    /// 0 leaves the browser out.
    #[arg(long, default_value_t = 1000, value_name = "N")]
    pub max_rows: usize,
    /// Characters kept of each text a row shows (prompt, reply, a tool's arguments or result).
    #[arg(long, default_value_t = 2000, value_name = "N", value_parser = clap::value_parser!(u64).range(80..))]
    pub max_chars: u64,
    /// The seed of the pass@k bootstrap and of the transcript sample.
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
    /// The page's title (default: `wai report` and the first input).
    #[arg(long)]
    pub title: Option<String>,
    /// Open the page in the default browser once written.
    #[arg(long)]
    pub open: bool,
}
