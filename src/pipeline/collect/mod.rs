//! `wai collect`: an OTLP/HTTP receiver that lands traces in a lake.
//!
//! Three parts, each on its own thread: the server (tokio, axum over hyper) decodes and checks
//! each request and cuts it into one OTLP/JSON piece per trace; the log thread appends the
//! pieces to the write-ahead log, fsyncs a batch of requests at once, and only then lets them be
//! acknowledged; the assembler groups pieces into conversations and writes the quiet ones as
//! row partitions (`collected/date=DAY/part-*.parquet`) through `wai ingest`'s own reader.
//! `docs/commands/collect.md` describes it.

pub mod assemble;
pub mod otlp;
pub mod server;
pub mod wal;

use std::fmt::Write as _;
use std::io::Write as _;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, mpsc};
use std::time::{Duration, Instant};

use crate::error::{Error, Result};
use crate::pipeline::context::Context;
use crate::pipeline::ingest::Options;

/// The counters `GET /metrics` shows.
#[derive(Debug, Default)]
pub struct Metrics {
    /// Requests answered.
    pub requests: AtomicU64,
    /// Spans acknowledged.
    pub spans_received: AtomicU64,
    /// Log records acknowledged.
    pub logs_received: AtomicU64,
    /// Request bytes read (as sent).
    pub bytes_received: AtomicU64,
    /// Spans and log records set aside (bad ids).
    pub items_rejected: AtomicU64,
    /// Rows written to partitions.
    pub rows_written: AtomicU64,
    /// Conversations set aside when their rows were made.
    pub rows_rejected: AtomicU64,
    /// Partitions written.
    pub parts_written: AtomicU64,
    /// Bytes held between acknowledgement and their partition.
    pub buffer_bytes: AtomicU64,
    /// Bytes in the write-ahead log.
    pub wal_bytes: AtomicU64,
    /// Conversations open.
    pub open_groups: AtomicU64,
    /// Age of the oldest open conversation, in seconds.
    pub lag_s: AtomicU64,
    /// Refused: 503 (buffer full, or stopping).
    pub refused_busy: AtomicU64,
    /// Refused: 401.
    pub refused_auth: AtomicU64,
    /// Refused: 413.
    pub refused_large: AtomicU64,
    /// Refused: 400, 408 or 415.
    pub refused_bad: AtomicU64,
    /// Partition writes that failed (and were tried again).
    pub write_errors: AtomicU64,
}

impl Metrics {
    /// The Prometheus text exposition.
    pub fn render(&self) -> String {
        let rows: [(&str, &str, &str, &AtomicU64); 17] = [
            (
                "wai_collect_requests_total",
                "counter",
                "requests answered",
                &self.requests,
            ),
            (
                "wai_collect_spans_received_total",
                "counter",
                "spans acknowledged",
                &self.spans_received,
            ),
            (
                "wai_collect_log_records_received_total",
                "counter",
                "log records acknowledged",
                &self.logs_received,
            ),
            (
                "wai_collect_bytes_received_total",
                "counter",
                "request body bytes read, as sent",
                &self.bytes_received,
            ),
            (
                "wai_collect_items_rejected_total",
                "counter",
                "spans and log records set aside (partial_success)",
                &self.items_rejected,
            ),
            (
                "wai_collect_rows_written_total",
                "counter",
                "rows written to partitions",
                &self.rows_written,
            ),
            (
                "wai_collect_conversations_rejected_total",
                "counter",
                "conversations set aside when made into rows",
                &self.rows_rejected,
            ),
            (
                "wai_collect_partitions_written_total",
                "counter",
                "row partitions written",
                &self.parts_written,
            ),
            (
                "wai_collect_buffer_bytes",
                "gauge",
                "bytes acknowledged and not yet in a partition",
                &self.buffer_bytes,
            ),
            (
                "wai_collect_wal_bytes",
                "gauge",
                "bytes in the write-ahead log's open segment",
                &self.wal_bytes,
            ),
            (
                "wai_collect_open_conversations",
                "gauge",
                "conversations waiting to go quiet",
                &self.open_groups,
            ),
            (
                "wai_collect_lag_seconds",
                "gauge",
                "age of the oldest open conversation",
                &self.lag_s,
            ),
            (
                "wai_collect_refused_busy_total",
                "counter",
                "503 answers (buffer full, or stopping)",
                &self.refused_busy,
            ),
            (
                "wai_collect_refused_auth_total",
                "counter",
                "401 answers",
                &self.refused_auth,
            ),
            (
                "wai_collect_refused_too_large_total",
                "counter",
                "413 answers",
                &self.refused_large,
            ),
            (
                "wai_collect_refused_bad_total",
                "counter",
                "400, 408 and 415 answers",
                &self.refused_bad,
            ),
            (
                "wai_collect_write_errors_total",
                "counter",
                "partition writes that failed and were retried",
                &self.write_errors,
            ),
        ];
        let mut out = String::new();
        for (name, kind, help, v) in rows {
            let _ = writeln!(
                out,
                "# HELP {name} {help}\n# TYPE {name} {kind}\n{name} {}",
                v.load(Ordering::Relaxed)
            );
        }
        out
    }
}

