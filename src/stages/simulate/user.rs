//! The person a model agent talks to: when they speak again, when they walk away, and what they
//! say when no model plays them (the offline template user).
//!
//! A rollout's length is a budget of agent turns drawn per rollout around `--avg-turns` and
//! capped by `--max-turns` (the reference's turn budget, `../shared/spec/models.md` §3.4). After
//! a reply in words, the person answers a question, pushes back on a refusal, or reacts, with
//! the reference's odds (§3.7.1); at the second and later questions of a thread they may walk
//! away instead, with the odds of their patience (§3.7.2), and the row says `ended_by:
//! user_left`.
//!
//! Where wai differs from the reference: every draw is keyed by the run's seed and the rollout
//! (the reference keyed the person's draws by the ask's text alone, so the k rollouts of an ask
//! met the same person and their pass^k was less than k tries; and its turn budget followed a
//! running mean of the rows landed so far, so it depended on scheduling). The same seed gives the
//! same people at any concurrency.

use std::sync::LazyLock;

use regex::Regex;

use super::hash::{draw, pick_index, uniform};

/// The patience levels and their walk-away odds at the second and at later questions.
pub const PATIENCE_LEVELS: [(&str, f64, f64); 3] = [
    ("short", 0.6, 0.9),
    ("normal", 0.35, 0.6),
    ("endless", 0.0, 0.0),
];

/// How likely the person is to walk away when the agent asks again.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Patience {
    /// The chance at the thread's second question.
    pub second: f64,
    /// The chance at each later one.
    pub later: f64,
}

impl Default for Patience {
    fn default() -> Self {
        Self {
            second: 0.35,
            later: 0.6,
        }
    }
}

impl Patience {
    /// A level (`short`, `normal`, `endless`) or the two chances, `SECOND,LATER`.
    ///
    /// # Errors
    /// Anything else, in words that say what to write.
    pub fn parse(text: &str) -> std::result::Result<Self, String> {
        let t = text.trim().to_ascii_lowercase();
        if let Some((_, second, later)) = PATIENCE_LEVELS.iter().find(|(n, _, _)| *n == t) {
            return Ok(Self {
                second: *second,
                later: *later,
            });
        }
        let chance = |s: &str| {
            s.trim()
                .parse::<f64>()
                .ok()
                .filter(|p| (0.0..=1.0).contains(p))
        };
        match t.split_once(',') {
            Some((a, b)) => match (chance(a), chance(b)) {
                (Some(second), Some(later)) => Ok(Self { second, later }),
                _ => Err(format!(
                    "`{text}`: the two walk-away chances are shares in [0, 1], as in `0.35,0.6`"
                )),
            },
            None => Err(format!(
                "`{text}` is not a patience: use short, normal or endless, or the walk-away chances at the second and later questions, as in `0.35,0.6`"
            )),
        }
    }

    /// Whether the person may walk away at all.
    #[must_use]
    pub fn may_leave(self) -> bool {
        self.second > 0.0 || self.later > 0.0
    }

    /// The chance of walking away at a question after `questions` earlier ones: the first is
    /// always answered.
    fn hazard(self, questions: usize) -> f64 {
        match questions {
            0 => 0.0,
            1 => self.second,
            _ => self.later,
        }
    }
}

/// The largest turn budget by default, for an agent with `n_tools` tools: what a 4,096-token
/// context holds after the tool schemas, between 8 and 40 turns (the reference's rule).
#[must_use]
pub fn default_max_turns(n_tools: usize) -> usize {
    let reserved = 2048 + (64 * n_tools).min(1536);
    (4096usize.saturating_sub(reserved).max(1) / 128).clamp(8, 40)
}

/// Python's `round`: halves to even.
#[allow(
    clippy::cast_possible_truncation,
    clippy::cast_sign_loss,
    reason = "a turn count in [1, 10_000]"
)]
fn round_half_even(x: f64) -> usize {
    x.clamp(0.0, 10_000.0).round_ties_even() as usize
}

/// The agent turns one rollout may take: drawn by `u` (in `0..1000`) around `avg`, at most
/// `max_turns`, even and at least 2 (the reference's `sample_turn_budget` without its running
/// mean); 1 when `avg` is 1 or less.
#[must_use]
pub fn turn_budget(u: u64, max_turns: usize, avg: f64) -> usize {
    if avg <= 1.0 || max_turns <= 1 {
        return 1;
    }
    let u = usize::try_from(u % 1000).unwrap_or(0);
    let cap = max_turns.max(2);
    let center = round_half_even(avg).clamp(2, cap);
    let mid_lo = center.saturating_sub(2).max(2);
    let mid_hi = cap.min(mid_lo.max(center + 2));
    let short_hi = mid_lo - 1;
    let tail_lo = cap.min(mid_hi + 1);
    let want = if avg <= 3.5 {
        if u < 600 {
            2 + u % 3
        } else if u < 900 {
            5 + u % 4
        } else {
            9 + u % cap.saturating_sub(8).max(1)
        }
    } else if u < 150 && short_hi >= 2 {
        2 + u % (short_hi - 1).max(1)
    } else if u < 900 {
        mid_lo + u % (mid_hi - mid_lo + 1)
    } else {
        tail_lo + u % (cap + 1).saturating_sub(tail_lo).max(1)
    };
    let want = want + want % 2;
    let even_cap = if cap >= 2 { cap - cap % 2 } else { cap };
    want.min(even_cap).max(2)
}

