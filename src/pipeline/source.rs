//! Where rows come from: files, folders, globs and object-store URLs, resolved to a list of
//! [`Input`]s with a format each.
//!
//! URLs (`s3://`, `gs://`, `az://`, `abfs://`, `http(s)://`, `file://`) go through
//! `object_store`, with credentials and endpoints from the usual environment variables
//! (`AWS_*`, `GOOGLE_*`, `AZURE_*`). A URL whose path has no row-file extension is a prefix: every
//! `.jsonl`/`.parquet` object under it is read, in key order. A `*`, `?` or `[` in a local path or
//! URL path makes it a glob.

use std::io::Read;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use bytes::Bytes;
use futures::stream::BoxStream;
use futures::{StreamExt, TryStreamExt};
use object_store::path::Path as StorePath;
use object_store::{ObjectStore, ObjectStoreExt};
use url::Url;

use crate::error::{Error, Result};

/// A row file format.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Format {
    /// One JSON object per line (the reference's row format).
    Jsonl,
    /// Apache Parquet in the row schema.
    Parquet,
}

impl Format {
    /// The format a file name's extension says, if any.
    #[allow(
        clippy::case_sensitive_file_extension_comparisons,
        reason = "the name is lower-cased first"
    )]
    pub fn from_name(name: &str) -> Option<Self> {
        let lower = name.to_ascii_lowercase();
        if lower.ends_with(".parquet") || lower.ends_with(".pq") {
            Some(Self::Parquet)
        } else if lower.ends_with(".jsonl")
            || lower.ends_with(".ndjson")
            || lower.ends_with(".json")
        {
            Some(Self::Jsonl)
        } else {
            None
        }
    }

    /// Whether a file name is an `inspect_ai` `.eval` log: a zip archive, never rows. Only
    /// `wai ingest` reads it ([`resolve_traces`]); other commands skip it in folders and refuse it
    /// when named.
    pub fn is_eval_log(name: &str) -> bool {
        name.to_ascii_lowercase().ends_with(".eval")
    }

    /// Its name in messages.
    pub fn name(self) -> &'static str {
        match self {
            Self::Jsonl => "JSON Lines",
            Self::Parquet => "Parquet",
        }
    }
}

/// What a run reads: rows (every command), or trace files (`wai ingest`, which also reads
/// `inspect_ai` `.eval` archives).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Want {
    Rows,
    Traces,
}

impl Want {
    /// The format of a file named `name`, when this run reads it.
    fn format_of(self, name: &str) -> Option<Format> {
        match Format::from_name(name) {
            Some(f) => Some(f),
            // ingest opens it itself, by its content; it is tagged JSON, never Parquet.
            None if self == Self::Traces && Format::is_eval_log(name) => Some(Format::Jsonl),
            None => None,
        }
    }
}

/// The error for an `inspect_ai` log given to a command that reads rows.
fn not_rows(display: &str) -> Error {
    Error::Usage(format!(
        "`{display}` is an inspect_ai log (a zip archive), not rows: turn it into rows with `wai ingest {display} -o rows.parquet`"
    ))
}

/// Where one input lives.
#[derive(Debug, Clone)]
pub enum Location {
    /// A local file.
    Local(PathBuf),
    /// An object in a store.
    Remote {
        /// The store.
        store: Arc<dyn ObjectStore>,
        /// The store's root URL (`s3://bucket`), as DataFusion registers it.
        root: Url,
        /// The object's path within the store.
        path: StorePath,
    },
}

/// One resolved input file.
#[derive(Debug, Clone)]
pub struct Input {
    /// How it is named in messages: the path or URL.
    pub display: String,
    /// Where it is.
    pub location: Location,
    /// Its format.
    pub format: Format,
    /// Its size in bytes, when known.
    pub size: Option<u64>,
}

