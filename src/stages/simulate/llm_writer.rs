//! An LLM writer (`--writer SPEC`): a model rewrites each templated ask as a person in its cell
//! would put it. The template's ask comes first and holds the facts (the id, the world state, the
//! stance); the model only words them. A line that cannot be used (empty, over 1,200
//! characters, tool markup, an id of the template's lost, another script than the template's)
//! is not used: the template's ask goes instead, counted by cause.
//!
//! Calls go through the model layer (its limits, retries, budget and cache): at temperature 0
//! each (cell, phrasing) asks the same question, so a rerun or a resumed run writes the same asks
//! for free. A call that fails falls back to the template; a run the model cannot serve (a spent
//! budget, a breaker) writes the rest from the template and says so in the notes.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, LazyLock, Mutex};

use futures::StreamExt;
use regex::Regex;

use super::grid::{AXES, Cell};
use super::writer::Ask;
use crate::error::Result;
use crate::models::{CallError, ChatRequest, Message, Model};

/// How the writer model's system prompt opens (the test model server knows its requests by it).
pub const WRITER_SYSTEM_OPENING: &str = "You write the first message a person sends";

/// The longest usable ask, in characters.
const MAX_CHARS: usize = 1200;

static ID: LazyLock<Regex> =
    LazyLock::new(|| Regex::new(r"\b[A-Z]+-?\d+\b").expect("a valid pattern"));

/// A model that words asks.
pub struct ModelWriter {
    model: Arc<Model>,
    runtime: tokio::runtime::Runtime,
    name: String,
    written: AtomicU64,
    rejected: Mutex<BTreeMap<&'static str, u64>>,
    failed: AtomicU64,
    stopped: Mutex<Option<String>>,
}

impl ModelWriter {
    /// A writer on `model`.
    ///
    /// # Errors
    /// No async runtime.
    pub fn new(model: Arc<Model>) -> Result<Self> {
        let name = model.spec().model.clone();
        Ok(Self {
            model,
            runtime: crate::models::runtime()?,
            name,
            written: AtomicU64::new(0),
            rejected: Mutex::new(BTreeMap::new()),
            failed: AtomicU64::new(0),
            stopped: Mutex::new(None),
        })
    }

