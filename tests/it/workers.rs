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
