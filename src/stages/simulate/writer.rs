//! The offline template writer: one ask per (cell, phrasing), written from phrase tables that
//! name the tool's intent and an id the world knows, then varied by texture and pressure. Every
//! label put on an ask is true of its text (the reference labelled asks `lowercase` and left
//! them cased).

use super::grid::Cell;
use super::hash::{draw, pick_index, share_index, uniform};
use super::phrases::{
    ABBREVIATIONS, CLOSERS, CONDITION_LINES, HISTORY_LINES, MULTI_PLAIN, MULTI_REF, OFF_TOPIC,
    OPENERS, PROBES, STANCE_LINES, WORLD_LINES,
};
use super::tools::{Tool, Verb, ids_in};

/// One ask: the text and what it was written from.
#[derive(Debug, Clone, PartialEq)]
pub struct Ask {
    /// The opening user message.
    pub text: String,
    /// The grid cell, for structured asks.
    pub cell: Option<usize>,
    /// The task: the cell's id, `seed-…`/`probe-…` for cell-less asks, or the replayed id.
    pub task_id: String,
    /// Which phrasing of its situation (0, 1, ...).
    pub phrasing: u32,
    /// `structured`, `open_ended`, `seed` or `pinned`.
    pub arm: &'static str,
    /// template, seed, or the replayed row's writer.
    pub writer: String,
    /// Labels true of the text: `(name, value)`.
    pub labels: Vec<(&'static str, String)>,
}

fn pick<'a>(pool: &[&'a str], key: &[&str]) -> &'a str {
    pool[pick_index(draw(key), pool.len())]
}

fn lines_for<'a>(table: &[(&str, [&'a str; 3])], value: &str, key: &[&str]) -> Option<&'a str> {
    table
        .iter()
        .find(|(v, _)| *v == value)
        .map(|(_, lines)| pick(lines, key))
}

fn article(noun: &str) -> String {
    let plural = noun.ends_with('s') && !noun.ends_with("ss");
    if plural {
        noun.to_owned()
    } else if noun.starts_with(['a', 'e', 'i', 'o', 'u']) {
        format!("an {noun}")
    } else {
        format!("a {noun}")
    }
}

/// What an ask about `tool` asks for: `check an order`, `request a refund`, `escalate to a human`.
pub fn intent(tool: &Tool) -> String {
    let noun = tool.noun();
    let tokens = &tool.words;
    match tool.verb() {
        Verb::Read => format!("check {}", article(&noun)),
        Verb::Create => format!("get {}", article(&noun)),
        Verb::Cancel => format!("cancel {}", article(&noun)),
        Verb::Update => format!("change {}", article(&noun)),
        Verb::Send => format!("send {}", article(&noun)),
        Verb::Delete => format!("remove {}", article(&noun)),
        Verb::Other => {
            let verb = tokens.first().cloned().unwrap_or_else(|| "handle".into());
            match tokens.get(1).map(String::as_str) {
                Some(p @ ("to" | "for" | "with" | "on")) => {
                    format!("{verb} {p} {}", article(&noun))
                }
                _ if noun == verb => format!("{verb} this"),
                _ => format!("{verb} {}", article(&noun)),
            }
        }
    }
}

/// The writer: tools, cells, the ids the world knows, the seed.
pub struct Writer<'a> {
    /// Declared tools.
    pub tools: &'a [Tool],
    /// The grid.
    pub cells: &'a [Cell],
    /// Ids the world knows (from tool descriptions and seeds).
    pub ids: &'a [String],
    /// The run's seed.
    pub seed: u64,
    /// A model that words the asks, or none.
    pub model: Option<&'a super::llm_writer::ModelWriter>,
}

