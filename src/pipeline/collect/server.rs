//! OTLP/HTTP: `POST /v1/traces` and `/v1/logs` (protobuf or JSON, gzip or not), `GET /healthz`
//! and `GET /metrics`, over plain TCP or rustls, with a header timeout against slow clients and
//! a graceful stop.

use std::io::Read as _;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::Router;
use axum::body::Body;
use axum::extract::State;
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::server::graceful::GracefulShutdown;
use hyper_util::service::TowerToHyperService;
use subtle::ConstantTimeEq as _;
use tokio::net::TcpListener;

use super::Metrics;
use super::otlp::{self, Encoding, Piece, Rejected, Signal};

/// `google.rpc.Code`s OTLP answers with.
const INVALID_ARGUMENT: i32 = 3;
const UNAUTHENTICATED: i32 = 16;
const UNAVAILABLE: i32 = 14;
const RESOURCE_EXHAUSTED: i32 = 8;

/// A request's kept pieces and rejects, for the log thread; it answers once they are durable.
pub struct Append {
    /// What the request carried.
    pub signal: Signal,
    /// One trace's part each.
    pub pieces: Vec<Piece>,
    /// Items set aside.
    pub rejected: Vec<Rejected>,
    /// Told when the lines are synced (or why they could not be).
    pub ack: tokio::sync::oneshot::Sender<Result<(), String>>,
}

/// What every request handler shares.
pub struct Shared {
    /// The bearer token, when one is required.
    pub token: Option<Vec<u8>>,
    /// The largest body, compressed or not.
    pub max_body: usize,
    /// The most bytes held between acknowledgement and the row partition.
    pub max_buffer: u64,
    /// How long a body may take to arrive.
    pub body_timeout: Duration,
    /// The log thread's queue; `None` once stopping.
    pub wal: Mutex<Option<std::sync::mpsc::Sender<Append>>>,
    /// The counters.
    pub metrics: Arc<Metrics>,
}

/// The routes.
pub fn router(shared: Arc<Shared>) -> Router {
    Router::new()
        .route("/v1/traces", post(traces))
        .route("/v1/logs", post(logs))
        .route("/healthz", get(healthz))
        .route("/metrics", get(metrics))
        .with_state(shared)
}

async fn traces(State(s): State<Arc<Shared>>, headers: HeaderMap, body: Body) -> Response {
    counted(&s, export(&s, Signal::Traces, &headers, body).await)
}

async fn logs(State(s): State<Arc<Shared>>, headers: HeaderMap, body: Body) -> Response {
    counted(&s, export(&s, Signal::Logs, &headers, body).await)
}

/// Counts an export's answer, by its status, in the metrics.
fn counted(s: &Shared, r: Response) -> Response {
    let m = &s.metrics;
    let counter = match r.status() {
        StatusCode::OK => None,
        StatusCode::SERVICE_UNAVAILABLE => Some(&m.refused_busy),
        StatusCode::UNAUTHORIZED => Some(&m.refused_auth),
        StatusCode::PAYLOAD_TOO_LARGE => Some(&m.refused_large),
        _ => Some(&m.refused_bad),
    };
    if let Some(c) = counter {
        c.fetch_add(1, Ordering::Relaxed);
    }
    r
}

async fn healthz() -> Response {
    (StatusCode::OK, "ok\n").into_response()
}

async fn metrics(State(s): State<Arc<Shared>>, headers: HeaderMap) -> Response {
    if !authorized(&s, &headers) {
        return unauthorized(Encoding::Json);
    }
    (
        StatusCode::OK,
        [(header::CONTENT_TYPE, "text/plain; version=0.0.4")],
        s.metrics.render(),
    )
        .into_response()
}

fn authorized(s: &Shared, headers: &HeaderMap) -> bool {
    let Some(token) = &s.token else {
        return true;
    };
    let Some(given) = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| {
            let (scheme, rest) = v.split_once(' ')?;
            scheme.eq_ignore_ascii_case("bearer").then(|| rest.trim())
        })
    else {
        return false;
    };
    bool::from(given.as_bytes().ct_eq(token))
}

fn content_type(encoding: Encoding) -> &'static str {
    match encoding {
        Encoding::Protobuf => "application/x-protobuf",
        Encoding::Json => "application/json",
    }
}

/// A failed request's answer: its status, a `google.rpc.Status` body in the request's encoding.
fn fail(status: StatusCode, encoding: Encoding, code: i32, message: &str) -> Response {
    (
        status,
        [(header::CONTENT_TYPE, content_type(encoding))],
        otlp::status(encoding, code, message),
    )
        .into_response()
}

