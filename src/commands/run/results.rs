//! A stage's report as rows of its results table (`results/<stage>/`).

use serde_json::{Map, Value, json};

/// The line a run's summary gives a stage: the command's first line of text, but for markers
/// (whose first line explains the table) the marker with the lowest mean, with its interval and n.
pub(super) fn headline(kind: &str, report: &Value, text: &str) -> String {
    let first = text.lines().find(|l| !l.trim().is_empty()).unwrap_or("");
    if kind != "markers" {
        return first.to_owned();
    }
    let markers = report["markers"].as_object();
    let lowest = markers.into_iter().flatten().min_by(|a, b| {
        let mean = |m: &Value| m["mean"].as_f64().unwrap_or(f64::INFINITY);
        mean(a.1).total_cmp(&mean(b.1))
    });
    let n = markers.map_or(0, Map::len);
    match lowest {
        Some((name, m)) if m["mean"].is_number() => {
            let ci = match (m["ci95"][0].as_f64(), m["ci95"][1].as_f64()) {
                (Some(lo), Some(hi)) => format!(" [{lo:.2}..{hi:.2}]"),
                _ => String::new(),
            };
            format!(
                "{n} markers; lowest `{name}` {:.2}{ci} ({} tasks)",
                m["mean"].as_f64().unwrap_or_default(),
                m["n_tasks"]
            )
        }
        _ => format!("{n} markers"),
    }
}

/// A flat results row from a report object: scalars as they are, two-number `*ci95` intervals as
/// `*ci_low` and `*ci_high`, anything else as JSON text.
fn flatten(into: &mut Map<String, Value>, report: &Map<String, Value>) {
    for (key, value) in report {
        match value {
            Value::Array(pair) if key.ends_with("ci95") && pair.len() == 2 => {
                let prefix = key.strip_suffix("ci95").unwrap_or_default();
                into.insert(format!("{prefix}ci_low"), pair[0].clone());
                into.insert(format!("{prefix}ci_high"), pair[1].clone());
            }
            // No interval: its two columns, null, so a query naming them reads every run.
            Value::Null if key.ends_with("ci95") => {
                let prefix = key.strip_suffix("ci95").unwrap_or_default();
                into.insert(format!("{prefix}ci_low"), Value::Null);
                into.insert(format!("{prefix}ci_high"), Value::Null);
            }
            Value::Array(_) | Value::Object(_) => {
                into.insert(key.clone(), Value::String(value.to_string()));
            }
            v => {
                into.insert(key.clone(), v.clone());
            }
        }
    }
}

/// A stage's report as results rows, each opening with `common`.
pub(super) fn rows(
    kind: &str,
    report: &Value,
    common: &Map<String, Value>,
) -> Vec<Map<String, Value>> {
    let row = |extra: &[(&str, Value)], body: &Map<String, Value>| {
        let mut r = common.clone();
        for (k, v) in extra {
            r.insert((*k).to_owned(), v.clone());
        }
        flatten(&mut r, body);
        r
    };
    let empty = Map::new();
    let top = report.as_object().unwrap_or(&empty);
    match kind {
        "pass-at" => {
            let mut rows = Vec::new();
            for r in report["results"].as_array().into_iter().flatten() {
                rows.push(row(
                    &[("slice_by", Value::Null), ("slice", Value::Null)],
                    r.as_object().unwrap_or(&empty),
                ));
            }
            for s in report["slices"].as_array().into_iter().flatten() {
                for r in s["results"].as_array().into_iter().flatten() {
                    rows.push(row(
                        &[("slice_by", s["by"].clone()), ("slice", s["value"].clone())],
                        r.as_object().unwrap_or(&empty),
                    ));
                }
            }
            rows
        }
        "markers" => report["markers"]
            .as_object()
            .into_iter()
            .flatten()
            .map(|(name, m)| row(&[("marker", json!(name))], m.as_object().unwrap_or(&empty)))
            .collect(),
        _ => vec![row(&[], top)],
    }
}

/// The rows a command's envelope says it read or wrote (its first output with a count).
pub(super) fn rows_of(doc: &Value) -> Option<u64> {
    doc["outputs"]
        .as_array()
        .and_then(|o| o.iter().find_map(|o| o["rows"].as_u64()))
        .or_else(|| doc["report"]["n_rows"].as_u64())
        .or_else(|| doc["report"]["results"][0]["n_rows"].as_u64())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_markers_headline_names_the_lowest_with_its_interval() {
        let report = json!({"markers": {"a": {"mean": 0.9, "ci95": [0.8, 0.95], "n_tasks": 40},
            "b": {"mean": 0.41, "ci95": [0.3, 0.52], "n_tasks": 38}}});
        assert_eq!(
            headline("markers", &report, "per task: ..."),
            "2 markers; lowest `b` 0.41 [0.30..0.52] (38 tasks)"
        );
        assert_eq!(
            headline("pass-at", &report, "\npass@1 0.5\nmore"),
            "pass@1 0.5"
        );
    }

    #[test]
    fn results_rows_flatten_slices_and_intervals() {
        let report = json!({"results": [{"k": 4, "pass_at_1": 0.5, "ci95": [0.4, 0.6], "pass_at_k_ci95": [0.7, 0.9]}],
            "slices": [{"by": "dims.tier", "value": "edge", "results": [{"k": 4, "pass_at_1": 0.3, "ci95": null}]}]});
        let rows = rows("pass-at", &report, &Map::new());
        assert_eq!(rows.len(), 2);
        assert_eq!(rows[0]["ci_low"], json!(0.4));
        assert_eq!(rows[0]["pass_at_k_ci_high"], json!(0.9));
        assert_eq!(rows[1]["slice"], json!("edge"));
        assert_eq!(rows[1]["ci_low"], Value::Null);
        assert!(!rows[1].contains_key("ci95"));
    }
}
