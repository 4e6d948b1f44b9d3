//! Text embedders for the semantic decontamination rule: vectors precomputed in the rows
//! (`column:NAME`, read from `extra.NAME`), any program over a JSON Lines pipe (`cmd:COMMAND`),
//! or an OpenAI-compatible `/embeddings` endpoint (`openai:MODEL@URL`, the key from
//! `OPENAI_API_KEY` when set; it never lands in a row or a log line).
//!
//! Command protocol: one request per line on stdin, `{"id": N, "texts": ["...", ...]}`; one reply
//! per line on stdout, `{"id": N, "vectors": [[0.1, ...], ...]}` with one vector per text, in
//! order. A reply that is late past the timeout, malformed, or has the wrong number of vectors
//! stops the run with an error naming the command and the tail of its stderr.

use std::io::{BufRead, BufReader, Write};
use std::process::{Child, ChildStdin, Command as Process, Stdio};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError};
use std::time::Duration;

use serde_json::{Value, json};

use crate::error::{Error, Result};
use crate::pipeline::pipe::{Tail, keep_tail, tail_text};

/// How an embedder is given.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Spec {
    /// Vectors in `extra.NAME` of each row.
    Column(String),
    /// A program over the pipe.
    Command(String),
    /// An OpenAI-compatible endpoint: the model and the base URL.
    OpenAi {
        /// The model name.
        model: String,
        /// The base URL (`.../v1`) or the full `/embeddings` URL.
        url: String,
    },
}

impl Spec {
    /// Parses `column:NAME`, `cmd:COMMAND` or `openai:MODEL@URL`.
    ///
    /// # Errors
    /// Another form (an error of the option `embedder`).
    pub fn parse(text: &str) -> Result<Self> {
        match text.split_once(':') {
            Some(("column", name)) if !name.trim().is_empty() => {
                Ok(Self::Column(name.trim().to_owned()))
            }
            Some(("cmd", command)) if !command.trim().is_empty() => {
                Ok(Self::Command(command.trim().to_owned()))
            }
            Some(("openai", rest)) => match rest.split_once('@') {
                Some((model, url)) if !model.is_empty() && url.starts_with("http") => {
                    Ok(Self::OpenAi {
                        model: model.to_owned(),
                        url: url.to_owned(),
                    })
                }
                _ => Err(Error::option(
                    "embedder",
                    format!(
                        "`{text}`: write `openai:MODEL@URL`, e.g. `openai:text-embedding-3-small@https://api.openai.com/v1`"
                    ),
                )),
            },
            _ => Err(Error::option(
                "embedder",
                format!(
                    "`{text}`: write `column:NAME` (vectors in each row's extra.NAME), `cmd:COMMAND` (texts in, vectors out over JSON Lines) or `openai:MODEL@URL`"
                ),
            )),
        }
    }
}

/// A model that turns texts into unit vectors: a program over a pipe ([`CommandEmbedder`]), an
/// HTTP endpoint ([`EndpointEmbedder`]), or anything else a caller brings.
pub trait Embed {
    /// The unit vectors of `texts`, one per text, in order.
    ///
    /// # Errors
    /// The model failed or answered out of shape.
    fn embed(&mut self, texts: &[String]) -> Result<Vec<Vec<f32>>>;
}

/// Where the semantic rule's vectors come from.
pub enum Embedder {
    /// Precomputed, in each row's `extra.NAME`.
    Column(String),
    /// A model the caller started.
    Model(Box<dyn Embed + Send>),
}

impl std::fmt::Debug for Embedder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Column(name) => write!(f, "Column({name:?})"),
            Self::Model(_) => f.write_str("Model(..)"),
        }
    }
}

/// `xs` as `f32`s, if every one is a number.
fn numbers(xs: &[Value]) -> Option<Vec<f32>> {
    #[allow(
        clippy::cast_possible_truncation,
        reason = "embeddings are f32; an f64 from JSON is rounded to it"
    )]
    xs.iter().map(|x| x.as_f64().map(|x| x as f32)).collect()
}