fn unauthorized(encoding: Encoding) -> Response {
    let mut r = fail(
        StatusCode::UNAUTHORIZED,
        encoding,
        UNAUTHENTICATED,
        "a bearer token is required: send `Authorization: Bearer TOKEN` (the exporter's OTEL_EXPORTER_OTLP_HEADERS)",
    );
    r.headers_mut()
        .insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
    r
}

/// A retryable refusal: 503 with `Retry-After`.
fn busy(encoding: Encoding, message: &str) -> Response {
    let mut r = fail(
        StatusCode::SERVICE_UNAVAILABLE,
        encoding,
        UNAVAILABLE,
        message,
    );
    r.headers_mut()
        .insert(header::RETRY_AFTER, HeaderValue::from_static("1"));
    r
}

fn too_large(encoding: Encoding, max: usize) -> Response {
    fail(
        StatusCode::PAYLOAD_TOO_LARGE,
        encoding,
        RESOURCE_EXHAUSTED,
        &format!(
            "the body is over --max-body ({max} bytes, after decompression): send smaller batches (the exporter's max export batch size)"
        ),
    )
}

async fn export(s: &Shared, signal: Signal, headers: &HeaderMap, body: Body) -> Response {
    let m = &s.metrics;
    m.requests.fetch_add(1, Ordering::Relaxed);
    let kind = headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("");
    let essence = kind
        .split(';')
        .next()
        .unwrap_or("")
        .trim()
        .to_ascii_lowercase();
    let encoding = match essence.as_str() {
        "application/x-protobuf" | "application/protobuf" => Encoding::Protobuf,
        "application/json" => Encoding::Json,
        _ => {
            return fail(
                StatusCode::UNSUPPORTED_MEDIA_TYPE,
                Encoding::Json,
                INVALID_ARGUMENT,
                &format!(
                    "content type `{kind}`: OTLP/HTTP bodies are `application/x-protobuf` or `application/json`"
                ),
            );
        }
    };
    if !authorized(s, headers) {
        return unauthorized(encoding);
    }
    let body = match read_body(s, headers, body, encoding).await {
        Ok(b) => b,
        Err(r) => return r,
    };
    // Backpressure: what is held between acknowledgement and the row partition stays under
    // the budget.
    if m.buffer_bytes.load(Ordering::Relaxed) + body.len() as u64 > s.max_buffer {
        return busy(
            encoding,
            "the collector's buffer is full (--max-buffer): retry after the time given",
        );
    }
    let decoded = match otlp::decode(signal, encoding, &body) {
        Ok(d) => d,
        Err(message) => {
            return fail(
                StatusCode::BAD_REQUEST,
                encoding,
                INVALID_ARGUMENT,
                &message,
            );
        }
    };
    let rejected = decoded.rejected.len() as u64;
    let message = decoded.rejected.first().map_or(String::new(), |r| {
        format!(
            "{rejected} {} set aside (in the collector's rejects file), the first because {}",
            signal.items(),
            r.reason
        )
    });
    let kept: u64 = decoded.pieces.iter().map(|p| p.items).sum();
    if !decoded.pieces.is_empty() || !decoded.rejected.is_empty() {
        // The lines' bytes are reserved against the budget at once (not checked, then added),
        // so requests arriving together cannot pass it between them.
        let bytes: u64 = decoded.pieces.iter().map(|p| p.line.len() as u64).sum();
        let reserved = m
            .buffer_bytes
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |held| {
                (held + bytes <= s.max_buffer || held == 0).then_some(held + bytes)
            })
            .is_ok();
        if !reserved {
            return busy(
                encoding,
                "the collector's buffer is full (--max-buffer): retry after the time given",
            );
        }
        let (ack, done) = tokio::sync::oneshot::channel();
        let sent = s
            .wal
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .as_ref()
            .is_some_and(|q| {
                q.send(Append {
                    signal,
                    pieces: decoded.pieces,
                    rejected: decoded.rejected,
                    ack,
                })
                .is_ok()
            });
        if !sent {
            m.buffer_bytes.fetch_sub(bytes, Ordering::Relaxed);
            return busy(encoding, "not stored: the collector is stopping");
        }
        // On a failed write the log thread lets the reserved bytes go (this handler may be gone
        // by then, its client having hung up).
        let durable = done
            .await
            .unwrap_or_else(|_| Err("the log thread stopped".into()));
        if let Err(why) = durable {
            return busy(encoding, &format!("not stored: {why}"));
        }
    }
    match signal {
        Signal::Traces => m.spans_received.fetch_add(kept, Ordering::Relaxed),
        Signal::Logs => m.logs_received.fetch_add(kept, Ordering::Relaxed),
    };
    m.items_rejected.fetch_add(rejected, Ordering::Relaxed);
    (
        StatusCode::OK,
        [(header::CONTENT_TYPE, content_type(encoding))],
        otlp::response(signal, encoding, rejected, &message),
    )
        .into_response()
}

