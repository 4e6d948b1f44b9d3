//! A pool of long-lived worker processes speaking JSON Lines: one request per line on stdin,
//! one reply per line on stdout, matched by `id`, in any order. Command judges and command
//! agents both run on it, with the same timeout and restart rules.
//!
//! Failures stay with their request. Each worker has a window of requests in flight; when it
//! dies, hangs past the timeout or prints a line that is not a reply, it is restarted and the
//! requests it held are retried one at a time on a fresh worker, so the request that did it is
//! found: it gets [`Failure::Died`] (with the tail of the worker's stderr), [`Failure::Hung`] or
//! [`Failure::Garbage`], and the others are answered as if nothing happened.
//!
//! A worker may also ask something back in the middle of a request (a command agent calling a
//! tool): a line `{"id": N, "call": {...}}` is handed to the caller's `interim` function and its
//! answer is written back as `{"id": N, "result": ...}`; the request stays open.

use std::collections::VecDeque;
use std::io::{BufRead, BufReader, Read, Write};
use std::os::unix::process::CommandExt;
use std::process::{Command as Process, Stdio};
use std::sync::mpsc::{self, Receiver, Sender};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::{Map, Value};

use super::signals;
use crate::error::{Error, Result};

mod in_process;
mod reply;
pub use in_process::{InProcess, InProcessHandle, Lines, Replies, register};
#[cfg(feature = "fuzzing")]
pub(crate) use reply::{parse_object, reply};
mod run;

/// One request line: the text it sits in and where.
type Request = (Arc<Vec<u8>>, std::ops::Range<usize>);

/// Mid-request calls one request may make; past them, calls are refused and no longer count
/// as progress, so a request that loops on calls runs into the timeout.
const MAX_CALLS: u32 = 256;

/// Requests in flight per worker.
const WINDOW: usize = 64;
/// Bytes of a worker's stderr kept for error reasons.
const STDERR_TAIL: usize = 4096;
/// Workers that die before answering anything, in a row, before the run stops.
const MAX_DEAD_STARTS: usize = 3;
/// Timeouts in a row, with no reply between them, before the run stops: a program that hangs on
/// every request would otherwise take `--timeout` per request (20,000 rows at 60 s: two weeks).
pub const MAX_TIMEOUTS_IN_A_ROW: usize = 8;

/// A pool's settings.
#[derive(Debug, Clone)]
pub struct Options {
    /// The command line, run by `sh -c`.
    pub command: String,
    /// Worker processes.
    pub workers: usize,
    /// How long a worker may take over one request.
    pub timeout: Duration,
    /// What the program is, in messages: `judge`, `agent`.
    pub role: &'static str,
    /// Environment variables passed on beyond the minimal set ([`worker_env`]).
    pub forward: Vec<String>,
}

/// Variables every worker gets when wai has them: what a program needs to start and find its
/// interpreter, files and locale, and no credentials.
const BASE_ENV: &[&str] = &[
    "PATH",
    "HOME",
    "USER",
    "LOGNAME",
    "SHELL",
    "LANG",
    "LANGUAGE",
    "TERM",
    "TZ",
    "TMPDIR",
    "TMP",
    "TEMP",
    "VIRTUAL_ENV",
    "CONDA_PREFIX",
    "CONDA_DEFAULT_ENV",
    "LD_LIBRARY_PATH",
    "SSL_CERT_FILE",
    "SSL_CERT_DIR",
    "NO_COLOR",
    "SYSTEMROOT",
];
/// Prefixes of variables every worker gets: locale (`LC_ALL`, ...) and Python's own settings
/// (`PYTHONPATH`, `PYTHONHASHSEED`, ...).
const BASE_ENV_PREFIXES: &[&str] = &["LC_", "PYTHON"];

/// The environment a worker starts with: [`BASE_ENV`], the [`BASE_ENV_PREFIXES`] and the names
/// in `forward`, each only when wai has it. Nothing else: not `OPENAI_API_KEY`, not
/// `AWS_SECRET_ACCESS_KEY`, unless it is forwarded by name.
pub fn worker_env(forward: &[String]) -> Vec<(std::ffi::OsString, std::ffi::OsString)> {
    std::env::vars_os()
        .filter(|(name, _)| {
            let name = name.to_string_lossy();
            BASE_ENV.contains(&name.as_ref())
                || BASE_ENV_PREFIXES.iter().any(|p| name.starts_with(p))
                || forward.iter().any(|f| *f == name)
        })
        .collect()
}