/// What a local input was when a run first read it: its size, modification time and file
/// identity (device and inode), so a stage that reads its inputs twice can tell that the second
/// reading would see other rows (the file rewritten, or another file moved into its place).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Pin {
    len: u64,
    modified: Option<std::time::SystemTime>,
    file: (u64, u64),
}

impl Pin {
    fn of(path: &Path) -> Result<Self> {
        use std::os::unix::fs::MetadataExt;
        let m = std::fs::metadata(path).map_err(|e| Error::io(path, e))?;
        Ok(Self {
            len: m.len(),
            modified: m.modified().ok(),
            file: (m.dev(), m.ino()),
        })
    }
}

/// The pins of `inputs` (`None` for a remote object).
pub fn pin(inputs: &[Input]) -> Result<Vec<Option<Pin>>> {
    inputs
        .iter()
        .map(|i| match &i.location {
            Location::Local(path) => Pin::of(path).map(Some),
            Location::Remote { .. } => Ok(None),
        })
        .collect()
}

/// Refuses to go on when a local input is no longer what [`pin`] saw.
pub fn unchanged(inputs: &[Input], pins: &[Option<Pin>], stage: &str) -> Result<()> {
    for (input, pinned) in inputs.iter().zip(pins) {
        if let (Location::Local(path), Some(pinned)) = (&input.location, pinned) {
            let now = Pin::of(path)?;
            if &now != pinned {
                return Err(Error::Input {
                    stage: stage.to_owned(),
                    message: format!(
                        "`{}` changed while it was being read (its size, modification time or file is not what the first reading saw): run on a copy that does not change; nothing was written",
                        input.display
                    ),
                });
            }
        }
    }
    Ok(())
}

fn has_glob(s: &str) -> bool {
    s.contains(['*', '?', '['])
}

/// Whether `spec` is a URL we read through `object_store` (and not a Windows drive letter).
pub fn is_url(spec: &str) -> bool {
    spec.split_once("://")
        .is_some_and(|(scheme, _)| scheme.len() > 1)
}

/// Builds the object store for a URL's bucket or host, configured from the environment.
pub fn store_for(url: &Url) -> Result<(Arc<dyn ObjectStore>, Url)> {
    let store_err = |source| Error::Store {
        url: url.to_string(),
        source,
    };
    let root = Url::parse(&format!("{}://{}", url.scheme(), url.authority()))
        .map_err(|e| Error::Usage(format!("bad URL `{url}`: {e}")))?;
    let store: Arc<dyn ObjectStore> = match url.scheme() {
        "s3" | "s3a" => Arc::new(
            object_store::aws::AmazonS3Builder::from_env()
                .with_url(url.as_str())
                .build()
                .map_err(store_err)?,
        ),
        "gs" => Arc::new(
            object_store::gcp::GoogleCloudStorageBuilder::from_env()
                .with_url(url.as_str())
                .build()
                .map_err(store_err)?,
        ),
        "az" | "azure" | "abfs" | "abfss" | "adl" => Arc::new(
            object_store::azure::MicrosoftAzureBuilder::from_env()
                .with_url(url.as_str())
                .build()
                .map_err(store_err)?,
        ),
        "http" | "https" => Arc::new(
            object_store::http::HttpBuilder::new()
                .with_url(root.as_str())
                // A URL that says http:// asks for plain HTTP.
                .with_client_options(
                    object_store::ClientOptions::new().with_allow_http(url.scheme() == "http"),
                )
                .build()
                .map_err(store_err)?,
        ),
        other => {
            return Err(Error::Usage(format!(
                "unsupported URL scheme `{other}` in `{url}`; use s3, gs, az, abfs, http(s) or file"
            )));
        }
    };
    Ok((store, root))
}

