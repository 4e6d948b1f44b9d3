//! Scratch space: a folder per run under the system's temporary folder, locked while in use.

use crate::error::{Error, Result};

/// A scratch folder under the system's temporary folder, removed when dropped. While a run
/// holds it, it holds a lock on `.lock` inside it, so a later run can tell a killed run's
/// scratch folder (left behind, its lock free) from a live one and remove it.
#[derive(Debug)]
pub struct Scratch {
    dir: tempfile::TempDir,
    _lock: std::fs::File,
}

impl Scratch {
    /// The folder.
    pub fn path(&self) -> &std::path::Path {
        self.dir.path()
    }

    /// Creates file `name` in the folder, for reading and writing: an error if it is there.
    pub fn create(&self, name: &str) -> Result<(std::path::PathBuf, std::fs::File)> {
        let path = self.path().join(name);
        let file = std::fs::File::options()
            .read(true)
            .write(true)
            .create_new(true)
            .open(&path)
            .map_err(|e| Error::io(&path, e))?;
        Ok((path, file))
    }
}

/// Makes a [`Scratch`] folder, first removing those killed runs left (`wai-*` folders whose
/// lock nobody holds).
pub fn scratch() -> Result<Scratch> {
    let tmp = std::env::temp_dir();
    if let Ok(entries) = std::fs::read_dir(&tmp) {
        for entry in entries.flatten() {
            let path = entry.path();
            // A folder made in the last minute may be a run between making it and locking it.
            let young = entry
                .metadata()
                .and_then(|m| m.modified())
                .is_ok_and(|t| t.elapsed().is_ok_and(|age| age.as_secs() < 60));
            let ours =
                entry.file_name().to_string_lossy().starts_with("wai-") && path.is_dir() && !young;
            let Ok(lock) = std::fs::File::open(path.join(".lock")) else {
                continue;
            };
            if ours && lock.try_lock().is_ok() {
                drop(lock);
                if std::fs::remove_dir_all(&path).is_ok() {
                    tracing::info!(path = %path.display(), "removed the scratch folder of a killed run");
                }
            }
        }
    }
    let dir = tempfile::Builder::new()
        .prefix("wai-")
        .tempdir()
        .map_err(|e| Error::io(&tmp, e))?;
    let lock_path = dir.path().join(".lock");
    let lock = std::fs::File::create(&lock_path).map_err(|e| Error::io(&lock_path, e))?;
    lock.lock().map_err(|e| Error::io(&lock_path, e))?;
    // A signal removes it too.
    crate::pipeline::signals::add_temp(dir.path());
    Ok(Scratch { dir, _lock: lock })
}
