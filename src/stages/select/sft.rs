//! SFT selection: passing demonstrations, one per prompt, one of each behaviour before a repeat.

use std::collections::BTreeMap;

use foldhash::HashMap;

use super::rl::leak_gate;
use super::{Options, Report, RowInfo, empty_report};
use crate::stages::normalize::normalize;
use crate::stages::simulate::hash::sha256_hex;

/// SFT selection: the indices of the chosen rows, in order, and the report.
pub fn sft(rows: &[RowInfo], opts: &Options) -> (Vec<usize>, Report) {
    let mut report = empty_report("sft", rows.len(), opts);
    let live = leak_gate(rows, &mut report);
    // Completions per prompt, over the input.
    let mut per_prompt: HashMap<String, usize> = HashMap::default();
    for r in rows {
        *per_prompt.entry(normalize(&r.prompt)).or_insert(0) += 1;
    }
    let mut c: Vec<usize> = per_prompt.values().copied().collect();
    c.sort_unstable();
    let mean = if c.is_empty() {
        0.0
    } else {
        c.iter().sum::<usize>() as f64 / c.len() as f64
    };
    let median = if c.is_empty() {
        0.0
    } else if c.len() % 2 == 1 {
        c[c.len() / 2] as f64
    } else {
        (c[c.len() / 2 - 1] + c[c.len() / 2]) as f64 / 2.0
    };
    report.completions_per_prompt = (
        c.last().copied().unwrap_or(0),
        mean,
        median,
        c.iter().filter(|n| **n == 1).count(),
    );
    // Eligible: passing, not junk.
    let mut eligible = Vec::new();
    for &i in &live {
        let r = &rows[i];
        if r.reward.is_none_or(|x| x < opts.min_reward) {
            report.n_not_pass += 1;
        } else if r.junk.is_some() {
            report.n_junk += 1;
        } else {
            eligible.push(i);
        }
    }
    // One per prompt: the highest reward, ties by a hash of the signature and the prompt.
    let mut best: HashMap<String, usize> = HashMap::default();
    let mut order: Vec<String> = Vec::new();
    for &i in &eligible {
        let p = normalize(&rows[i].prompt);
        let tie = |j: usize| sha256_hex(&format!("{}:{}", rows[j].signature, p));
        match best.get(&p).copied() {
            None => {
                order.push(p.clone());
                best.insert(p, i);
            }
            Some(j) => {
                let (ri, rj) = (rows[i].reward.unwrap_or(0.0), rows[j].reward.unwrap_or(0.0));
                if ri > rj || (ri == rj && tie(i) < tie(j)) {
                    best.insert(p, i);
                }
            }
        }
    }
    let picked: Vec<usize> = order.iter().map(|p| best[p]).collect();
    report.n_eligible = picked.len();
    // Every distinct way of being right before any repeat.
    let mut buckets: BTreeMap<String, Vec<usize>> = BTreeMap::new();
    for &i in &picked {
        buckets
            .entry(rows[i].signature.to_string())
            .or_default()
            .push(i);
    }
    for (sig, v) in &mut buckets {
        v.sort_by_cached_key(|&i| sha256_hex(&format!("{sig}:{}", rows[i].prompt)));
        v.reverse();
    }
    let mut ordered: Vec<(String, Vec<usize>)> = buckets.into_iter().collect();
    ordered.sort_by(|a, b| b.1.len().cmp(&a.1.len()).then(a.0.cmp(&b.0)));
    report.behaviors.0 = ordered.len();
    let mut chosen = Vec::new();
    'fill: loop {
        let mut any = false;
        for (_, v) in &mut ordered {
            if chosen.len() >= opts.target {
                break 'fill;
            }
            if let Some(i) = v.pop() {
                chosen.push(i);
                any = true;
            }
        }
        if !any {
            break;
        }
    }
    let covered: std::collections::HashSet<&str> =
        chosen.iter().map(|&i| &*rows[i].signature).collect();
    report.behaviors.1 = covered.len();
    report.n_selected = chosen.len();
    report.eval_sourced = chosen.iter().filter(|&&i| rows[i].eval_sourced).count();
    if report.eval_sourced > 0 {
        report.warnings.push(format!(
            "{} selected row(s) carry rewards from an eval (lineage.source == \"eval\"); training on them turns the held-out scorer into the reward model",
            report.eval_sourced
        ));
    }
    if mean < 10.0 && !c.is_empty() {
        report.warnings.push(format!(
            "completions per prompt: mean {mean:.1}, median {median}, max {}; {} of {} prompts have one. Choosing among completions wants 10 to 30 per prompt so the pick is not biased; simulate more (`repeats`) if you mean to choose rather than filter",
            report.completions_per_prompt.0,
            report.completions_per_prompt.3,
            c.len()
        ));
    }
    if chosen.is_empty() {
        report.warnings.push(format!(
            "nothing selected: no row reaches reward {}",
            opts.min_reward
        ));
    }
    (chosen, report)
}
