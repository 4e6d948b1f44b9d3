//! The response cache: every reply a server gave, keyed by a hash of what was asked, in one
//! `SQLite` file, so a rerun (or a run started again after `kill -9`) calls for nothing it already
//! has.
//!
//! Why `SQLite`: a real embedded database with atomic commits and a write-ahead log, so a killed
//! process leaves every committed reply readable and nothing half-written; one file a person can
//! open with any `SQLite` shell; built from source (`rusqlite`'s bundled build), so no system
//! library is needed. Each reply is committed as it arrives.
//!
//! The key is the SHA-256 of (provider, model, URL, the exact request body, sample index); no key
//! or header is part of it, and only the server's reply body is stored.
//!
//! Beside the replies, a memo maps a digest of a judge's row and settings to its first request's
//! key, so a rerun finds a row's reply without making the request again (see
//! [`crate::stages::grade::llm`]). A memo entry whose reply is gone is a miss; `clear` removes
//! both.

use std::path::{Path, PathBuf};
use std::sync::Mutex;

use rusqlite::{Connection, OptionalExtension, params};
use sha2::{Digest, Sha256};

use crate::error::{Error, Result};

/// The cache file's name in its folder.
pub const FILE: &str = "models.sqlite";

/// The cache folder when none is given: `$WAI_CACHE_DIR`, else `$XDG_CACHE_HOME/wai`, else
/// `~/.cache/wai`.
pub fn default_dir() -> PathBuf {
    if let Some(d) = std::env::var_os("WAI_CACHE_DIR").filter(|d| !d.is_empty()) {
        return PathBuf::from(d);
    }
    if let Some(d) = std::env::var_os("XDG_CACHE_HOME").filter(|d| !d.is_empty()) {
        return PathBuf::from(d).join("wai");
    }
    std::env::var_os("HOME").map_or_else(
        || PathBuf::from(".wai-cache"),
        |h| PathBuf::from(h).join(".cache").join("wai"),
    )
}

/// A request's cache key.
pub fn key(provider: &str, model: &str, url: &str, body: &[u8], sample: u32) -> [u8; 32] {
    let mut h = Sha256::new();
    for part in [provider.as_bytes(), model.as_bytes(), url.as_bytes()] {
        h.update((part.len() as u64).to_le_bytes());
        h.update(part);
    }
    h.update((body.len() as u64).to_le_bytes());
    h.update(body);
    h.update(sample.to_le_bytes());
    h.finalize().into()
}

/// A connection to the cache file, set up as every connection is.
fn connect(path: &Path) -> rusqlite::Result<Connection> {
    let db = Connection::open(path)?;
    db.busy_timeout(std::time::Duration::from_secs(30))?;
    Ok(db)
}

/// The replies the memo leads to from `rows` on `db`, in one read transaction, read through a
/// memory map (no system call a page: 6% of a cached rerun) that is let go after, so the file's
/// pages do not stay in the process's resident memory (an uncached run writes the file as it
/// grows).
fn memo_lookup(db: &Connection, rows: &[[u8; 32]]) -> rusqlite::Result<Vec<Option<Vec<u8>>>> {
    db.execute_batch("PRAGMA mmap_size = 1073741824;")?;
    let got = lookup_many(
        db,
        "SELECT r.body FROM memo m JOIN replies r ON r.key = m.reply WHERE m.row = ?1",
        rows,
    );
    db.execute_batch("PRAGMA mmap_size = 0;")?;
    got
}

/// The blob `sql` (one `?1`) finds for each of `keys`, in order, in one read transaction: one
/// snapshot for all of them, not a transaction a lookup each.
fn lookup_many(
    db: &Connection,
    sql: &str,
    keys: &[[u8; 32]],
) -> rusqlite::Result<Vec<Option<Vec<u8>>>> {
    db.execute_batch("BEGIN")?;
    let got = (|| {
        let mut stmt = db.prepare_cached(sql)?;
        keys.iter()
            .map(|k| stmt.query_row(params![&k[..]], |r| r.get(0)).optional())
            .collect()
    })();
    db.execute_batch("COMMIT")?;
    got
}

/// What the cache holds.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize)]
pub struct Stats {
    /// The cache file.
    pub path: String,
    /// Replies stored.
    pub entries: u64,
    /// Bytes of reply bodies stored.
    pub reply_bytes: u64,
    /// The file's size in bytes (with its write-ahead log).
    pub file_bytes: u64,
    /// Replies per model, most first.
    pub models: Vec<(String, u64)>,
}

