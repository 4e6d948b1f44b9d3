//! `wai lake compact`: a lake's small files packed, with every query and every later night
//! giving what they give on the same lake left alone; a compaction stopped at any point
//! leaving nothing a reader sees, and the next one sweeping it.

use std::path::Path;

use serde_json::Value;

use crate::run::{gen_night, last_export, manifest, pipeline, query};
use crate::support::{gen_rows, refused, succeeded, wai};

/// Runs a night of `pipeline` in `d`: exit 0, or 1 when a gate failed (still committed).
fn night(d: &Path, pipeline: &str) -> std::process::Output {
    let out = wai()
        .current_dir(d)
        .args(["run", pipeline])
        .output()
        .unwrap();
    assert!(
        matches!(out.status.code(), Some(0 | 1)),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

/// Every Parquet file under `lake` (relative), sorted.
fn parquet_files(lake: &Path) -> Vec<String> {
    fn walk(dir: &Path, root: &Path, out: &mut Vec<String>) {
        for entry in std::fs::read_dir(dir).unwrap().flatten() {
            let path = entry.path();
            if path.is_dir() {
                walk(&path, root, out);
            } else if path.extension().is_some_and(|e| e == "parquet") {
                out.push(path.strip_prefix(root).unwrap().display().to_string());
            }
        }
    }
    let mut out = Vec::new();
    walk(lake, lake, &mut out);
    out.sort();
    out
}

/// `wai --json lake compact LAKE ARGS...`'s report.
fn compact(d: &Path, lake: &str, args: &[&str]) -> Value {
    let out = succeeded(
        wai()
            .current_dir(d)
            .args(["--json", "lake", "compact", lake])
            .args(args),
    );
    serde_json::from_slice::<Value>(&out.stdout).unwrap()["report"].clone()
}

/// What the lake's tables say, run by run: every rows table's rows and a digest of them, and
/// the measures' and compare's results (their own fields, not times or bytes).
fn everything(d: &Path, lake: &str) -> Vec<Vec<Value>> {
    let run = |table: &str| {
        format!(
            "json_get_str(lineage, 'scoring_run_id') AS run, count(*) AS n, sum(round(reward * 1e6)) AS reward, \
             min(rollout_id) AS lo, max(rollout_id) AS hi FROM {table} GROUP BY 1 ORDER BY 1"
        )
    };
    vec![
        query(d, lake, &format!("SELECT {}", run("scored"))),
        query(d, lake, &format!("SELECT {}", run("selected"))),
        query(
            d,
            lake,
            "SELECT stage, slice, k, pass_at_1, ci_low, ci_high, n_groups, n_rows FROM results_pass_at ORDER BY run_time, stage, slice NULLS FIRST",
        ),
        query(
            d,
            lake,
            "SELECT marker, mean, ci_low, ci_high, n_tasks FROM results_markers ORDER BY run_time, marker",
        ),
        query(
            d,
            lake,
            "SELECT regime, n_rows, n_groups, top_feature, rho_max FROM results_hack_scan ORDER BY run_time",
        ),
        query(
            d,
            lake,
            "SELECT skipped, ok, headline_word, target_delta, n_paired_tasks FROM results_compare ORDER BY run_time",
        ),
    ]
}

/// One stage's start event in a run's progress (JSON lines on stderr).
fn start(out: &std::process::Output, stage: &str) -> Value {
    use std::io::BufRead as _;
    (out.stderr.lines())
        .map_while(Result::ok)
        .filter_map(|l| serde_json::from_str::<Value>(&l).ok())
        .find(|e| e["event"] == "start" && e["stage"] == stage)
        .unwrap_or(Value::Null)
}

/// Copies the folder `from` to `to`.
fn copy_tree(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for entry in std::fs::read_dir(from).unwrap().flatten() {
        let path = entry.path();
        let dest = to.join(entry.file_name());
        if path.is_dir() {
            copy_tree(&path, &dest);
        } else {
            std::fs::copy(&path, &dest).unwrap();
        }
    }
}

#[test]
fn a_compacted_lake_answers_every_query_and_runs_every_next_night_as_before() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    std::fs::create_dir(d.join("in")).unwrap();
    gen_rows(&d.join("in/a.jsonl"), 300, 41);
    pipeline(d, "nightly.toml", "nightly");
    night(d, "nightly.toml");
    for (i, rows) in [(2, 400), (3, 350)] {
        gen_night(
            &d.join(format!("in/n{i}.jsonl")),
            rows,
            40 + i,
            &format!("n{i}-"),
        );
        night(d, "nightly.toml");
    }
    // The same lake, left alone (a pipeline naming it: the same stages, so the same history).
    copy_tree(&d.join("nightly"), &d.join("plain"));
    pipeline(d, "plain.toml", "plain");
    let before = everything(d, "nightly");
    assert_eq!(before, everything(d, "plain"));
    assert_eq!(before[0].len(), 3, "three nights scored: {:?}", before[0]);
    let files = parquet_files(&d.join("nightly"));

    // A dry run says what it would do and changes nothing.
    let dry = compact(d, "nightly", &["--dry-run"]);
    assert_eq!(dry["dry_run"], true);
    let planned = dry["made"].as_array().unwrap().clone();
    assert!(!planned.is_empty(), "{dry}");
    assert_eq!(parquet_files(&d.join("nightly")), files);

    let done = compact(d, "nightly", &[]);
    let made = done["made"].as_array().unwrap();
    assert_eq!(made.len(), planned.len(), "{done}");
    // The scored rows of the three nights: one file, their rows in run order.
    let scored = (made.iter())
        .find(|m| m["path"].as_str().unwrap().starts_with("scored/compacted="))
        .unwrap_or_else(|| panic!("no scored file made: {done}"));
    assert_eq!(scored["files"], 3);
    assert_eq!(scored["rows"], 300 + 400 + 350);
    let after = parquet_files(&d.join("nightly"));
    assert!(
        !after.iter().any(|f| f.starts_with("scored/run=")),
        "{after:?}"
    );
    assert!(after.len() < files.len() / 2, "{files:?} -> {after:?}");
    let m = manifest(d, "nightly");
    assert_eq!(m["compacted"].as_array().unwrap().len(), made.len());
    assert_eq!(done["replaced"].as_u64().unwrap(), {
        made.iter()
            .map(|m| m["files"].as_u64().unwrap())
            .sum::<u64>()
    });
    // Every query gives what it gave.
    assert_eq!(everything(d, "nightly"), before);
    let status = succeeded(wai().current_dir(d).args(["lake", "status", "nightly"]));
    assert!(
        String::from_utf8_lossy(&status.stdout).contains("compacted file"),
        "{}",
        String::from_utf8_lossy(&status.stdout)
    );
    // Nothing more to do.
    assert!(
        compact(d, "nightly", &[])["made"]
            .as_array()
            .unwrap()
            .is_empty()
    );

    // A fourth night on both lakes: markers and hack-scan read every row so far (the compacted
    // file whole), compare reads the third night alone (its rows copied out of it).
    gen_night(&d.join("in/n4.jsonl"), 380, 44, "n4-");
    let compacted_night = night(d, "nightly.toml");
    let plain_night = night(d, "plain.toml");
    assert_eq!(everything(d, "nightly"), everything(d, "plain"));
    assert_eq!(last_export(d, "nightly"), last_export(d, "plain"));
    assert_eq!(start(&compacted_night, "markers")["files"], 2);
    assert_eq!(start(&plain_night, "markers")["files"], 4);
    let compare = |lake: &str| {
        query(
            d,
            lake,
            "SELECT n_paired_tasks, target_delta FROM results_compare ORDER BY run_time DESC LIMIT 1",
        )
    };
    assert!(compare("nightly")[0]["n_paired_tasks"].as_u64().unwrap() > 0);
    assert_eq!(compare("nightly"), compare("plain"));
    assert!(
        !d.join("nightly/_wai/extracted").exists()
            || std::fs::read_dir(d.join("nightly/_wai/extracted"))
                .unwrap()
                .next()
                .is_none(),
        "rows copied out are removed with the run"
    );

    // Compacted again: the compacted file and the fourth night's, one file.
    let again = compact(d, "nightly", &[]);
    let scored = (again["made"].as_array().unwrap().iter())
        .find(|m| m["path"].as_str().unwrap().starts_with("scored/compacted="))
        .unwrap_or_else(|| panic!("{again}"))
        .clone();
    assert_eq!(scored["files"], 2);
    assert_eq!(scored["parts"], 4);
    assert_eq!(
        (parquet_files(&d.join("nightly")).iter())
            .filter(|f| f.starts_with("scored/"))
            .count(),
        1
    );
    assert_eq!(everything(d, "nightly"), everything(d, "plain"));
}

/// A lake of two nights at `d/nightly`: what its tables say, its scored files (relative), and
/// copies of them in `d/kept/0.parquet`, `1.parquet`.
fn two_nights(d: &Path) -> (Vec<Vec<Value>>, Vec<String>) {
    std::fs::create_dir(d.join("in")).unwrap();
    gen_rows(&d.join("in/a.jsonl"), 200, 51);
    pipeline(d, "nightly.toml", "nightly");
    night(d, "nightly.toml");
    gen_night(&d.join("in/b.jsonl"), 250, 52, "b-");
    night(d, "nightly.toml");
    let lake = d.join("nightly");
    let before = everything(d, "nightly");
    let originals: Vec<String> = (parquet_files(&lake).into_iter())
        .filter(|f| f.starts_with("scored/run="))
        .collect();
    assert_eq!(originals.len(), 2);
    let kept = d.join("kept");
    std::fs::create_dir(&kept).unwrap();
    for (i, f) in originals.iter().enumerate() {
        std::fs::copy(lake.join(f), kept.join(format!("{i}.parquet"))).unwrap();
    }
    (before, originals)
}

#[test]
fn a_compaction_stopped_before_it_published_is_undone_by_the_next() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let (before, originals) = two_nights(d);
    let (lake, kept) = (d.join("nightly"), d.join("kept"));
    // Stopped before its manifest landed: the files its journal says it made (and a temporary
    // file of each) are invisible, and the next compaction removes them and keeps what they
    // were to replace.
    std::fs::create_dir_all(lake.join("scored/compacted=stopped")).unwrap();
    std::fs::copy(
        kept.join("0.parquet"),
        lake.join("scored/compacted=stopped/grade.parquet"),
    )
    .unwrap();
    std::fs::write(
        lake.join("scored/compacted=stopped/.grade.parquet.a1b2c3.tmp"),
        b"PAR1",
    )
    .unwrap();
    std::fs::write(
        lake.join("results/grade/compacted=stopped.parquet"),
        b"PAR1",
    )
    .unwrap();
    std::fs::write(
        lake.join("results/grade/.compacted=stopped.parquet.x9y8z7.tmp"),
        b"PAR1",
    )
    .unwrap();
    let journal = serde_json::json!({
        "made": ["scored/compacted=stopped/grade.parquet", "results/grade/compacted=stopped.parquet"],
        "replaced": originals,
    });
    std::fs::write(lake.join("_wai/compacting.json"), journal.to_string()).unwrap();
    // A compacted file no manifest and no journal names (a manifest put back from an older
    // copy) may hold the only copy of some rows: it is left alone.
    std::fs::create_dir_all(lake.join("scored/compacted=foreign")).unwrap();
    std::fs::copy(
        kept.join("1.parquet"),
        lake.join("scored/compacted=foreign/grade.parquet"),
    )
    .unwrap();
    assert_eq!(everything(d, "nightly"), before);

    // A run holds the lake: the compaction is refused, and changes nothing.
    let lock = std::fs::OpenOptions::new()
        .write(true)
        .open(lake.join("_wai/lock"))
        .unwrap();
    lock.lock().unwrap();
    refused(
        wai().current_dir(d).args(["lake", "compact", "nightly"]),
        "is writing the lake",
    );
    assert!(lake.join("scored/compacted=stopped/grade.parquet").exists());
    drop(lock);

    let done = compact(d, "nightly", &[]);
    assert_eq!(done["swept"], 4, "{done}");
    assert!(!lake.join("scored/compacted=stopped").exists());
    assert!(
        !lake
            .join("results/grade/compacted=stopped.parquet")
            .exists()
    );
    assert!(
        !lake
            .join("results/grade/.compacted=stopped.parquet.x9y8z7.tmp")
            .exists()
    );
    assert!(!lake.join("_wai/compacting.json").exists());
    assert!(lake.join("scored/compacted=foreign/grade.parquet").exists());
    // The compaction itself went on: the two nights' scored rows, one file.
    assert!(
        (done["made"].as_array().unwrap().iter())
            .any(|m| m["path"].as_str().unwrap().starts_with("scored/compacted=")),
        "{done}"
    );
    assert_eq!(manifest(d, "nightly")["version"], 2);
    assert_eq!(everything(d, "nightly"), before);
}