/// The vector in `extra` JSON text under `name`, if it is a list of numbers.
pub fn vector_of(extra: Option<&str>, name: &str) -> Option<Vec<f32>> {
    let v: Value = serde_json::from_str(extra?).ok()?;
    numbers(v.get(name)?.as_array()?)
}

/// A running command embedder.
pub struct CommandEmbedder {
    command: String,
    child: Child,
    /// Requests go to a writer thread, so a program that stops reading cannot block the run
    /// past the timeout.
    requests: Option<mpsc::Sender<String>>,
    lines: Receiver<std::io::Result<String>>,
    stderr: Tail,
    timeout: Duration,
    next_id: u64,
}

impl CommandEmbedder {
    /// Starts `command` under `sh -c`.
    ///
    /// # Errors
    /// The program does not start.
    pub fn start(command: &str, timeout: Duration) -> Result<Self> {
        let mut child = Process::new("sh")
            .arg("-c")
            .arg(command)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .map_err(|e| Error::Usage(format!("embedder `{command}` does not start: {e}")))?;
        let mut stdin: ChildStdin = child
            .stdin
            .take()
            .ok_or_else(|| Error::Internal("no stdin".into()))?;
        let (requests, pending) = mpsc::channel::<String>();
        std::thread::spawn(move || {
            for request in pending {
                if writeln!(stdin, "{request}")
                    .and_then(|()| stdin.flush())
                    .is_err()
                {
                    break;
                }
            }
        });
        let stdout = child
            .stdout
            .take()
            .ok_or_else(|| Error::Internal("no stdout".into()))?;
        let err = child
            .stderr
            .take()
            .ok_or_else(|| Error::Internal("no stderr".into()))?;
        let (tx, lines) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        let (stderr, _) = keep_tail(err);
        Ok(Self {
            command: command.to_owned(),
            child,
            requests: Some(requests),
            lines,
            stderr,
            timeout,
            next_id: 0,
        })
    }

    fn fail(&self, what: &str) -> Error {
        let tail = tail_text(&self.stderr);
        Error::Usage(format!(
            "embedder `{}`: {what}{}",
            self.command,
            if tail.is_empty() {
                String::new()
            } else {
                format!(" (stderr: {tail})")
            }
        ))
    }

    /// The unit vectors of `texts`, in order.
    ///
    /// # Errors
    /// The program died, was late, or answered out of protocol.
    pub fn embed(&mut self, texts: &[String]) -> Result<Vec<Vec<f32>>> {
        if texts.is_empty() {
            return Ok(Vec::new());
        }
        let id = self.next_id;
        self.next_id += 1;
        let request = json!({"id": id, "texts": texts}).to_string();
        let sent = self
            .requests
            .as_ref()
            .is_some_and(|r| r.send(request).is_ok());
        if !sent {
            return Err(self.fail("no longer takes requests"));
        }
        let line = match self.lines.recv_timeout(self.timeout) {
            Ok(Ok(line)) => line,
            Ok(Err(e)) => return Err(self.fail(&format!("unreadable reply: {e}"))),
            Err(RecvTimeoutError::Timeout) => {
                return Err(self.fail(&format!(
                    "no reply within {:.0} s for {} texts",
                    self.timeout.as_secs_f64(),
                    texts.len()
                )));
            }
            Err(RecvTimeoutError::Disconnected) => {
                return Err(self.fail("exited before replying"));
            }
        };
        let reply: Value = serde_json::from_str(&line)
            .map_err(|e| self.fail(&format!("reply is not JSON ({e}): {line:.200}")))?;
        if reply.get("id").and_then(Value::as_u64) != Some(id) {
            return Err(self.fail(&format!("reply has no `id` {id}: {line:.200}")));
        }
        let vectors = reply
            .get("vectors")
            .and_then(Value::as_array)
            .ok_or_else(|| self.fail("reply has no `vectors` list"))?;
        if vectors.len() != texts.len() {
            return Err(self.fail(&format!(
                "{} vectors for {} texts",
                vectors.len(),
                texts.len()
            )));
        }
        vectors
            .iter()
            .map(|v| {
                v.as_array()
                    .and_then(|xs| numbers(xs))
                    .map(crate::stages::decontaminate::unit)
                    .ok_or_else(|| self.fail("a vector is not a list of numbers"))
            })
            .collect()
    }
}

