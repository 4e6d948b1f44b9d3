//! `wai-otlp-load`: a load generator for `wai collect` on loopback, bounded in count and time.
//! It sends `--batches` OTLP/HTTP protobuf requests of `--spans` GenAI chat spans each (every
//! trace new, four spans a trace) over `--connections` kept-alive connections, and prints one
//! JSON line: spans per second, acknowledgement latency (p50, p99, max), and the answers by
//! status. `benches/collect/load.sh` runs it against a release collector and adds its peak RSS.
//!
//! ```text
//! cargo run --release --features testing --bin wai-otlp-load -- --url http://127.0.0.1:4318
//! ```

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use clap::Parser;
use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::tonic::common::v1::{AnyValue, InstrumentationScope, KeyValue, any_value};
use opentelemetry_proto::tonic::resource::v1::Resource;
use opentelemetry_proto::tonic::trace::v1::{ResourceSpans, ScopeSpans, Span};
use prost::Message as _;

/// A bounded OTLP/HTTP load on loopback.
#[derive(Debug, Parser)]
#[command(name = "wai-otlp-load")]
struct Args {
    /// The collector's base URL.
    #[arg(long, default_value = "http://127.0.0.1:4318")]
    url: String,
    /// Requests to send.
    #[arg(long, default_value_t = 1000)]
    batches: usize,
    /// Spans per request.
    #[arg(long, default_value_t = 512)]
    spans: usize,
    /// Connections sending at once.
    #[arg(long, default_value_t = 8)]
    connections: usize,
    /// Stop sending after this many seconds, whatever is left.
    #[arg(long, default_value_t = 120)]
    max_seconds: u64,
    /// A bearer token to send.
    #[arg(long)]
    token: Option<String>,
    /// Send a request answered 503 again after its `Retry-After`, as exporters do.
    #[arg(long)]
    retry: bool,
}

fn kv(key: &str, value: String) -> KeyValue {
    KeyValue {
        key: key.into(),
        value: Some(AnyValue {
            value: Some(any_value::Value::StringValue(value)),
        }),
        ..KeyValue::default()
    }
}

