//! How a run allocates rollouts to its asks: the groups, what each is owed, and when the
//! successive policy stops a unanimous group early.

use std::collections::HashMap;

use super::PROBE;
use super::options::RepeatPolicy;
use super::report::Report;

/// An ask being played: its rollouts so far and how its group stands.
pub(super) struct Group {
    /// The ask's index in the run.
    pub(super) ask: usize,
    /// Rollouts this ask is owed.
    pub(super) k: u32,
    /// Rows landed.
    pub(super) landed: u32,
    /// Rollouts scheduled.
    pub(super) scheduled: u32,
    /// Rollouts landed or lost.
    pub(super) done: u32,
    /// The behaviour signatures of the landed rows.
    pub(super) labels: Vec<u64>,
    /// Rollouts re-played after an unusable result.
    pub(super) rerolls: u32,
    /// How the allocation closed the group, once it has.
    pub(super) closed: Option<&'static str>,
}

impl Group {
    /// A group owed `k` rollouts with `scheduled` of them in the wave.
    pub(super) fn new(ask: usize, k: u32, scheduled: u32) -> Self {
        Self {
            ask,
            k,
            landed: 0,
            scheduled,
            done: 0,
            labels: Vec::new(),
            rerolls: 0,
            closed: None,
        }
    }

    /// Whether its landed rows behaved differently.
    fn mixed(&self) -> bool {
        self.labels.iter().any(|l| *l != self.labels[0])
    }
}

/// One rollout in a wave: `(ask, rollout index)`.
pub(super) type Slot = (usize, u32);

/// The allocation state of one run.
pub(super) struct Alloc {
    /// How rollouts are allocated.
    pub(super) policy: RepeatPolicy,
    /// The groups, one per ask, in ask order.
    pub(super) groups: Vec<Group>,
    /// Rows landed in this run.
    pub(super) rows: u64,
    /// Rollouts the budget has room for (the budget less the rows landed).
    pub(super) room: u64,
    /// No more asks to open.
    pub(super) exhausted: bool,
    /// The asks stopped because a whole group no longer fit the budget.
    pub(super) budget_cut: bool,
    /// Per group size: unanimous groups grown past it, and those that split at it.
    seen_at: HashMap<u32, (u64, u64)>,
    /// Groups probed (their first [`PROBE`] rollouts landed), and the mixed among them.
    probed_groups: u64,
    mixed_groups: u64,
    /// Rollouts to play again in the next wave.
    pub(super) retry: Vec<Slot>,
    /// Earlier tries of a rollout that came back unusable.
    pub(super) attempts: HashMap<Slot, u32>,
    /// Rollouts lost, and the empty replies among them.
    pub(super) lost: u64,
    empty_losses: u64,
}

impl Alloc {
    /// A run under `policy` with `budget` rows.
    pub(super) fn new(policy: RepeatPolicy, budget: u64) -> Self {
        Self {
            policy,
            groups: Vec::new(),
            rows: 0,
            room: budget,
            exhausted: false,
            budget_cut: false,
            seen_at: HashMap::new(),
            probed_groups: 0,
            mixed_groups: 0,
            retry: Vec::new(),
            attempts: HashMap::new(),
            lost: 0,
            empty_losses: 0,
        }
    }

