//! Judge and agent processes (issue #29): what environment they get, that a signal to wai ends
//! them, that secrets never reach a message.

use std::path::{Path, PathBuf};

use serde_json::Value;

use crate::support::{fixture, sql_jsonl, succeeded, wai};

fn write(dir: &Path, name: &str, text: &str) -> PathBuf {
    let path = dir.join(name);
    std::fs::write(&path, text).unwrap();
    path
}

// Issue #29, item 14: command judges inherited the whole environment, keys included.
#[test]
fn a_command_judge_gets_a_minimal_environment_and_what_env_forwards() {
    let dir = tempfile::tempdir().unwrap();
    let judge = write(
        dir.path(),
        "env.py",
        "import json, os, sys\nfor line in sys.stdin:\n    req = json.loads(line)\n    seen = {k: k in os.environ for k in ['OPENAI_API_KEY', 'AWS_SECRET_ACCESS_KEY', 'PATH', 'HOME', 'PYTHONHASHSEED']}\n    print(json.dumps({'id': req['id'], 'reward': 1, 'seen': seen}), flush=True)\n",
    );
    let seen = |extra: &[&str]| -> Value {
        let out = dir.path().join("out.parquet");
        succeeded(
            wai()
                .arg("grade")
                .arg(fixture("grade_transcripts.jsonl"))
                .args(["--judge", &format!("cmd:python3 {}", judge.display())])
                .args(["--workers", "1", "--no-tools"])
                .args(extra)
                .arg("-o")
                .arg(&out)
                .env("OPENAI_API_KEY", "sk-test-not-a-real-key-0000")
                .env("AWS_SECRET_ACCESS_KEY", "aws-test-not-a-real-secret")
                .env("PYTHONHASHSEED", "0"),
        );
        let rows = sql_jsonl(&["SELECT judge_meta FROM rows"], &out);
        let meta: Value = serde_json::from_str(rows[0]["judge_meta"].as_str().unwrap()).unwrap();
        meta["seen"].clone()
    };
    let default = seen(&[]);
    assert_eq!(default["OPENAI_API_KEY"], false, "{default}");
    assert_eq!(default["AWS_SECRET_ACCESS_KEY"], false, "{default}");
    assert_eq!(default["PATH"], true, "{default}");
    assert_eq!(default["PYTHONHASHSEED"], true, "{default}");
    let forwarded = seen(&["--env", "OPENAI_API_KEY"]);
    assert_eq!(forwarded["OPENAI_API_KEY"], true, "{forwarded}");
    assert_eq!(forwarded["AWS_SECRET_ACCESS_KEY"], false, "{forwarded}");
    let both = seen(&["--env", "OPENAI_API_KEY,AWS_SECRET_ACCESS_KEY"]);
    assert_eq!(both["AWS_SECRET_ACCESS_KEY"], true, "{both}");
    crate::support::refused(
        wai()
            .arg("grade")
            .arg(fixture("grade_transcripts.jsonl"))
            .args(["--judge", "sql:1", "--env", "A=B", "-o"])
            .arg(dir.path().join("x.parquet")),
        "--env takes the name of a variable",
    );
}

/// Whether process `pid` is still running (a zombie waiting for its reaper is not).
fn alive(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|s| {
            s.rsplit_once(')')
                .map(|(_, rest)| !rest.trim_start().starts_with('Z'))
        })
        .unwrap_or(false)
}

// Issue #29, item 7: on SIGTERM, SIGINT or SIGHUP, busy workers outlived wai (they lead their
// own process groups).
#[test]
fn a_signal_ends_every_worker_and_what_it_started() {
    let dir = tempfile::tempdir().unwrap();
    let rows = dir.path().join("rows.jsonl");
    crate::support::gen_rows(&rows, 40, 1);
    for (signal, code) in [("-TERM", 143), ("-INT", 130), ("-HUP", 129)] {
        let pids = dir.path().join(format!("pids{signal}.txt"));
        // Each worker notes its pid and starts a child of its own (`sleep`), then hangs on the
        // first row it gets.
        let judge = write(
            dir.path(),
            "busy.py",
            &format!(
                "import os, subprocess, sys, time\nkid = subprocess.Popen(['sleep', '300'])\nwith open({:?}, 'a') as f:\n    f.write(f'{{os.getpid()}}\\n{{kid.pid}}\\n')\nfor line in sys.stdin:\n    time.sleep(300)\n",
                pids.display().to_string()
            ),
        );
        let out = dir.path().join("out.parquet");
        let mut child = std::process::Command::new(assert_cmd::cargo::cargo_bin("wai"))
            .arg("grade")
            .arg(&rows)
            .args(["--judge", &format!("cmd:python3 {}", judge.display())])
            .args(["--workers", "2", "--no-tools", "-o"])
            .arg(&out)
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap();
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
        let started = |p: &Path| std::fs::read_to_string(p).map_or(0, |t| t.lines().count());
        while started(&pids) < 4 && std::time::Instant::now() < deadline {
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
        // Let the rows reach the workers.
        std::thread::sleep(std::time::Duration::from_millis(300));
        let workers: Vec<u32> = std::fs::read_to_string(&pids)
            .unwrap()
            .lines()
            .map(|l| l.parse().unwrap())
            .collect();
        assert_eq!(workers.len(), 4, "two workers and their children");
        assert!(workers.iter().all(|p| alive(*p)), "busy before the signal");
        let sent = std::process::Command::new("kill")
            .args([signal, &child.id().to_string()])
            .status()
            .unwrap();
        assert!(sent.success());
        let status = child.wait().unwrap();
        assert_eq!(status.code(), Some(code), "{signal}");
        for pid in &workers {
            assert!(!alive(*pid), "{signal}: process {pid} outlived wai");
        }
        assert!(!out.exists(), "{signal}: no output");
        let temps: Vec<String> = std::fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .filter(|n| {
                #[allow(
                    clippy::case_sensitive_file_extension_comparisons,
                    reason = "wai names its temporary files in lower case"
                )]
                n.ends_with(".tmp")
            })
            .collect();
        assert!(
            temps.is_empty(),
            "{signal}: temporary files left: {temps:?}"
        );
        // The verdict log stays for the rerun; this test starts each signal afresh.
        let _ = std::fs::remove_file(dir.path().join(".out.parquet.verdicts.jsonl"));
    }
}