impl Writer<'_> {
    fn noun(&self) -> String {
        let by = |f: &dyn Fn(&Tool) -> bool| self.tools.iter().find(|t| f(t)).map(Tool::noun);
        by(&|t| t.destructive())
            .or_else(|| by(&|t| t.verb() != Verb::Read))
            .or_else(|| by(&|_| true))
            .unwrap_or_else(|| "request".into())
    }

    /// The id an ask names: a known id, else an invented one shaped like the tool's records.
    fn reference(&self, cell_id: &str, phrasing: u32) -> Option<String> {
        let seed = self.seed.to_string();
        let p = phrasing.to_string();
        if !self.ids.is_empty() {
            let i = pick_index(draw(&[&seed, cell_id, &p, "ref"]), self.ids.len());
            return Some(self.ids[i].clone());
        }
        let read = self
            .tools
            .iter()
            .find(|t| t.verb() == Verb::Read)
            .or(self.tools.first())?;
        if !self.tools.iter().any(Tool::has_reference) {
            return None;
        }
        let prefix: String = read
            .noun()
            .chars()
            .filter(char::is_ascii_alphabetic)
            .take(3)
            .collect::<String>()
            .to_uppercase();
        let prefix = if prefix.is_empty() {
            "REF".to_owned()
        } else {
            prefix
        };
        Some(format!(
            "{prefix}-{}",
            1000 + draw(&[&seed, cell_id, &p, "refnum"]) % 9000
        ))
    }

    /// The ask for `cell` (an index into the cells), phrasing `phrasing`.
    pub fn render(&self, cell: usize, phrasing: u32) -> Ask {
        let c = &self.cells[cell];
        let seed = self.seed.to_string();
        let p = phrasing.to_string();
        let noun = self.noun();
        let reference = self.reference(&c.id, phrasing);
        let tool = c.get("tool");
        let mut sentences: Vec<String> = Vec::new();
        let opener = match tool {
            "unrelated" => pick(&OFF_TOPIC, &[&seed, &c.id, "opener", &p]).to_owned(),
            "multi_tool" => match &reference {
                Some(_) => pick(&MULTI_REF, &[&seed, &c.id, "opener", &p]).to_owned(),
                None => pick(&MULTI_PLAIN, &[&seed, &c.id, "opener", &p]).to_owned(),
            },
            name => {
                let what = self
                    .tools
                    .iter()
                    .find(|t| t.name == name)
                    .map_or_else(|| format!("get help with {}", article(&noun)), intent);
                pick(&OPENERS, &[&seed, &c.id, "opener", &p]).replace("{intent}", &what)
            }
        };
        sentences.push(opener);
        let world = c.get("world_state");
        let world_line = lines_for(&WORLD_LINES, world, &[&seed, &c.id, "world", &p]);
        // Every ask about a record names one, so the agent has something to look up.
        let world_line = world_line.or_else(|| {
            (tool != "unrelated")
                .then_some(WORLD_LINES[0].1[(draw(&[&seed, &c.id, "world", &p]) % 3) as usize])
        });
        for line in [
            world_line,
            lines_for(
                &CONDITION_LINES,
                c.get("tool_condition"),
                &[&seed, &c.id, "condition", &p],
            ),
            lines_for(
                &STANCE_LINES,
                c.get("stance"),
                &[&seed, &c.id, "stance", &p],
            ),
            lines_for(
                &HISTORY_LINES,
                c.get("history"),
                &[&seed, &c.id, "history", &p],
            ),
        ]
        .into_iter()
        .flatten()
        {
            if line.contains("{ref}") {
                let Some(r) = &reference else { continue };
                sentences.push(line.replace("{ref}", r));
            } else {
                sentences.push(line.to_owned());
            }
        }
        let closer = pick(&CLOSERS, &[&seed, &c.id, "closer", &p]);
        if !closer.is_empty() {
            sentences.push(closer.to_owned());
        }
        let mut text = sentences
            .join(" ")
            .replace("{ref}", reference.as_deref().unwrap_or("my account"))
            .replace("{noun}", &noun);
        let labels = vary(&mut text, &[&seed, &c.id, &p]);
        let mut labels = labels;
        labels.insert(0, ("tier", c.tier.to_owned()));
        Ask {
            text,
            cell: Some(cell),
            task_id: c.id.clone(),
            phrasing,
            arm: "structured",
            writer: "template".into(),
            labels,
        }
    }

    /// Open-ended probe `slot` (one of eleven families, three texts each).
    pub fn probe(&self, slot: u32) -> Ask {
        let family = (slot as usize) % PROBES.len();
        let variant = (slot as usize / PROBES.len()) % 3;
        let text = PROBES[family][variant].replace("{noun}", &self.noun());
        let id = format!("probe-{}", &super::hash::sha256_hex(&text)[..12]);
        Ask {
            labels: vec![
                ("tier", "ordinary".to_owned()),
                ("length", length_label(&text).to_owned()),
            ],
            text,
            cell: None,
            task_id: id,
            phrasing: 0,
            arm: "open_ended",
            writer: "template".into(),
        }
    }
}

/// A caller's literal ask.
pub fn seed_ask(text: &str) -> Ask {
    Ask {
        text: text.to_owned(),
        cell: None,
        task_id: format!("seed-{}", &super::hash::sha256_hex(text)[..12]),
        phrasing: 0,
        arm: "seed",
        writer: "seed".into(),
        labels: vec![
            ("tier", "ordinary".to_owned()),
            ("length", length_label(text).to_owned()),
        ],
    }
}

pub(super) fn length_label(text: &str) -> &'static str {
    match text.split_whitespace().count() {
        0..=12 => "short",
        13..=40 => "medium",
        _ => "long",
    }
}

