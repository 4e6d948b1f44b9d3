//! A stage's report as rows of its results table (`results/<stage>/`).

use serde_json::{Map, Value, json};

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