/// The body, whole and decompressed, within `--max-body` and `--body-timeout`; else the answer.
async fn read_body(
    s: &Shared,
    headers: &HeaderMap,
    body: Body,
    encoding: Encoding,
) -> Result<Vec<u8>, Response> {
    let m = &s.metrics;
    let declared = headers
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    if declared.is_some_and(|n| n > s.max_body as u64) {
        return Err(too_large(encoding, s.max_body));
    }
    let raw =
        match tokio::time::timeout(s.body_timeout, axum::body::to_bytes(body, s.max_body)).await {
            Err(_) => {
                return Err(fail(
                    StatusCode::REQUEST_TIMEOUT,
                    encoding,
                    INVALID_ARGUMENT,
                    "the body did not arrive in time",
                ));
            }
            Ok(Err(e)) => {
                // axum says so when the body outgrows the limit (a chunked body declares no length).
                let large = format!("{e:?}").contains("LengthLimitError")
                    || e.to_string().contains("length limit");
                if large {
                    return Err(too_large(encoding, s.max_body));
                }
                return Err(fail(
                    StatusCode::BAD_REQUEST,
                    encoding,
                    INVALID_ARGUMENT,
                    &format!("the body could not be read: {e}"),
                ));
            }
            Ok(Ok(b)) => b,
        };
    m.bytes_received
        .fetch_add(raw.len() as u64, Ordering::Relaxed);
    let zipped = match headers
        .get(header::CONTENT_ENCODING)
        .and_then(|v| v.to_str().ok())
        .map(|v| v.trim().to_ascii_lowercase())
        .as_deref()
    {
        None | Some("" | "identity") => false,
        Some("gzip") => true,
        Some(other) => {
            return Err(fail(
                StatusCode::UNSUPPORTED_MEDIA_TYPE,
                encoding,
                INVALID_ARGUMENT,
                &format!("content encoding `{other}`: send gzip or none"),
            ));
        }
    };
    let body: Vec<u8> = if zipped {
        let mut out = Vec::new();
        let limit = s.max_body as u64 + 1;
        match flate2::read::GzDecoder::new(&raw[..])
            .take(limit)
            .read_to_end(&mut out)
        {
            Ok(_) if out.len() > s.max_body => {
                return Err(too_large(encoding, s.max_body));
            }
            Ok(_) => out,
            Err(e) => {
                return Err(fail(
                    StatusCode::BAD_REQUEST,
                    encoding,
                    INVALID_ARGUMENT,
                    &format!("the gzip body could not be read: {e}"),
                ));
            }
        }
    } else {
        raw.to_vec()
    };
    Ok(body)
}

/// Serves `app` on `listener` (through `tls` when given) until `stop`, then lets the open
/// requests finish (for at most `drain`).
pub async fn serve(
    listener: TcpListener,
    tls: Option<tokio_rustls::TlsAcceptor>,
    app: Router,
    header_timeout: Duration,
    drain: Duration,
    stop: impl std::future::Future<Output = ()>,
) {
    let graceful = GracefulShutdown::new();
    let mut http = hyper::server::conn::http1::Builder::new();
    http.timer(TokioTimer::new())
        .header_read_timeout(header_timeout);
    let http = Arc::new(http);
    tokio::pin!(stop);
    loop {
        let (stream, _) = tokio::select! {
            accepted = listener.accept() => if let Ok(a) = accepted { a } else {
                // Out of file descriptors and the like: wait, then accept again.
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            },
            () = &mut stop => break,
        };
        let _ = stream.set_nodelay(true);
        let service = TowerToHyperService::new(app.clone());
        let http = Arc::clone(&http);
        match &tls {
            None => {
                let conn = http.serve_connection(TokioIo::new(stream), service);
                let conn = graceful.watch(conn);
                tokio::spawn(async move {
                    let _ = conn.await;
                });
            }
            Some(acceptor) => {
                let acceptor = acceptor.clone();
                let watcher = graceful.watcher();
                tokio::spawn(async move {
                    let Ok(Ok(stream)) =
                        tokio::time::timeout(header_timeout, acceptor.accept(stream)).await
                    else {
                        return;
                    };
                    let conn = http.serve_connection(TokioIo::new(stream), service);
                    let _ = watcher.watch(conn).await;
                });
            }
        }
    }
    drop(listener);
    let _ = tokio::time::timeout(drain, graceful.shutdown()).await;
}
