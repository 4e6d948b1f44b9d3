//! Object-store inputs against real servers on 127.0.0.1: S3 (moto) and plain HTTP.
//!
//! The test starts `moto_server` itself (`pip install "moto[server]"`; `.ci/run` installs it).
//! Without it the tests skip, except under CI, where a missing server is a failure.

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::support::{fixture, gen_rows, wai};

pub(crate) const BUCKET: &str = "wai-test";

/// A server process on 127.0.0.1, killed when dropped.
pub(crate) struct Server {
    child: Child,
    port: u16,
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn request(port: u16, method: &str, path: &str, body: &[u8]) -> String {
    let mut s = TcpStream::connect(("127.0.0.1", port)).expect("connect to moto");
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    write!(s, "{method} {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n", body.len()).unwrap();
    s.write_all(body).unwrap();
    let mut out = String::new();
    let _ = s.read_to_string(&mut out);
    out
}

pub(crate) fn start() -> Option<Server> {
    if Command::new("moto_server")
        .arg("--help")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_err()
    {
        assert!(
            std::env::var_os("CI").is_none(),
            "moto_server is not installed; .ci/run installs it"
        );
        #[allow(clippy::print_stderr, reason = "a skipped test says why")]
        {
            eprintln!("skipped: moto_server is not installed (pip install \"moto[server]\")");
        }
        return None;
    }
    let port = TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let child = Command::new("moto_server")
        .args(["-H", "127.0.0.1", "-p", &port.to_string()])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("start moto_server");
    let moto = Server { child, port };
    let deadline = Instant::now() + Duration::from_secs(30);
    while TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(
            Instant::now() < deadline,
            "moto_server did not start on port {port}"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    let created = request(port, "PUT", &format!("/{BUCKET}"), b"");
    assert!(
        created.starts_with("HTTP/1.1 200"),
        "create bucket: {created}"
    );
    Some(moto)
}

pub(crate) fn put(moto: &Server, key: &str, path: &std::path::Path) {
    let body = std::fs::read(path).unwrap();
    let reply = request(moto.port, "PUT", &format!("/{BUCKET}/{key}"), &body);
    assert!(reply.starts_with("HTTP/1.1 200"), "put {key}: {reply}");
}

/// The environment that points `object_store` at `moto` (set), and what must not leak in (unset).
pub(crate) fn s3_env(moto: &Server) -> (Vec<(&'static str, String)>, [&'static str; 2]) {
    let endpoint = format!("http://127.0.0.1:{}", moto.port);
    (
        vec![
            ("AWS_ENDPOINT_URL", endpoint.clone()),
            ("AWS_ENDPOINT", endpoint),
            ("AWS_ALLOW_HTTP", "true".into()),
            ("AWS_ACCESS_KEY_ID", "test".into()),
            ("AWS_SECRET_ACCESS_KEY", "test".into()),
            ("AWS_REGION", "us-east-1".into()),
        ],
        ["AWS_PROFILE", "AWS_SESSION_TOKEN"],
    )
}

pub(crate) fn with_s3(cmd: &mut assert_cmd::Command, moto: &Server) {
    let (set, unset) = s3_env(moto);
    cmd.envs(set);
    for name in unset {
        cmd.env_remove(name);
    }
}

#[test]
fn s3_objects_prefixes_and_sql() {
    let Some(moto) = start() else { return };
    let dir = tempfile::tempdir().unwrap();
    let generated = dir.path().join("gen.parquet");
    gen_rows(&generated, 500, 2);
    put(
        &moto,
        "runs/a/example_rows.jsonl",
        &fixture("example_rows.jsonl"),
    );
    put(
        &moto,
        "runs/a/example_scored.jsonl",
        &fixture("example_scored.jsonl"),
    );
    put(&moto, "lake/part-0.parquet", &generated);

    // One object.
    let out = dir.path().join("one.parquet");
    let mut cmd = wai();
    with_s3(&mut cmd, &moto);
    let a = cmd
        .args([
            "--json",
            "convert",
            &format!("s3://{BUCKET}/runs/a/example_rows.jsonl"),
            "-o",
        ])
        .arg(&out)
        .assert()
        .success();
    let report: Value = crate::support::envelope(&a.get_output().stdout)["report"].clone();
    assert_eq!(report["rows"], 200);

    // A prefix: both JSONL objects, in key order.
    let mut cmd = wai();
    with_s3(&mut cmd, &moto);
    let a = cmd
        .args(["--json", "convert", &format!("s3://{BUCKET}/runs/"), "-o"])
        .arg(dir.path().join("all.jsonl"))
        .assert()
        .success();
    let report: Value = crate::support::envelope(&a.get_output().stdout)["report"].clone();
    assert_eq!(report["rows"], 400, "{report}");

    // SQL over a Parquet object, scanned in place.
    let mut cmd = wai();
    with_s3(&mut cmd, &moto);
    let a = cmd
        .args([
            "sql",
            "SELECT count(*) AS n, count(DISTINCT task_id) AS tasks FROM rows",
            "--format",
            "jsonl",
            "--table",
        ])
        .arg(format!("s3://{BUCKET}/lake/part-0.parquet"))
        .assert()
        .success();
    let got: Value = serde_json::from_slice(&a.get_output().stdout).unwrap();
    assert_eq!(got["n"], 500);

    // `wai ARGS -o OUT` for the object and for the same file on disk: the two outputs.
    let both = |args: &[&str], out: &str| -> (String, String) {
        let run = |input: &str, side: &str| {
            let out = dir.path().join(format!("{side}-{out}"));
            let mut cmd = wai();
            with_s3(&mut cmd, &moto);
            cmd.arg(args[0])
                .arg(input)
                .args(&args[1..])
                .arg("-o")
                .arg(&out)
                .assert()
                .success();
            std::fs::read_to_string(&out).unwrap()
        };
        (
            run(&format!("s3://{BUCKET}/lake/part-0.parquet"), "remote"),
            run(generated.to_str().unwrap(), "local"),
        )
    };
    // Select reads a Parquet object in place, its columns then its chosen rows, as it reads
    // the same file on disk.
    let (remote, local) = both(&["select", "--target", "60"], "selected.jsonl");
    assert!(remote.lines().count() >= 40, "{}", remote.lines().count());
    assert_eq!(remote, local);
    // Export reads a Parquet object whole, its text as views, as it reads the file on disk.
    let (remote, local) = both(&["export"], "train.jsonl");
    assert_eq!(remote.lines().count(), 500);
    assert_eq!(remote, local);

    // A missing object is missing input (66), named.
    let mut cmd = wai();
    with_s3(&mut cmd, &moto);
    let a = cmd
        .args(["convert", &format!("s3://{BUCKET}/nope.jsonl"), "-o"])
        .arg(dir.path().join("x.parquet"))
        .assert()
        .code(66);
    let stderr = String::from_utf8_lossy(&a.get_output().stderr).into_owned();
    assert!(stderr.contains("nope.jsonl"), "{stderr}");
}

#[test]
fn http_urls_are_inputs() {
    let port = TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let Ok(child) = Command::new("python3")
        .args([
            "-m",
            "http.server",
            "--bind",
            "127.0.0.1",
            &port.to_string(),
        ])
        .current_dir(fixture(""))
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
    else {
        assert!(
            std::env::var_os("CI").is_none(),
            "python3 is needed for the HTTP test"
        );
        return;
    };
    let server = Server { child, port };
    let deadline = Instant::now() + Duration::from_secs(20);
    while TcpStream::connect(("127.0.0.1", server.port)).is_err() {
        assert!(Instant::now() < deadline, "http.server did not start");
        std::thread::sleep(Duration::from_millis(100));
    }
    let dir = tempfile::tempdir().unwrap();
    let a = wai()
        .args([
            "--json",
            "convert",
            &format!("http://127.0.0.1:{}/example_scored.jsonl", server.port),
            "-o",
        ])
        .arg(dir.path().join("scored.parquet"))
        .assert()
        .success();
    let report: Value = crate::support::envelope(&a.get_output().stdout)["report"].clone();
    assert_eq!(report["rows"], 200);
}
