//! Conversations assembled from the log's pieces, and written as row partitions when they go
//! quiet.
//!
//! A group is the pieces tied together by a trace id or a conversation id (a conversation can
//! span traces, as `wai ingest` joins them). A group is written when nothing has joined it for
//! `--idle`, when it has been open for `--max-open`, or at shutdown. The groups due at one tick
//! are written together, a partition per day, through `wai ingest`'s own reader: the staged
//! lines are exactly what a file of the same spans would hold.

use std::collections::{BTreeMap, HashMap};
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use super::otlp::Piece;
use super::wal::{self, Layout, Marks};
use super::{Metrics, log_event};
use crate::error::{Error, Result};
use crate::pipeline::context::Context;
use crate::pipeline::ingest::{self, Destination, Options};
use crate::pipeline::source::{self, Input, Location};

/// The most bytes of log lines one partition is made from.
const PART_BYTES: u64 = 4 << 20;

/// What the log thread tells the assembler.
pub enum Event {
    /// Lines made durable: sequence number, segment, piece.
    Pieces(Vec<(u64, u64, Piece)>),
    /// A segment will get no more lines.
    Closed(u64),
}

struct Group {
    keys: Vec<String>,
    pieces: Vec<(u64, u64, Piece)>,
    opened: Instant,
    last: Instant,
    bytes: u64,
}

/// How the assembler behaves.
pub struct Settings {
    /// Quiet this long: written.
    pub idle: Duration,
    /// Open this long: written anyway.
    pub max_open: Duration,
    /// Written segments go to `raw/otlp/`.
    pub keep_raw: bool,
    /// How pieces read as rows.
    pub options: Options,
}

/// The groups, the segments they hold lines of, and the partitions written.
pub struct Assembler<'a> {
    ctx: &'a Context,
    layout: Layout,
    settings: Settings,
    metrics: Arc<Metrics>,
    marks: Marks,
    groups: HashMap<u64, Group>,
    key_group: HashMap<String, u64>,
    next_group: u64,
    /// Lines not yet written, by segment.
    open_lines: BTreeMap<u64, u64>,
    /// Segments that get no more lines.
    closed: std::collections::BTreeSet<u64>,
    /// This process's start (part names), and the parts it wrote.
    boot: String,
    parts: u64,
    /// Not before this, after a failed write.
    retry_at: Option<Instant>,
    /// The threads partitions are made on.
    pool: Option<rayon::ThreadPool>,
}

impl<'a> Assembler<'a> {
    /// An assembler with nothing open.
    pub fn new(
        ctx: &'a Context,
        layout: Layout,
        settings: Settings,
        metrics: Arc<Metrics>,
        marks: Marks,
    ) -> Self {
        Self {
            ctx,
            layout,
            settings,
            metrics,
            marks,
            groups: HashMap::new(),
            key_group: HashMap::new(),
            next_group: 0,
            open_lines: BTreeMap::new(),
            closed: std::collections::BTreeSet::new(),
            boot: chrono::Utc::now().format("%Y%m%dT%H%M%S%.3fZ").to_string(),
            parts: 0,
            retry_at: None,
            pool: rayon::ThreadPoolBuilder::new()
                .num_threads(2)
                .thread_name(|_| "wai-collect-rows".into())
                .build()
                .ok(),
        }
    }

    /// Takes an event.
    ///
    /// # Errors
    /// A segment cannot be retired.
    pub fn take(&mut self, event: Event, now: Instant) -> Result<()> {
        match event {
            Event::Pieces(pieces) => {
                for (seq, segment, piece) in pieces {
                    self.add(seq, segment, piece, now);
                }
                Ok(())
            }
            Event::Closed(segment) => {
                self.closed.insert(segment);
                self.retire()
            }
        }
    }

    fn add(&mut self, seq: u64, segment: u64, piece: Piece, now: Instant) -> u64 {
        *self.open_lines.entry(segment).or_default() += 1;
        let mut found: Vec<u64> = piece
            .keys
            .iter()
            .filter_map(|k| self.key_group.get(k).copied())
            .collect();
        found.sort_unstable();
        found.dedup();
        let id = if let Some(&first) = found.first() {
            // Every other group these keys reach joins the first.
            for other in &found[1..] {
                if let Some(g) = self.groups.remove(other) {
                    for k in &g.keys {
                        self.key_group.insert(k.clone(), first);
                    }
                    let into = self.groups.get_mut(&first).expect("found above");
                    into.keys.extend(g.keys);
                    into.pieces.extend(g.pieces);
                    into.opened = into.opened.min(g.opened);
                    into.bytes += g.bytes;
                }
            }
            first
        } else {
            let id = self.next_group;
            self.next_group += 1;
            self.groups.insert(
                id,
                Group {
                    keys: Vec::new(),
                    pieces: Vec::new(),
                    opened: now,
                    last: now,
                    bytes: 0,
                },
            );
            id
        };
        let g = self.groups.get_mut(&id).expect("made above");
        for k in &piece.keys {
            if self.key_group.insert(k.clone(), id).is_none() {
                g.keys.push(k.clone());
            }
        }
        g.last = now;
        g.bytes += piece.line.len() as u64;
        g.pieces.push((seq, segment, piece));
        self.metrics
            .open_groups
            .store(self.groups.len() as u64, Ordering::Relaxed);
        id
    }

