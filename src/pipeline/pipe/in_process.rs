//! Programs that run inside this process: a binding's function (the Python package's judge or
//! agent) served on a thread, speaking the same lines a worker process speaks on its pipes.
//!
//! [`register`] names a program; a pool whose command is that name runs it on a thread per
//! worker instead of starting a process, with the same windows, timeouts and retries. A thread
//! cannot be killed: a worker that hangs past the timeout has its input closed and is replaced,
//! and whatever it answers later is not read.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc::{Receiver, RecvTimeoutError, Sender};
use std::sync::{Arc, LazyLock, Mutex};
use std::time::Duration;

use super::{Event, Request};

/// How a registered program's command begins.
const PREFIX: &str = "wai-in-process:";

/// A program that serves requests in this process.
pub trait InProcess: Send + Sync {
    /// Serves one worker: reads request lines from `lines` until it ends, and sends one reply
    /// line per request (and any mid-request `call` line) to `replies`, in any order. Runs on a
    /// thread of its own; returns when `lines` ends.
    fn serve(&self, lines: Lines, replies: Replies);
}

/// A registered program: its command is valid until this is dropped. Dropping it also ends the
/// workers serving it (their [`Lines`] end), so a command its caller abandoned stops asking.
pub struct InProcessHandle {
    command: String,
    ended: Arc<AtomicBool>,
}

impl InProcessHandle {
    /// The command a pool takes to run it (`cmd:` + this, for a judge or an agent spec).
    pub fn command(&self) -> &str {
        &self.command
    }
}

impl Drop for InProcessHandle {
    fn drop(&mut self) {
        self.ended.store(true, Ordering::Relaxed);
        if let Ok(mut programs) = PROGRAMS.lock() {
            programs.remove(&self.command);
        }
    }
}

/// A registered program: its name, the program, and whether its handle was dropped.
type Registered = (String, Arc<dyn InProcess>, Arc<AtomicBool>);

static PROGRAMS: LazyLock<Mutex<HashMap<String, Registered>>> = LazyLock::new(Mutex::default);
static NEXT: AtomicU64 = AtomicU64::new(1);

/// Registers `program`, named `name` in reports (a judge's name, say).
pub fn register(name: &str, program: Arc<dyn InProcess>) -> InProcessHandle {
    let command = format!("{PREFIX}{}", NEXT.fetch_add(1, Ordering::Relaxed));
    let ended = Arc::new(AtomicBool::new(false));
    if let Ok(mut programs) = PROGRAMS.lock() {
        programs.insert(
            command.clone(),
            (name.to_owned(), program, Arc::clone(&ended)),
        );
    }
    InProcessHandle { command, ended }
}

/// The program a command names, if it is a registered one.
pub(super) fn lookup(command: &str) -> Option<Registered> {
    if !command.starts_with(PREFIX) {
        return None;
    }
    PROGRAMS.lock().ok()?.get(command.trim()).cloned()
}

/// The request lines one worker receives.
pub struct Lines {
    lines: Receiver<Request>,
    ended: Arc<AtomicBool>,
}

impl Lines {
    pub(super) fn new(lines: Receiver<Request>, ended: Arc<AtomicBool>) -> Self {
        Self { lines, ended }
    }

    /// Waits up to `wait` for request lines and returns every one that has arrived (each without
    /// its newline): an empty list when none came in time, `None` once the worker is ended (the
    /// pool closed it, or the program's handle was dropped).
    pub fn next_batch(&self, wait: Duration) -> Option<Vec<String>> {
        if self.ended.load(Ordering::Relaxed) {
            return None;
        }
        let first = match self.lines.recv_timeout(wait) {
            Ok(line) => line,
            Err(RecvTimeoutError::Timeout) => return Some(Vec::new()),
            Err(RecvTimeoutError::Disconnected) => return None,
        };
        let text =
            |(bytes, range): Request| String::from_utf8_lossy(&bytes[range]).trim_end().to_owned();
        let mut out = vec![text(first)];
        out.extend(self.lines.try_iter().map(text));
        Some(out)
    }
}