    /// Adds to `wave` the rollouts of groups waiting on a decision, within `budget_left`: a
    /// group is closed when full, filled when mixed, and, under the successive policy, grown by
    /// one while the run's record says another rollout is likely to split it.
    pub(super) fn decide(&mut self, wave: &mut Vec<Slot>, budget_left: &mut u64) {
        let successive = self.policy == RepeatPolicy::Successive;
        // Laplace's rule on the run's mixed share: an agent that has never split a group is
        // not taken to split every one.
        let mixed_rate = (self.mixed_groups as f64 + 1.0) / (self.probed_groups as f64 + 2.0);
        for g in self
            .groups
            .iter_mut()
            .filter(|g| g.closed.is_none() && g.done == g.scheduled && g.done > 0)
        {
            if !successive || g.scheduled >= g.k {
                g.closed = Some(if g.scheduled >= g.k {
                    "full"
                } else {
                    "partial"
                });
                continue;
            }
            let n = g.done;
            let add = if g.mixed() {
                g.k - g.scheduled
            } else {
                let (seen, splits) = self.seen_at.get(&n).copied().unwrap_or((0, 0));
                let p_next = (splits as f64 + 1.0 / f64::from(n + 2)) / (seen as f64 + 1.0);
                if self.exhausted || p_next > mixed_rate / f64::from(PROBE) {
                    self.seen_at.entry(n).or_insert((0, 0)).0 += 1;
                    1
                } else {
                    g.closed = Some("stopped_unanimous");
                    continue;
                }
            };
            let add = add.min(u32::try_from(*budget_left).unwrap_or(u32::MAX));
            if add == 0 {
                g.closed = Some("cut");
                continue;
            }
            for i in 0..add {
                wave.push((g.ask, g.scheduled + i));
            }
            g.scheduled += add;
            *budget_left -= u64::from(add);
        }
    }

    /// Counts a landed row of the group of `ask`, with behaviour signature `sig`.
    pub(super) fn landed(&mut self, ask: usize, sig: u64) {
        let g = &mut self.groups[ask];
        let before_mixed = g.mixed();
        let n_before = g.done;
        g.labels.push(sig);
        g.done += 1;
        g.landed += 1;
        let now_mixed = g.mixed();
        if n_before >= PROBE && !before_mixed && now_mixed {
            self.seen_at.entry(n_before).or_insert((0, 0)).1 += 1;
        }
        if g.done == PROBE.min(g.k)
            && n_before + 1 == g.done
            && self.policy == RepeatPolicy::Successive
        {
            self.probed_groups += 1;
            if now_mixed {
                self.mixed_groups += 1;
            }
        }
    }

    /// Counts an unusable rollout `slot` (for reason `why`): re-rolled while its group has
    /// re-rolls left, else lost.
    pub(super) fn unusable(&mut self, slot: Slot, why: &str, report: &mut Report) {
        let g = &mut self.groups[slot.0];
        if g.rerolls < g.k {
            g.rerolls += 1;
            report.rerolled += 1;
            *self.attempts.entry(slot).or_insert(0) += 1;
            self.retry.push(slot);
        } else {
            *report.lost.entry(why.to_owned()).or_insert(0) += 1;
            self.lost += 1;
            self.empty_losses += u64::from(why == "empty_reply");
            g.done += 1;
            g.scheduled = g.scheduled.max(g.done);
        }
    }

