//! `wai collect`: the real OpenTelemetry exporter into it, rows equal to `wai ingest`'s, and its
//! faults (kill -9 under load, a full buffer, bad tokens, huge and garbage bodies, slow clients).

use std::fmt::Write as _;
use std::io::{BufRead as _, BufReader, Read as _, Write as _};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use opentelemetry_proto::tonic::collector::trace::v1::{
    ExportTraceServiceRequest, ExportTraceServiceResponse,
};
use opentelemetry_proto::tonic::common::v1::{AnyValue, KeyValue, any_value};
use opentelemetry_proto::tonic::trace::v1::{ResourceSpans, ScopeSpans, Span};
use prost::Message as _;
use serde_json::Value;

use crate::support::{fixture, read_jsonl, wai};

const TOKEN: &str = "0123456789abcdef0123456789abcdef";

/// A collector started on a free port, its stderr kept.
struct Collector {
    child: Child,
    port: u16,
    log: Arc<Mutex<Vec<String>>>,
}

impl Collector {
    fn start(lake: &Path, args: &[&str]) -> Self {
        let mut child = Command::new(assert_cmd::cargo::cargo_bin("wai"))
            .args(["collect", "--listen", "127.0.0.1:0", "--lake"])
            .arg(lake)
            .args(args)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("wai starts");
        let mut lines = BufReader::new(child.stderr.take().unwrap()).lines();
        let mut port = 0;
        let log = Arc::new(Mutex::new(Vec::new()));
        for line in lines.by_ref() {
            let line = line.unwrap();
            log.lock().unwrap().push(line.clone());
            if let Ok(v) = serde_json::from_str::<Value>(&line)
                && v["event"] == "listening"
            {
                let address = v["address"].as_str().unwrap();
                port = address.rsplit(':').next().unwrap().parse().unwrap();
                break;
            }
        }
        assert!(port > 0, "no listening line: {:?}", log.lock().unwrap());
        let keep = Arc::clone(&log);
        std::thread::spawn(move || {
            for line in lines.map_while(Result::ok) {
                keep.lock().unwrap().push(line);
            }
        });
        Self { child, port, log }
    }

