//! Command judges: any program that reads one request per line on stdin and writes one verdict
//! per line on stdout, run as a pool of long-lived workers.
//!
//! Protocol: each request is `{"id": N, "row": {...}}` (the row in the reference's format); each
//! reply is a verdict object with the same `id` (`{"id": N, "reward": 1, "reason": "..."}`), in
//! any order. A reply `{"id": N, "error": "..."}` marks the row `error`.
//!
//! Failures stay with their row. Each worker has a window of rows in flight; when it dies, hangs
//! past the timeout or prints a line that is not a verdict, it is restarted and the rows it held
//! are retried one at a time on a fresh worker, so the row that did it is found: it gets `error`
//! (with the tail of the worker's stderr), `timeout` or `invalid_result`, and the others are graded
//! as if nothing happened.

use std::collections::{HashMap, VecDeque};
use std::io::{BufRead, BufReader, Read, Write};
use std::os::unix::process::CommandExt;
use std::process::{Child, Command as Process, Stdio};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError, Sender};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use datafusion::arrow::array::RecordBatch;
use rayon::prelude::*;
use serde_json::{Value, json};

use super::{Judge, Status, Verdict};
use crate::error::{Error, Result};
use crate::pipeline::row::{BatchView, encode};

/// Rows in flight per worker.
const WINDOW: usize = 64;
/// Bytes of a worker's stderr kept for error reasons.
const STDERR_TAIL: usize = 4096;
/// Workers that die before answering anything, in a row, before the run stops.
const MAX_DEAD_STARTS: usize = 3;

/// A command judge's settings.
#[derive(Debug, Clone)]
pub struct Options {
    /// The command line, run by `sh -c`.
    pub command: String,
    /// Worker processes.
    pub workers: usize,
    /// How long a worker may take over one row.
    pub timeout: Duration,
}

enum Event {
    Line(usize, u64, String),
    Closed(usize, u64),
}

struct Worker {
    child: Child,
    input: Sender<Request>,
    stderr: Tail,
    /// Hangs up when the worker's stderr is closed (read to its end).
    stderr_done: Receiver<()>,
    generation: u64,
    /// Rows sent and not answered, oldest first.
    in_flight: VecDeque<usize>,
    /// The suspect this worker holds alone, if any.
    solo: Option<usize>,
    /// When the worker last answered (or got work while idle).
    progress: Instant,
}

/// The last bytes a program wrote to its stderr, kept by a reader thread.
pub(crate) type Tail = Arc<Mutex<VecDeque<u8>>>;

/// Reads `stderr` on a thread of its own, keeping its last [`STDERR_TAIL`] bytes; the receiver
/// hangs up when the stream is read to its end.
pub(crate) fn keep_tail(mut stderr: impl Read + Send + 'static) -> (Tail, Receiver<()>) {
    let tail = Arc::new(Mutex::new(VecDeque::with_capacity(STDERR_TAIL)));
    let sink = Arc::clone(&tail);
    let (done, finished) = mpsc::channel();
    std::thread::spawn(move || {
        let mut buf = [0u8; 4096];
        while let Ok(n) = stderr.read(&mut buf) {
            if n == 0 {
                break;
            }
            if let Ok(mut t) = sink.lock() {
                t.extend(&buf[..n]);
                let excess = t.len().saturating_sub(STDERR_TAIL);
                t.drain(..excess);
            }
        }
        let _ = done.send(());
    });
    (tail, finished)
}

/// The last eight lines of `tail`.
pub(crate) fn tail_text(tail: &Tail) -> String {
    let bytes: Vec<u8> = tail
        .lock()
        .map(|b| b.iter().copied().collect())
        .unwrap_or_default();
    let text = String::from_utf8_lossy(&bytes);
    let lines: Vec<&str> = text.trim_end().lines().collect();
    lines[lines.len().saturating_sub(8)..].join("\n")
}

impl Worker {
    fn stderr_tail(&self) -> String {
        tail_text(&self.stderr)
    }