static QUIET: AtomicBool = AtomicBool::new(false);

/// A structured log line on stderr: `{"ts", "event", ...fields}`.
pub fn log_event(event: &str, fields: &serde_json::Value) {
    if QUIET.load(Ordering::Relaxed) && !event.ends_with("_failed") {
        return;
    }
    let mut line = serde_json::json!({
        "ts": chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Millis, true),
        "event": event,
    });
    if let (Some(line), Some(fields)) = (line.as_object_mut(), fields.as_object()) {
        line.extend(fields.clone());
    }
    // A log nobody reads any more (its pipe closed) is no reason to stop serving: a write that
    // fails is dropped, where `eprintln!` would panic.
    let _ = writeln!(std::io::stderr().lock(), "{line}");
}

/// How a collector runs.
pub struct Config {
    /// The address asked for.
    pub listen: SocketAddr,
    /// Bound to it already (so a port in use is refused before the lake is touched).
    pub listener: std::net::TcpListener,
    /// The lake (made already).
    pub lake: PathBuf,
    /// The bearer token requests must carry.
    pub token: Option<Vec<u8>>,
    /// TLS, when given.
    pub tls: Option<Arc<tokio_rustls::rustls::ServerConfig>>,
    /// A conversation quiet this long is written.
    pub idle: Duration,
    /// A conversation open this long is written anyway.
    pub max_open: Duration,
    /// The most bytes held between acknowledgement and partition.
    pub max_buffer: u64,
    /// The largest body (compressed or not).
    pub max_body: usize,
    /// How long a client may take to send its headers (and a TLS handshake).
    pub header_timeout: Duration,
    /// How long it may take to send its body.
    pub body_timeout: Duration,
    /// Written segments go to `raw/otlp/`.
    pub keep_raw: bool,
    /// Stop once something came, all of it is written, and nothing came for `idle`.
    pub once: bool,
    /// How pieces read as rows.
    pub options: Options,
    /// A segment is closed past this size.
    pub max_segment: u64,
    /// Only errors on stderr.
    pub quiet: bool,
}

/// What a collector did.
#[derive(Debug, Default, serde::Serialize)]
pub struct Summary {
    /// The address it listened on.
    pub address: String,
    /// Log lines replayed at start.
    pub replayed: u64,
    /// Spans acknowledged.
    pub spans: u64,
    /// Log records acknowledged.
    pub log_records: u64,
    /// Items set aside.
    pub rejected: u64,
    /// Rows written.
    pub rows: u64,
    /// Conversations set aside when made into rows.
    pub rows_rejected: u64,
    /// Partitions written.
    pub partitions: u64,
    /// Requests refused, 503.
    pub refused_busy: u64,
}

/// Holds `_wai/collect/lock` (released by the system if the collector dies).
fn lock(layout: &wal::Layout) -> Result<std::fs::File> {
    crate::pipeline::lake::hold(&layout.home().join("lock"), || {
        format!(
            "another `wai collect` is writing the lake `{}`: one collector per lake",
            layout.lake.display()
        )
    })
}

fn reject_line(signal: otlp::Signal, r: &otlp::Rejected) -> Vec<u8> {
    serde_json::to_vec(&serde_json::json!({
        "received": chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Millis, true),
        "signal": match signal { otlp::Signal::Traces => "traces", otlp::Signal::Logs => "logs" },
        "reason": r.reason,
        "item": r.item,
    }))
    .unwrap_or_default()
}