#[test]
fn a_compaction_stopped_after_it_published_is_finished_by_the_next() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let (before, originals) = two_nights(d);
    let (lake, kept) = (d.join("nightly"), d.join("kept"));
    compact(d, "nightly", &[]);
    // Stopped after its manifest landed: the files it replaced are still there. Readers go by
    // the manifest (no row twice), and the next compaction removes them.
    for (i, f) in originals.iter().enumerate() {
        std::fs::create_dir_all(lake.join(f).parent().unwrap()).unwrap();
        std::fs::copy(kept.join(format!("{i}.parquet")), lake.join(f)).unwrap();
    }
    assert_eq!(everything(d, "nightly"), before);
    // And its journal says which files it replaced that are not runs' own: an earlier
    // compacted file, removed once the manifest no longer names it.
    let m = manifest(d, "nightly");
    let named: Vec<String> = (m["compacted"].as_array().unwrap().iter())
        .map(|c| c["path"].as_str().unwrap().to_owned())
        .collect();
    std::fs::create_dir_all(lake.join("scored/compacted=older")).unwrap();
    std::fs::copy(
        kept.join("0.parquet"),
        lake.join("scored/compacted=older/grade.parquet"),
    )
    .unwrap();
    let journal =
        serde_json::json!({"made": named, "replaced": ["scored/compacted=older/grade.parquet"]});
    std::fs::write(lake.join("_wai/compacting.json"), journal.to_string()).unwrap();
    let done = compact(d, "nightly", &[]);
    assert_eq!(done["swept"], 3, "{done}");
    assert!(done["made"].as_array().unwrap().is_empty(), "{done}");
    assert!(originals.iter().all(|f| !lake.join(f).exists()));
    assert!(!lake.join("scored/compacted=older").exists());
    assert_eq!(everything(d, "nightly"), before);

    // A compacted file that lost rows is never swept for: its parts' files stay (here, put
    // back), and reading a part of it says the file was changed.
    let m = manifest(d, "nightly");
    let file = (m["compacted"].as_array().unwrap().iter())
        .find(|c| c["path"].as_str().unwrap().starts_with("scored/"))
        .unwrap()["path"]
        .as_str()
        .unwrap()
        .to_owned();
    std::fs::copy(kept.join("0.parquet"), lake.join(&file)).unwrap();
    for (i, f) in originals.iter().enumerate() {
        std::fs::create_dir_all(lake.join(f).parent().unwrap()).unwrap();
        std::fs::copy(kept.join(format!("{i}.parquet")), lake.join(f)).unwrap();
    }
    let done = compact(d, "nightly", &[]);
    assert_eq!(done["swept"], 0, "{done}");
    assert!(originals.iter().all(|f| lake.join(f).exists()));
    // A reader of the whole file finds it short, and says so.
    let out = wai()
        .current_dir(d)
        .args(["sql", "--lake", "nightly", "SELECT count(*) FROM scored"])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(65), "{err}");
    assert!(err.contains("cut short"), "{err}");
}

#[test]
fn compact_checks_its_options_before_any_work() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    refused(
        wai()
            .current_dir(d)
            .args(["lake", "compact", "nowhere", "--target-mib", "0"]),
        "--target-mib",
    );
    refused(
        wai().current_dir(d).args(["lake", "compact", "nowhere"]),
        "is not a lake",
    );
}