    /// Kills the worker and what it started (it leads its own process group).
    fn kill(&mut self) {
        let group = format!("-{}", self.child.id());
        let _ = Process::new("kill")
            .args(["-KILL", "--", &group])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status();
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A pool of workers running one judge command.
pub struct CommandJudge {
    opts: Options,
    name: String,
    workers: Vec<Option<Worker>>,
    events: Receiver<Event>,
    sender: Sender<Event>,
    generation: u64,
    dead_starts: usize,
    answered_any: bool,
    /// Lines on stdout that were not JSON objects (ignored): how many, and the first.
    noise: (u64, Option<String>),
    /// The request text of the batch being judged.
    text: Arc<Vec<u8>>,
    /// Request ids handed out so far.
    issued: u64,
}

impl CommandJudge {
    /// Starts the pool.
    pub fn start(opts: Options) -> Result<Self> {
        if opts.command.trim().is_empty() {
            return Err(Error::Usage("the judge command is empty".into()));
        }
        let name = opts
            .command
            .split_whitespace()
            .find(|w| !matches!(*w, "python" | "python3" | "node" | "uv" | "run" | "-u"))
            .map_or("command", |w| w.rsplit('/').next().unwrap_or(w))
            .to_owned();
        let (sender, events) = mpsc::channel();
        let mut judge = Self {
            workers: (0..opts.workers.max(1)).map(|_| None).collect(),
            opts,
            name,
            events,
            sender,
            generation: 0,
            dead_starts: 0,
            answered_any: false,
            noise: (0, None),
            text: Arc::new(Vec::new()),
            issued: 0,
        };
        for w in 0..judge.workers.len() {
            judge.spawn(w)?;
        }
        Ok(judge)
    }

    fn spawn(&mut self, w: usize) -> Result<()> {
        self.generation += 1;
        let generation = self.generation;
        let mut child = Process::new("sh")
            .arg("-c")
            .arg(&self.opts.command)
            .process_group(0)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .map_err(|e| {
                Error::Usage(format!(
                    "cannot start the judge command `{}`: {e}",
                    self.opts.command
                ))
            })?;
        let (Some(stdin), Some(stdout), Some(stderr)) =
            (child.stdin.take(), child.stdout.take(), child.stderr.take())
        else {
            return Err(Error::Internal("a judge worker has no pipes".into()));
        };
        let (input, lines) = mpsc::channel::<Request>();
        std::thread::spawn(move || {
            let mut out = std::io::BufWriter::with_capacity(1 << 16, stdin);
            for (text, range) in &lines {
                if out.write_all(&text[range]).is_err() {
                    return;
                }
                // Flush when nothing more is waiting, so lines go out in bulk but never sit.
                let more = lines
                    .try_iter()
                    .try_for_each(|(text, range)| out.write_all(&text[range]));
                if more.is_err() || out.flush().is_err() {
                    return;
                }
            }
        });
        let events = self.sender.clone();
        std::thread::spawn(move || {
            let mut reader = BufReader::with_capacity(1 << 16, stdout);
            let mut line = String::new();
            loop {
                line.clear();
                match reader.read_line(&mut line) {
                    Ok(0) | Err(_) => break,
                    Ok(_) => {
                        let text = line.trim_end().to_owned();
                        if !text.is_empty()
                            && events.send(Event::Line(w, generation, text)).is_err()
                        {
                            return;
                        }
                    }
                }
            }
            let _ = events.send(Event::Closed(w, generation));
        });
        let (tail, stderr_done) = keep_tail(stderr);
        self.workers[w] = Some(Worker {
            child,
            input,
            stderr: tail,
            stderr_done,
            generation,
            in_flight: VecDeque::new(),
            solo: None,
            progress: Instant::now(),
        });
        Ok(())
    }

    /// Kills worker `w`, starts a new one, and returns the rows it held and whether it held a
    /// suspect alone (then that row is the culprit), with its stderr tail.
    fn replace(&mut self, w: usize, died: bool) -> Result<(Vec<usize>, Option<usize>, String)> {
        let Some(mut old) = self.workers[w].take() else {
            return Ok((Vec::new(), None, String::new()));
        };
        old.kill();
        // Let the stderr reader take the last words.
        let _ = old.stderr_done.recv_timeout(Duration::from_millis(500));
        let tail = old.stderr_tail();
        // Only a worker that exits counts against the start: a slow one may just be busy.
        if died && !self.answered_any {
            self.dead_starts += 1;
            if self.dead_starts >= MAX_DEAD_STARTS {
                return Err(Error::Input {
                    stage: "grade".into(),
                    message: format!(
                        "the judge command `{}` stops before answering any row{}",
                        self.opts.command,
                        if tail.is_empty() {
                            String::new()
                        } else {
                            format!("; its stderr ends:\n{tail}")
                        }
                    ),
                });
            }
        }
        self.spawn(w)?;
        Ok((old.in_flight.into_iter().collect(), old.solo, tail))
    }
}

impl Drop for CommandJudge {
    fn drop(&mut self) {
        for w in self.workers.iter_mut().flatten() {
            // Closing stdin lets a well-behaved worker exit; the kill is for the rest.
            let (input, _) = mpsc::channel();
            drop(std::mem::replace(&mut w.input, input));
            let deadline = Instant::now() + Duration::from_millis(200);
            while Instant::now() < deadline {
                if let Ok(Some(_)) = w.child.try_wait() {
                    break;
                }
                std::thread::sleep(Duration::from_millis(5));
            }
            w.kill();
        }
    }
}

/// One request line: where it is in a batch's request text.
type Request = (Arc<Vec<u8>>, std::ops::Range<usize>);

/// The rows of a batch as request lines (`{"id": i, "row": {...}}`), encoded in parallel into
/// `text` (reused from batch to batch when no worker still holds it); returns each line's range.
fn requests(
    batch: &RecordBatch,
    first_id: u64,
    text: &mut Arc<Vec<u8>>,
) -> Result<Vec<std::ops::Range<usize>>> {
    const CHUNK: usize = 256;
    let view = BatchView::new(batch)?;
    let rows: Vec<usize> = (0..batch.num_rows()).collect();
    let chunks: Vec<(Vec<u8>, Vec<usize>)> = rows
        .par_chunks(CHUNK)
        .map(|chunk| {
            let mut out = Vec::with_capacity(chunk.len() * 2048);
            let mut ends = Vec::with_capacity(chunk.len());
            for &i in chunk {
                let row = encode(&view, i)?;
                let id = first_id + i as u64;
                out.extend_from_slice(format!("{{\"id\":{id},\"row\":").as_bytes());
                serde_json::to_writer(&mut out, &row)
                    .map_err(|e| Error::Internal(format!("encoding a request: {e}")))?;
                out.extend_from_slice(b"}\n");
                ends.push(out.len());
            }
            Ok((out, ends))
        })
        .collect::<Result<_>>()?;
    // A worker still holding the last batch's text keeps it; this batch gets a new one.
    if Arc::get_mut(text).is_none() {
        *text = Arc::new(Vec::new());
    }
    let buf =
        Arc::get_mut(text).ok_or_else(|| Error::Internal("a fresh buffer is shared".into()))?;
    buf.clear();
    let mut ranges = Vec::with_capacity(batch.num_rows());
    for (chunk, ends) in chunks {
        let base = buf.len();
        let mut start = base;
        for end in ends {
            ranges.push(start..base + end);
            start = base + end;
        }
        buf.extend_from_slice(&chunk);
    }
    Ok(ranges)
}

impl Judge for CommandJudge {
    fn name(&self) -> &str {
        &self.name
    }

    fn notes(&self) -> Vec<String> {
        match &self.noise {
            (0, _) => Vec::new(),
            (n, first) => vec![format!(
                "the judge printed {n} line{} on stdout that {} not JSON and {} ignored (first: {}); print logs to stderr",
                if *n == 1 { "" } else { "s" },
                if *n == 1 { "is" } else { "are" },
                if *n == 1 { "was" } else { "were" },
                first.as_deref().unwrap_or("")
            )],
        }
    }

    fn judge(&mut self, batch: &RecordBatch) -> Result<Vec<Verdict>> {
        let n = batch.num_rows();
        // Ids run on across batches, so a late reply to an earlier batch cannot pass for one
        // of this batch's.
        let first = self.issued;
        self.issued += n as u64;
        let lines = requests(batch, first, &mut self.text)?;
        let text = Arc::clone(&self.text);
        let mut verdicts: Vec<Option<Verdict>> = vec![None; n];
        let mut done = 0;
        let mut pending: VecDeque<usize> = (0..n).collect();
        let mut suspects: VecDeque<usize> = VecDeque::new();
        let mut owner: HashMap<usize, usize> = HashMap::new();
        let timeout = self.opts.timeout;
        while done < n {
            // Hand out work: suspects alone to idle workers, then the rest spread over every
            // worker (a slow judge's few rows must not queue behind one of them).
            for w in 0..self.workers.len() {
                let Some(worker) = self.workers[w].as_mut() else {
                    continue;
                };
                if worker.solo.is_none() && worker.in_flight.is_empty() {
                    worker.progress = Instant::now();
                    if let Some(row) = suspects.pop_front() {
                        worker.solo = Some(row);
                        worker.in_flight.push_back(row);
                        owner.insert(row, w);
                        let _ = worker.input.send((Arc::clone(&text), lines[row].clone()));
                    }
                }
            }
            // Each worker takes its share of what is pending, in one burst (lines go down the
            // pipe in bulk), up to its window.
            let share = pending.len().div_ceil(self.workers.len().max(1)).max(1);
            for w in 0..self.workers.len() {
                let Some(worker) = self.workers[w].as_mut() else {
                    continue;
                };
                if worker.solo.is_some() {
                    continue;
                }
                let room = WINDOW.saturating_sub(worker.in_flight.len()).min(share);
                if room > 0 && worker.in_flight.is_empty() && !pending.is_empty() {
                    worker.progress = Instant::now();
                }
                for _ in 0..room {
                    let Some(row) = pending.pop_front() else {
                        break;
                    };
                    worker.in_flight.push_back(row);
                    owner.insert(row, w);
                    let _ = worker.input.send((Arc::clone(&text), lines[row].clone()));
                }
            }
            // Wait for a reply, or for the first worker to overrun its timeout.
            let now = Instant::now();
            let next_deadline = self
                .workers
                .iter()
                .flatten()
                .filter(|w| !w.in_flight.is_empty())
                .map(|w| w.progress + timeout)
                .min();
            let wait = next_deadline.map_or(timeout, |d| d.saturating_duration_since(now));
            let event = match self.events.recv_timeout(wait) {
                Ok(e) => Some(e),
                Err(RecvTimeoutError::Timeout) => None,
                Err(RecvTimeoutError::Disconnected) => {
                    return Err(Error::Internal("the judge pool lost its channel".into()));
                }
            };
            let (failed, why) = match event {
                Some(Event::Line(w, generation, text)) => {
                    let current = self.workers[w]
                        .as_ref()
                        .is_some_and(|x| x.generation == generation);
                    if !current {
                        continue;
                    }
                    let Some(object) = parse_object(&text) else {
                        // A log line on stdout: not a reply, and no reason to stop the worker.
                        self.noise.0 += 1;
                        self.noise
                            .1
                            .get_or_insert_with(|| text.chars().take(120).collect());
                        continue;
                    };
                    let answer = reply(object).map(|(id, verdict)| {
                        (
                            id.checked_sub(first).and_then(|r| usize::try_from(r).ok()),
                            id,
                            verdict,
                        )
                    });
                    match answer {
                        Some((None, _, _)) => {
                            // A late reply to an earlier batch's row: already settled.
                            continue;
                        }
                        Some((Some(id), _, verdict))
                            if id < n && owner.get(&id) == Some(&w) && verdicts[id].is_none() =>
                        {
                            let worker = self.workers[w]
                                .as_mut()
                                .ok_or_else(|| Error::Internal("a judge worker vanished".into()))?;
                            worker.in_flight.retain(|r| *r != id);
                            if worker.solo == Some(id) {
                                worker.solo = None;
                            }
                            worker.progress = Instant::now();
                            owner.remove(&id);
                            verdicts[id] = Some(verdict);
                            done += 1;
                            self.answered_any = true;
                            self.dead_starts = 0;
                            continue;
                        }
                        _ => (
                            w,
                            Failure::Garbage(text.chars().take(200).collect::<String>()),
                        ),
                    }
                }
                Some(Event::Closed(w, generation)) => {
                    let current = self.workers[w]
                        .as_ref()
                        .is_some_and(|x| x.generation == generation);
                    if !current {
                        continue;
                    }
                    (w, Failure::Died)
                }
                None => {
                    let now = Instant::now();
                    let Some(w) = self.workers.iter().position(|x| {
                        x.as_ref()
                            .is_some_and(|x| !x.in_flight.is_empty() && x.progress + timeout <= now)
                    }) else {
                        continue;
                    };
                    (w, Failure::Hung)
                }
            };
            let (held, solo, tail) = self.replace(failed, matches!(why, Failure::Died))?;
            for row in held {
                owner.remove(&row);
                if verdicts[row].is_some() {
                    continue;
                }
                if solo == Some(row) {
                    verdicts[row] = Some(why.verdict(timeout.as_secs_f64(), &tail));
                    done += 1;
                } else {
                    suspects.push_back(row);
                }
            }
        }
        Ok(verdicts
            .into_iter()
            .map(|v| v.unwrap_or_else(|| Verdict::failed(Status::Error, "no verdict")))
            .collect())
    }
}

enum Failure {
    Died,
    Hung,
    Garbage(String),
}

impl Failure {
    fn verdict(&self, timeout_s: f64, stderr_tail: &str) -> Verdict {
        let tail = if stderr_tail.is_empty() {
            String::new()
        } else {
            format!("; stderr: {stderr_tail}")
        };
        match self {
            Self::Died => Verdict::failed(
                Status::Error,
                format!("the judge process exited on this row{tail}"),
            )
            .with_meta("stderr", Value::String(stderr_tail.to_owned())),
            Self::Hung => Verdict::failed(
                Status::Timeout,
                format!("the judge took longer than {timeout_s} s on this row"),
            )
            .with_meta("timeout_s", json!(timeout_s)),
            Self::Garbage(line) => Verdict::failed(
                Status::InvalidResult,
                format!(
                    "the judge answered with an object that carries no request id of its own: {line}"
                ),
            ),
        }
    }
}

fn parse_object(text: &str) -> Option<serde_json::Map<String, Value>> {
    match serde_json::from_str::<Value>(text) {
        Ok(Value::Object(obj)) => Some(obj),
        _ => None,
    }
}

/// Reads a reply: its `id` and verdict.
fn reply(mut obj: serde_json::Map<String, Value>) -> Option<(u64, Verdict)> {
    let id = obj.shift_remove("id")?.as_u64()?;
    Some((id, Verdict::from_json(Value::Object(obj))))
}
