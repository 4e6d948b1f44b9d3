//! The semantic rule's vectors: unit vectors, the best other-task cosine, the calibration.

use std::collections::HashMap;

use rayon::prelude::*;

/// L2-normalised `v` (zero stays zero).
pub fn unit(mut v: Vec<f32>) -> Vec<f32> {
    let n = v
        .iter()
        .map(|x| f64::from(*x) * f64::from(*x))
        .sum::<f64>()
        .sqrt();
    if n > 0.0 {
        #[allow(
            clippy::cast_possible_truncation,
            reason = "vectors are f32; the norm is summed in f64"
        )]
        let inv = (1.0 / n) as f32;
        for x in &mut v {
            *x *= inv;
        }
    }
    v
}

pub(super) fn dot(a: &[f32], b: &[f32]) -> f64 {
    a.iter()
        .zip(b)
        .map(|(x, y)| f64::from(*x) * f64::from(*y))
        .sum()
}

/// The best cosine of `v` (unit) over the eval prompt vectors whose task differs from `task`,
/// with that prompt's index.
pub fn best_other(
    v: &[f32],
    task: Option<&str>,
    eval: &[Vec<f32>],
    prompts: &[(String, Option<String>)],
) -> Option<(f64, usize)> {
    eval.iter()
        .enumerate()
        .filter(|(i, _)| match (task, prompts[*i].1.as_deref()) {
            (Some(a), Some(b)) => a != b,
            _ => true,
        })
        .map(|(i, e)| (dot(v, e), i))
        .fold(None, |best: Option<(f64, usize)>, x| match best {
            Some(b) if b.0 >= x.0 => Some(b),
            _ => Some(x),
        })
}

/// A similarity ordered by `total_cmp`, for the heap of the largest.
#[derive(PartialEq)]
struct Sim(f64);

impl Eq for Sim {}

impl PartialOrd for Sim {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for Sim {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        self.0.total_cmp(&other.0)
    }
}

/// The 99th percentile of cosine between eval prompts of different recorded tasks (the
/// reference's rank: the sorted value at `round(0.99·(k−1))` of k pairs, capped at 1), and how
/// many eval prompts there are; `None` under two such pairs. Only the top 1% of the pairs is
/// held in memory.
#[allow(
    clippy::cast_possible_truncation,
    clippy::cast_sign_loss,
    reason = "a rank below the pair count, rounded from a non-negative f64"
)]
pub fn calibrate(eval: &[Vec<f32>], prompts: &[(String, Option<String>)]) -> Option<(f64, usize)> {
    use std::cmp::Reverse;
    use std::collections::BinaryHeap;
    let with_task: Vec<usize> = (0..eval.len())
        .filter(|i| prompts[*i].1.is_some())
        .collect();
    // Pairs of different recorded tasks: all pairs less those within one task.
    let mut per_task: HashMap<&str, u64> = HashMap::new();
    for &i in &with_task {
        *per_task
            .entry(prompts[i].1.as_deref().unwrap_or(""))
            .or_default() += 1;
    }
    let m = with_task.len() as u64;
    let k = m * m.saturating_sub(1) / 2 - per_task.values().map(|c| c * (c - 1) / 2).sum::<u64>();
    if k < 2 {
        return None;
    }
    // Python's round: half to even.
    let rank = (0.99 * (k - 1) as f64).round_ties_even() as u64;
    let keep = usize::try_from(k - rank).unwrap_or(usize::MAX);
    let push = |mut heap: BinaryHeap<Reverse<Sim>>, s: f64| {
        if heap.len() < keep {
            heap.push(Reverse(Sim(s)));
        } else if heap.peek().is_some_and(|Reverse(Sim(low))| s > *low) {
            heap.pop();
            heap.push(Reverse(Sim(s)));
        }
        heap
    };
    let top = with_task
        .par_iter()
        .enumerate()
        .fold(BinaryHeap::new, |heap, (a, &i)| {
            with_task[a + 1..]
                .iter()
                .filter(|&&j| prompts[i].1 != prompts[j].1)
                .fold(heap, |h, &j| push(h, dot(&eval[i], &eval[j])))
        })
        .reduce(BinaryHeap::new, |a, b| {
            b.into_iter().fold(a, |h, Reverse(Sim(s))| push(h, s))
        });
    // The smallest of the `k − rank` largest is the value at `rank` in ascending order.
    let p = top.peek().map(|Reverse(Sim(s))| *s)?;
    Some((p.min(1.0), prompts.len()))
}
