//! JSON lines written on their own thread, whole or not at all: a file (and, line for line, a
//! file beside it), or a scratch file inside a folder built beside its destination and moved
//! into place whole once it is made.
//!
//! The lines are written a chunk at a time while the next chunks are made (the copy into the
//! page cache is a fifth of an export's time). Nothing is kept until [`LinesOut::commit`] or
//! [`LinesOut::commit_folder`]: dropped, a run leaves nothing behind.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::mpsc::SyncSender;
use std::thread::JoinHandle;

use super::io::{self, AtomicFile};
use crate::error::{Error, Result};

/// Chunks of lines (and their lines beside) in flight to the writer.
const IN_FLIGHT: usize = 16;

/// Takes each chunk of lines and its lines beside, in order.
pub type Sink = Box<dyn FnMut(Vec<u8>, Vec<u8>) -> Result<()>>;

/// Where the lines go, and the thread writing them.
pub struct LinesOut {
    /// The file, when the lines are the output.
    file: Option<AtomicFile>,
    /// The file beside it.
    beside: Option<AtomicFile>,
    /// The folder being built, and the scratch file of lines inside it.
    staging: Option<(tempfile::TempDir, tempfile::NamedTempFile)>,
    sender: Option<SyncSender<(Vec<u8>, Vec<u8>)>>,
    writer: Option<JoinHandle<Result<()>>>,
    /// What writes (`export`), for the errors of a writer that stopped.
    what: &'static str,
}

impl LinesOut {
    /// Lines to `out` and, when given, their lines beside to `beside`.
    pub fn file(out: &Path, beside: Option<&Path>, what: &'static str) -> Result<Self> {
        let file = AtomicFile::create(out)?;
        let beside = beside.map(AtomicFile::create).transpose()?;
        let handle: Box<dyn Write + Send> = Box::new(file.writer()?);
        let beside_handle: Option<(Box<dyn Write + Send>, PathBuf)> = match &beside {
            Some(f) => Some((Box::new(f.writer()?), f.path().to_path_buf())),
            None => None,
        };
        let mut lines = Self {
            file: Some(file),
            beside,
            staging: None,
            sender: None,
            writer: None,
            what,
        };
        lines.spawn(handle, out.to_path_buf(), beside_handle);
        Ok(lines)
    }

    /// Lines to a scratch file inside a folder built beside `out` (staging folders of killed
    /// runs, older than a day, go first), to be made into the folder by [`Self::commit_folder`].
    pub fn folder(out: &Path, what: &'static str) -> Result<Self> {
        let parent = match out.parent() {
            Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
            _ => PathBuf::from("."),
        };
        let prefix = format!(".{}.", file_name(out));
        io::remove_stale(&parent, &prefix);
        let building = tempfile::Builder::new()
            .prefix(&prefix)
            .tempdir_in(&parent)
            .map_err(|e| Error::io(&parent, e))?;
        let temp = tempfile::Builder::new()
            .prefix(".rows.")
            .suffix(".jsonl")
            .tempfile_in(building.path())
            .map_err(|e| Error::io(out, e))?;
        let path = temp.path().to_path_buf();
        // The scratch lines are read back and deleted, so they are not written out.
        let handle: Box<dyn Write + Send> = Box::new(
            temp.as_file()
                .try_clone()
                .map_err(|e| Error::io(&path, e))?,
        );
        let mut lines = Self {
            file: None,
            beside: None,
            staging: Some((building, temp)),
            sender: None,
            writer: None,
            what,
        };
        lines.spawn(handle, path, None);
        Ok(lines)
    }

    fn spawn(
        &mut self,
        mut handle: Box<dyn Write + Send>,
        path: PathBuf,
        mut beside: Option<(Box<dyn Write + Send>, PathBuf)>,
    ) {
        let (sender, written) = std::sync::mpsc::sync_channel::<(Vec<u8>, Vec<u8>)>(IN_FLIGHT);
        self.sender = Some(sender);
        self.writer = Some(std::thread::spawn(move || -> Result<()> {
            for (chunk, lines_beside) in written {
                handle.write_all(&chunk).map_err(|e| Error::io(&path, e))?;
                if let Some((h, p)) = beside.as_mut() {
                    h.write_all(&lines_beside).map_err(|e| Error::io(&*p, e))?;
                }
            }
            handle.flush().map_err(|e| Error::io(&path, e))?;
            if let Some((h, p)) = beside.as_mut() {
                h.flush().map_err(|e| Error::io(&*p, e))?;
            }
            Ok(())
        }));
    }