/// The most times the person speaks in a rollout of `budget` agent turns.
#[must_use]
pub fn user_turn_cap(budget: usize) -> usize {
    (budget / 2).max(2)
}

static REFUSAL: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r"(?i)\b(can't|can’t|cannot|won't|won’t|unable|not allowed|against (the )?(policy|policies|rules?))\b")
        .expect("a valid pattern")
});

static CONFIRMATION: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r"(?i)(yes/no|yes or no|please confirm|confirm (if|whether|that)|shall i (proceed|go ahead)|would you like (me )?to proceed|do you want me to [^?]*\?|proceed with the [^?]*\?|should i go ahead)")
        .expect("a valid pattern")
});

static ID: LazyLock<Regex> =
    LazyLock::new(|| Regex::new(r"\b[A-Z]+-?\d+\b|#\d+\b").expect("a valid pattern"));

static LEAVES: LazyLock<Regex> =
    LazyLock::new(|| Regex::new(r"(?i)^\W*leaves\W*$").expect("a valid pattern"));

/// The words the agent starts with when it is about to act rather than done.
const PREAMBLES: [&str; 10] = [
    "sure",
    "ok",
    "okay",
    "got it",
    "let me",
    "i will",
    "i'll",
    "one sec",
    "one moment",
    "hang on",
];

/// A short line that announces work rather than reports it ("Sure, let me check."): the agent
/// gets another turn before the person speaks.
#[must_use]
pub fn looks_unfinished(line: &str) -> bool {
    let words: Vec<&str> = line.split_whitespace().collect();
    if words.is_empty() || words.len() > 24 {
        return false;
    }
    let head = words[..words.len().min(8)].join(" ").to_lowercase();
    PREAMBLES.iter().any(|p| {
        head.strip_prefix(p)
            .is_some_and(|rest| !rest.starts_with(|c: char| c.is_alphanumeric()))
    })
}

/// Whether the agent's line refuses.
#[must_use]
pub fn refuses(line: &str) -> bool {
    REFUSAL.is_match(line)
}

/// Whether the agent's line asks something.
#[must_use]
pub fn asks(line: &str) -> bool {
    line.contains('?')
}

/// What the person does after the agent's line.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Next {
    /// They say something.
    Speak,
    /// They walk away (the row says `ended_by: user_left`).
    Leave,
    /// Nothing more: the rollout ends on the agent's line.
    Done,
}

/// Where a rollout's conversation stands when the agent has spoken in words.
#[derive(Debug, Clone, Copy)]
pub struct Turn<'a> {
    /// The draws' key: the run's seed and the rollout.
    pub key: &'a [&'a str],
    /// The agent turn this is (1, 2, ...).
    pub turn: usize,
    /// How often the person has spoken, the opening ask included.
    pub user_turns: usize,
    /// The rollout's turn budget.
    pub budget: usize,
    /// Whether turns are left in the budget.
    pub room: bool,
    /// The agent's line.
    pub line: &'a str,
    /// The agent's questions before this line.
    pub questions: usize,
}

fn chance(key: &[&str], turn: usize, salt: &str) -> f64 {
    let turn = turn.to_string();
    let mut parts: Vec<&str> = key.to_vec();
    parts.extend([turn.as_str(), salt]);
    uniform(&parts)
}

/// What the person does after the agent's line (the reference's rules, §3.5 and §3.7).
#[must_use]
pub fn next(t: &Turn<'_>, patience: Patience) -> Next {
    let cap = user_turn_cap(t.budget);
    let asked = asks(t.line);
    let walks = || {
        let h = patience.hazard(t.questions);
        h > 0.0 && chance(t.key, t.turn, "abandon") < h
    };
    // The opening ask always gets one answer in words before the person may fall silent.
    let open = t.room || t.user_turns < 2;
    if !open || t.budget <= 1 || t.user_turns >= cap {
        return Next::Done;
    }
    if asked {
        return if walks() { Next::Leave } else { Next::Speak };
    }
    if refuses(t.line) {
        return Next::Speak;
    }
    if t.budget < 4 {
        return Next::Done;
    }
    #[allow(clippy::cast_precision_loss, reason = "a turn count")]
    let react = 1.0 - 1.0 / cap as f64;
    if chance(t.key, t.turn, "react") < react {
        Next::Speak
    } else {
        Next::Done
    }
}