/// Checks `--env` names: each a variable name, not `NAME=VALUE`.
///
/// # Errors
/// An empty name or one holding `=`.
pub fn check_forward(names: &[String]) -> Result<()> {
    for name in names.iter().filter(|n| !n.is_empty()) {
        if name.contains('=') || name.contains('\0') {
            return Err(Error::Usage(format!(
                "--env takes the name of a variable to pass on (`--env OPENAI_API_KEY`), not `{name}`"
            )));
        }
    }
    Ok(())
}

enum Event {
    Line(usize, u64, String),
    Closed(usize, u64),
}

struct Worker {
    /// Shared with the signal thread, which ends it if wai is told to stop; `None` for a program
    /// in this process (its thread ends when its input closes).
    child: Option<signals::SharedChild>,
    pid: u32,
    /// A program in this process: its serving thread.
    thread: Option<std::thread::JoinHandle<()>>,
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
    // The tail lands in row reasons and messages: a program that prints its key keeps it.
    crate::report::redact::redact(&lines[lines.len().saturating_sub(8)..].join("\n")).into_owned()
}

impl Worker {
    fn stderr_tail(&self) -> String {
        tail_text(&self.stderr)
    }

    /// Kills the worker and what it started (it leads its own process group).
    fn kill(&mut self) {
        let Some(child) = &self.child else {
            // A thread cannot be killed: its input closes, which ends its serving loop, and what
            // it answers after this is not read (its generation is gone).
            let (input, _) = mpsc::channel();
            drop(std::mem::replace(&mut self.input, input));
            return;
        };
        signals::kill_group(self.pid, "-KILL");
        if let Ok(mut child) = child.lock() {
            let _ = child.kill();
            let _ = child.wait();
        }
        signals::remove_group(self.pid);
    }

    /// Whether the worker has exited.
    fn exited(&self) -> bool {
        match (&self.child, &self.thread) {
            (Some(child), _) => child
                .lock()
                .is_ok_and(|mut c| matches!(c.try_wait(), Ok(Some(_)))),
            (None, Some(thread)) => thread.is_finished(),
            (None, None) => true,
        }
    }
}

/// A pool of workers running one command.
pub struct Pool {
    opts: Options,
    name: String,
    workers: Vec<Option<Worker>>,
    events: Receiver<Event>,
    sender: Sender<Event>,
    generation: u64,
    dead_starts: usize,
    /// Timeouts since the last reply.
    timeouts_in_a_row: usize,
    answered_any: bool,
    /// Lines on stdout that were not JSON objects (ignored): how many, and the first.
    noise: (u64, Option<String>),
}

impl Pool {
    /// Starts the pool.
    pub fn start(opts: Options) -> Result<Self> {
        if opts.command.trim().is_empty() {
            return Err(Error::Usage(format!("the {} command is empty", opts.role)));
        }
        let name = in_process::lookup(&opts.command).map_or_else(
            || {
                opts.command
                    .split_whitespace()
                    .find(|w| !matches!(*w, "python" | "python3" | "node" | "uv" | "run" | "-u"))
                    .map_or("command", |w| w.rsplit('/').next().unwrap_or(w))
                    .to_owned()
            },
            |(name, _, _)| name,
        );
        let (sender, events) = mpsc::channel();
        let mut pool = Self {
            workers: (0..opts.workers.max(1)).map(|_| None).collect(),
            opts,
            name,
            events,
            sender,
            generation: 0,
            dead_starts: 0,
            timeouts_in_a_row: 0,
            answered_any: false,
            noise: (0, None),
        };
        for w in 0..pool.workers.len() {
            pool.spawn(w)?;
        }
        Ok(pool)
    }

