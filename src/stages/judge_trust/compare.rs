//! Several judges on the same labeled rows, one table: `wai compare-judges`.
//!
//! Each judge grades its own copy of the rows that carry a gold label; each is scored as
//! `judge-trust` scores one judge (agreement with its Wilson interval, kappa, the leak rate: gold
//! failures it passed), with the rows it left unjudged, the rows it called unsure (`unsure` in its
//! verdict's metadata) and seconds per row. The table is ranked by kappa, then agreement; the best
//! judge is the first that clears both floors, else the top of the ranking, marked as not clearing
//! them.

use serde::Serialize;

use super::{Labeled, Options, agreement, is_binary, trusted_kind};
use crate::stages::grade::Verdict;

/// One judge's row of the table.
#[derive(Debug, Clone, Serialize)]
pub struct Score {
    /// The name given.
    pub name: String,
    /// The judge spec.
    pub spec: String,
    /// Pairs compared (0/1 gold and 0/1 reward).
    pub n: u64,
    /// Agreement (4 places).
    pub agreement: Option<f64>,
    /// Its Wilson 95% interval.
    pub ci95: Option<[f64; 2]>,
    /// Cohen's kappa (null when undefined).
    pub kappa: Option<f64>,
    /// Gold failures the judge passed, as a share.
    pub leak: Option<f64>,
    /// Gold passes the judge failed, as a share.
    pub miss: Option<f64>,
    /// Rows the judge called unsure.
    pub unsure: u64,
    /// Rows the judge gave no reward.
    pub unjudged: u64,
    /// Seconds grading took.
    pub seconds: f64,
    /// Seconds per row.
    pub seconds_per_row: f64,
    /// Clears both floors on trusted gold.
    pub ok: bool,
}

/// The table.
#[derive(Debug, Clone, Serialize)]
pub struct Comparison {
    /// Labeled rows each judge graded.
    pub n_rows: u64,
    /// Who wrote the labels.
    pub gold_kind: Option<String>,
    /// The floors.
    pub min_agreement: f64,
    #[allow(missing_docs, reason = "the fields are named for what they count")]
    pub min_kappa: f64,
    /// The judge to keep: the first that clears the floors, else the top of the ranking.
    pub best: Option<String>,
    /// Whether the best judge clears the floors.
    pub ok: bool,
    /// Ranked by kappa, then agreement.
    pub judges: Vec<Score>,
    /// What to read.
    pub warnings: Vec<String>,
}

/// One judge's verdicts on `rows` (in row order) and the seconds they took.
pub struct Graded<'a> {
    /// The name given.
    pub name: &'a str,
    /// The judge spec.
    pub spec: &'a str,
    /// The verdicts.
    pub verdicts: &'a [Verdict],
    /// Seconds.
    pub seconds: f64,
}

