//! Where a run's asks come from: the seeds, then sweeps over the grid, with open-ended probes;
//! or the tasks a replay pins.

use std::collections::HashMap;

use super::grid::{Cell, HARD_TIERS};
use super::hash::draw;
use super::options::Pinned;
use super::writer::{self, Ask, Writer};
use super::{PROBE_EVERY, PROBES};

/// Where asks come from: the seeds, then sweeps over the grid (one phrasing each), with an
/// open-ended probe every [`PROBE_EVERY`] asks; or the pinned tasks.
pub(super) struct Source {
    queue: std::collections::VecDeque<Ask>,
    sweep: u32,
    sweeps: u32,
    emitted: usize,
    probe_slot: u32,
    probes: bool,
    order: Vec<usize>,
    next: usize,
    written: std::collections::HashSet<(String, String)>,
}

impl Source {
    /// Asks from `seeds` first, then `sweeps` sweeps over the grid (with probes, if `probes`).
    pub(super) fn new(seeds: &[String], sweeps: u32, probes: bool) -> Self {
        Self {
            queue: seeds.iter().map(|s| writer::seed_ask(s)).collect(),
            sweep: 0,
            sweeps,
            emitted: 0,
            probe_slot: 0,
            probes,
            order: Vec::new(),
            next: 0,
            written: std::collections::HashSet::new(),
        }
    }

    /// The cells of sweep `sweep` in their drawn order, hard ones interleaved at `hard_share`.
    fn sweep_order(cells: &[Cell], seed: u64, sweep: u32, hard_share: f64) -> Vec<usize> {
        let s = seed.to_string();
        let w = sweep.to_string();
        let mut keyed: Vec<(u64, usize)> = (0..cells.len())
            .map(|i| (draw(&[&s, &w, &cells[i].id, "order"]), i))
            .collect();
        keyed.sort_unstable();
        let (hard, ordinary): (Vec<usize>, Vec<usize>) = keyed
            .into_iter()
            .map(|(_, i)| i)
            .partition(|&i| HARD_TIERS.contains(&cells[i].tier));
        // Interleave so that every prefix holds about `hard_share` hard asks.
        let mut out = Vec::with_capacity(cells.len());
        let (mut h, mut o) = (0, 0);
        while h < hard.len() || o < ordinary.len() {
            let want_hard = (h as f64) < hard_share * (out.len() + 1) as f64;
            if (want_hard && h < hard.len()) || o >= ordinary.len() {
                out.push(hard[h]);
                h += 1;
            } else {
                out.push(ordinary[o]);
                o += 1;
            }
        }
        out
    }

    /// Asks `ask` next, before the sweeps go on (a failed row's situation in new words).
    pub(super) fn ask_next(&mut self, ask: Ask) {
        self.queue.push_front(ask);
    }

    /// The next ask, or `None` when the seeds and sweeps are used up.
    pub(super) fn next(&mut self, writer: &Writer<'_>, hard_share: f64) -> Option<Ask> {
        if let Some(a) = self.queue.pop_front() {
            return Some(a);
        }
        if self.probes && self.emitted % PROBE_EVERY == PROBE_EVERY - 1 && self.probe_slot < PROBES
        {
            self.emitted += 1;
            self.probe_slot += 1;
            return Some(writer.probe(self.probe_slot - 1));
        }
        loop {
            if self.sweep >= self.sweeps || writer.cells.is_empty() {
                return None;
            }
            if self.order.is_empty() {
                self.order = Self::sweep_order(writer.cells, writer.seed, self.sweep, hard_share);
                self.next = 0;
            }
            if self.next < self.order.len() {
                let cell = self.order[self.next];
                self.next += 1;
                let ask = writer.render(cell, self.sweep);
                // Two phrasings that came out the same are one ask, not two.
                if !self.written.insert((ask.task_id.clone(), ask.text.clone())) {
                    continue;
                }
                self.emitted += 1;
                return Some(ask);
            }
            self.sweep += 1;
            self.order.clear();
        }
    }
}

/// A run's asks: written (seeds, sweeps and probes) or pinned (a replay).
pub(super) enum Feed {
    /// Written by the template writer.
    Written(Source),
    /// The tasks of a replay, each with its phrasing.
    Pinned(std::vec::IntoIter<(Pinned, u32)>),
}

impl Feed {
    /// A replay of `tasks`: an ask's phrasing is its place among its task's asks, in first-seen
    /// order.
    pub(super) fn pinned(tasks: Vec<Pinned>) -> Self {
        let mut seen: HashMap<String, u32> = HashMap::new();
        let numbered: Vec<(Pinned, u32)> = tasks
            .into_iter()
            .map(|t| {
                let n = seen.entry(t.task_id.clone()).or_insert(0);
                let phrasing = *n;
                *n += 1;
                (t, phrasing)
            })
            .collect();
        Self::Pinned(numbered.into_iter())
    }

