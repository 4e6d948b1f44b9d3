//! Outputs written whole or not at all: the temporary file beside the destination, renamed
//! into place on commit, the write-back of large outputs, and the sweep of what killed runs left.

use std::io::Write;
use std::path::{Path, PathBuf};

use crate::error::{Error, Result};

/// Whether a file name is one of wai's temporary outputs (`.NAME.XXXXXX.tmp`).
#[allow(
    clippy::case_sensitive_file_extension_comparisons,
    reason = "wai names its temporary files itself, in lower case"
)]
pub fn is_temporary(name: &str) -> bool {
    name.starts_with('.') && name.ends_with(".tmp")
}

/// How old a temporary file of wai's must be before a later run beside it removes it: older
/// than any run that could still be writing it.
const STALE: std::time::Duration = std::time::Duration::from_hours(24);

/// Removes what killed runs left in `dir`: wai's temporary files and folders whose name starts
/// with `prefix`, last changed more than a day ago. Best effort: what cannot be removed stays.
pub fn remove_stale(dir: &Path, prefix: &str) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    let now = std::time::SystemTime::now();
    for entry in entries.flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        // Only the names wai's temporary files and staging folders take: PREFIX then six
        // random characters (then `.tmp` for a file), nothing a user or a live log is called.
        let Some(rest) = name.strip_prefix(prefix) else {
            continue;
        };
        let random = rest.strip_suffix(".tmp").unwrap_or(rest);
        if random.len() != 6 || !random.bytes().all(|b| b.is_ascii_alphanumeric()) {
            continue;
        }
        let old = entry
            .metadata()
            .and_then(|m| m.modified())
            .is_ok_and(|t| now.duration_since(t).is_ok_and(|age| age > STALE));
        if !old {
            continue;
        }
        let path = entry.path();
        let removed = if path.is_dir() {
            std::fs::remove_dir_all(&path)
        } else {
            std::fs::remove_file(&path)
        };
        if removed.is_ok() {
            tracing::info!(path = %path.display(), "removed a stale temporary file of an earlier run");
        }
    }
}

/// A file written whole or not at all: a temporary file beside `path`, renamed on
/// [`AtomicFile::commit`], deleted if dropped uncommitted. Temporary files of this output that
/// killed runs left (older than a day) are removed when it starts.
pub struct AtomicFile {
    path: PathBuf,
    temp: tempfile::NamedTempFile,
}

impl AtomicFile {
    /// Starts writing `path`.
    pub fn create(path: &Path) -> Result<Self> {
        let dir = match path.parent() {
            Some(p) if !p.as_os_str().is_empty() => p,
            _ => Path::new("."),
        };
        if !dir.is_dir() {
            return Err(Error::io(
                path,
                std::io::Error::new(
                    std::io::ErrorKind::NotFound,
                    "the output's folder does not exist",
                ),
            ));
        }
        let name = path
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        let prefix = format!(".{name}.");
        remove_stale(dir, &prefix);
        let mut builder = tempfile::Builder::new();
        builder.prefix(&prefix).suffix(".tmp");
        // A finished output is an ordinary file (not the 0600 of a temporary one).
        #[cfg(unix)]
        builder.permissions(std::os::unix::fs::PermissionsExt::from_mode(0o644));
        let temp = builder.tempfile_in(dir).map_err(|e| Error::io(path, e))?;
        crate::pipeline::signals::add_temp(temp.path());
        Ok(Self {
            path: path.to_path_buf(),
            temp,
        })
    }

    /// The open temporary file.
    pub fn file(&self) -> &std::fs::File {
        self.temp.as_file()
    }

    /// A second handle on the temporary file, for writers that take ownership.
    pub fn handle(&self) -> Result<std::fs::File> {
        self.temp
            .as_file()
            .try_clone()
            .map_err(|e| Error::io(&self.path, e))
    }

    /// A handle for writing a large output front to back (see [`Writeback`]).
    pub fn writer(&self) -> Result<Writeback> {
        Writeback::new(self.handle()?, &self.path)
    }

    /// The destination path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Flushes and renames the file into place.
    pub fn commit(self) -> Result<()> {
        self.temp
            .as_file()
            .sync_all()
            .map_err(|e| Error::io(&self.path, e))?;
        crate::pipeline::signals::remove_temp(self.temp.path());
        self.temp
            .persist(&self.path)
            .map_err(|e| Error::io(&self.path, e.error))?;
        Ok(())
    }
}

/// A file handle that hands a large output's pages to the disk while it is still being written:
/// every [`Writeback::WINDOW`] bytes, a helper thread asks the system to write out what the file
/// holds so far (`fdatasync`), so the `fsync` of [`AtomicFile::commit`] finds little left to do.
/// Without it, a 1.5 GB export spent its last second waiting for the disk. The helper's errors
/// are left to that final `fsync`, which reports them.
pub struct Writeback {
    file: std::fs::File,
    kick: Option<std::sync::mpsc::SyncSender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
    since: u64,
    window: u64,
    requests: u64,
}

impl Writeback {
    /// Bytes written between two requests.
    pub const WINDOW: u64 = 64 << 20;

    /// Writes to `file` (named `path` in errors).
    pub fn new(file: std::fs::File, path: &Path) -> Result<Self> {
        Self::with_window(file, path, Self::WINDOW)
    }

    /// Writes to `file`, asking for a write-out every `window` bytes.
    pub fn with_window(file: std::fs::File, path: &Path, window: u64) -> Result<Self> {
        let helper = file.try_clone().map_err(|e| Error::io(path, e))?;
        // One request waits at most: a request made while the disk is busy is folded into it.
        let (kick, requests) = std::sync::mpsc::sync_channel::<()>(1);
        let thread = std::thread::spawn(move || {
            for () in requests {
                let _ = helper.sync_data();
            }
        });
        Ok(Self {
            file,
            kick: Some(kick),
            thread: Some(thread),
            since: 0,
            window: window.max(1),
            requests: 0,
        })
    }

    /// How many write-outs were asked for.
    pub fn requests(&self) -> u64 {
        self.requests
    }
}

impl Write for Writeback {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let n = self.file.write(buf)?;
        self.since += n as u64;
        if self.since >= self.window {
            self.since = 0;
            self.requests += 1;
            if let Some(kick) = &self.kick {
                let _ = kick.try_send(());
            }
        }
        Ok(n)
    }

    fn flush(&mut self) -> std::io::Result<()> {
        self.file.flush()
    }
}

impl Drop for Writeback {
    fn drop(&mut self) {
        drop(self.kick.take());
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn writeback_writes_everything_and_asks_for_write_outs_as_windows_fill() {
        let dir = tempfile::tempdir().expect("dir");
        let path = dir.path().join("out.jsonl");
        let out = AtomicFile::create(&path).expect("create");
        let mut w =
            Writeback::with_window(out.handle().expect("handle"), &path, 2500).expect("writeback");
        let mut line = [b'x'; 1000];
        line[999] = b'\n';
        for _ in 0..10 {
            w.write_all(&line).expect("write");
        }
        // Lines of 1,000 bytes, a request once 2,500 have gathered: at 3,000, 6,000 and 9,000.
        assert_eq!(w.requests(), 3);
        drop(w);
        out.commit().expect("commit");
        let back = std::fs::read(&path).expect("read");
        assert_eq!(back.len(), 10_000);
        assert!(back.chunks(1000).all(|c| c == line));
    }
}