/// Scores each judge in `graded` against the gold of `rows`.
pub fn compare(rows: &[Labeled], graded: &[Graded<'_>], opts: &Options) -> Comparison {
    // Who wrote the gold is a fact of the rows, not of what each judge managed to grade.
    let gold_kind = super::gold_kind_of(
        rows.iter()
            .filter(|r| is_binary(r.gold))
            .map(|r| r.kind.as_deref()),
    );
    let trusted = opts.allow_model_gold || gold_kind.as_deref().is_some_and(trusted_kind);
    let mut judges = Vec::new();
    for g in graded {
        let copy: Vec<Labeled> = rows
            .iter()
            .zip(g.verdicts)
            .map(|(r, v)| Labeled {
                reward: v.reward,
                ..r.clone()
            })
            .collect();
        let refs: Vec<&Labeled> = copy.iter().collect();
        let a = agreement(&refs, copy.len() as u64);
        let ok = trusted
            && a.n > 0
            && a.ci95.is_some_and(|[lo, _]| lo >= opts.min_agreement)
            && a.kappa.is_some_and(|k| k >= opts.min_kappa);
        judges.push(Score {
            name: g.name.to_owned(),
            spec: g.spec.to_owned(),
            n: a.n,
            agreement: a.agreement,
            ci95: a.ci95,
            kappa: a.kappa,
            leak: a.pass_when_gold_fail,
            miss: a.fail_when_gold_pass,
            unsure: g
                .verdicts
                .iter()
                .filter(|v| v.meta.get("unsure").is_some_and(truthy))
                .count() as u64,
            unjudged: g.verdicts.iter().filter(|v| v.reward.is_none()).count() as u64,
            seconds: g.seconds,
            seconds_per_row: g.seconds / rows.len().max(1) as f64,
            ok,
        });
    }
    let key = |x: Option<f64>| x.unwrap_or(f64::NEG_INFINITY);
    judges.sort_by(|a, b| {
        key(b.kappa)
            .total_cmp(&key(a.kappa))
            .then(key(b.agreement).total_cmp(&key(a.agreement)))
    });
    let mut warnings = Vec::new();
    if !trusted {
        warnings.push(
            "the gold labels are not a person's or a program's, so no judge can clear the floors: attach human labels (wai labels attach `kind` human) or pass `allow_model_gold`".to_owned(),
        );
    }
    let golds: Vec<f64> = rows
        .iter()
        .map(|r| r.gold)
        .filter(|g| is_binary(*g))
        .collect();
    if !golds.is_empty() && golds.iter().all(|g| *g == golds[0]) {
        warnings.push(format!(
            "gold labels are all {}: kappa is undefined for every judge; label some {} and compare again",
            golds[0],
            if golds[0] == 1.0 { "failures" } else { "passes" }
        ));
    }
    let best = judges.iter().find(|s| s.ok).or(judges.first());
    Comparison {
        n_rows: rows.len() as u64,
        gold_kind,
        min_agreement: opts.min_agreement,
        min_kappa: opts.min_kappa,
        best: best.map(|s| s.name.clone()),
        ok: best.is_some_and(|s| s.ok),
        judges,
        warnings,
    }
}

/// JSON truthiness: true, a non-zero number, a non-empty text, list or object.
fn truthy(v: &serde_json::Value) -> bool {
    match v {
        serde_json::Value::Null => false,
        serde_json::Value::Bool(b) => *b,
        serde_json::Value::Number(n) => n.as_f64().is_some_and(|x| x != 0.0),
        serde_json::Value::String(s) => !s.is_empty(),
        serde_json::Value::Array(a) => !a.is_empty(),
        serde_json::Value::Object(o) => !o.is_empty(),
    }
}

fn num(x: Option<f64>) -> String {
    x.map_or_else(|| "-".to_owned(), |v| format!("{v:.2}"))
}

impl std::fmt::Display for Comparison {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        writeln!(
            f,
            "{} judges on {} labeled rows, gold={}, floors agreement>={:.2} kappa>={:.2}",
            self.judges.len(),
            self.n_rows,
            self.gold_kind.as_deref().unwrap_or("none"),
            self.min_agreement,
            self.min_kappa
        )?;
        let mut table = vec![
            [
                "judge", "agree", "95% CI", "kappa", "leak", "unsure", "unjudged", "s/row", "ok",
            ]
            .map(str::to_owned)
            .to_vec(),
        ];
        for s in &self.judges {
            table.push(vec![
                s.name.clone(),
                num(s.agreement),
                s.ci95
                    .map_or_else(|| "-".to_owned(), |[l, h]| format!("[{l:.2}..{h:.2}]")),
                num(s.kappa),
                num(s.leak),
                if s.unsure > 0 {
                    s.unsure.to_string()
                } else {
                    "-".into()
                },
                if s.unjudged > 0 {
                    s.unjudged.to_string()
                } else {
                    "-".into()
                },
                format!("{:.4}", s.seconds_per_row),
                if s.ok { "yes" } else { "no" }.to_owned(),
            ]);
        }
        let widths: Vec<usize> = (0..table[0].len())
            .map(|i| {
                table
                    .iter()
                    .map(|r| r[i].chars().count())
                    .max()
                    .unwrap_or(0)
            })
            .collect();
        for row in &table {
            let line: Vec<String> = row
                .iter()
                .zip(&widths)
                .map(|(c, w)| format!("{c:<w$}"))
                .collect();
            writeln!(f, "{}", line.join("  ").trim_end())?;
        }
        match self
            .judges
            .iter()
            .find(|s| Some(&s.name) == self.best.as_ref())
        {
            None => writeln!(f, "best: none (no judge was scored)")?,
            Some(b) if b.ok => writeln!(
                f,
                "best: {} (kappa {}, n={}), clears both floors",
                b.name,
                num(b.kappa),
                b.n
            )?,
            Some(b) => writeln!(
                f,
                "best: {} (kappa {}, n={}); no judge clears the floors. Change the judge prompt or the judge model, or label more rows, then compare again.",
                b.name,
                num(b.kappa),
                b.n
            )?,
        }
        for w in &self.warnings {
            writeln!(f, "! {w}")?;
        }
        Ok(())
    }
}