/// Request `b`: `spans` spans, four to a trace, every trace id new.
fn body(b: usize, spans: usize) -> Vec<u8> {
    let now = 1_796_400_000_000_000_000u64;
    let list = (0..spans)
        .map(|i| {
            let trace = (b * spans + i) / 4;
            let mut trace_id = vec![0u8; 16];
            trace_id[..8].copy_from_slice(&(trace as u64 + 1).to_be_bytes());
            trace_id[8..].copy_from_slice(&0x10ad_u64.to_be_bytes());
            let span_id = ((b * spans + i) as u64 + 1).to_be_bytes().to_vec();
            let start = now + (trace as u64) * 1_000_000 + (i % 4) as u64;
            Span {
                trace_id,
                span_id,
                name: "chat fake-model".into(),
                kind: 3,
                start_time_unix_nano: start,
                end_time_unix_nano: start + 400_000,
                attributes: vec![
                    kv("gen_ai.operation.name", "chat".into()),
                    kv("gen_ai.request.model", "fake-model".into()),
                    kv("gen_ai.input.messages", format!(r#"[{{"role":"user","parts":[{{"type":"text","content":"Where is order {trace}? It was due on Monday."}}]}}]"#)),
                    kv("gen_ai.output.messages", format!(r#"[{{"role":"assistant","parts":[{{"type":"text","content":"Order {trace} has shipped and arrives Thursday."}}],"finish_reason":"stop"}}]"#)),
                    kv("whileai.task_id", format!("task-{}", trace % 97)),
                ],
                ..Span::default()
            }
        })
        .collect();
    ExportTraceServiceRequest {
        resource_spans: vec![ResourceSpans {
            resource: Some(Resource {
                attributes: vec![kv("service.name", "orders-agent".into())],
                ..Resource::default()
            }),
            scope_spans: vec![ScopeSpans {
                scope: Some(InstrumentationScope {
                    name: "opentelemetry.instrumentation.openai_v2".into(),
                    ..InstrumentationScope::default()
                }),
                spans: list,
                ..ScopeSpans::default()
            }],
            ..ResourceSpans::default()
        }],
    }
    .encode_to_vec()
}

#[allow(
    clippy::cast_precision_loss,
    clippy::cast_possible_truncation,
    clippy::cast_sign_loss,
    reason = "counts and shares for a report"
)]
fn main() {
    let args = Args::parse();
    let runtime = tokio::runtime::Runtime::new().expect("a runtime");
    // The bodies are made before the clock starts, so the generator's own work is not timed.
    let bodies: Arc<Vec<Vec<u8>>> =
        Arc::new((0..args.batches).map(|b| body(b, args.spans)).collect());
    let bytes: usize = bodies.iter().map(Vec::len).sum();
    let client = reqwest::Client::builder()
        .pool_max_idle_per_host(args.connections)
        .build()
        .expect("a client");
    let next = Arc::new(AtomicUsize::new(0));
    let url = format!("{}/v1/traces", args.url.trim_end_matches('/'));
    let deadline = Instant::now() + Duration::from_secs(args.max_seconds);
    let started = Instant::now();
    let results: Vec<(Vec<f64>, std::collections::BTreeMap<u16, u64>)> = runtime.block_on(async {
        let tasks: Vec<_> = (0..args.connections)
            .map(|_| {
                let (client, bodies, next, url) = (
                    client.clone(),
                    Arc::clone(&bodies),
                    Arc::clone(&next),
                    url.clone(),
                );
                let token = args.token.clone();
                let retry = args.retry;
                tokio::spawn(async move {
                    let mut latencies = Vec::new();
                    let mut statuses = std::collections::BTreeMap::new();
                    loop {
                        let i = next.fetch_add(1, Ordering::Relaxed);
                        if i >= bodies.len() || Instant::now() > deadline {
                            break;
                        }
                        // As an exporter does: a 503 is sent again after its Retry-After.
                        loop {
                            let mut req = client
                                .post(&url)
                                .header("Content-Type", "application/x-protobuf")
                                .body(bodies[i].clone());
                            if let Some(t) = &token {
                                req = req.bearer_auth(t);
                            }
                            let sent = Instant::now();
                            let (status, after) = match req.send().await {
                                Ok(r) => {
                                    let s = r.status().as_u16();
                                    let after = r
                                        .headers()
                                        .get("retry-after")
                                        .and_then(|v| v.to_str().ok())
                                        .and_then(|v| v.parse::<f64>().ok());
                                    let _ = r.bytes().await;
                                    (s, after)
                                }
                                Err(_) => (0, None),
                            };
                            latencies.push(sent.elapsed().as_secs_f64() * 1000.0);
                            *statuses.entry(status).or_insert(0) += 1;
                            if status != 503 || !retry || Instant::now() > deadline {
                                break;
                            }
                            tokio::time::sleep(Duration::from_secs_f64(after.unwrap_or(1.0))).await;
                        }
                    }
                    (latencies, statuses)
                })
            })
            .collect();
        let mut out = Vec::new();
        for t in tasks {
            out.push(t.await.expect("a sender"));
        }
        out
    });
    let elapsed = started.elapsed().as_secs_f64();
    let mut latencies: Vec<f64> = results.iter().flat_map(|r| r.0.iter().copied()).collect();
    latencies.sort_by(f64::total_cmp);
    let mut statuses = std::collections::BTreeMap::<u16, u64>::new();
    for (_, s) in &results {
        for (k, v) in s {
            *statuses.entry(*k).or_default() += v;
        }
    }
    let ok = statuses.get(&200).copied().unwrap_or(0);
    // The nearest-rank quantile.
    let at = |q: f64| {
        let n = latencies.len();
        let rank = (n.saturating_sub(1) * (q * 1000.0) as usize).div_ceil(1000);
        latencies.get(rank).copied().unwrap_or(f64::NAN)
    };
    let line = serde_json::json!({
        "requests": latencies.len(),
        "spans_acknowledged": ok * args.spans as u64,
        "seconds": elapsed,
        "spans_per_s": (ok * args.spans as u64) as f64 / elapsed,
        "mb_per_s": bytes as f64 / 1e6 / elapsed * (ok as f64 / args.batches as f64),
        "latency_ms": {"p50": at(0.5), "p99": at(0.99), "max": at(1.0)},
        "statuses": statuses,
        "connections": args.connections,
        "spans_per_request": args.spans,
    });
    #[allow(clippy::print_stdout, reason = "the load's one line")]
    {
        println!("{line}");
    }
}