    /// The model's name, as rows' `writer_model` say it.
    #[must_use]
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Each of `asks` (the template's, each for its cell) in the model's words, or as it is
    /// when they cannot be used; in order. The calls go out together, as many at once as the
    /// model's concurrency allows.
    #[must_use]
    pub fn rewrite(&self, asks: Vec<(Ask, &Cell)>) -> Vec<Ask> {
        if asks.is_empty() {
            return Vec::new();
        }
        let width = self.model.settings().concurrency;
        let n = asks.len();
        // The template's asks, kept for a runtime that cannot run.
        let kept: Vec<Ask> = asks.iter().map(|(a, _)| a.clone()).collect();
        let words: Vec<_> = asks
            .into_iter()
            .map(|(ask, cell)| self.reword(ask, cell))
            .collect();
        let work = async move {
            futures::stream::iter(words)
                .buffered(width)
                .collect::<Vec<Ask>>()
                .await
        };
        match crate::models::block_on(&self.runtime, work) {
            Ok(written) if written.len() == n => written,
            _ => {
                self.failed.fetch_add(n as u64, Ordering::Relaxed);
                kept
            }
        }
    }

    /// `ask` (the template's, for `cell`) in the model's words, or as it is when they cannot be
    /// used.
    async fn reword(&self, ask: Ask, cell: &Cell) -> Ask {
        if self.stopped.lock().is_ok_and(|s| s.is_some()) {
            return ask;
        }
        let situation: Vec<String> = AXES
            .iter()
            .map(|a| format!("{a}: {}", cell.get(a)))
            .collect();
        let req = ChatRequest {
            messages: vec![
                Message::new(
                    "system",
                    format!(
                        "{WRITER_SYSTEM_OPENING} to a support agent, in their words. Keep every fact of the message you are given (ids exactly as written, what happened, what they want, how they feel about it) and add none. Plain text, one to four sentences, in the language of the message; no greeting line of the agent's, no quotes around it, no tool calls."
                    ),
                ),
                Message::new(
                    "user",
                    format!(
                        "The situation: {}.\nThe message to rewrite:\n{}",
                        situation.join(", "),
                        ask.text
                    ),
                ),
            ],
            tools: Vec::new(),
            temperature: 0.0,
            max_tokens: 400,
            logprobs: false,
        };
        let written = match self.model.chat(&req, ask.phrasing).await {
            Ok(a) => a.reply.content.unwrap_or_default(),
            Err(CallError::Failed(_)) => {
                self.failed.fetch_add(1, Ordering::Relaxed);
                return ask;
            }
            Err(CallError::Stop(e)) => {
                if let Ok(mut s) = self.stopped.lock() {
                    s.get_or_insert_with(|| e.to_string());
                }
                return ask;
            }
        };
        match usable(&written, &ask.text) {
            Ok(text) => {
                self.written.fetch_add(1, Ordering::Relaxed);
                // The model wrote its own texture (typos, case): the template's is not the text's.
                let mut labels = ask.labels;
                labels.retain(|(name, _)| *name != "texture");
                for (name, value) in &mut labels {
                    if *name == "length" {
                        super::writer::length_label(&text).clone_into(value);
                    }
                }
                Ask {
                    text,
                    writer: self.name.clone(),
                    labels,
                    ..ask
                }
            }
            Err(why) => {
                if let Ok(mut r) = self.rejected.lock() {
                    *r.entry(why).or_insert(0) += 1;
                }
                ask
            }
        }
    }

    /// What a person should know after the run.
    #[must_use]
    pub fn notes(&self) -> Vec<String> {
        let t = self.model.tally();
        let rejected = self.rejected.lock().map(|r| r.clone()).unwrap_or_default();
        let mut notes = vec![format!(
            "writer {}: {} asks in its words; {} it wrote could not be used{} and {} calls failed, so the template wrote those; {} requests, {} replies from the cache",
            self.name,
            self.written.load(Ordering::Relaxed),
            rejected.values().sum::<u64>(),
            if rejected.is_empty() {
                String::new()
            } else {
                format!(
                    " ({})",
                    rejected
                        .iter()
                        .map(|(k, n)| format!("{n} {k}"))
                        .collect::<Vec<_>>()
                        .join(", ")
                )
            },
            self.failed.load(Ordering::Relaxed),
            t.requests,
            t.cached
        )];
        if let Some(why) = self.stopped.lock().ok().and_then(|s| s.clone()) {
            notes.push(format!(
                "writer {}: stopped ({why}); the template wrote the asks after that",
                self.name
            ));
        }
        notes
    }
}

/// The model's ask, cleaned, or why it cannot be used in place of `template`.
fn usable(written: &str, template: &str) -> std::result::Result<String, &'static str> {
    let text = super::user::strip_think(written);
    let text = text.trim().trim_matches('"').trim();
    if text.is_empty() {
        return Err("empty");
    }
    if text.chars().count() > MAX_CHARS {
        return Err("too long");
    }
    if super::model::looks_like_markup(text) {
        return Err("tool markup");
    }
    if ID.find_iter(template).any(|id| !text.contains(id.as_str())) {
        return Err("an id lost");
    }
    if latin_share(template) >= 0.9 && latin_share(text) < 0.9 {
        return Err("another script");
    }
    Ok(text.to_owned())
}

/// The share of a text's letters that are ASCII.
#[allow(clippy::cast_precision_loss, reason = "letter counts")]
fn latin_share(text: &str) -> f64 {
    let (mut ascii, mut all) = (0usize, 0usize);
    for c in text.chars().filter(|c| c.is_alphabetic()) {
        all += 1;
        ascii += usize::from(c.is_ascii());
    }
    if all == 0 {
        1.0
    } else {
        ascii as f64 / all as f64
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_written_ask_keeps_the_templates_facts() {
        let template = "Please refund order A1002, it arrived broken.";
        assert_eq!(
            usable(
                "  \"Hi, my order A1002 came broken, refund it please.\" ",
                template
            ),
            Ok("Hi, my order A1002 came broken, refund it please.".to_owned())
        );
        assert_eq!(usable("", template), Err("empty"));
        assert_eq!(
            usable("Refund my order please.", template),
            Err("an id lost")
        );
        assert_eq!(
            usable(
                "<tool_call>{\"name\": \"refund\"}</tool_call> A1002",
                template
            ),
            Err("tool markup")
        );
        assert_eq!(
            usable("Пожалуйста, верните деньги за заказ A1002.", template),
            Err("another script")
        );
        assert_eq!(usable(&"A1002 ".repeat(300), template), Err("too long"));
    }
}