    /// Whether nothing is open.
    pub fn is_empty(&self) -> bool {
        self.groups.is_empty()
    }

    /// Seconds since the oldest open group opened (0 with none).
    fn lag(&self, now: Instant) -> u64 {
        self.groups
            .values()
            .map(|g| now.duration_since(g.opened).as_secs())
            .max()
            .unwrap_or(0)
    }

    /// Writes the groups that are due (all of them with `all`).
    ///
    /// # Errors
    /// Only at shutdown (`all`): a partition that cannot be written (its lines stay in the log
    /// and are written by the next start). Otherwise a failed write is logged and tried again.
    pub fn tick(&mut self, now: Instant, all: bool) -> Result<()> {
        self.metrics.lag_s.store(self.lag(now), Ordering::Relaxed);
        if !all && self.retry_at.is_some_and(|t| now < t) {
            return Ok(());
        }
        let idle = self.settings.idle;
        let max_open = self.settings.max_open;
        let mut due: Vec<u64> = self
            .groups
            .iter()
            .filter(|(_, g)| {
                all || now.duration_since(g.last) >= idle
                    || now.duration_since(g.opened) >= max_open
            })
            .map(|(id, _)| *id)
            .collect();
        if due.is_empty() {
            return Ok(());
        }
        due.sort_unstable();
        let mut groups: Vec<Group> = due.iter().filter_map(|id| self.groups.remove(id)).collect();
        for g in &groups {
            for k in &g.keys {
                self.key_group.remove(k);
            }
        }
        for g in &mut groups {
            g.pieces.sort_by_key(|(seq, _, _)| *seq);
        }
        groups.sort_by_key(|g| g.pieces.first().map_or(0, |p| p.0));
        // A partition per day (of the group's first span).
        let mut days: BTreeMap<String, Vec<Group>> = BTreeMap::new();
        for g in groups {
            let start = g
                .pieces
                .iter()
                .map(|(_, _, p)| p.start_ns)
                .filter(|s| *s > 0)
                .min();
            let day = start
                .and_then(|ns| i64::try_from(ns).ok())
                .map_or_else(chrono::Utc::now, chrono::DateTime::from_timestamp_nanos)
                .format("%Y-%m-%d")
                .to_string();
            days.entry(day).or_default().push(g);
        }
        // A partition holds at most about PART_BYTES of lines: what one write holds in memory
        // stays bounded however much went quiet at once.
        let mut parts: Vec<(String, Vec<Group>)> = Vec::new();
        for (day, groups) in days {
            let mut chunk: Vec<Group> = Vec::new();
            let mut bytes = 0;
            for g in groups {
                if !chunk.is_empty() && bytes + g.bytes > PART_BYTES {
                    parts.push((day.clone(), std::mem::take(&mut chunk)));
                    bytes = 0;
                }
                bytes += g.bytes;
                chunk.push(g);
            }
            if !chunk.is_empty() {
                parts.push((day, chunk));
            }
        }
        let mut failed = None;
        for (day, groups) in parts {
            if failed.is_some() {
                self.put_back(groups);
                continue;
            }
            match self.write(&day, &groups) {
                Ok(()) => {
                    for g in &groups {
                        self.metrics
                            .buffer_bytes
                            .fetch_sub(g.bytes, Ordering::Relaxed);
                        for (_, segment, _) in &g.pieces {
                            if let Some(n) = self.open_lines.get_mut(segment) {
                                *n = n.saturating_sub(1);
                            }
                        }
                    }
                }
                Err(e) => {
                    self.metrics.write_errors.fetch_add(1, Ordering::Relaxed);
                    log_event(
                        "write_failed",
                        &serde_json::json!({"message": e.to_string(), "retry_in_s": 5}),
                    );
                    failed = Some(e);
                    self.put_back(groups);
                }
            }
        }
        self.metrics
            .open_groups
            .store(self.groups.len() as u64, Ordering::Relaxed);
        self.retire()?;
        match failed {
            Some(e) if all => Err(e),
            Some(_) => {
                self.retry_at = Some(now + Duration::from_secs(5));
                Ok(())
            }
            None => {
                self.retry_at = None;
                Ok(())
            }
        }
    }