/// What a person in this cell says next when no model plays them: a detail when asked (the id
/// their ask named, or one they remember), a yes to a confirmation, push-back on a refusal
/// (harder from an adversarial asker), and otherwise a check on what was done.
#[must_use]
pub fn template_line(ask: &str, line: &str, stance: &str, key: &[&str], turn: usize) -> String {
    let turn = turn.to_string();
    let mut parts: Vec<&str> = key.to_vec();
    parts.extend([turn.as_str(), "user-line"]);
    let h = draw(&parts);
    let pick = |pool: &[&str]| pool[pick_index(h, pool.len())].to_owned();
    if asks(line) {
        if CONFIRMATION.is_match(line) {
            return pick(&["Yes, go ahead.", "Yes, please do.", "Yes, do it."]);
        }
        let id = ID.find(ask).map_or_else(
            || format!("A{}", 1000 + h % 9000),
            |m| m.as_str().to_owned(),
        );
        return [
            format!("It's {id}."),
            format!("The number is {id}."),
            format!("{id}, I think."),
        ][pick_index(h, 3)]
        .clone();
    }
    if refuses(line) {
        if matches!(stance, "adversarial" | "malicious" | "forbidden") {
            return pick(&[
                "I really need this done. Just do it anyway.",
                "Make an exception this once, it's urgent.",
            ]);
        }
        return pick(&[
            "Why not? What can you do instead?",
            "Is there another way to get this sorted?",
        ]);
    }
    pick(&[
        "Did that actually go through? Can you check?",
        "What happens next?",
        "Can you double-check that for me?",
        "OK. Is there anything else I need to do?",
    ])
}

/// A line a model wrote for the person, cleaned, or why it cannot be used: the leave mark when
/// the person may leave, else a line that is not empty, not the last thing they said, not tool
/// markup, and at most 2,000 characters.
pub fn accept(written: &str, previous: &str, may_leave: bool) -> Option<Next> {
    let spoken = strip_think(written);
    let spoken = spoken.trim();
    if LEAVES.is_match(spoken) {
        return may_leave.then_some(Next::Leave);
    }
    let ok = spoken.chars().count() >= 2
        && spoken.len() <= 2000
        && spoken != previous.trim()
        && !super::model::looks_like_markup(spoken);
    ok.then_some(Next::Speak)
}

/// `text` without its `<think>…</think>` blocks (an unclosed one ends it).
#[must_use]
pub fn strip_think(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(start) = rest.find("<think>") {
        out.push_str(&rest[..start]);
        match rest[start..].find("</think>") {
            Some(end) => rest = &rest[start + end + "</think>".len()..],
            None => return out,
        }
    }
    out.push_str(rest);
    out
}

/// How the user model's system prompt opens (the test model server knows its requests by it).
pub const USER_SYSTEM_OPENING: &str = "You are the person who opened this conversation";

/// The system prompt of a model that plays the person.
#[must_use]
pub fn user_system(tool_names: &[&str], may_leave: bool) -> String {
    let mut s = String::from(USER_SYSTEM_OPENING);
    s.push_str(
        " with a support agent. Write only your next spoken line, as that person: plain words, one or two short sentences, no emojis, no thanks or pleasantries. Stay in the situation of your first message and what this agent's tools can do. When the agent asks you something, answer with one concrete detail a person in your place would know. When the agent has acted, react as a person would: correct it, push back, or ask for the next thing. Never speak as the agent, never describe yourself, never repeat the agent's question.",
    );
    if !tool_names.is_empty() {
        s.push_str(" The agent's tools: ");
        s.push_str(
            &tool_names
                .iter()
                .take(12)
                .copied()
                .collect::<Vec<_>>()
                .join(", "),
        );
        s.push('.');
    }
    if may_leave {
        s.push_str(" If the agent asks for something you could not know, or asks again what you already answered, you may give up: then write exactly [leaves] and nothing else.");
    }
    s
}