    /// Where chunks go: each chunk's lines, and its lines beside (empty without a file beside).
    /// Taken once; the writer ends when it is dropped.
    pub fn sink(&mut self) -> Sink {
        let sender = self.sender.take();
        let what = self.what;
        Box::new(move |lines, beside| match &sender {
            Some(s) if s.send((lines, beside)).is_ok() => Ok(()),
            // The writer stopped on an error: [`Self::finish`] says which.
            _ => Err(Error::Internal(format!("the {what} writer stopped"))),
        })
    }

    /// Waits for the writer to write what it was sent (the sink must be dropped first).
    ///
    /// # Errors
    /// A write failed (a full disk): the cause of any error the sink gave.
    pub fn finish(&mut self) -> Result<()> {
        self.sender = None;
        match self.writer.take() {
            Some(w) => w.join().unwrap_or_else(|_| {
                Err(Error::Internal(format!(
                    "the {} writer panicked",
                    self.what
                )))
            }),
            None => Ok(()),
        }
    }

    /// Keeps the file (the file beside first).
    pub fn commit(mut self) -> Result<()> {
        self.finish()?;
        if let Some(b) = self.beside.take() {
            b.commit()?;
        }
        match self.file.take() {
            Some(f) => f.commit(),
            None => Err(Error::Internal("no file to commit".into())),
        }
    }

    /// Makes the folder with `build` (given the scratch lines and the folder) and moves it into
    /// place at `out`, whole.
    pub fn commit_folder<T>(
        mut self,
        out: &Path,
        build: impl FnOnce(&Path, &Path) -> Result<T>,
    ) -> Result<T> {
        self.finish()?;
        let (building, temp) = self
            .staging
            .take()
            .ok_or_else(|| Error::Internal("no staging folder".into()))?;
        let made = build(temp.path(), building.path())?;
        drop(temp);
        swap_into_place(&building.keep(), out)?;
        Ok(made)
    }
}

/// The last part of `path`'s name.
fn file_name(path: &Path) -> String {
    path.file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default()
}

/// Moves the folder `built` to `out`: the old folder (if any) moves aside first and goes once
/// the new one is in.
pub fn swap_into_place(built: &Path, out: &Path) -> Result<()> {
    let old = out.with_file_name(format!(".{}.old", file_name(out)));
    let _ = std::fs::remove_dir_all(&old);
    if out.exists() {
        std::fs::rename(out, &old).map_err(|e| Error::io(out, e))?;
    }
    std::fs::rename(built, out).map_err(|e| Error::io(out, e))?;
    let _ = std::fs::remove_dir_all(&old);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_are_kept_only_when_committed() {
        let dir = tempfile::tempdir().unwrap();
        let out = dir.path().join("a.jsonl");
        let beside = dir.path().join("a.meta.jsonl");
        let mut lines = LinesOut::file(&out, Some(&beside), "test").unwrap();
        let mut sink = lines.sink();
        sink(b"1\n".to_vec(), b"m1\n".to_vec()).unwrap();
        sink(b"2\n".to_vec(), b"m2\n".to_vec()).unwrap();
        drop(sink);
        lines.commit().unwrap();
        assert_eq!(std::fs::read_to_string(&out).unwrap(), "1\n2\n");
        assert_eq!(std::fs::read_to_string(&beside).unwrap(), "m1\nm2\n");
        let dropped = dir.path().join("b.jsonl");
        let mut lines = LinesOut::file(&dropped, None, "test").unwrap();
        lines.sink()(b"x\n".to_vec(), Vec::new()).unwrap();
        lines.finish().unwrap();
        drop(lines);
        assert!(!dropped.exists());
    }

    #[test]
    fn a_folder_replaces_the_old_one_whole() {
        let dir = tempfile::tempdir().unwrap();
        let out = dir.path().join("ds");
        std::fs::create_dir(&out).unwrap();
        std::fs::write(out.join("old.txt"), "old").unwrap();
        let mut lines = LinesOut::folder(&out, "test").unwrap();
        lines.sink()(b"{}\n".to_vec(), Vec::new()).unwrap();
        let n = lines
            .commit_folder(&out, |jsonl, folder| {
                let text = std::fs::read_to_string(jsonl).unwrap();
                std::fs::write(folder.join("new.txt"), &text).unwrap();
                Ok(text.len())
            })
            .unwrap();
        assert_eq!(n, 3);
        let names: Vec<String> = std::fs::read_dir(&out)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        assert_eq!(names, ["new.txt"]);
        let left: Vec<_> = std::fs::read_dir(dir.path()).unwrap().collect();
        assert_eq!(left.len(), 1, "no staging or old folder left");
    }
}