fn local_format(path: &Path, want: Want) -> Result<Format> {
    let name = path.to_string_lossy();
    if let Some(f) = want.format_of(&name) {
        return Ok(f);
    }
    if Format::is_eval_log(&name) {
        return Err(not_rows(&name));
    }
    // No telling extension: sniff the first bytes.
    let mut head = [0u8; 64];
    let mut file = std::fs::File::open(path).map_err(|e| Error::io(path, e))?;
    let n = file.read(&mut head).map_err(|e| Error::io(path, e))?;
    let head = &head[..n];
    if head.starts_with(b"PAR1") {
        Ok(Format::Parquet)
    } else if head.starts_with(b"PK\x03\x04") {
        if want == Want::Traces {
            Ok(Format::Jsonl)
        } else {
            Err(not_rows(&name))
        }
    } else if crate::pipeline::io::strip_bom(head)
        .iter()
        .find(|b| !b.is_ascii_whitespace())
        == Some(&b'{')
    {
        Ok(Format::Jsonl)
    } else {
        Err(Error::Usage(format!(
            "cannot tell the format of `{}`: name it `.jsonl` or `.parquet`",
            path.display()
        )))
    }
}

/// Checks a Parquet file's frame before any reader trusts it: the magic at both ends, and a
/// footer length that fits in the file (a length past the start makes the parquet crate's
/// footer decoder panic rather than fail).
fn parquet_frame(path: &Path, size: u64) -> Result<()> {
    use std::io::{Seek, SeekFrom};
    let bad = |why: &str| Error::Input {
        stage: "read".into(),
        message: format!(
            "`{}` is not a readable Parquet file ({why})",
            path.display()
        ),
    };
    if size < 12 {
        return Err(bad("it is too short to hold a footer"));
    }
    let mut file = std::fs::File::open(path).map_err(|e| Error::io(path, e))?;
    let mut head = [0u8; 4];
    file.read_exact(&mut head).map_err(|e| Error::io(path, e))?;
    let mut tail = [0u8; 8];
    file.seek(SeekFrom::End(-8))
        .and_then(|_| file.read_exact(&mut tail))
        .map_err(|e| Error::io(path, e))?;
    if &head != b"PAR1" || &tail[4..] != b"PAR1" {
        return Err(bad(
            "it does not start and end with the Parquet magic `PAR1`",
        ));
    }
    let footer = u64::from(u32::from_le_bytes([tail[0], tail[1], tail[2], tail[3]]));
    if footer + 12 > size {
        return Err(bad(&format!(
            "its footer claims {footer} bytes of a {size}-byte file"
        )));
    }
    Ok(())
}

fn local_input(path: PathBuf, want: Want) -> Result<Input> {
    let format = local_format(&path, want)?;
    let size = std::fs::metadata(&path)
        .map_err(|e| Error::io(&path, e))?
        .len();
    if format == Format::Parquet {
        parquet_frame(&path, size)?;
    }
    Ok(Input {
        display: path.display().to_string(),
        location: Location::Local(path),
        format,
        size: Some(size),
    })
}

fn walk(dir: &Path, want: Want, out: &mut Vec<PathBuf>) -> Result<()> {
    let mut entries: Vec<PathBuf> = std::fs::read_dir(dir)
        .map_err(|e| Error::io(dir, e))?
        .map(|e| e.map(|e| e.path()).map_err(|e| Error::io(dir, e)))
        .collect::<Result<_>>()?;
    entries.sort();
    for path in entries {
        let name = path
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        if name.starts_with('.') || name.starts_with('_') {
            continue;
        }
        if path.is_dir() {
            walk(&path, want, out)?;
        } else if want.format_of(&name).is_some() {
            out.push(path);
        }
    }
    Ok(())
}