    fn spawn(&mut self, w: usize) -> Result<()> {
        self.generation += 1;
        let generation = self.generation;
        if let Some((_, program, ended)) = in_process::lookup(&self.opts.command) {
            let (input, lines) = mpsc::channel::<Request>();
            let replies = Replies::new(self.sender.clone(), w, generation);
            let thread = std::thread::Builder::new()
                .name(format!("wai-{}-{w}", self.opts.role.replace(' ', "-")))
                .spawn(move || {
                    // The pool hears of the end however the program ends: a panic too.
                    let _closed = replies.closer();
                    program.serve(Lines::new(lines, ended), replies);
                })
                .map_err(|e| Error::Internal(format!("cannot start a worker thread: {e}")))?;
            // Nothing is written to a stderr: a program in this process says what failed in its
            // error replies.
            let (_, stderr_done) = mpsc::channel();
            self.workers[w] = Some(Worker {
                child: None,
                pid: 0,
                thread: Some(thread),
                input,
                stderr: Arc::default(),
                stderr_done,
                generation,
                in_flight: VecDeque::new(),
                solo: None,
                progress: Instant::now(),
            });
            return Ok(());
        }
        let mut child = Process::new("sh")
            .arg("-c")
            .arg(&self.opts.command)
            .env_clear()
            .envs(worker_env(&self.opts.forward))
            .process_group(0)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .map_err(|e| {
                Error::Usage(format!(
                    "cannot start the {} command `{}`: {e}",
                    self.opts.role, self.opts.command
                ))
            })?;
        let (Some(stdin), Some(stdout), Some(stderr)) =
            (child.stdin.take(), child.stdout.take(), child.stderr.take())
        else {
            return Err(Error::Internal("a worker has no pipes".into()));
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
        let pid = child.id();
        let child = Arc::new(Mutex::new(child));
        signals::add_group(&child);
        self.workers[w] = Some(Worker {
            child: Some(child),
            pid,
            thread: None,
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
                    stage: self.stage().into(),
                    message: format!(
                        "the {} command `{}` stops before answering any {}{}",
                        self.opts.role,
                        self.opts.command,
                        self.unit(),
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

impl Pool {
    /// The command this pool serves, in errors.
    fn stage(&self) -> &'static str {
        if self.opts.role == "judge" {
            "grade"
        } else {
            "simulate"
        }
    }

    /// What one request is, in errors.
    fn unit(&self) -> &'static str {
        match self.opts.role {
            "judge" => "row",
            "tool world" => "call",
            _ => "ask",
        }
    }

    /// Counts a timeout; too many in a row stop the run.
    fn timed_out(&mut self) -> Result<()> {
        self.timeouts_in_a_row += 1;
        if self.timeouts_in_a_row < MAX_TIMEOUTS_IN_A_ROW {
            return Ok(());
        }
        Err(Error::Input {
            stage: self.stage().into(),
            message: format!(
                "the {role} command `{command}` timed out {MAX_TIMEOUTS_IN_A_ROW} times in a row (--timeout {t} s) with no answer between them; stopping instead of waiting {t} s on every {what}. Check that it answers each request with one line on stdout, flushed, or raise --timeout",
                role = self.opts.role,
                command = self.opts.command,
                t = self.opts.timeout.as_secs_f64(),
                what = self.unit(),
            ),
        })
    }
}

impl Drop for Pool {
    fn drop(&mut self) {
        for w in self.workers.iter_mut().flatten() {
            // Closing stdin lets a well-behaved worker exit; the kill is for the rest.
            let (input, _) = mpsc::channel();
            drop(std::mem::replace(&mut w.input, input));
            let deadline = Instant::now() + Duration::from_millis(200);
            while Instant::now() < deadline {
                if w.exited() {
                    break;
                }
                std::thread::sleep(Duration::from_millis(5));
            }
            w.kill();
        }
    }
}

impl Pool {
    /// The note about stdout lines that were not JSON, if there were any.
    pub fn noise_note(&self) -> Option<String> {
        match &self.noise {
            (0, _) => None,
            (n, first) => Some(format!(
                "the {} printed {n} line{} on stdout that {} not JSON and {} ignored (first: {}); print logs to stderr",
                self.opts.role,
                if *n == 1 { "" } else { "s" },
                if *n == 1 { "is" } else { "are" },
                if *n == 1 { "was" } else { "were" },
                first.as_deref().unwrap_or("")
            )),
        }
    }

    /// A short name for the command (its program's file name).
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The per-request timeout.
    pub fn timeout(&self) -> Duration {
        self.opts.timeout
    }
}

/// What came back for one request.
#[derive(Debug, Clone)]
pub enum Answer {
    /// The reply object, its `id` removed.
    Reply(Map<String, Value>),
    /// The worker failed on this request; with its stderr tail.
    Failed(Failure, String),
}

/// How a worker failed a request.
#[derive(Debug, Clone)]
pub enum Failure {
    /// The process exited.
    Died,
    /// It took longer than the timeout.
    Hung,
    /// It answered with something that is not a reply to a request it holds.
    Garbage(String),
}