/// An embeddings endpoint, through the model layer ([`crate::models`]): one shared client,
/// retries with backoff, the response cache, keys kept out of every message.
pub struct EndpointEmbedder {
    model: crate::models::Model,
    handle: tokio::runtime::Handle,
}

impl EndpointEmbedder {
    /// A client for `model` at `url` (`.../v1`, or the full `.../embeddings`), the key from
    /// `OPENAI_API_KEY` when set, calling as `settings` say.
    ///
    /// # Errors
    /// Plain http to another host, or a cache that cannot be opened.
    pub fn new(
        model: &str,
        url: &str,
        settings: crate::models::Settings,
        handle: tokio::runtime::Handle,
    ) -> Result<Self> {
        let base = url.trim().trim_end_matches('/');
        let base = base.strip_suffix("/embeddings").unwrap_or(base);
        let spec = crate::models::ModelSpec {
            provider: crate::models::Provider::OpenAi,
            model: model.to_owned(),
            base_url: base.to_owned(),
            text: format!("openai:{model}@{url}"),
        };
        Ok(Self {
            model: crate::models::Model::new(spec, settings)?,
            handle,
        })
    }

    /// The unit vectors of `texts`, in order. It blocks on the runtime it was given: call it
    /// outside that runtime's tasks (as `wai decontaminate` does, between batches).
    ///
    /// # Errors
    /// The endpoint fails after its retries (exit 69), refuses, or answers out of shape.
    pub fn embed(&mut self, texts: &[String]) -> Result<Vec<Vec<f32>>> {
        if texts.is_empty() {
            return Ok(Vec::new());
        }
        let vectors = self
            .handle
            .block_on(self.model.embed(texts))
            .map_err(|e| match e {
                crate::models::CallError::Failed(m) => {
                    Error::Unavailable(format!("embedder `{}`: {m}", self.model.spec().text))
                }
                crate::models::CallError::Stop(e) => e,
            })?;
        Ok(vectors
            .into_iter()
            .map(crate::stages::decontaminate::unit)
            .collect())
    }
}

impl Embed for CommandEmbedder {
    fn embed(&mut self, texts: &[String]) -> Result<Vec<Vec<f32>>> {
        CommandEmbedder::embed(self, texts)
    }
}

impl Embed for EndpointEmbedder {
    fn embed(&mut self, texts: &[String]) -> Result<Vec<Vec<f32>>> {
        EndpointEmbedder::embed(self, texts)
    }
}

impl Drop for CommandEmbedder {
    fn drop(&mut self) {
        self.requests = None;
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn specs_parse() {
        assert_eq!(
            Spec::parse("column:emb").unwrap(),
            Spec::Column("emb".into())
        );
        assert_eq!(
            Spec::parse("cmd:python e.py").unwrap(),
            Spec::Command("python e.py".into())
        );
        assert!(Spec::parse("e.py").is_err());
        assert_eq!(
            Spec::parse("openai:m@http://127.0.0.1:9/v1").unwrap(),
            Spec::OpenAi {
                model: "m".into(),
                url: "http://127.0.0.1:9/v1".into()
            }
        );
        assert!(Spec::parse("openai:m").is_err());
    }

    #[test]
    fn vectors_read_from_extra() {
        assert_eq!(
            vector_of(Some(r#"{"emb": [1, 0.5]}"#), "emb"),
            Some(vec![1.0, 0.5])
        );
        assert_eq!(vector_of(Some(r#"{"emb": "x"}"#), "emb"), None);
        assert_eq!(vector_of(None, "emb"), None);
    }
}