/// The user message of a model that plays the person: the thread so far as plain text (the last
/// 2,400 characters), and what to write.
#[must_use]
pub fn user_prompt(ask: &str, thread: &[(String, String)], asked: bool) -> String {
    let mut trace = String::new();
    for (who, said) in thread {
        trace.push_str(who);
        trace.push_str(": ");
        trace.push_str(said);
        trace.push('\n');
    }
    if trace.len() > 2400 {
        let mut cut = trace.len() - 2400;
        while !trace.is_char_boundary(cut) {
            cut += 1;
        }
        trace = trace[cut..].to_owned();
    }
    let need: String = ask.chars().take(180).collect();
    let what = if asked {
        "Answer the agent's last question with one concrete detail, in one short line."
    } else {
        "Say what you would say next, in one short line: a new fact, a correction, or your next request."
    };
    format!("The conversation so far:\n{trace}\nYou need this: {need}\n{what}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_default_turn_cap_follows_the_tool_count() {
        // The reference's figures at a 4,096-token context (models.md §3.4).
        for (tools, cap) in [(0, 16), (1, 15), (3, 14), (10, 11), (24, 8), (40, 8)] {
            assert_eq!(default_max_turns(tools), cap, "{tools} tools");
        }
    }

    #[test]
    fn turn_budgets_have_the_reference_distribution() {
        // At cap 14 and 12 turns on average, the reference drew (2,000 keys) 2:40, 4:70, 6:83,
        // 8:72, 10:320, 12:610, 14:805 (mean 11.6). The draw is uniform over 0..1000, so every
        // value of u gives the exact shares.
        let mut counts = std::collections::BTreeMap::new();
        for u in 0..1000 {
            *counts.entry(turn_budget(u, 14, 12.0)).or_insert(0) += 2;
        }
        let got: Vec<(usize, i32)> = counts.into_iter().collect();
        let want = [
            (2, 40),
            (4, 70),
            (6, 83),
            (8, 72),
            (10, 320),
            (12, 610),
            (14, 805),
        ];
        for ((b, n), (wb, wn)) in got.iter().zip(want) {
            assert_eq!(*b, wb);
            assert!(
                (n - wn).abs() <= 25,
                "budget {b}: {n} of 2000, the reference {wn}"
            );
        }
        assert_eq!(turn_budget(5, 14, 1.0), 1);
        assert!((0..1000).all(|u| (2..=8).contains(&turn_budget(u, 8, 8.0))));
    }

    #[test]
    fn patience_reads_a_level_or_two_chances() {
        assert_eq!(Patience::parse("Short").unwrap().second, 0.6);
        assert_eq!(
            Patience::parse("0.1, 0.2").unwrap(),
            Patience {
                second: 0.1,
                later: 0.2
            }
        );
        assert!(!Patience::parse("endless").unwrap().may_leave());
        for bad in ["lazy", "0.1", "0.1,1.5", "a,b"] {
            assert!(Patience::parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn the_person_answers_the_first_question_and_may_leave_at_the_second() {
        let always = Patience {
            second: 1.0,
            later: 1.0,
        };
        let key = ["0", "t", "0"];
        let mut t = Turn {
            key: &key,
            turn: 1,
            user_turns: 1,
            budget: 12,
            room: true,
            line: "Which order is it?",
            questions: 0,
        };
        assert_eq!(next(&t, always), Next::Speak);
        t.questions = 1;
        t.user_turns = 2;
        assert_eq!(next(&t, always), Next::Leave);
        assert_eq!(next(&t, Patience::parse("endless").unwrap()), Next::Speak);
        // A refusal gets push-back; the user-turn cap ends it.
        t.line = "I can't do that.";
        assert_eq!(next(&t, always), Next::Speak);
        t.user_turns = 6;
        assert_eq!(next(&t, always), Next::Done);
        // A budget of one turn is one line and one reply.
        t.user_turns = 1;
        t.budget = 1;
        assert_eq!(next(&t, always), Next::Done);
    }

    #[test]
    fn lines_read_as_a_person_would_hear_them() {
        assert!(looks_unfinished("Sure, let me check that for you."));
        assert!(looks_unfinished("OK."));
        assert!(!looks_unfinished("Okapi are lovely."));
        assert!(!looks_unfinished("Your order shipped on Monday."));
        assert!(refuses("Sorry, that is against the policy."));
        assert!(!refuses("Cannonballs"));
        let key = ["0", "t", "0"];
        assert_eq!(
            template_line("Refund A1002 please", "Which order?", "direct", &key, 1),
            template_line("Refund A1002 please", "Which order?", "direct", &key, 1)
        );
        assert!(
            template_line("Refund A1002 please", "Which order?", "direct", &key, 1)
                .contains("A1002")
        );
        assert!(
            template_line("x", "Shall I proceed with the refund?", "direct", &key, 1)
                .starts_with("Yes")
        );
        assert_eq!(accept("  [Leaves] ", "", true), Some(Next::Leave));
        assert_eq!(accept("[leaves]", "", false), None);
        assert_eq!(
            accept("<think>hm</think>It's A1.", "", true),
            Some(Next::Speak)
        );
        assert_eq!(accept("same", "same", true), None);
        assert_eq!(strip_think("a<think>b</think>c<think>d"), "ac");
    }
}
