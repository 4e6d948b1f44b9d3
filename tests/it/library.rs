//! The library on its own: a stage run through `wai::stages::run` gives what the command prints.

use wai::stages::pass_at::{self, PassAtStage};
use wai::stages::{Session, run};

use crate::support::{report_of, wai};

#[test]
fn a_stage_run_from_the_library_matches_the_command() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("rows.parquet");
    crate::support::succeeded(
        wai()
            .args(["gen", "--rows", "3000", "--seed", "11", "--out"])
            .arg(&path),
    );
    let cli = report_of(wai().args(["--json", "pass-at", "--k", "4"]).arg(&path));

    let runtime = tokio::runtime::Runtime::new().unwrap();
    let report = runtime.block_on(async {
        let session = Session::new().unwrap();
        let rows = session
            .context()
            .read_parquet(
                path.to_str().unwrap(),
                datafusion::prelude::ParquetReadOptions::default(),
            )
            .await
            .unwrap();
        let options = pass_at::Options {
            k: vec![4],
            ..pass_at::Options::default()
        };
        run::<PassAtStage>(&session, pass_at::Inputs::new(rows), &options)
            .await
            .unwrap()
    });
    assert_eq!(serde_json::to_value(&report).unwrap(), cli);
}

#[test]
fn options_are_checked_before_any_row_is_read_and_name_their_key() {
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let err = runtime.block_on(async {
        let session = Session::new().unwrap();
        // The rows would fail to plan (no `task_id`): the option error comes first.
        let rows = session.context().sql("SELECT 1 AS x").await.unwrap();
        let options = pass_at::Options {
            draws: 0,
            ..pass_at::Options::default()
        };
        run::<PassAtStage>(&session, pass_at::Inputs::new(rows), &options)
            .await
            .unwrap_err()
    });
    assert!(
        matches!(&err, wai::Error::Option { key, .. } if key == "draws"),
        "{err}"
    );
    assert_eq!(err.to_string(), "option `draws` must be at least 1");
}

#[test]
fn in_memory_rows_from_the_testing_feature_run_through_a_stage() {
    let rows = [
        serde_json::json!({"prompt": "a", "task_id": "t1", "reward": 1.0}),
        serde_json::json!({"prompt": "a", "task_id": "t1", "reward": 0.0}),
        serde_json::json!({"prompt": "b", "task_id": "t2", "reward": 1.0}),
        serde_json::json!({"prompt": "b", "task_id": "t2", "reward": 1.0}),
    ];
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let report = runtime.block_on(async {
        let session = Session::new().unwrap();
        let frame =
            wai::testing::frame(&session, vec![wai::testing::batch(&rows).unwrap()]).unwrap();
        run::<PassAtStage>(
            &session,
            pass_at::Inputs::new(frame),
            &pass_at::Options::default(),
        )
        .await
        .unwrap()
    });
    // Task means 0.5 and 1.0: pass@1 weighs tasks equally.
    assert_eq!(report.results[0].pass_at_1, Some(0.75));
    assert_eq!(report.results[0].n_groups, 2);
}

#[test]
fn a_command_line_run_in_process_answers_help_and_reports_like_the_binary() {
    let mut sink = Vec::new();
    let version = wai::run_command_line(["wai", "--version"], &mut sink).unwrap();
    assert_eq!(version.status, wai::ExitStatus::Success);
    assert!(version.text.starts_with("wai "), "{}", version.text);
    let err = wai::run_command_line(["wai", "pass-at", "--no-such-flag"], &mut sink).unwrap_err();
    assert_eq!(err.exit_status(), wai::ExitStatus::Usage);
    let dir = tempfile::tempdir().unwrap();
    let rows = dir.path().join("r.parquet");
    let rows = rows.to_str().unwrap();
    wai::run_command_line(["wai", "gen", "--rows", "200", "-o", rows], &mut sink).unwrap();
    let done = wai::run_command_line(["wai", "--json", "pass-at", rows], &mut sink).unwrap();
    assert_eq!(done.json["version"], 2);
    assert_eq!(done.json["command"], "pass-at");
    assert!(done.json["report"]["results"][0]["pass_at_1"].is_number());
}
