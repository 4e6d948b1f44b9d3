//! One run of requests over the pool: hand them out, read the replies and the mid-request
//! calls, and settle the requests a failed worker held (alone, or retried one at a time).

use std::collections::{HashMap, VecDeque};
use std::sync::Arc;
use std::sync::mpsc::RecvTimeoutError;
use std::time::Instant;

use serde_json::{Map, Value, json};

use super::reply::{parse_object, reply};
use super::{Answer, Event, Failure, MAX_CALLS, Pool, WINDOW};
use crate::error::{Error, Result};

/// Asked in the middle of request `i` (`None` when the request starts again).
type Interim<'a> = dyn FnMut(usize, Option<&Map<String, Value>>) -> Value + 'a;
/// Told of each request's answer the moment it is settled.
type Answered<'a> = dyn FnMut(usize, &Answer) + 'a;

/// The state of one [`Pool::run`]: what is pending, who holds what, what is settled.
struct Round<'a> {
    text: Arc<Vec<u8>>,
    lines: &'a [std::ops::Range<usize>],
    /// The `id` of request 0.
    first: u64,
    verdicts: Vec<Option<Answer>>,
    done: usize,
    pending: VecDeque<usize>,
    /// Requests a failed worker held, to retry one at a time.
    suspects: VecDeque<usize>,
    /// Which worker holds each request in flight.
    owner: HashMap<usize, usize>,
    /// Mid-request calls per request.
    calls: Vec<u32>,
}

impl Round<'_> {
    /// The request an `id` names, if it is one of this run's.
    fn row_of(&self, id: u64) -> Option<usize> {
        id.checked_sub(self.first)
            .and_then(|r| usize::try_from(r).ok())
    }

    /// Settles request `row` with `answer`.
    fn settle(&mut self, row: usize, answer: Answer, answered: &mut Answered<'_>) {
        answered(row, &answer);
        self.verdicts[row] = Some(answer);
        self.done += 1;
    }
}

impl Pool {
    /// Sends request `i` (the line `text[lines[i]]`, whose `id` is `first + i`) to the workers
    /// and returns one answer per request, in request order. A mid-request line with a `call`
    /// goes to `interim(i, object)`, and what it returns is written back to that worker as
    /// `{"id": N, "result": ...}`. Each request's answer also goes to `answered(i, answer)` the
    /// moment it is settled.
    ///
    /// # Errors
    /// Workers that keep dying before answering anything, or a worker that cannot start.
    pub fn run(
        &mut self,
        text: &Arc<Vec<u8>>,
        lines: &[std::ops::Range<usize>],
        first: u64,
        interim: &mut Interim<'_>,
        answered: &mut Answered<'_>,
    ) -> Result<Vec<Answer>> {
        let n = lines.len();
        let mut round = Round {
            text: Arc::clone(text),
            lines,
            first,
            verdicts: vec![None; n],
            done: 0,
            pending: (0..n).collect(),
            suspects: VecDeque::new(),
            owner: HashMap::new(),
            calls: vec![0; n],
        };
        while round.done < n {
            self.hand_out(&mut round, interim);
            let failed = match self.next_event()? {
                Some(Event::Line(w, generation, text)) => {
                    if !self.is_current(w, generation) {
                        continue;
                    }
                    self.on_line(&mut round, w, &text, interim, answered)?
                }
                Some(Event::Closed(w, generation)) => {
                    self.is_current(w, generation).then_some((w, Failure::Died))
                }
                None => self.overdue().map(|w| (w, Failure::Hung)),
            };
            if let Some((w, why)) = failed {
                self.fail(&mut round, w, &why, answered)?;
            }
        }
        Ok(round
            .verdicts
            .into_iter()
            .map(|v| v.unwrap_or_else(|| Answer::Failed(Failure::Died, "no answer".into())))
            .collect())
    }

    /// Hands out work: suspects alone to idle workers, then the rest spread over every worker
    /// (a slow judge's few rows must not queue behind one of them), each taking its share in
    /// one burst (lines go down the pipe in bulk), up to its window.
    fn hand_out(&mut self, round: &mut Round<'_>, interim: &mut Interim<'_>) {
        for w in 0..self.workers.len() {
            let Some(worker) = self.workers[w].as_mut() else {
                continue;
            };
            if worker.solo.is_none() && worker.in_flight.is_empty() {
                worker.progress = Instant::now();
                if let Some(row) = round.suspects.pop_front() {
                    // The request starts again: what its first try did is forgotten.
                    round.calls[row] = 0;
                    interim(row, None);
                    worker.solo = Some(row);
                    worker.in_flight.push_back(row);
                    round.owner.insert(row, w);
                    let _ = worker
                        .input
                        .send((Arc::clone(&round.text), round.lines[row].clone()));
                }
            }
        }
        let share = round
            .pending
            .len()
            .div_ceil(self.workers.len().max(1))
            .max(1);
        for w in 0..self.workers.len() {
            let Some(worker) = self.workers[w].as_mut() else {
                continue;
            };
            if worker.solo.is_some() {
                continue;
            }
            let room = WINDOW.saturating_sub(worker.in_flight.len()).min(share);
            if room > 0 && worker.in_flight.is_empty() && !round.pending.is_empty() {
                worker.progress = Instant::now();
            }
            for _ in 0..room {
                let Some(row) = round.pending.pop_front() else {
                    break;
                };
                worker.in_flight.push_back(row);
                round.owner.insert(row, w);
                let _ = worker
                    .input
                    .send((Arc::clone(&round.text), round.lines[row].clone()));
            }
        }
    }