/// An open cache.
pub struct Cache {
    path: PathBuf,
    db: Mutex<Connection>,
    /// A second connection for lookups split in two, opened when first needed.
    reader: Mutex<Option<Connection>>,
}

fn db_error(path: &Path, e: &rusqlite::Error) -> Error {
    Error::Io {
        path: path.to_path_buf(),
        source: std::io::Error::other(format!("the model cache: {e}")),
    }
}

impl Cache {
    /// Opens (or makes) the cache in `dir`.
    ///
    /// # Errors
    /// The folder cannot be made or the file opened (an I/O error naming it).
    pub fn open(dir: &Path) -> Result<Self> {
        std::fs::create_dir_all(dir).map_err(|e| Error::Io {
            path: dir.to_path_buf(),
            source: e,
        })?;
        let path = dir.join(FILE);
        let db = connect(&path).map_err(|e| db_error(&path, &e))?;
        db.execute_batch(
            "PRAGMA journal_mode = WAL;
                     PRAGMA synchronous = NORMAL;
                     CREATE TABLE IF NOT EXISTS replies (
                         key BLOB PRIMARY KEY,
                         provider TEXT NOT NULL,
                         model TEXT NOT NULL,
                         created INTEGER NOT NULL,
                         body BLOB NOT NULL
                     ) WITHOUT ROWID;
                     CREATE TABLE IF NOT EXISTS memo (
                         row BLOB PRIMARY KEY,
                         reply BLOB NOT NULL,
                         provider TEXT NOT NULL,
                         model TEXT NOT NULL
                     ) WITHOUT ROWID;",
        )
        .map_err(|e| db_error(&path, &e))?;
        Ok(Self {
            path,
            db: Mutex::new(db),
            reader: Mutex::new(None),
        })
    }

    /// The cache file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Connection> {
        self.db
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// The stored reply body for `key`.
    ///
    /// # Errors
    /// The database cannot be read.
    pub fn get(&self, key: &[u8; 32]) -> Result<Option<Vec<u8>>> {
        let db = self.lock();
        let mut stmt = db
            .prepare_cached("SELECT body FROM replies WHERE key = ?1")
            .map_err(|e| db_error(&self.path, &e))?;
        stmt.query_row(params![&key[..]], |r| r.get(0))
            .optional()
            .map_err(|e| db_error(&self.path, &e))
    }

    /// The stored reply bodies for `keys`, in order, looked up in one read transaction.
    ///
    /// # Errors
    /// The database cannot be read.
    pub fn get_many(&self, keys: &[[u8; 32]]) -> Result<Vec<Option<Vec<u8>>>> {
        lookup_many(
            &self.lock(),
            "SELECT body FROM replies WHERE key = ?1",
            keys,
        )
        .map_err(|e| db_error(&self.path, &e))
    }

    /// The replies the memo leads to from `rows` (digests of a judge's rows and settings, see
    /// [`crate::stages::grade::llm`]), in order, looked up in one read transaction: `None` where
    /// the memo holds no such row, or its reply is gone.
    ///
    /// # Errors
    /// The database cannot be read.
    pub fn memo_replies(&self, rows: &[[u8; 32]]) -> Result<Vec<Option<Vec<u8>>>> {
        // Two halves on two connections, each on its own core, when there are enough rows to
        // pay for it (a second connection reads under the write-ahead log beside the first).
        if rows.len() < 2048 {
            return memo_lookup(&self.lock(), rows).map_err(|e| db_error(&self.path, &e));
        }
        let reader = || {
            self.reader
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
        };
        {
            let mut r = reader();
            if r.is_none() {
                *r = Some(connect(&self.path).map_err(|e| db_error(&self.path, &e))?);
            }
        }
        let (a, b) = rows.split_at(rows.len() / 2);
        let (got, rest) = rayon::join(
            || memo_lookup(&self.lock(), a),
            || match reader().as_ref() {
                Some(second) => memo_lookup(second, b),
                None => memo_lookup(&self.lock(), b),
            },
        );
        let mut got = got.map_err(|e| db_error(&self.path, &e))?;
        got.extend(rest.map_err(|e| db_error(&self.path, &e))?);
        Ok(got)
    }