    /// Whether it replays tasks.
    pub(super) fn is_pinned(&self) -> bool {
        matches!(self, Self::Pinned(_))
    }

    /// Whether asks made from failed rows wait to be asked.
    pub(super) fn has_queued(&self) -> bool {
        matches!(self, Self::Written(s) if !s.queue.is_empty())
    }

    /// The next ask and, for a replay, the task it replays.
    pub(super) fn next(
        &mut self,
        writer: &Writer<'_>,
        hard_share: f64,
    ) -> Option<(Ask, Option<Pinned>)> {
        match self {
            Self::Written(source) => source.next(writer, hard_share).map(|a| (a, None)),
            Self::Pinned(tasks) => {
                let (t, phrasing) = tasks.next()?;
                Some((pinned_ask(&t, phrasing), Some(t)))
            }
        }
    }
}

/// The ask of a pinned task: its text and ids, and the labels it carried that name an axis.
fn pinned_ask(t: &Pinned, phrasing: u32) -> Ask {
    let mut labels: Vec<(&'static str, String)> = Vec::new();
    for (k, v) in &t.labels {
        if let Some(known) = crate::pipeline::row::AXES
            .iter()
            .find(|a| **a == k.as_str())
        {
            labels.push((known, v.clone()));
        }
    }
    Ask {
        text: t.prompt.clone(),
        cell: None,
        task_id: t.task_id.clone(),
        phrasing,
        arm: "pinned",
        writer: t.writer.clone(),
        labels,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::stages::simulate::demo;
    use crate::stages::simulate::grid::{self, Axes};

    fn task(id: &str, prompt: &str) -> Pinned {
        Pinned {
            prompt: prompt.into(),
            task_id: id.into(),
            dims: Vec::new(),
            labels: vec![
                ("tier".into(), "boundary".into()),
                ("made_up".into(), "x".into()),
            ],
            plan: None,
            world_state: None,
            writer: "w".into(),
            privileged: None,
            rows: 2,
        }
    }

    #[test]
    fn pinned_asks_are_numbered_per_task_and_keep_axis_labels() {
        let tools = demo::tools();
        let writer = Writer {
            tools: &tools,
            cells: &[],
            ids: &[],
            seed: 0,
            model: None,
        };
        let mut feed = Feed::pinned(vec![task("t1", "a"), task("t2", "b"), task("t1", "c")]);
        assert!(feed.is_pinned());
        let got: Vec<(String, u32)> = std::iter::from_fn(|| feed.next(&writer, 0.4))
            .map(|(a, p)| {
                assert_eq!(a.arm, "pinned");
                assert_eq!(a.labels, [("tier", "boundary".to_owned())]);
                assert!(p.is_some());
                (a.text, a.phrasing)
            })
            .collect();
        assert_eq!(got, [("a".into(), 0), ("b".into(), 0), ("c".into(), 1)]);
    }

    #[test]
    fn seeds_come_first_then_the_grid_with_a_probe_every_tenth_ask() {
        let tools = demo::tools();
        let cells = grid::cells(&Axes::build(&tools, &[]), &tools, true);
        let ids = crate::stages::simulate::tools::described_ids(&tools);
        let writer = Writer {
            tools: &tools,
            cells: &cells,
            ids: &ids,
            seed: 3,
            model: None,
        };
        let mut source = Source::new(&["my seed".to_owned()], 1, true);
        let asks: Vec<Ask> = std::iter::from_fn(|| source.next(&writer, 0.4))
            .take(30)
            .collect();
        assert_eq!(asks[0].arm, "seed");
        assert_eq!(asks[0].text, "my seed");
        // The seed is not counted: nine grid asks, then a probe.
        assert_eq!(asks[10].arm, "open_ended", "{:?}", asks[10]);
        assert_eq!(asks[1].arm, "structured");
        let mut written = std::collections::HashSet::new();
        assert!(
            asks.iter()
                .all(|a| written.insert((a.task_id.clone(), a.text.clone())))
        );
    }

    #[test]
    fn a_sweep_interleaves_hard_cells_at_the_share() {
        let tools = demo::tools();
        let cells = grid::cells(&Axes::build(&tools, &[]), &tools, true);
        let order = Source::sweep_order(&cells, 1, 0, 0.5);
        let mut sorted = order.clone();
        sorted.sort_unstable();
        assert_eq!(sorted, (0..cells.len()).collect::<Vec<_>>());
        let hard = cells
            .iter()
            .filter(|c| HARD_TIERS.contains(&c.tier))
            .count();
        let head = 2 * hard.min(cells.len() - hard);
        let hard_in_head = order[..head]
            .iter()
            .filter(|&&i| HARD_TIERS.contains(&cells[i].tier))
            .count();
        assert_eq!(hard_in_head, head / 2);
    }
}
