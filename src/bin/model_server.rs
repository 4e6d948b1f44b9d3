//! `wai-model-server`: the deterministic model server of the tests (`wai::testing::model_server`)
//! as a process of its own, for benchmarks that measure the `wai` binary (its memory, its wall
//! time) and for trying model-backed commands offline. It prints its API base
//! (`http://127.0.0.1:PORT/v1`) on the first line of stdout and serves until it is killed.
//!
//! ```text
//! cargo run --release --features testing --bin wai-model-server -- --latency-ms 20
//! ```

use std::io::Write;
use std::time::Duration;

use clap::Parser;
use wai::testing::model_server::{Config, Fault, ModelServer};

/// The deterministic model server of wai's tests, on 127.0.0.1.
#[derive(Debug, Parser)]
#[command(name = "wai-model-server")]
struct Args {
    /// Milliseconds added to every answer.
    #[arg(long, default_value_t = 0)]
    latency_ms: u64,
    /// A share of requests that fail in one way: `KIND=SHARE`, KIND one of `rate-limited`,
    /// `server-error`, `hang`, `close-mid-body`, `malformed`, `echo-key` (repeatable).
    #[arg(long = "fault", value_name = "KIND=SHARE", value_parser = fault)]
    faults: Vec<(Fault, f64)>,
}

fn fault(s: &str) -> Result<(Fault, f64), String> {
    let (kind, share) = s
        .split_once('=')
        .ok_or_else(|| format!("`{s}` is not KIND=SHARE"))?;
    let share: f64 = share
        .parse()
        .ok()
        .filter(|x: &f64| (0.0..=1.0).contains(x))
        .ok_or_else(|| format!("the share in `{s}` is not a number in [0, 1]"))?;
    let kind = match kind {
        "rate-limited" => Fault::RateLimited(1.0),
        "server-error" => Fault::ServerError,
        "hang" => Fault::Hang,
        "close-mid-body" => Fault::CloseMidBody,
        "malformed" => Fault::Malformed,
        "echo-key" => Fault::EchoKey,
        other => return Err(format!("unknown fault `{other}`")),
    };
    Ok((kind, share))
}

fn main() {
    let args = Args::parse();
    let server = ModelServer::start(Config {
        latency: Duration::from_millis(args.latency_ms),
        faults: args.faults,
    });
    let mut out = std::io::stdout().lock();
    let _ = writeln!(out, "{}", server.url());
    let _ = out.flush();
    drop(out);
    // Serve until killed.
    loop {
        std::thread::park();
    }
}