    /// Waits for a worker's line or end, or (`None`) for the first worker to overrun its
    /// timeout.
    fn next_event(&self) -> Result<Option<Event>> {
        let timeout = self.opts.timeout;
        let now = Instant::now();
        let next_deadline = self
            .workers
            .iter()
            .flatten()
            .filter(|w| !w.in_flight.is_empty())
            .map(|w| w.progress + timeout)
            .min();
        let wait = next_deadline.map_or(timeout, |d| d.saturating_duration_since(now));
        match self.events.recv_timeout(wait) {
            Ok(e) => Ok(Some(e)),
            Err(RecvTimeoutError::Timeout) => Ok(None),
            Err(RecvTimeoutError::Disconnected) => {
                Err(Error::Internal("the worker pool lost its channel".into()))
            }
        }
    }

    /// Whether worker `w` is still the one of `generation` (not restarted since).
    fn is_current(&self, w: usize, generation: u64) -> bool {
        self.workers[w]
            .as_ref()
            .is_some_and(|x| x.generation == generation)
    }

    /// The first worker past its timeout with requests in flight.
    fn overdue(&self) -> Option<usize> {
        let now = Instant::now();
        let timeout = self.opts.timeout;
        self.workers.iter().position(|x| {
            x.as_ref()
                .is_some_and(|x| !x.in_flight.is_empty() && x.progress + timeout <= now)
        })
    }

    /// Takes one line worker `w` printed: a log line (ignored), a mid-request call (answered),
    /// or a reply (settled). Returns the worker and its failure when the line is none of those.
    fn on_line(
        &mut self,
        round: &mut Round<'_>,
        w: usize,
        text: &str,
        interim: &mut Interim<'_>,
        answered: &mut Answered<'_>,
    ) -> Result<Option<(usize, Failure)>> {
        let Some(object) = parse_object(text) else {
            // A log line on stdout: not a reply, and no reason to stop the worker.
            self.noise.0 += 1;
            self.noise
                .1
                .get_or_insert_with(|| text.chars().take(120).collect());
            return Ok(None);
        };
        let n = round.lines.len();
        if let Some(id) = object.get("id").and_then(Value::as_u64)
            && object.contains_key("call")
            && let Some(row) = round.row_of(id)
            && row < n
            && round.owner.get(&row) == Some(&w)
        {
            self.call_back(round, w, id, row, &object, interim);
            return Ok(None);
        }
        match reply(object).map(|(id, verdict)| (round.row_of(id), verdict)) {
            // A late reply to an earlier batch's row: already settled.
            Some((None, _)) => Ok(None),
            Some((Some(id), reply_obj))
                if id < n && round.owner.get(&id) == Some(&w) && round.verdicts[id].is_none() =>
            {
                let worker = self.workers[w]
                    .as_mut()
                    .ok_or_else(|| Error::Internal("a worker vanished".into()))?;
                worker.in_flight.retain(|r| *r != id);
                if worker.solo == Some(id) {
                    worker.solo = None;
                }
                worker.progress = Instant::now();
                round.owner.remove(&id);
                round.settle(id, Answer::Reply(reply_obj), answered);
                self.answered_any = true;
                self.dead_starts = 0;
                self.timeouts_in_a_row = 0;
                Ok(None)
            }
            _ => Ok(Some((
                w,
                Failure::Garbage(text.chars().take(200).collect::<String>()),
            ))),
        }
    }

    /// Answers a question worker `w` asked in the middle of request `row` (its `id`), keeping
    /// the request open.
    fn call_back(
        &mut self,
        round: &mut Round<'_>,
        w: usize,
        id: u64,
        row: usize,
        object: &Map<String, Value>,
        interim: &mut Interim<'_>,
    ) {
        round.calls[row] += 1;
        let result = if round.calls[row] > MAX_CALLS {
            json!({"status": "error", "reason": format!("more than {MAX_CALLS} calls in one request")})
        } else {
            interim(row, Some(object))
        };
        let mut line = json!({"id": id, "result": result}).to_string().into_bytes();
        line.push(b'\n');
        let len = line.len();
        if let Some(worker) = self.workers[w].as_mut() {
            if round.calls[row] <= MAX_CALLS {
                worker.progress = Instant::now();
            }
            let _ = worker.input.send((Arc::new(line), 0..len));
        }
    }

    /// Restarts worker `w`, which failed with `why`: the request it held alone gets the
    /// failure, the others it held become suspects to retry one at a time.
    fn fail(
        &mut self,
        round: &mut Round<'_>,
        w: usize,
        why: &Failure,
        answered: &mut Answered<'_>,
    ) -> Result<()> {
        if matches!(why, Failure::Hung) {
            self.timed_out()?;
        }
        let (held, solo, tail) = self.replace(w, matches!(why, Failure::Died))?;
        for row in held {
            round.owner.remove(&row);
            if round.verdicts[row].is_some() {
                continue;
            }
            if solo == Some(row) {
                round.settle(row, Answer::Failed(why.clone(), tail.clone()), answered);
            } else {
                round.suspects.push_back(row);
            }
        }
        Ok(())
    }
}
