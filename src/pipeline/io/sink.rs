//! Where batches go: the [`Sink`] trait, and [`Background`], which runs a sink on its own thread.

use datafusion::arrow::array::RecordBatch;

use crate::error::{Error, Result};

/// Where batches go.
pub trait Sink: Send {
    /// Writes one batch of the row schema.
    fn write(&mut self, batch: &RecordBatch) -> Result<()>;
    /// Completes the output (renames it into place).
    fn finish(self: Box<Self>) -> Result<()>;
}

/// Runs another sink on its own thread, so encoding and compressing one batch overlaps reading
/// the next. Batches queue up to [`Background::QUEUE`] deep; the first error stops the writer and
/// comes back from the next `write` or from `finish`.
pub struct Background {
    sender: Option<std::sync::mpsc::SyncSender<Job>>,
    thread: Option<std::thread::JoinHandle<Result<()>>>,
}

/// What the writer thread is told.
enum Job {
    /// Write this batch.
    Write(RecordBatch),
    /// Complete the output. A writer whose channel closes without it drops its output unfinished,
    /// so a failed run leaves no file behind.
    Finish,
}

impl Background {
    /// Batches waiting for the writer at most.
    pub const QUEUE: usize = 4;

    /// Starts `inner` on a writer thread.
    pub fn spawn(mut inner: Box<dyn Sink>) -> Self {
        let (sender, receiver) = std::sync::mpsc::sync_channel::<Job>(Self::QUEUE);
        let thread = std::thread::spawn(move || {
            for job in receiver {
                match job {
                    Job::Write(batch) => inner.write(&batch)?,
                    Job::Finish => return inner.finish(),
                }
            }
            Ok(())
        });
        Self {
            sender: Some(sender),
            thread: Some(thread),
        }
    }

    fn join(&mut self) -> Result<()> {
        self.sender = None;
        match self.thread.take() {
            Some(t) => t
                .join()
                .map_err(|_| Error::Internal("the writer thread panicked".into()))?,
            None => Ok(()),
        }
    }
}

impl Sink for Background {
    fn write(&mut self, batch: &RecordBatch) -> Result<()> {
        let sent = self
            .sender
            .as_ref()
            .is_some_and(|s| s.send(Job::Write(batch.clone())).is_ok());
        if sent {
            return Ok(());
        }
        // The writer stopped: its error says why.
        self.join()?;
        Err(Error::Internal(
            "the writer thread stopped without an error".into(),
        ))
    }

    fn finish(mut self: Box<Self>) -> Result<()> {
        if let Some(s) = &self.sender {
            // A closed channel means the writer already stopped; `join` returns its error.
            let _ = s.send(Job::Finish);
        }
        self.join()
    }
}

impl Drop for Background {
    fn drop(&mut self) {
        // Unfinished (an error elsewhere): stop the writer; its temporary file is removed.
        self.sender = None;
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::{Arc, Mutex};

    use super::*;
    use crate::pipeline::row::testing::{batch_of, fixture};

    /// Counts what it is given, and fails on a batch of one row.
    struct Counting(Arc<Mutex<(usize, bool)>>);

    impl Sink for Counting {
        fn write(&mut self, batch: &RecordBatch) -> Result<()> {
            if batch.num_rows() == 1 {
                return Err(crate::error::Error::Internal("one row".into()));
            }
            self.0.lock().expect("lock").0 += batch.num_rows();
            Ok(())
        }

        fn finish(self: Box<Self>) -> Result<()> {
            self.0.lock().expect("lock").1 = true;
            Ok(())
        }
    }

    #[test]
    fn background_writes_every_batch_then_finishes_and_its_errors_come_back() {
        let batch = batch_of(fixture("example_rows.jsonl"));
        let seen = Arc::new(Mutex::new((0, false)));
        let mut sink = Box::new(Background::spawn(Box::new(Counting(Arc::clone(&seen)))));
        sink.write(&batch).expect("written");
        sink.write(&batch).expect("written");
        sink.finish().expect("finished");
        assert_eq!(*seen.lock().expect("lock"), (2 * batch.num_rows(), true));
        let failing = Arc::new(Mutex::new((0, false)));
        let mut sink = Box::new(Background::spawn(Box::new(Counting(Arc::clone(&failing)))));
        let one = batch.slice(0, 1);
        let _ = sink.write(&one);
        assert!(sink.finish().is_err(), "the writer's error comes back");
        assert!(
            !failing.lock().expect("lock").1,
            "a failed output is not finished"
        );
    }
}