/// The log thread: batches of requests appended, synced once, handed on, acknowledged.
fn log_thread(
    mut wal: wal::Wal,
    layout: &wal::Layout,
    rx: &mpsc::Receiver<server::Append>,
    to: &mpsc::Sender<assemble::Event>,
    metrics: &Metrics,
) {
    const BATCH: usize = 4096;
    while let Ok(first) = rx.recv() {
        let mut batch = vec![first];
        while batch.len() < BATCH {
            match rx.try_recv() {
                Ok(a) => batch.push(a),
                Err(_) => break,
            }
        }
        let mut rejects = Vec::new();
        let mut made = Vec::with_capacity(batch.len());
        let before = wal.mark();
        let mut failed: Option<String> = None;
        for a in &batch {
            rejects.extend(a.rejected.iter().map(|r| reject_line(a.signal, r)));
            match wal.append(&a.pieces) {
                Ok(at) => made.push(at),
                Err(e) => {
                    failed = Some(e.to_string());
                    break;
                }
            }
        }
        if failed.is_none()
            && let Err(e) = wal.sync().and_then(|()| wal::reject(layout, &rejects))
        {
            failed = Some(e.to_string());
        }
        metrics.wal_bytes.store(wal.size(), Ordering::Relaxed);
        if let Some(why) = failed {
            // Lines written but not synced are not acknowledged; the segment is closed so the
            // next batch starts clean, and a restart replays whatever did reach the disk.
            log_event("log_failed", &serde_json::json!({"message": why}));
            wal.undo(before);
            for a in batch {
                // The handler answers 503; the bytes it reserved are let go here, whether or not
                // its client is still waiting.
                let bytes: u64 = a.pieces.iter().map(|p| p.line.len() as u64).sum();
                metrics.buffer_bytes.fetch_sub(bytes, Ordering::Relaxed);
                let _ = a.ack.send(Err(why.clone()));
            }
        } else {
            let mut pieces = Vec::new();
            let mut acks = Vec::with_capacity(batch.len());
            for (a, at) in batch.into_iter().zip(made) {
                pieces.extend(
                    at.into_iter()
                        .zip(a.pieces)
                        .map(|((seq, seg), p)| (seq, seg, p)),
                );
                acks.push(a.ack);
            }
            let _ = to.send(assemble::Event::Pieces(pieces));
            for ack in acks {
                let _ = ack.send(Ok(()));
            }
        }
        for s in wal.take_closed() {
            let _ = to.send(assemble::Event::Closed(s));
        }
    }
    wal.close();
    for s in wal.take_closed() {
        let _ = to.send(assemble::Event::Closed(s));
    }
}