    /// Records, in one write transaction, that each row digest's first request has the reply key
    /// beside it.
    ///
    /// # Errors
    /// The database cannot be written.
    pub fn memo_put_many(
        &self,
        pairs: &[([u8; 32], [u8; 32])],
        provider: &str,
        model: &str,
    ) -> Result<()> {
        if pairs.is_empty() {
            return Ok(());
        }
        let db = self.lock();
        let write = || -> rusqlite::Result<()> {
            db.execute_batch("BEGIN IMMEDIATE")?;
            let done = (|| {
                let mut stmt = db.prepare_cached(
                    "INSERT OR REPLACE INTO memo (row, reply, provider, model) VALUES (?1, ?2, ?3, ?4)",
                )?;
                for (row, reply) in pairs {
                    stmt.execute(params![&row[..], &reply[..], provider, model])?;
                }
                Ok(())
            })();
            match done {
                Ok(()) => db.execute_batch("COMMIT"),
                Err(e) => {
                    let _ = db.execute_batch("ROLLBACK");
                    Err(e)
                }
            }
        };
        write().map_err(|e| db_error(&self.path, &e))
    }

    /// Stores `body` under `key` (committed before it returns).
    ///
    /// # Errors
    /// The database cannot be written (a full disk, say).
    pub fn put(&self, key: &[u8; 32], provider: &str, model: &str, body: &[u8]) -> Result<()> {
        let created = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| i64::try_from(d.as_secs()).unwrap_or(i64::MAX));
        let db = self.lock();
        let mut stmt = db
            .prepare_cached(
                "INSERT OR REPLACE INTO replies (key, provider, model, created, body) VALUES (?1, ?2, ?3, ?4, ?5)",
            )
            .map_err(|e| db_error(&self.path, &e))?;
        stmt.execute(params![&key[..], provider, model, created, body])
            .map_err(|e| db_error(&self.path, &e))?;
        Ok(())
    }

    /// What the cache holds.
    ///
    /// # Errors
    /// The database cannot be read.
    pub fn stats(&self) -> Result<Stats> {
        let db = self.lock();
        let fail = |e: rusqlite::Error| db_error(&self.path, &e);
        let (entries, reply_bytes): (i64, i64) = db
            .query_row(
                "SELECT COUNT(*), COALESCE(SUM(LENGTH(body)), 0) FROM replies",
                [],
                |r| Ok((r.get(0)?, r.get(1)?)),
            )
            .map_err(fail)?;
        let mut stmt = db
            .prepare("SELECT provider || ':' || model, COUNT(*) FROM replies GROUP BY 1 ORDER BY 2 DESC, 1")
            .map_err(fail)?;
        let models = stmt
            .query_map([], |r| Ok((r.get::<_, String>(0)?, r.get::<_, i64>(1)?)))
            .map_err(fail)?
            .map(|r| r.map(|(m, n)| (m, u64::try_from(n).unwrap_or(0))))
            .collect::<std::result::Result<Vec<_>, _>>()
            .map_err(fail)?;
        let size = |p: &Path| std::fs::metadata(p).map_or(0, |m| m.len());
        let wal = PathBuf::from(format!("{}-wal", self.path.display()));
        Ok(Stats {
            path: self.path.display().to_string(),
            entries: u64::try_from(entries).unwrap_or(0),
            reply_bytes: u64::try_from(reply_bytes).unwrap_or(0),
            file_bytes: size(&self.path) + size(&wal),
            models,
        })
    }

    /// Removes every stored reply and memo entry (or only those of `model`, as
    /// `provider:model`); returns how many replies.
    ///
    /// # Errors
    /// The database cannot be written.
    pub fn clear(&self, model: Option<&str>) -> Result<u64> {
        let db = self.lock();
        let n = match model {
            Some(m) => db
                .execute(
                    "DELETE FROM memo WHERE provider || ':' || model = ?1",
                    params![m],
                )
                .and_then(|_| {
                    db.execute(
                        "DELETE FROM replies WHERE provider || ':' || model = ?1",
                        params![m],
                    )
                }),
            None => db
                .execute("DELETE FROM memo", [])
                .and_then(|_| db.execute("DELETE FROM replies", [])),
        }
        .map_err(|e| db_error(&self.path, &e))?;
        db.execute_batch("PRAGMA wal_checkpoint(TRUNCATE); VACUUM;")
            .map_err(|e| db_error(&self.path, &e))?;
        Ok(n as u64)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_reply_survives_reopening_and_clear_removes_it() {
        let dir = tempfile::tempdir().unwrap();
        let k = key("openai", "m", "u", b"{}", 0);
        assert_ne!(
            k,
            key("openai", "m", "u", b"{}", 1),
            "each sample has its own key"
        );
        assert_ne!(
            k,
            key("openai", "mu", "", b"{}", 0),
            "parts are length-prefixed"
        );
        {
            let c = Cache::open(dir.path()).unwrap();
            assert_eq!(c.get(&k).unwrap(), None);
            c.put(&k, "openai", "m", b"reply").unwrap();
        }
        let c = Cache::open(dir.path()).unwrap();
        assert_eq!(c.get(&k).unwrap().as_deref(), Some(&b"reply"[..]));
        // Many at once, in order, a miss as none; the cache still writes after it.
        let other = key("openai", "m", "u", b"{}", 7);
        let got = c.get_many(&[other, k, other]).unwrap();
        assert_eq!(got, vec![None, Some(b"reply".to_vec()), None]);
        assert_eq!(c.get_many(&[]).unwrap(), Vec::<Option<Vec<u8>>>::new());
        c.put(&other, "openai", "m", b"later").unwrap();
        assert_eq!(c.get_many(&[other]).unwrap(), vec![Some(b"later".to_vec())]);
        c.clear(Some("openai:m")).unwrap();
        c.put(&k, "openai", "m", b"reply").unwrap();
        let s = c.stats().unwrap();
        assert_eq!((s.entries, s.reply_bytes), (1, 5));
        assert_eq!(s.models, vec![("openai:m".to_owned(), 1)]);
        assert_eq!(c.clear(Some("openai:other")).unwrap(), 0);
        assert_eq!(c.clear(None).unwrap(), 1);
        assert_eq!(c.get(&k).unwrap(), None);
    }

    #[test]
    fn the_memo_leads_rows_to_replies_and_is_cleared_with_its_model() {
        let dir = tempfile::tempdir().unwrap();
        let c = Cache::open(dir.path()).unwrap();
        let (r1, r2, r3, r4) = ([1u8; 32], [2u8; 32], [3u8; 32], [4u8; 32]);
        let (k1, k2) = ([11u8; 32], [12u8; 32]);
        c.put(&k1, "openai", "m", b"one").unwrap();
        c.put(&k2, "openai", "m", b"two").unwrap();
        assert_eq!(c.memo_replies(&[r1]).unwrap(), vec![None]);
        c.memo_put_many(&[(r1, k1), (r2, k2)], "openai", "m")
            .unwrap();
        c.memo_put_many(&[(r3, k1), (r4, [13u8; 32])], "openai", "other")
            .unwrap();
        c.memo_put_many(&[], "openai", "m").unwrap();
        // In order; a row the memo lacks, or whose reply is not stored, is a miss.
        assert_eq!(
            c.memo_replies(&[r2, r1, [9; 32], r4]).unwrap(),
            vec![Some(b"two".to_vec()), Some(b"one".to_vec()), None, None]
        );
        // A model's clear takes its memo and its replies; the count is of replies.
        assert_eq!(c.clear(Some("openai:m")).unwrap(), 2);
        assert_eq!(c.memo_replies(&[r1, r3]).unwrap(), vec![None, None]);
        c.put(&k1, "openai", "m", b"one").unwrap();
        assert_eq!(
            c.memo_replies(&[r1, r3]).unwrap(),
            vec![None, Some(b"one".to_vec())]
        );
        c.clear(None).unwrap();
        c.put(&k1, "openai", "m", b"one").unwrap();
        assert_eq!(c.memo_replies(&[r3]).unwrap(), vec![None]);
        // Many rows are looked up in two halves on two connections, still in order.
        let rows: Vec<[u8; 32]> = (0..3000u32)
            .map(|i| {
                let mut r = [0u8; 32];
                r[..4].copy_from_slice(&i.to_le_bytes());
                r
            })
            .collect();
        let pairs: Vec<([u8; 32], [u8; 32])> = rows
            .iter()
            .enumerate()
            .filter(|(i, _)| i % 3 != 0)
            .map(|(_, r)| (*r, k1))
            .collect();
        c.memo_put_many(&pairs, "openai", "m").unwrap();
        let got = c.memo_replies(&rows).unwrap();
        assert_eq!(got.len(), 3000);
        for (i, g) in got.iter().enumerate() {
            assert_eq!(g.is_some(), i % 3 != 0, "{i}");
        }
    }
}