    /// Puts groups whose write failed back, as they were (their times kept, so they are due
    /// again at the retry).
    fn put_back(&mut self, groups: Vec<Group>) {
        for g in groups {
            let mut id = None;
            for (seq, segment, piece) in g.pieces {
                // `add` counts the line again; it was counted once already.
                if let Some(n) = self.open_lines.get_mut(&segment) {
                    *n = n.saturating_sub(1);
                }
                id = Some(self.add(seq, segment, piece, g.last));
            }
            if let Some(group) = id.and_then(|id| self.groups.get_mut(&id)) {
                group.opened = group.opened.min(g.opened);
            }
        }
    }

    /// Writes one partition: the intent, the staged lines, the rows (through `wai ingest`'s
    /// reader), `done`.
    fn write(&mut self, day: &str, groups: &[Group]) -> Result<()> {
        self.parts += 1;
        let name = format!("part-{}-{:06}", self.boot, self.parts);
        let part = format!("collected/date={day}/{name}.parquet");
        let seqs: Vec<u64> = {
            let mut s: Vec<u64> = groups
                .iter()
                .flat_map(|g| g.pieces.iter().map(|p| p.0))
                .collect();
            s.sort_unstable();
            s
        };
        self.marks.intent(&part, wal::ranges(&seqs))?;
        let staged = self.layout.staging().join(format!("{name}.jsonl"));
        let mut text = Vec::with_capacity(
            groups
                .iter()
                .map(|g| g.pieces.iter().map(|p| p.2.line.len() + 1).sum::<usize>())
                .sum(),
        );
        for g in groups {
            for (_, _, p) in &g.pieces {
                text.extend_from_slice(&p.line);
                text.push(b'\n');
            }
        }
        std::fs::write(&staged, &text).map_err(|e| Error::io(&staged, e))?;
        let out: PathBuf = self.layout.lake.join(&part);
        if let Some(dir) = out.parent() {
            std::fs::create_dir_all(dir).map_err(|e| Error::io(dir, e))?;
        }
        let rejects = self.layout.rejects().join(format!("{name}.jsonl"));
        let input = Input {
            display: staged.display().to_string(),
            location: Location::Local(staged.clone()),
            format: source::Format::Jsonl,
            size: Some(text.len() as u64),
        };
        let to = Destination {
            out: &out,
            format: source::Format::Parquet,
            rejects: Some(&rejects),
        };
        let run =
            || ingest::ingest_inputs(self.ctx, &[input], &self.settings.options, &to, &|_| {});
        // On one thread of its own, so the server and the log keep a core however much goes
        // quiet at once.
        let made = match &self.pool {
            Some(pool) => pool.install(run),
            None => run(),
        };
        let got = match made {
            Ok(got) => got,
            Err(e) => {
                // The rows may have been renamed into place before the rejects failed: a
                // partition that is not done is not left behind (its lines are written again).
                let _ = std::fs::remove_file(&out);
                let _ = std::fs::remove_file(&staged);
                return Err(e);
            }
        };
        let rows = got.counts.rows;
        // The partition's name in its folder survives a power cut before `done` does.
        if let Some(dir) = out.parent() {
            let _ = wal::sync_dir(dir);
            if let Some(up) = dir.parent() {
                let _ = wal::sync_dir(up);
            }
        }
        if let Err(e) = self.marks.done(&part, rows) {
            // The partition is whole and in place: it stands (a restart finds its file and
            // takes its lines as written); only the record of it failed.
            log_event(
                "record_failed",
                &serde_json::json!({"part": part, "message": e.to_string()}),
            );
        }
        if rows == 0 {
            let _ = std::fs::remove_file(&out);
        }
        if std::fs::metadata(&rejects).is_ok_and(|m| m.len() == 0) {
            let _ = std::fs::remove_file(&rejects);
        }
        let _ = std::fs::remove_file(&staged);
        self.metrics.rows_written.fetch_add(rows, Ordering::Relaxed);
        self.metrics.parts_written.fetch_add(1, Ordering::Relaxed);
        self.metrics
            .rows_rejected
            .fetch_add(got.counts.rejected, Ordering::Relaxed);
        log_event(
            "part",
            &serde_json::json!({
                "part": if rows == 0 { serde_json::Value::Null } else { part.clone().into() },
                "rows": rows,
                "conversations_set_aside": got.counts.rejected,
                "not_rows": got.not_rows,
                "lines": seqs.len(),
            }),
        );
        Ok(())
    }

    /// Retires the closed segments none of whose lines are still open.
    fn retire(&mut self) -> Result<()> {
        let done: Vec<u64> = self
            .closed
            .iter()
            .copied()
            .filter(|s| self.open_lines.get(s).is_none_or(|n| *n == 0))
            .collect();
        for s in done {
            wal::retire(&self.layout, s, self.settings.keep_raw)?;
            self.closed.remove(&s);
            self.open_lines.remove(&s);
        }
        Ok(())
    }
}