/// Runs a collector until SIGTERM or SIGINT (or, with `once`, until all it got is written).
///
/// # Errors
/// Another collector holds the lake; the log is damaged; the address cannot be bound; a
/// partition cannot be written at shutdown (its lines stay in the log for the next start).
#[allow(clippy::too_many_lines, reason = "the threads' wiring, in one place")]
pub fn collect(ctx: &Context, cfg: Config) -> Result<Summary> {
    QUIET.store(cfg.quiet, Ordering::Relaxed);
    let layout = wal::Layout {
        lake: cfg.lake.clone(),
    };
    layout.make()?;
    let _lock = lock(&layout)?;
    let (marks, replayed) = wal::recover(&layout, cfg.keep_raw)?;
    let Config {
        listener,
        options,
        tls,
        token,
        ..
    } = cfg;
    listener
        .set_nonblocking(true)
        .map_err(|e| Error::Internal(format!("cannot set up the listener: {e}")))?;
    let address = listener
        .local_addr()
        .map_or_else(|_| cfg.listen.to_string(), |a| a.to_string());
    let metrics = Arc::new(Metrics::default());
    let replayed_n = replayed.pieces.len() as u64;
    let replayed_bytes: u64 = replayed.pieces.iter().map(|p| p.2.line.len() as u64).sum();
    metrics
        .buffer_bytes
        .store(replayed_bytes, Ordering::Relaxed);
    let (wal_tx, wal_rx) = mpsc::channel::<server::Append>();
    let (asm_tx, asm_rx) = mpsc::channel::<assemble::Event>();
    let shared = Arc::new(server::Shared {
        token,
        max_body: cfg.max_body,
        max_buffer: cfg.max_buffer,
        body_timeout: cfg.body_timeout,
        wal: Mutex::new(Some(wal_tx)),
        metrics: Arc::clone(&metrics),
    });
    let stop = Arc::new(tokio::sync::Notify::new());
    let scheme = if tls.is_some() { "https" } else { "http" };
    log_event(
        "listening",
        &serde_json::json!({
            "address": address,
            "url": format!("{scheme}://{address}"),
            "lake": cfg.lake.display().to_string(),
            "replayed_lines": replayed_n,
            "torn_line_cut": replayed.torn,
        }),
    );
    let wal = wal::Wal::new(layout.clone(), replayed.next_seq, cfg.max_segment);
    let settings = assemble::Settings {
        idle: cfg.idle,
        max_open: cfg.max_open,
        keep_raw: cfg.keep_raw,
        options,
    };
    let tick = (cfg.idle / 4).clamp(Duration::from_millis(10), Duration::from_millis(250));
    let written = std::thread::scope(|scope| -> Result<()> {
        let log = {
            let (layout, metrics) = (&layout, &metrics);
            std::thread::Builder::new()
                .name("wai-collect-log".into())
                .spawn_scoped(scope, move || {
                    log_thread(wal, layout, &wal_rx, &asm_tx, metrics);
                })
                .map_err(|e| Error::Internal(format!("cannot start the log thread: {e}")))?
        };
        let assembler = {
            let (layout, metrics, stop) = (layout.clone(), Arc::clone(&metrics), Arc::clone(&stop));
            let once = cfg.once;
            let idle = cfg.idle;
            std::thread::Builder::new()
                .name("wai-collect-assemble".into())
                .spawn_scoped(scope, move || -> Result<()> {
                    let r = (|| -> Result<()> {
                        let mut asm =
                            assemble::Assembler::new(ctx, layout, settings, metrics, marks);
                        let start = Instant::now();
                        let mut got_any = replayed_n > 0;
                        let mut last = start;
                        asm.take(assemble::Event::Pieces(replayed.pieces), start)?;
                        for s in replayed.segments {
                            asm.take(assemble::Event::Closed(s), start)?;
                        }
                        let mut stopped = false;
                        // Groups are looked over once a tick, however many events come between.
                        let mut next_tick = start;
                        loop {
                            let wait = next_tick.saturating_duration_since(Instant::now());
                            let event = asm_rx.recv_timeout(wait.max(Duration::from_millis(1)));
                            let now = Instant::now();
                            match event {
                                Ok(e) => {
                                    if matches!(e, assemble::Event::Pieces(_)) {
                                        got_any = true;
                                        last = now;
                                    }
                                    asm.take(e, now)?;
                                }
                                Err(mpsc::RecvTimeoutError::Timeout) => {}
                                Err(mpsc::RecvTimeoutError::Disconnected) => break,
                            }
                            if now < next_tick {
                                continue;
                            }
                            next_tick = now + tick;
                            asm.tick(now, false)?;
                            if once
                                && !stopped
                                && got_any
                                && asm.is_empty()
                                && now.duration_since(last) >= idle
                            {
                                stopped = true;
                                stop.notify_one();
                            }
                        }
                        asm.tick(Instant::now(), true)
                    })();
                    if let Err(e) = &r {
                        // The server stops too: what it acknowledged is in the log.
                        log_event(
                            "assembler_failed",
                            &serde_json::json!({"message": e.to_string()}),
                        );
                        stop.notify_one();
                    }
                    r
                })
                .map_err(|e| Error::Internal(format!("cannot start the assembler: {e}")))?
        };
        let served = ctx.runtime.block_on(async {
            let listener = tokio::net::TcpListener::from_std(listener)
                .map_err(|e| Error::Internal(format!("cannot set up the listener: {e}")))?;
            let tls = tls.map(tokio_rustls::TlsAcceptor::from);
            let until = async {
                let mut term =
                    tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()).ok();
                let term = async {
                    match term.as_mut() {
                        Some(t) => {
                            t.recv().await;
                        }
                        None => std::future::pending::<()>().await,
                    }
                };
                let why = tokio::select! {
                    () = term => "SIGTERM",
                    _ = tokio::signal::ctrl_c() => "SIGINT",
                    () = stop.notified() => "once: all written",
                };
                log_event("stopping", &serde_json::json!({"why": why}));
            };
            server::serve(
                listener,
                tls,
                server::router(Arc::clone(&shared)),
                cfg.header_timeout,
                Duration::from_secs(10),
                until,
            )
            .await;
            Ok::<(), Error>(())
        });
        // No more requests: the log thread drains its queue and ends, then the assembler
        // writes what is open and ends.
        shared
            .wal
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .take();
        let _ = log.join();
        let written = assembler
            .join()
            .unwrap_or_else(|_| Err(Error::Internal("the assembler panicked".into())));
        served.and(written)
    });
    let m = &metrics;
    let summary = Summary {
        address,
        replayed: replayed_n,
        spans: m.spans_received.load(Ordering::Relaxed),
        log_records: m.logs_received.load(Ordering::Relaxed),
        rejected: m.items_rejected.load(Ordering::Relaxed),
        rows: m.rows_written.load(Ordering::Relaxed),
        rows_rejected: m.rows_rejected.load(Ordering::Relaxed),
        partitions: m.parts_written.load(Ordering::Relaxed),
        refused_busy: m.refused_busy.load(Ordering::Relaxed),
    };
    written?;
    log_event(
        "stopped",
        &serde_json::to_value(&summary).unwrap_or_default(),
    );
    Ok(summary)
}