fn resolve_local(spec: &str, want: Want) -> Result<Vec<Input>> {
    let path = Path::new(spec);
    if path.is_file() {
        return Ok(vec![local_input(path.to_path_buf(), want)?]);
    }
    let mut files = Vec::new();
    if path.is_dir() {
        walk(path, want, &mut files)?;
    } else if has_glob(spec) {
        // As a shell does, `*` does not match a leading dot; and a temporary file of wai's
        // (`.NAME.XXXXXX.tmp`, an output being written or left by a killed run) is never rows.
        let options = glob::MatchOptions {
            require_literal_leading_dot: true,
            ..glob::MatchOptions::new()
        };
        let paths = glob::glob_with(spec, options)
            .map_err(|e| Error::Usage(format!("bad glob `{spec}`: {e}")))?;
        for p in paths {
            let p = p.map_err(|e| Error::io(e.path().to_path_buf(), e.into()))?;
            let temporary = p
                .file_name()
                .map(|n| n.to_string_lossy())
                .is_some_and(|n| crate::pipeline::io::is_temporary(&n));
            let skipped = want == Want::Rows && Format::is_eval_log(&p.to_string_lossy());
            if p.is_file() && !temporary && !skipped {
                files.push(p);
            }
        }
    } else {
        return Err(Error::MissingInput {
            path: spec.to_owned(),
        });
    }
    if files.is_empty() {
        return Err(Error::MissingInput {
            path: spec.to_owned(),
        });
    }
    files.into_iter().map(|p| local_input(p, want)).collect()
}

async fn resolve_url(spec: &str, want: Want) -> Result<Vec<Input>> {
    let url = Url::parse(spec).map_err(|e| Error::Usage(format!("bad URL `{spec}`: {e}")))?;
    if url.scheme() == "file" {
        let path = url
            .to_file_path()
            .map_err(|()| Error::Usage(format!("bad file URL `{spec}`")))?;
        return resolve_local(&path.to_string_lossy(), want);
    }
    let (store, root) = store_for(&url)?;
    let key = url.path().trim_start_matches('/').to_owned();
    let decoded = StorePath::from_url_path(&key)
        .map_err(|e| Error::Usage(format!("bad object path in `{spec}`: {e}")))?;
    let store_err = |source| Error::Store {
        url: spec.to_owned(),
        source,
    };
    if want == Want::Rows && Format::is_eval_log(&key) {
        return Err(not_rows(spec));
    }
    if !has_glob(&key)
        && let Some(format) = want.format_of(&key)
    {
        let size = store.head(&decoded).await.map_err(store_err)?.size;
        return Ok(vec![Input {
            display: spec.to_owned(),
            location: Location::Remote {
                store,
                root,
                path: decoded,
            },
            format,
            size: Some(size),
        }]);
    }
    // A prefix or a glob: list, keep row files, in key order.
    let (prefix, pattern) = if has_glob(&key) {
        let cut = key.find(['*', '?', '[']).unwrap_or(key.len());
        let prefix = key[..cut]
            .rsplit_once('/')
            .map_or("", |(p, _)| p)
            .to_owned();
        let pattern = glob::Pattern::new(&key)
            .map_err(|e| Error::Usage(format!("bad glob `{spec}`: {e}")))?;
        (prefix, Some(pattern))
    } else {
        (key.trim_end_matches('/').to_owned(), None)
    };
    let prefix = (!prefix.is_empty()).then(|| StorePath::from(prefix.as_str()));
    let mut objects: Vec<object_store::ObjectMeta> = store
        .list(prefix.as_ref())
        .try_collect()
        .await
        .map_err(store_err)?;
    objects.sort_by(|a, b| a.location.cmp(&b.location));
    let mut inputs = Vec::new();
    for meta in objects {
        let name = meta.location.to_string();
        let Some(format) = want.format_of(&name) else {
            continue;
        };
        if pattern.as_ref().is_some_and(|p| !p.matches(&name)) {
            continue;
        }
        inputs.push(Input {
            display: format!(
                "{}{}",
                root.as_str().trim_end_matches('/'),
                format_args!("/{name}")
            ),
            location: Location::Remote {
                store: Arc::clone(&store),
                root: root.clone(),
                path: meta.location,
            },
            format,
            size: Some(meta.size),
        });
    }
    if inputs.is_empty() {
        return Err(Error::MissingInput {
            path: spec.to_owned(),
        });
    }
    Ok(inputs)
}