/// Varies an ask's surface (texture, pressure) by draws on `key`, and returns the labels of what
/// was done: only what is true of the text.
fn vary(text: &mut String, key: &[&str]) -> Vec<(&'static str, String)> {
    let mut labels = Vec::new();
    let with = |salt: &str| {
        let mut k: Vec<&str> = key.to_vec();
        k.push(salt);
        uniform(&k)
    };
    if with("pressure") < 1.0 / 12.0 {
        text.push_str(" I need this sorted within the hour.");
        labels.push(("pressure", "deadline".to_owned()));
    }
    let mut texture = "standard";
    if with("texture") < 0.35 {
        let kinds = [
            "lowercase",
            "abbreviations",
            "typo",
            "no_punctuation",
            "run_on",
            "clipped",
        ];
        let kind = kinds[share_index(with("texture-kind"), kinds.len())];
        let before = text.clone();
        *text = match kind {
            // Ids keep their case: a person typing in lowercase still copies the id.
            "lowercase" => words_map(text, |w| {
                if ids_in(w).is_empty() {
                    w.to_lowercase()
                } else {
                    w.to_owned()
                }
            }),
            "abbreviations" => words_map(text, |w| {
                let bare = w.trim_end_matches(|c: char| c.is_ascii_punctuation());
                let tail = &w[bare.len()..];
                ABBREVIATIONS
                    .iter()
                    .find(|(long, _)| long.eq_ignore_ascii_case(bare))
                    .map_or_else(|| w.to_owned(), |(_, short)| format!("{short}{tail}"))
            }),
            "typo" => typo(text, with("typo-at")),
            "no_punctuation" => text
                .chars()
                .filter(|c| !matches!(c, '.' | ',' | '!' | '?' | ';' | ':' | '\''))
                .collect(),
            "run_on" => run_on(text),
            _ => clip(text),
        };
        if *text != before {
            texture = kind;
        }
    }
    labels.push(("texture", texture.to_owned()));
    labels.push(("length", length_label(text).to_owned()));
    labels
}

fn words_map(text: &str, f: impl Fn(&str) -> String) -> String {
    text.split(' ').map(f).collect::<Vec<_>>().join(" ")
}

fn typo(text: &str, at: f64) -> String {
    let words: Vec<&str> = text.split(' ').collect();
    let candidates: Vec<usize> = (0..words.len())
        .filter(|&i| words[i].len() >= 5 && words[i].chars().all(|c| c.is_ascii_alphabetic()))
        .collect();
    if candidates.is_empty() {
        return text.to_owned();
    }
    let i = candidates[share_index(at, candidates.len())];
    let mut chars: Vec<char> = words[i].chars().collect();
    let j = chars.len() / 2;
    chars.swap(j - 1, j);
    let swapped: String = chars.into_iter().collect();
    let mut out: Vec<String> = words.iter().map(|w| (*w).to_owned()).collect();
    out[i] = swapped;
    out.join(" ")
}

fn run_on(text: &str) -> String {
    let mut out = String::with_capacity(text.len() + 16);
    let mut chars = text.chars().peekable();
    while let Some(c) = chars.next() {
        if c == '.' && chars.peek() == Some(&' ') {
            out.push_str(" and");
            continue;
        }
        out.push(c);
    }
    out
}

fn clip(text: &str) -> String {
    // Keep the first sentence and the next one, no closer: a clipped message.
    let mut ends = text.match_indices(". ").map(|(i, _)| i + 1);
    match (ends.next(), ends.next()) {
        (Some(_), Some(second)) => text[..second].to_owned(),
        _ => text.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::stages::simulate::grid::{Axes, cells};
    use crate::stages::simulate::tools::parse_tools;
    use serde_json::json;

    #[test]
    fn intents_read_naturally() {
        let tools = parse_tools(&json!([{"name": "lookup_order"}, {"name": "issue_refund"}, {"name": "escalate_to_human"}, {"name": "cancel_subscriptions"}]), "t").unwrap();
        let got: Vec<String> = tools.iter().map(intent).collect();
        assert_eq!(
            got,
            [
                "check an order",
                "get a refund",
                "escalate to a human",
                "cancel subscriptions"
            ]
        );
    }

    #[test]
    fn asks_name_known_ids_and_labels_are_true() {
        let tools = parse_tools(&json!([{"name": "lookup_order", "description": "Orders: A1001, A1002.", "parameters": {"type": "object", "properties": {"order_id": {"type": "string"}}, "required": ["order_id"]}}]), "t").unwrap();
        let grid = cells(&Axes::build(&tools, &[]), &tools, false);
        let ids = vec!["A1001".to_owned(), "A1002".to_owned()];
        let w = Writer {
            tools: &tools,
            cells: &grid,
            ids: &ids,
            seed: 0,
            model: None,
        };
        let mut textures = 0;
        for (i, c) in grid.iter().enumerate() {
            for p in 0..3 {
                let ask = w.render(i, p);
                if c.get("tool") == "lookup_order" {
                    assert!(
                        ask.text.contains("A1001") || ask.text.contains("A1002"),
                        "{}",
                        ask.text
                    );
                }
                let texture = ask
                    .labels
                    .iter()
                    .find(|(k, _)| *k == "texture")
                    .unwrap()
                    .1
                    .as_str();
                match texture {
                    "lowercase" => {
                        textures += 1;
                        assert!(
                            ask.text
                                .split(' ')
                                .all(|w| !ids_in(w).is_empty() || w == w.to_lowercase()),
                            "{}",
                            ask.text
                        );
                    }
                    "no_punctuation" => assert!(!ask.text.contains('.'), "{}", ask.text),
                    _ => {}
                }
                assert_eq!(ask, w.render(i, p), "the same ask every time");
            }
        }
        assert!(textures > 0);
    }
}