/// Where one worker's reply lines go.
pub struct Replies {
    events: Sender<Event>,
    worker: usize,
    generation: u64,
}

impl Replies {
    pub(super) fn new(events: Sender<Event>, worker: usize, generation: u64) -> Self {
        Self {
            events,
            worker,
            generation,
        }
    }

    /// Sends one reply line; `false` once the pool is gone.
    pub fn send(&self, line: &str) -> bool {
        let line = line.trim();
        line.is_empty()
            || self
                .events
                .send(Event::Line(self.worker, self.generation, line.to_owned()))
                .is_ok()
    }

    /// What tells the pool this worker's thread has ended, when it is dropped (at the end of
    /// the thread, or as a panic unwinds it).
    pub(super) fn closer(&self) -> Closer {
        Closer {
            events: self.events.clone(),
            worker: self.worker,
            generation: self.generation,
        }
    }
}

/// Tells the pool, when dropped, that a worker's thread has ended.
pub(super) struct Closer {
    events: Sender<Event>,
    worker: usize,
    generation: u64,
}

impl Drop for Closer {
    fn drop(&mut self) {
        let _ = self
            .events
            .send(Event::Closed(self.worker, self.generation));
    }
}

#[cfg(test)]
mod tests {
    use super::super::{Answer, Failure, Options, Pool};
    use super::*;

    /// Answers `{"id", "n"}` with `{"id", "reward": n % 2}`, hangs on n = 3, and ignores n = 5.
    struct Parity;

    impl InProcess for Parity {
        fn serve(&self, lines: Lines, replies: Replies) {
            while let Some(batch) = lines.next_batch(Duration::from_millis(50)) {
                for line in batch {
                    let v: serde_json::Value = serde_json::from_str(&line).expect("json");
                    let (id, n) = (v["id"].as_u64().expect("id"), v["n"].as_u64().expect("n"));
                    match n {
                        3 => std::thread::sleep(Duration::from_secs(2)),
                        5 => {
                            replies.send("not a reply");
                        }
                        _ => {
                            replies.send(&format!("{{\"id\": {id}, \"reward\": {}}}", n % 2));
                        }
                    }
                }
            }
        }
    }

    #[test]
    fn a_program_in_this_process_answers_as_a_worker_would() {
        let handle = register("parity", Arc::new(Parity));
        let mut pool = Pool::start(Options {
            command: handle.command().to_owned(),
            workers: 2,
            timeout: Duration::from_millis(500),
            role: "judge",
            forward: Vec::new(),
        })
        .expect("started");
        assert_eq!(pool.name(), "parity");
        let mut text = Vec::new();
        let mut lines = Vec::new();
        for n in 0..8u64 {
            let start = text.len();
            text.extend(format!("{{\"id\": {n}, \"n\": {n}}}\n").bytes());
            lines.push(start..text.len());
        }
        let answers = pool
            .run(
                &Arc::new(text),
                &lines,
                0,
                &mut |_, _| serde_json::Value::Null,
                &mut |_, _| {},
            )
            .expect("ran");
        for (n, answer) in answers.iter().enumerate() {
            match (n, answer) {
                (3, other) => assert!(
                    matches!(other, Answer::Failed(Failure::Hung, _)),
                    "row 3 hangs: {other:?}"
                ),
                (5, other) => assert!(
                    matches!(other, Answer::Failed(_, _)),
                    "row 5 gets no reply: {other:?}"
                ),
                (n, Answer::Reply(r)) => assert_eq!(r["reward"], serde_json::json!(n % 2)),
                (n, other) => panic!("row {n}: {other:?}"),
            }
        }
        drop(pool);
        let command = handle.command().to_owned();
        drop(handle);
        assert!(lookup(&command).is_none(), "unregistered when dropped");
    }
}