    fn url(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    /// Waits for the collector to exit (at most `secs`), and its status.
    fn wait(&mut self, secs: u64) -> std::process::ExitStatus {
        let until = Instant::now() + Duration::from_secs(secs);
        loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                return status;
            }
            if Instant::now() > until {
                let _ = self.child.kill();
                panic!("the collector did not stop: {:?}", self.log.lock().unwrap());
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    fn term(&mut self) -> std::process::ExitStatus {
        let _ = Command::new("kill")
            .args(["-TERM", &self.child.id().to_string()])
            .status();
        self.wait(30)
    }
}

impl Drop for Collector {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// An HTTP/1.1 answer: status, headers (lower-cased names), body.
struct Answer {
    status: u16,
    headers: Vec<(String, String)>,
    body: Vec<u8>,
}

impl Answer {
    fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
    }
}

/// One request on its own connection, as bytes on the wire.
fn request(port: u16, method: &str, path: &str, headers: &[(&str, &str)], body: &[u8]) -> Answer {
    let mut s = TcpStream::connect(("127.0.0.1", port)).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    let mut head = format!(
        "{method} {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\nContent-Length: {}\r\n",
        body.len()
    );
    for (k, v) in headers {
        let _ = write!(head, "{k}: {v}\r\n");
    }
    head.push_str("\r\n");
    s.write_all(head.as_bytes()).unwrap();
    // A server may answer (413) before the whole body is sent, and close.
    let _ = s.write_all(body);
    let mut raw = Vec::new();
    let _ = s.read_to_end(&mut raw);
    let split = raw
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .unwrap_or_else(|| panic!("no HTTP answer: {:?}", String::from_utf8_lossy(&raw)));
    let head = String::from_utf8_lossy(&raw[..split]).into_owned();
    let mut lines = head.lines();
    let status = lines
        .next()
        .unwrap()
        .split(' ')
        .nth(1)
        .unwrap()
        .parse()
        .unwrap();
    let headers = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(k, v)| (k.trim().to_ascii_lowercase(), v.trim().to_owned()))
        .collect();
    Answer {
        status,
        headers,
        body: raw[split + 4..].to_vec(),
    }
}

fn protobuf_headers(token: Option<&str>) -> Vec<(&'static str, String)> {
    let mut h = vec![("Content-Type", "application/x-protobuf".to_owned())];
    if let Some(t) = token {
        h.push(("Authorization", format!("Bearer {t}")));
    }
    h
}

fn post(port: u16, path: &str, headers: &[(&'static str, String)], body: &[u8]) -> Answer {
    let h: Vec<(&str, &str)> = headers.iter().map(|(k, v)| (*k, v.as_str())).collect();
    request(port, "POST", path, &h, body)
}

fn text(v: &str) -> AnyValue {
    AnyValue {
        value: Some(any_value::Value::StringValue(v.into())),
    }
}

fn attr(key: &str, value: &str) -> KeyValue {
    KeyValue {
        key: key.into(),
        value: Some(text(value)),
        ..KeyValue::default()
    }
}

/// A GenAI chat span: trace `trace`, one span of it, a prompt and a reply.
fn chat_span(trace: u64, n: u64) -> Span {
    let mut trace_id = vec![0u8; 16];
    trace_id[..8].copy_from_slice(&(trace + 1).to_be_bytes());
    trace_id[8..].copy_from_slice(&0x5eed_u64.to_be_bytes());
    let mut span_id = vec![0u8; 8];
    span_id.copy_from_slice(&(trace * 1000 + n + 1).to_be_bytes());
    let messages =
        format!(r#"[{{"role":"user","parts":[{{"type":"text","content":"question {trace}"}}]}}]"#);
    let reply = format!(
        r#"[{{"role":"assistant","parts":[{{"type":"text","content":"answer {trace}"}}],"finish_reason":"stop"}}]"#
    );
    Span {
        trace_id,
        span_id,
        name: "chat fake-model".into(),
        kind: 3,
        start_time_unix_nano: 1_796_400_000_000_000_000 + trace * 1_000_000 + n,
        end_time_unix_nano: 1_796_400_000_000_000_000 + trace * 1_000_000 + n + 500,
        attributes: vec![
            attr("gen_ai.operation.name", "chat"),
            attr("gen_ai.request.model", "fake-model"),
            attr("gen_ai.input.messages", &messages),
            attr("gen_ai.output.messages", &reply),
            attr("whileai.task_id", &format!("task-{}", trace % 7)),
        ],
        ..Span::default()
    }
}

fn batch(spans: Vec<Span>) -> Vec<u8> {
    ExportTraceServiceRequest {
        resource_spans: vec![ResourceSpans {
            resource: None,
            scope_spans: vec![ScopeSpans {
                spans,
                ..ScopeSpans::default()
            }],
            ..ResourceSpans::default()
        }],
    }
    .encode_to_vec()
}

/// The rows of every partition under the lake's `collected/`, as JSON.
fn collected_rows(dir: &Path, lake: &Path) -> Vec<Value> {
    let mut parts = Vec::new();
    let mut stack = vec![lake.join("collected")];
    while let Some(d) = stack.pop() {
        let Ok(entries) = std::fs::read_dir(&d) else {
            continue;
        };
        for e in entries.flatten() {
            let p = e.path();
            if p.is_dir() {
                stack.push(p);
            } else if p.extension().is_some_and(|x| x == "parquet") {
                parts.push(p);
            }
        }
    }
    parts.sort();
    let mut rows = Vec::new();
    for (i, p) in parts.iter().enumerate() {
        let out = dir.join(format!("rows-{i}.jsonl"));
        wai()
            .arg("convert")
            .arg(p)
            .arg("--out")
            .arg(&out)
            .assert()
            .success();
        rows.extend(read_jsonl(&out));
    }
    rows
}

fn sorted(mut rows: Vec<Value>) -> Vec<Value> {
    rows.sort_by_key(|r| r["rollout_id"].as_str().unwrap_or_default().to_owned());
    rows
}

fn otel_python() -> Option<PathBuf> {
    let python = std::env::var_os("WAI_OTEL_PYTHON");
    if python.is_none() {
        assert!(
            std::env::var_os("CI").is_none(),
            "CI must set WAI_OTEL_PYTHON (see .ci/run)"
        );
        #[allow(clippy::print_stderr, reason = "a skipped test says why")]
        {
            eprintln!(
                "skipped: set WAI_OTEL_PYTHON to a python with tests/fixtures/collect/requirements.txt"
            );
        }
    }
    python.map(PathBuf::from)
}

#[test]
fn the_real_otlp_exporter_lands_the_rows_wai_ingest_makes_and_wai_run_grades_them() {
    let Some(python) = otel_python() else {
        return;
    };
    let d = tempfile::tempdir().unwrap();
    std::fs::write(d.path().join("token"), format!("{TOKEN}\n")).unwrap();
    for mode in ["span_only", "event_only"] {
        let lake = d.path().join(format!("lake-{mode}"));
        let mut c = Collector::start(
            &lake,
            &[
                "--once",
                "--idle",
                "1s",
                "--token-file",
                d.path().join("token").to_str().unwrap(),
            ],
        );
        let stem = d.path().join(mode);
        let out = Command::new(&python)
            .arg(fixture("collect/export.py"))
            .arg(c.url())
            .arg(&stem)
            .args(["--token", TOKEN, "--mode", mode])
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(c.wait(60).success(), "{:?}", c.log.lock().unwrap());
        let got = sorted(collected_rows(d.path(), &lake));
        // The same spans, from the file the collector's file exporter would have written.
        let ingested = d.path().join(format!("{mode}.parquet"));
        let mut ingest = wai();
        ingest
            .arg("ingest")
            .arg(format!("{}.traces.jsonl", stem.display()));
        let logs = PathBuf::from(format!("{}.logs.jsonl", stem.display()));
        if mode == "event_only" {
            assert!(logs.exists(), "event_only writes log records");
            ingest.arg(&logs);
        }
        ingest.arg("--out").arg(&ingested).assert().success();
        let want_jsonl = d.path().join(format!("{mode}.jsonl"));
        wai()
            .arg("convert")
            .arg(&ingested)
            .arg("--out")
            .arg(&want_jsonl)
            .assert()
            .success();
        let want = sorted(read_jsonl(&want_jsonl));
        assert_eq!(want.len(), 4, "four rollouts");
        assert_eq!(got, want, "{mode}: collect's rows are ingest's");
        assert!(
            got.iter().any(|r| r["steps"][0]["tool"] == "lookup_order"),
            "{mode}: the tool call is there: {:?}",
            got[0]
        );
        // The log is empty once everything is written.
        let wal: Vec<_> = std::fs::read_dir(lake.join("_wai/collect/wal"))
            .unwrap()
            .collect();
        assert!(wal.is_empty(), "{mode}: log segments left: {wal:?}");
    }
    // The nightly job grades what landed.
    let pipeline = d.path().join("nightly.toml");
    std::fs::write(
        &pipeline,
        r#"lake = "runs"

[input]
paths = ["lake-span_only/collected/date=*/*.parquet"]

[[stage]]
run = "grade"
judge = ["sql:CASE WHEN reward > 0.5 THEN 1 ELSE 0 END"]

[[stage]]
run = "pass-at"
"#,
    )
    .unwrap();
    let report = crate::support::json_of(wai().current_dir(d.path()).args([
        "--json",
        "run",
        "nightly.toml",
    ]));
    let stages = report["report"]["stages"].as_array().unwrap();
    assert!(
        stages[0]["headline"]
            .as_str()
            .unwrap()
            .starts_with("graded 4 rows"),
        "{report}"
    );
    assert_eq!(stages[1]["rows"], 4, "{report}");
}

#[test]
fn acknowledged_spans_survive_kill_9_once_each() {
    let d = tempfile::tempdir().unwrap();
    let lake = d.path().join("lake");
    let c = Collector::start(&lake, &["--idle", "1s"]);
    let port = c.port;
    // Four senders, 30 requests each of 8 traces of 4 spans: killed part way.
    let acked = Arc::new(Mutex::new(Vec::<u64>::new()));
    let senders: Vec<_> = (0..4u64)
        .map(|w| {
            let acked = Arc::clone(&acked);
            std::thread::spawn(move || {
                for r in 0..30u64 {
                    let traces: Vec<u64> = (0..8).map(|t| (w * 30 + r) * 8 + t).collect();
                    let spans = traces
                        .iter()
                        .flat_map(|t| (0..4).map(move |n| chat_span(*t, n)))
                        .collect();
                    let body = batch(spans);
                    let Ok(mut s) = TcpStream::connect(("127.0.0.1", port)) else {
                        return;
                    };
                    let head = format!(
                        "POST /v1/traces HTTP/1.1\r\nHost: x\r\nConnection: close\r\nContent-Type: application/x-protobuf\r\nContent-Length: {}\r\n\r\n",
                        body.len()
                    );
                    if s.write_all(head.as_bytes()).and_then(|()| s.write_all(&body)).is_err() {
                        return;
                    }
                    let mut raw = Vec::new();
                    let _ = s.read_to_end(&mut raw);
                    if raw.starts_with(b"HTTP/1.1 200") {
                        acked.lock().unwrap().extend(&traces);
                    } else {
                        return;
                    }
                }
            })
        })
        .collect();
    // Kill when about half is acknowledged.
    let until = Instant::now() + Duration::from_mins(1);
    while acked.lock().unwrap().len() < 400 && Instant::now() < until {
        std::thread::sleep(Duration::from_millis(5));
    }
    let mut c = c;
    c.child.kill().unwrap();
    c.child.wait().unwrap();
    for s in senders {
        s.join().unwrap();
    }
    let acked: Vec<u64> = acked.lock().unwrap().clone();
    assert!(acked.len() >= 400, "{} acknowledged", acked.len());
    // A restart replays the log and writes what no partition holds.
    let mut again = Collector::start(&lake, &["--idle", "1s", "--once"]);
    assert!(again.wait(60).success(), "{:?}", again.log.lock().unwrap());
    let rows = collected_rows(d.path(), &lake);
    let mut seen = std::collections::HashMap::<String, u32>::new();
    for r in &rows {
        *seen
            .entry(r["prompt"].as_str().unwrap().to_owned())
            .or_default() += 1;
    }
    let twice: Vec<_> = seen.iter().filter(|(_, n)| **n > 1).collect();
    assert!(twice.is_empty(), "rows written twice: {twice:?}");
    for t in &acked {
        assert_eq!(
            seen.get(&format!("question {t}")),
            Some(&1),
            "acknowledged trace {t} is in the lake once"
        );
    }
    assert!(rows.iter().all(|r| r["steps"].as_array().is_some()));
}

#[test]
fn a_full_buffer_answers_503_with_retry_after_then_recovers() {
    let d = tempfile::tempdir().unwrap();
    let lake = d.path().join("lake");
    let c = Collector::start(
        &lake,
        &["--idle", "1s", "--max-buffer", "64K", "--max-body", "32K"],
    );
    let mut refused = None;
    for r in 0..200u64 {
        let body = batch((0..4).map(|n| chat_span(r, n)).collect());
        let a = post(c.port, "/v1/traces", &protobuf_headers(None), &body);
        if a.status == 503 {
            refused = Some(a);
            break;
        }
        assert_eq!(a.status, 200);
    }
    let refused = refused.expect("the buffer fills");
    assert_eq!(refused.header("retry-after"), Some("1"));
    // Quiet conversations are written, the buffer empties, requests are taken again.
    std::thread::sleep(Duration::from_millis(2500));
    let body = batch((0..4).map(|n| chat_span(10_000, n)).collect());
    let a = post(c.port, "/v1/traces", &protobuf_headers(None), &body);
    assert_eq!(a.status, 200);
    let m = request(c.port, "GET", "/metrics", &[], b"");
    let metrics = String::from_utf8_lossy(&m.body).into_owned();
    assert!(
        metrics.contains("wai_collect_refused_busy_total 1"),
        "{metrics}"
    );
}

#[test]
fn bad_requests_are_refused_with_the_status_otlp_defines() {
    let d = tempfile::tempdir().unwrap();
    let lake = d.path().join("lake");
    std::fs::write(d.path().join("token"), TOKEN).unwrap();
    let c = Collector::start(
        &lake,
        &[
            "--idle",
            "1s",
            "--max-body",
            "64K",
            "--token-file",
            d.path().join("token").to_str().unwrap(),
            "--header-timeout",
            "1s",
        ],
    );
    let good = batch((0..3).map(|n| chat_span(1, n)).collect());
    // No token, a wrong one: 401 with WWW-Authenticate.
    for token in [None, Some("wrong-token-wrong-token-wrong-t")] {
        let a = post(c.port, "/v1/traces", &protobuf_headers(token), &good);
        assert_eq!(a.status, 401);
        assert_eq!(a.header("www-authenticate"), Some("Bearer"));
    }
    // Metrics need it too; health does not.
    assert_eq!(request(c.port, "GET", "/metrics", &[], b"").status, 401);
    assert_eq!(request(c.port, "GET", "/healthz", &[], b"").status, 200);
    let auth = protobuf_headers(Some(TOKEN));
    // Over --max-body: 413, declared or after gunzip (a small body that inflates).
    let huge = vec![b'x'; 100 * 1024];
    assert_eq!(post(c.port, "/v1/traces", &auth, &huge).status, 413);
    let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::best());
    gz.write_all(&vec![0u8; 10 << 20]).unwrap();
    let bomb = gz.finish().unwrap();
    let mut zipped = auth.clone();
    zipped.push(("Content-Encoding", "gzip".into()));
    assert_eq!(post(c.port, "/v1/traces", &zipped, &bomb).status, 413);
    // Garbage: 400 with a google.rpc.Status saying why; a wrong content type: 415.
    let a = post(c.port, "/v1/traces", &auth, b"\xff\xff\xff\xff garbage");
    assert_eq!(a.status, 400);
    assert!(String::from_utf8_lossy(&a.body).contains("not an OTLP protobuf trace request"));
    let mut json = vec![("Content-Type", "application/json".to_owned())];
    json.push(("Authorization", format!("Bearer {TOKEN}")));
    let a = post(c.port, "/v1/traces", &json, b"{\"resourceSpans\": 7}");
    assert_eq!(a.status, 400);
    let status: Value = serde_json::from_slice(&a.body).unwrap();
    assert_eq!(status["code"], 3, "{status}");
    let mut plain = vec![("Content-Type", "text/plain".to_owned())];
    plain.push(("Authorization", format!("Bearer {TOKEN}")));
    assert_eq!(post(c.port, "/v1/traces", &plain, &good).status, 415);
    // A bad span inside a good batch: counted in partial_success and set aside; the rest kept.
    let mut spans: Vec<Span> = (0..3).map(|n| chat_span(2, n)).collect();
    spans[1].span_id = vec![1, 2, 3];
    let a = post(c.port, "/v1/traces", &auth, &batch(spans));
    assert_eq!(a.status, 200);
    let r = ExportTraceServiceResponse::decode(&a.body[..]).unwrap();
    let partial = r.partial_success.expect("partial success");
    assert_eq!(partial.rejected_spans, 1);
    assert!(
        partial.error_message.contains("span id is 3 bytes"),
        "{}",
        partial.error_message
    );
    // OTLP/JSON, gzipped: the fixture's spans are taken whole.
    let doc =
        std::fs::read_to_string(fixture("ingest/otel/openai_v2_span_only.traces.jsonl")).unwrap();
    let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    gz.write_all(doc.trim().as_bytes()).unwrap();
    let mut jz = json.clone();
    jz.push(("Content-Encoding", "gzip".into()));
    let a = post(c.port, "/v1/traces", &jz, &gz.finish().unwrap());
    assert_eq!(a.status, 200, "{}", String::from_utf8_lossy(&a.body));
    // A slow client that never finishes its headers is cut off.
    let mut slow = TcpStream::connect(("127.0.0.1", c.port)).unwrap();
    slow.write_all(b"POST /v1/traces HTTP/1.1\r\nHost: x\r\n")
        .unwrap();
    slow.set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    let started = Instant::now();
    let mut buf = Vec::new();
    let _ = slow.read_to_end(&mut buf);
    assert!(
        started.elapsed() < Duration::from_secs(8),
        "the connection was closed by the header timeout"
    );
    // SIGTERM: what is open is written, exit 0.
    let mut c = c;
    assert!(c.term().success(), "{:?}", c.log.lock().unwrap());
    let rows = collected_rows(d.path(), &lake);
    // Trace 2 (two good spans), and the fixture's four rollouts.
    assert_eq!(rows.len(), 5, "{rows:?}");
    let rejects: Vec<_> = std::fs::read_dir(lake.join("_wai/collect/rejects"))
        .unwrap()
        .flatten()
        .collect();
    assert_eq!(rejects.len(), 1);
    let set_aside = read_jsonl(&rejects[0].path());
    assert_eq!(set_aside.len(), 1);
    assert!(set_aside[0]["reason"].as_str().unwrap().contains("span id"));
}

#[test]
fn options_are_checked_before_any_work() {
    let d = tempfile::tempdir().unwrap();
    let lake = d.path().join("lake");
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let taken = taken.local_addr().unwrap().to_string();
    for (args, needle) in [
        (vec!["--listen", "0.0.0.0:0"], "no --token-file"),
        (vec!["--listen", taken.as_str()], "cannot listen on"),
        (vec!["--max-body", "1G"], "--max-body"),
        (vec!["--idle", "soon"], "not a duration"),
        (vec!["--token-file", "/nonexistent/token"], "cannot be read"),
    ] {
        let out = wai()
            .args(["collect", "--lake"])
            .arg(&lake)
            .args(&args)
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(64), "{args:?}");
        assert!(
            String::from_utf8_lossy(&out.stderr).contains(needle),
            "{args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(!lake.exists(), "{args:?}: nothing is made");
    }
}

#[test]
fn a_damaged_log_is_refused_naming_its_file_and_line() {
    let d = tempfile::tempdir().unwrap();
    let lake = d.path().join("lake");
    let mut c = Collector::start(&lake, &["--idle", "1h"]);
    // Values that serde writes as `null` and `{}` (a NaN, an empty value) read back on replay.
    let mut odd = chat_span(1, 0);
    odd.attributes.push(KeyValue {
        key: "x.nan".into(),
        value: Some(AnyValue {
            value: Some(any_value::Value::DoubleValue(f64::NAN)),
        }),
        ..KeyValue::default()
    });
    odd.attributes.push(KeyValue {
        key: "x.empty".into(),
        value: Some(AnyValue { value: None }),
        ..KeyValue::default()
    });
    let a = post(
        c.port,
        "/v1/traces",
        &protobuf_headers(None),
        &batch(vec![odd]),
    );
    assert_eq!(a.status, 200);
    let a = post(
        c.port,
        "/v1/traces",
        &protobuf_headers(None),
        &batch(vec![chat_span(2, 0)]),
    );
    assert_eq!(a.status, 200);
    c.child.kill().unwrap();
    c.child.wait().unwrap();
    let wal = lake.join("_wai/collect/wal");
    let segment = std::fs::read_dir(&wal)
        .unwrap()
        .flatten()
        .next()
        .unwrap()
        .path();
    let text = std::fs::read_to_string(&segment).unwrap();
    let mut lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 2);
    // A torn last line is cut (it was never acknowledged); a damaged first one is an error.
    std::fs::write(&segment, format!("{}\n{}", lines[0], &lines[1][..20])).unwrap();
    let mut c = Collector::start(&lake, &["--idle", "1s", "--once"]);
    assert!(c.wait(30).success());
    assert_eq!(collected_rows(d.path(), &lake).len(), 1);
    lines[0] = "{\"resourceSpans\": 7}";
    std::fs::create_dir_all(&wal).unwrap();
    let bad = wal.join(format!("{:020}.jsonl", 100));
    std::fs::write(&bad, format!("{}\n{}\n", lines[1], lines[0])).unwrap();
    let out = wai()
        .args(["collect", "--listen", "127.0.0.1:0", "--lake"])
        .arg(&lake)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(65));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("00000000000000000100.jsonl") && err.contains("line 2"),
        "{err}"
    );
}