    /// Why the agent failed, if nothing landed and most of what was lost came back empty or not.
    fn failed(&self) -> &'static str {
        if self.empty_losses * 10 >= self.lost * 9 {
            "empty_replies"
        } else {
            "agent_failed"
        }
    }

    /// Why a run whose wave came out empty stopped.
    pub(super) fn stop_reason(
        &self,
        budget: u64,
        budget_left: u64,
        pinned: bool,
        situations: Option<(u64, usize)>,
    ) -> &'static str {
        if self.rows >= budget || budget_left == 0 || self.budget_cut {
            "budget"
        } else if self.rows == 0 && self.lost > 0 {
            self.failed()
        } else if pinned {
            "tasks_done"
        } else if situations.is_some_and(|(cap, n)| n as u64 >= cap) {
            "situations_exhausted"
        } else {
            "writer_exhausted"
        }
    }

    /// A dead agent stops the run rather than burn the budget: why, if it is dead.
    pub(super) fn dead(&self) -> Option<&'static str> {
        (self.rows == 0 && self.lost >= 16).then(|| self.failed())
    }

    /// Counts the run's groups by how the allocation closed them.
    pub(super) fn close(&self, report: &mut Report) {
        for g in &self.groups {
            let how = g.closed.unwrap_or(if g.scheduled >= g.k {
                "full"
            } else {
                "partial"
            });
            let how = if self.policy == RepeatPolicy::Successive && g.mixed() {
                if g.scheduled >= g.k {
                    "mixed"
                } else {
                    "mixed_cut"
                }
            } else {
                how
            };
            *report.groups.entry(how.to_owned()).or_insert(0) += 1;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn report() -> Report {
        let opts = crate::stages::simulate::Options::new(Vec::new(), "p".into());
        let setup = crate::stages::simulate::setup::tests::setup(&opts);
        setup.report(&opts)
    }

    #[test]
    fn full_groups_close_and_mixed_ones_fill() {
        let mut alloc = Alloc::new(RepeatPolicy::Successive, 100);
        alloc.groups.push(Group::new(0, 4, 2));
        alloc.groups.push(Group::new(1, 2, 2));
        for (ask, sig) in [(0, 1), (0, 2), (1, 5), (1, 5)] {
            alloc.landed(ask, sig);
        }
        let (mut wave, mut left) = (Vec::new(), 100);
        alloc.decide(&mut wave, &mut left);
        // The mixed group is filled to its k; the full one closes.
        assert_eq!(wave, [(0, 2), (0, 3)]);
        assert_eq!(left, 98);
        assert_eq!(alloc.groups[1].closed, Some("full"));
        let mut r = report();
        alloc.close(&mut r);
        assert_eq!(r.groups.get("full"), Some(&1));
    }

    #[test]
    fn a_fixed_group_is_never_grown_and_no_budget_cuts() {
        let mut alloc = Alloc::new(RepeatPolicy::Fixed, 10);
        alloc.groups.push(Group::new(0, 4, 1));
        alloc.landed(0, 1);
        let (mut wave, mut left) = (Vec::new(), 10);
        alloc.decide(&mut wave, &mut left);
        assert!(wave.is_empty());
        assert_eq!(alloc.groups[0].closed, Some("partial"));
        let mut alloc = Alloc::new(RepeatPolicy::Successive, 10);
        alloc.groups.push(Group::new(0, 4, 2));
        alloc.landed(0, 1);
        alloc.landed(0, 2);
        let (mut wave, mut left) = (Vec::new(), 0);
        alloc.decide(&mut wave, &mut left);
        assert_eq!(alloc.groups[0].closed, Some("cut"));
    }

    #[test]
    fn unusable_rollouts_are_rerolled_then_lost() {
        let mut alloc = Alloc::new(RepeatPolicy::Fixed, 10);
        alloc.groups.push(Group::new(0, 1, 1));
        let mut r = report();
        alloc.unusable((0, 0), "empty_reply", &mut r);
        assert_eq!((alloc.retry.clone(), r.rerolled), (vec![(0, 0)], 1));
        assert_eq!(alloc.attempts.get(&(0, 0)), Some(&1));
        alloc.unusable((0, 0), "empty_reply", &mut r);
        assert_eq!(alloc.lost, 1);
        assert_eq!(r.lost.get("empty_reply"), Some(&1));
        assert_eq!(alloc.stop_reason(10, 9, false, None), "empty_replies");
        assert_eq!(alloc.dead(), None);
        alloc.lost = 16;
        assert_eq!(alloc.dead(), Some("agent_failed"));
    }

    #[test]
    fn stop_reasons() {
        let mut alloc = Alloc::new(RepeatPolicy::None, 10);
        alloc.rows = 3;
        assert_eq!(alloc.stop_reason(10, 0, false, None), "budget");
        assert_eq!(alloc.stop_reason(10, 5, true, None), "tasks_done");
        assert_eq!(
            alloc.stop_reason(10, 5, false, Some((2, 2))),
            "situations_exhausted"
        );
        assert_eq!(
            alloc.stop_reason(10, 5, false, Some((3, 2))),
            "writer_exhausted"
        );
    }
}