/// Resolves input specs (paths, folders, globs, URLs) to row files, in the order given. An
/// `inspect_ai` `.eval` log is not rows: folders and globs skip it, and naming one is a usage error.
pub async fn resolve(specs: &[String]) -> Result<Vec<Input>> {
    resolve_as(specs, Want::Rows).await
}

/// Resolves input specs to trace files for `wai ingest`: what [`resolve`] finds, and `inspect_ai`
/// `.eval` logs (tagged JSON Lines; ingest reads each file by its content).
pub async fn resolve_traces(specs: &[String]) -> Result<Vec<Input>> {
    resolve_as(specs, Want::Traces).await
}

async fn resolve_as(specs: &[String], want: Want) -> Result<Vec<Input>> {
    let mut out = Vec::new();
    for spec in specs {
        if super::memory::is_memory(spec) {
            out.push(super::memory::input(spec)?);
        } else if is_url(spec) {
            out.extend(resolve_url(spec, want).await?);
        } else {
            out.extend(resolve_local(spec, want)?);
        }
    }
    Ok(out)
}

/// A blocking reader over an object's byte stream, for the synchronous JSONL decoder.
struct RemoteRead {
    handle: tokio::runtime::Handle,
    stream: BoxStream<'static, object_store::Result<Bytes>>,
    chunk: Bytes,
    url: String,
}

impl Read for RemoteRead {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        while self.chunk.is_empty() {
            match self.handle.block_on(self.stream.next()) {
                Some(Ok(bytes)) => self.chunk = bytes,
                Some(Err(e)) => {
                    return Err(std::io::Error::other(format!(
                        "reading `{}`: {e}",
                        self.url
                    )));
                }
                None => return Ok(0),
            }
        }
        let n = buf.len().min(self.chunk.len());
        buf[..n].copy_from_slice(&self.chunk[..n]);
        self.chunk = self.chunk.slice(n..);
        Ok(n)
    }
}

/// Opens an input's bytes for sequential reading. Remote objects stream; call this from a
/// thread that is not a runtime worker (it blocks on `handle`).
pub fn open(input: &Input, handle: &tokio::runtime::Handle) -> Result<Box<dyn Read + Send>> {
    match &input.location {
        Location::Local(path) => Ok(Box::new(
            std::fs::File::open(path).map_err(|e| Error::io(path, e))?,
        )),
        Location::Remote { store, path, .. } => {
            let result = handle
                .block_on(store.get(path))
                .map_err(|source| Error::Store {
                    url: input.display.clone(),
                    source,
                })?;
            Ok(Box::new(RemoteRead {
                handle: handle.clone(),
                stream: result.into_stream(),
                chunk: Bytes::new(),
                url: input.display.clone(),
            }))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_pinned_input_that_changes_is_refused() {
        let dir = tempfile::tempdir().expect("a temp dir");
        let path = dir.path().join("rows.jsonl");
        std::fs::write(&path, "{\"task_id\": \"a\"}\n").expect("written");
        let inputs = vec![local_input(path.clone(), Want::Rows).expect("an input")];
        let pins = pin(&inputs).expect("pinned");
        assert!(unchanged(&inputs, &pins, "select").is_ok());
        // Another file of the same size moved into its place.
        let other = dir.path().join("other.jsonl");
        std::fs::write(&other, "{\"task_id\": \"b\"}\n").expect("written");
        std::fs::rename(&other, &path).expect("moved");
        let err = unchanged(&inputs, &pins, "select").expect_err("refused");
        assert!(
            err.to_string().contains("changed while it was being read"),
            "{err}"
        );
        // Rewritten in place with the same size: the modification time says so.
        let pins = pin(&inputs).expect("pinned");
        let file = std::fs::File::options()
            .write(true)
            .open(&path)
            .expect("open");
        file.set_modified(std::time::SystemTime::now() + std::time::Duration::from_secs(5))
            .expect("touched");
        assert!(unchanged(&inputs, &pins, "select").is_err());
    }
}