#[test]
fn tls_serves_with_the_given_certificate() {
    let d = tempfile::tempdir().unwrap();
    // A test CA and a certificate it signs for 127.0.0.1, made with the openssl CLI.
    let p = |name: &str| d.path().join(name).to_str().unwrap().to_owned();
    std::fs::write(
        d.path().join("ext.cnf"),
        "subjectAltName=IP:127.0.0.1,DNS:localhost\nbasicConstraints=CA:FALSE\n",
    )
    .unwrap();
    let steps: [Vec<String>; 3] = [
        [
            "req",
            "-x509",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-days",
            "2",
            "-subj",
            "/CN=wai-test-ca",
        ]
        .iter()
        .map(|s| (*s).to_owned())
        .chain(["-keyout".into(), p("ca.key"), "-out".into(), p("ca.pem")])
        .collect(),
        [
            "req",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-subj",
            "/CN=localhost",
        ]
        .iter()
        .map(|s| (*s).to_owned())
        .chain(["-keyout".into(), p("key.pem"), "-out".into(), p("leaf.csr")])
        .collect(),
        ["x509", "-req", "-days", "2", "-CAcreateserial"]
            .iter()
            .map(|s| (*s).to_owned())
            .chain([
                "-in".into(),
                p("leaf.csr"),
                "-CA".into(),
                p("ca.pem"),
                "-CAkey".into(),
                p("ca.key"),
                "-extfile".into(),
                p("ext.cnf"),
                "-out".into(),
                p("cert.pem"),
            ])
            .collect(),
    ];
    for args in steps {
        let made = Command::new("openssl")
            .args(&args)
            .output()
            .expect("openssl is installed");
        assert!(
            made.status.success(),
            "{}",
            String::from_utf8_lossy(&made.stderr)
        );
    }
    let (cert, key) = (d.path().join("cert.pem"), d.path().join("key.pem"));
    let lake = d.path().join("lake");
    let mut c = Collector::start(
        &lake,
        &[
            "--idle",
            "1s",
            "--once",
            "--keep-raw",
            "--tls-cert",
            cert.to_str().unwrap(),
            "--tls-key",
            key.to_str().unwrap(),
        ],
    );
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let pem = std::fs::read(d.path().join("ca.pem")).unwrap();
    let status = runtime.block_on(async {
        let client = reqwest::Client::builder()
            .add_root_certificate(reqwest::Certificate::from_pem(&pem).unwrap())
            .build()
            .unwrap();
        client
            .post(format!("https://127.0.0.1:{}/v1/traces", c.port))
            .header("Content-Type", "application/x-protobuf")
            .body(batch(vec![chat_span(5, 0)]))
            .send()
            .await
            .unwrap()
            .status()
    });
    assert_eq!(status.as_u16(), 200);
    // Plain HTTP to the TLS port gets no answer.
    let mut s = TcpStream::connect(("127.0.0.1", c.port)).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    s.write_all(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
        .unwrap();
    let mut buf = Vec::new();
    let _ = s.read_to_end(&mut buf);
    assert!(!buf.starts_with(b"HTTP/1.1 200"));
    assert!(c.wait(30).success());
    assert_eq!(collected_rows(d.path(), &lake).len(), 1);
    // --keep-raw: the written log segment is kept as raw spans, which `wai ingest` reads.
    let raw: Vec<_> = std::fs::read_dir(lake.join("raw/otlp"))
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .collect();
    assert_eq!(raw.len(), 1, "{raw:?}");
    let again = d.path().join("again.jsonl");
    wai()
        .args(["ingest", "--format", "otel"])
        .arg(&raw[0])
        .arg("--out")
        .arg(&again)
        .assert()
        .success();
    assert_eq!(read_jsonl(&again).len(), 1);
}
