//! The pairwise judge (`pairwise:SPEC`): a model is shown two replies to one ask and says which
//! served the person better, or that neither did. `wai select --mode preference --judge
//! pairwise:SPEC` asks it about every pair select made, once as built and once with the sides
//! swapped, so that a judge that prefers a position rather than a reply shows as a flip (a flip
//! is a tie). The pairs carry the verdict (`pairwise`, `tie`); the report says how often the
//! judge agreed with the rewards, preferred the rejected reply, or flipped, each with its
//! interval and n.
//!
//! Where the reference is wrong, this is not: its fallback reading takes `A`, `B` or `tie` as a
//! prefix (`"Both"` reads as B, `"a tie"` as A); here the whole value must be one of the three.

use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use serde::Serialize;
use serde_json::{Map, Value, json};

use crate::error::{Error, Result};
use crate::models::{CallError, ChatRequest, Message, Model};
use crate::stats::wilson;

use super::payload;
use super::prompt::sha12;

/// The version of the pairwise prompt's wording, recorded on every verdict.
pub const PROMPT_VERSION: &str = "wai-pairwise-1";
/// Characters of the ask shown, by default.
pub const REQUEST_CHARS: usize = 4000;
/// The share of flips, and of pairs where the judge prefers the rejected reply, at which the
/// report warns.
pub const WARN_SHARE: f64 = 0.2;
/// Pairs the report quotes where the judge and the rewards disagree, at most.
pub const EXAMPLES: usize = 10;

const SYSTEM: &str = "You compare two replies, A and B, that an AI agent with tools gave to the same \
request. Each reply is a JSON record of what the agent did: the tools it called with their results, and its \
final message. Decide which reply served the person better: the right tool calls with the right arguments, a \
final message that is true to what the tools returned, no invented facts, no steps that were not needed. A \
failure the agent reports honestly is better than a success it claims falsely. Length does not count: a short \
reply that is right beats a long one that is not. If both are equally good or equally bad, the answer is a \
tie. Reply with only a JSON object: {\"winner\": \"A\" or \"B\" or \"tie\", \"reason\": \"<one sentence>\"}.";

const REPAIR: &str = "Your reply did not follow the format. Reply again with only a JSON object: \
{\"winner\": \"A\" or \"B\" or \"tie\", \"reason\": \"<one sentence>\"}.";

/// How the pairwise judge judges.
#[derive(Debug, Clone)]
pub struct Options {
    /// The agent's policy, shown with each reply.
    pub policy: String,
    /// The agent's tools (OpenAI function schemas), shown by name.
    pub tools: Vec<Value>,
    /// Show the judge each reply's privileged block.
    pub use_privileged: bool,
    /// Each reply's budget in characters.
    pub payload_chars: usize,
    /// Characters of the ask shown.
    pub request_chars: usize,
    /// The reply budget in tokens.
    pub max_tokens: u32,
    /// Ask again with the sides swapped.
    pub swap: bool,
    /// Keep only the pairs where the judge picked the chosen reply.
    pub keep_agreed: bool,
}

impl Default for Options {
    fn default() -> Self {
        Self {
            policy: String::new(),
            tools: Vec::new(),
            use_privileged: false,
            payload_chars: super::PAYLOAD_CHARS,
            request_chars: REQUEST_CHARS,
            max_tokens: super::MAX_TOKENS,
            swap: true,
            keep_agreed: false,
        }
    }
}

impl crate::stages::Options for Options {
    fn check(&self) -> Result<()> {
        super::check_budgets(self.payload_chars, self.max_tokens)
    }
}

/// A side of a pair, as the judge's answer maps onto the pair.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Pick {
    Chosen,
    Rejected,
    Tie,
}

impl Pick {
    fn as_str(self) -> &'static str {
        match self {
            Self::Chosen => "chosen",
            Self::Rejected => "rejected",
            Self::Tie => "tie",
        }
    }
}

/// What the judge's reply says: `A`, `B` or `tie` (any case), or nothing.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Winner {
    /// The first reply shown.
    A,
    /// The second reply shown.
    B,
    /// Neither.
    Tie,
}

/// The winner and reason a reply gives: the JSON object from its first `{` to its last `}`
/// when that reads, else a `winner: X` written out, where X (quoted or not) is exactly `A`, `B`
/// or `tie` in any case.
#[must_use]
pub fn read_reply(text: &str) -> (Option<Winner>, String) {
    let word = |s: &str| match s.trim().to_lowercase().as_str() {
        "a" => Some(Winner::A),
        "b" => Some(Winner::B),
        "tie" => Some(Winner::Tie),
        _ => None,
    };
    if let (Some(lo), Some(hi)) = (text.find('{'), text.rfind('}'))
        && lo < hi
        && let Ok(Value::Object(o)) = serde_json::from_str::<Value>(&text[lo..=hi])
    {
        let reason = o
            .get("reason")
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_owned();
        if let Some(w) = o.get("winner").and_then(Value::as_str).and_then(word) {
            return (Some(w), reason);
        }
    }
    let winner = WRITTEN
        .captures(text)
        .and_then(|c| c.get(1))
        .and_then(|m| word(m.as_str()));
    (winner, String::new())
}

/// A winner written out: `winner`, `:` or `=`, and the value (quoted or not) up to its end.
static WRITTEN: std::sync::LazyLock<regex::Regex> = std::sync::LazyLock::new(|| {
    regex::Regex::new(r#"(?i)"?winner"?\s*[:=]\s*"?([a-z ]*?)"?\s*(?:[,}\n.]|$)"#)
        .expect("a valid pattern")
});

/// One question's answer, mapped onto the pair.
#[derive(Debug, Clone, Default)]
struct Asked {
    pick: Option<Pick>,
    reason: String,
    tokens_in: u64,
    tokens_out: u64,
    latency: Duration,
    cached: bool,
    failed: bool,
}

/// The judge's verdict on one pair, as the pair carries it.
#[derive(Debug, Clone, Serialize)]
pub struct PairVerdict {
    /// `chosen`, `rejected`, `tie`, or none when no answer read.
    pub winner: Option<&'static str>,
    /// Whether the two orders agreed; none without both answers.
    pub position_consistent: Option<bool>,
    /// Whether the swapped order was asked.
    pub swapped: bool,
    /// The reasons given, first order first.
    pub reasons: Vec<String>,
    /// The judge (`MODEL@PROMPT-SHA`).
    pub judge: String,
    /// Tokens sent and received for this pair.
    pub tokens_in: u64,
    /// Tokens received for this pair.
    pub tokens_out: u64,
    /// Milliseconds the calls took, summed.
    pub latency_ms: u64,
    /// Every answer came from the cache.
    pub cached: bool,
}

/// A share with its 95% Wilson interval and its n.
#[derive(Debug, Clone, Serialize)]
pub struct Rate {
    /// The share, 4 places; none when n is 0.
    pub value: Option<f64>,
    /// The 95% Wilson score interval.
    pub ci95: Option<[f64; 2]>,
    /// How many it is a share of.
    pub n: usize,
}

impl Rate {
    #[allow(clippy::cast_precision_loss, reason = "pair counts")]
    fn of(k: usize, n: usize) -> Self {
        let round = |x: f64| (x * 1e4).round() / 1e4;
        Self {
            value: (n > 0).then(|| round(k as f64 / n as f64)),
            ci95: wilson::interval(k as f64, n as f64, wilson::Z_95)
                .map(|(l, h)| [round(l), round(h)]),
            n,
        }
    }
}

impl std::fmt::Display for Rate {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match (self.value, self.ci95) {
            (Some(v), Some([l, h])) => write!(f, "{v:.2} [{l:.2}, {h:.2}] (n={})", self.n),
            (Some(v), None) => write!(f, "{v:.2} (n={})", self.n),
            _ => write!(f, "- (n=0)"),
        }
    }
}

/// A pair where the judge did not pick the chosen reply.
#[derive(Debug, Clone, Serialize)]
pub struct Disagreement {
    /// The ask, its first 160 characters.
    pub prompt: String,
    /// The chosen reply's reward.
    pub chosen_score: Value,
    /// The rejected reply's reward.
    pub rejected_score: Value,
    /// What the judge picked.
    pub winner: &'static str,
    /// The judge's reasons.
    pub reasons: Vec<String>,
}

/// What the pairwise judge found over the pairs.
#[derive(Debug, Clone, Serialize)]
pub struct Report {
    /// The judge (`MODEL@PROMPT-SHA`).
    pub judge: String,
    /// The prompt's version.
    pub prompt_version: &'static str,
    /// Whether each pair was also asked with its sides swapped.
    pub swap: bool,
    /// Pairs asked about.
    pub pairs: usize,
    /// Pairs with a winner (chosen, rejected or tie).
    pub judged: usize,
    /// Pairs with no answer that read, or whose calls failed.
    pub failed: usize,
    /// Pairs whose calls failed after their retries (part of `failed`).
    pub call_errors: usize,
    /// Of the pairs with both orders answered, the share where the answers disagreed (each is
    /// a tie).
    pub position_flip_rate: Rate,
    /// Of the judged pairs, the share the judge called a tie.
    pub tie_rate: Rate,
    /// Of the judged pairs, the share where the judge picked the chosen reply.
    pub agrees_with_scores: Rate,
    /// Of the judged pairs, the share where the judge picked the rejected reply.
    pub prefers_rejected: Rate,
    /// Pairs left out because the judge did not pick the chosen reply (`--keep-agreed`).
    pub dropped: usize,
    /// Some pairs where the judge did not pick the chosen reply.
    pub disagreements: Vec<Disagreement>,
    /// Tokens sent, over every call.
    pub tokens_in: u64,
    /// Tokens received, over every call.
    pub tokens_out: u64,
    /// Pairs whose every answer came from the cache.
    pub cached: usize,
    /// What a person should know.
    pub warnings: Vec<String>,
}

impl std::fmt::Display for Report {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        writeln!(
            f,
            "pairwise judge {}: {} of {} pairs judged ({} failed{}), {}",
            self.judge,
            self.judged,
            self.pairs,
            self.failed,
            if self.call_errors > 0 {
                format!(", {} by call errors", self.call_errors)
            } else {
                String::new()
            },
            if self.swap {
                "each asked in both orders"
            } else {
                "each asked once"
            }
        )?;
        writeln!(f, "  agrees with the rewards: {}", self.agrees_with_scores)?;
        writeln!(f, "  prefers the rejected:    {}", self.prefers_rejected)?;
        writeln!(f, "  ties:                    {}", self.tie_rate)?;
        if self.swap {
            writeln!(f, "  position flips:          {}", self.position_flip_rate)?;
        }
        if self.dropped > 0 {
            writeln!(
                f,
                "  {} pairs left out where the judge did not pick the chosen reply",
                self.dropped
            )?;
        }
        for w in &self.warnings {
            writeln!(f, "  warning: {w}")?;
        }
        Ok(())
    }
}

/// The pairwise judge on one model.
pub struct PairwiseJudge {
    model: Arc<Model>,
    runtime: tokio::runtime::Runtime,
    opts: Options,
    version: String,
}

impl PairwiseJudge {
    /// A pairwise judge on `model`.
    ///
    /// # Errors
    /// Options out of range, or no async runtime.
    pub fn new(model: Arc<Model>, opts: Options) -> Result<Self> {
        crate::stages::Options::check(&opts)?;
        let version = format!("{}@{}", model.spec().model, sha12(SYSTEM));
        Ok(Self {
            runtime: crate::models::runtime()?,
            model,
            opts,
            version,
        })
    }

    /// The judge's name and prompt version (`MODEL@PROMPT-SHA`).
    #[must_use]
    pub fn version(&self) -> &str {
        &self.version
    }

    /// The model's call tally.
    #[must_use]
    pub fn tally(&self) -> crate::models::Tally {
        self.model.tally()
    }

    fn record(&self, row: &Map<String, Value>) -> Value {
        let ctx = payload::Context {
            policy: &self.opts.policy,
            tools: &self.opts.tools,
            use_privileged: self.opts.use_privileged,
        };
        let text = payload::render(row, &ctx, self.opts.payload_chars);
        serde_json::from_str(&text).unwrap_or(Value::String(text))
    }

    /// One question: `first` shown as A, `second` as B.
    async fn ask(&self, request: &str, first: &Value, second: &Value) -> Result<Asked> {
        let user = json!({"request": request, "A": first, "B": second}).to_string();
        let mut messages = vec![
            Message::new("system", SYSTEM.to_owned()),
            Message::new("user", user),
        ];
        let mut asked = Asked {
            cached: true,
            ..Asked::default()
        };
        for attempt in 0..2 {
            let req = ChatRequest {
                messages: messages.clone(),
                tools: Vec::new(),
                temperature: 0.0,
                max_tokens: self.opts.max_tokens,
                logprobs: false,
            };
            let answer = match self.model.chat(&req, 0).await {
                Ok(a) => a,
                Err(CallError::Failed(m)) => {
                    asked.failed = true;
                    asked.cached = false;
                    asked.reason = format!("error: {m}");
                    return Ok(asked);
                }
                Err(CallError::Stop(e)) => return Err(e),
            };
            asked.tokens_in += answer.reply.usage.input_tokens;
            asked.tokens_out += answer.reply.usage.output_tokens;
            asked.latency += answer.latency;
            asked.cached &= answer.cached;
            let text = answer.reply.content.clone().unwrap_or_default();
            let (winner, reason) = read_reply(&text);
            if winner.is_some() || attempt == 1 {
                asked.reason = if winner.is_some() {
                    reason
                } else {
                    format!(
                        "the judge's reply named no winner, even after a repair request: {}",
                        super::excerpt(&text)
                    )
                };
                asked.pick = winner.map(|w| match w {
                    Winner::A => Pick::Chosen,
                    Winner::B => Pick::Rejected,
                    Winner::Tie => Pick::Tie,
                });
                break;
            }
            messages.push(Message::new("assistant", text));
            messages.push(Message::new("user", REPAIR.to_owned()));
        }
        Ok(asked)
    }

    /// The verdict on one pair.
    async fn judge_pair(&self, pair: &Value) -> Result<PairVerdict> {
        let side = |k: &str| match pair.get(k) {
            Some(Value::Object(row)) => self.record(row),
            _ => Value::Null,
        };
        let (chosen, rejected) = (side("chosen"), side("rejected"));
        let prompt = pair
            .get("prompt")
            .and_then(Value::as_str)
            .or_else(|| pair.get("chosen").and_then(|c| c.get("prompt")?.as_str()))
            .unwrap_or("");
        let request: String = prompt.chars().take(self.opts.request_chars).collect();
        let first = self.ask(&request, &chosen, &rejected);
        let (first, second) = if self.opts.swap {
            let (a, b) = futures::join!(first, self.ask(&request, &rejected, &chosen));
            // Asked the other way round, A is the rejected reply.
            let mut b = b?;
            b.pick = b.pick.map(|p| match p {
                Pick::Chosen => Pick::Rejected,
                Pick::Rejected => Pick::Chosen,
                Pick::Tie => Pick::Tie,
            });
            (a?, Some(b))
        } else {
            (first.await?, None)
        };
        let (winner, consistent) = match (first.pick, second.as_ref().and_then(|s| s.pick)) {
            (Some(a), Some(b)) if a == b => (Some(a), Some(true)),
            (Some(_), Some(_)) => (Some(Pick::Tie), Some(false)),
            (a, b) => (a.or(b), None),
        };
        let all: Vec<&Asked> = std::iter::once(&first).chain(second.as_ref()).collect();
        Ok(PairVerdict {
            winner: winner.map(Pick::as_str),
            position_consistent: consistent,
            swapped: second.is_some(),
            reasons: all
                .iter()
                .map(|a| a.reason.clone())
                .filter(|r| !r.is_empty())
                .collect(),
            judge: self.version.clone(),
            tokens_in: all.iter().map(|a| a.tokens_in).sum(),
            tokens_out: all.iter().map(|a| a.tokens_out).sum(),
            latency_ms: u64::try_from(all.iter().map(|a| a.latency).sum::<Duration>().as_millis())
                .unwrap_or(u64::MAX),
            cached: all.iter().all(|a| a.cached),
        })
    }

    /// Judges every pair of `pairs` (select's pair records), writes each verdict onto its pair
    /// (`pairwise`, `tie`), leaves out the pairs the judge did not pick the chosen reply of when
    /// the options say so, and reports.
    ///
    /// # Errors
    /// The run stopped: a spent budget, a refused key, or an endpoint that fails every call.
    pub fn judge_pairs(&self, pairs: &mut Vec<Value>) -> Result<Report> {
        let width = self.model.settings().concurrency;
        let this = self;
        // The futures made here, not in the async block: a closure there would ask for a
        // lifetime more general than the borrow of `pairs` the compiler can prove `Send`.
        let asks: Vec<_> = pairs.iter().map(|p| this.judge_pair(p)).collect();
        let verdicts: Vec<PairVerdict> = crate::models::block_on(&self.runtime, async move {
            let all: Vec<Result<PairVerdict>> =
                futures::stream::iter(asks).buffered(width).collect().await;
            all.into_iter().collect::<Result<Vec<_>>>()
        })??;
        let mut report = self.tally_up(pairs, &verdicts);
        let mut kept = Vec::with_capacity(pairs.len());
        for (mut pair, v) in std::mem::take(pairs).into_iter().zip(verdicts) {
            if self.opts.keep_agreed && v.winner != Some("chosen") {
                report.dropped += 1;
                continue;
            }
            if let Value::Object(o) = &mut pair {
                o.insert("tie".into(), json!(v.winner == Some("tie")));
                o.insert(
                    "pairwise".into(),
                    serde_json::to_value(&v).map_err(|e| Error::Internal(e.to_string()))?,
                );
            }
            kept.push(pair);
        }
        *pairs = kept;
        if self.opts.keep_agreed && pairs.is_empty() && report.pairs > 0 {
            report.warnings.push(format!(
                "the judge picked the chosen reply in none of the {} pairs, so `keep_agreed` left none",
                report.pairs
            ));
        }
        Ok(report)
    }

    fn tally_up(&self, pairs: &[Value], verdicts: &[PairVerdict]) -> Report {
        let count = |w: &str| verdicts.iter().filter(|v| v.winner == Some(w)).count();
        let judged = verdicts.iter().filter(|v| v.winner.is_some()).count();
        let both = verdicts
            .iter()
            .filter(|v| v.position_consistent.is_some())
            .count();
        let flips = verdicts
            .iter()
            .filter(|v| v.position_consistent == Some(false))
            .count();
        let rejected = count("rejected");
        let mut warnings = Vec::new();
        #[allow(clippy::cast_precision_loss, reason = "pair counts")]
        let share = |k: usize, n: usize| if n == 0 { 0.0 } else { k as f64 / n as f64 };
        if self.opts.swap && both > 0 && share(flips, both) >= WARN_SHARE {
            warnings.push(format!(
                "the judge changed its answer when the sides were swapped in {flips} of {both} pairs: it favours a position, not a reply (each flipped pair counts as a tie); its prompt or model needs work before its verdicts mean much"
            ));
        }
        if judged > 0 && share(rejected, judged) >= WARN_SHARE {
            warnings.push(format!(
                "the judge preferred the rejected reply in {rejected} of {judged} judged pairs: the rewards and the judge disagree often; read the disagreements before training on these pairs"
            ));
        }
        let disagreements = pairs
            .iter()
            .zip(verdicts)
            .filter_map(|(p, v)| match v.winner {
                Some(w @ ("rejected" | "tie")) => Some(Disagreement {
                    prompt: p
                        .get("prompt")
                        .and_then(Value::as_str)
                        .unwrap_or("")
                        .chars()
                        .take(160)
                        .collect(),
                    chosen_score: p.get("chosen_score").cloned().unwrap_or(Value::Null),
                    rejected_score: p.get("rejected_score").cloned().unwrap_or(Value::Null),
                    winner: w,
                    reasons: v.reasons.clone(),
                }),
                _ => None,
            })
            .take(EXAMPLES)
            .collect();
        let failed = verdicts.len() - judged;
        Report {
            judge: self.version.clone(),
            prompt_version: PROMPT_VERSION,
            swap: self.opts.swap,
            pairs: verdicts.len(),
            judged,
            failed,
            call_errors: verdicts
                .iter()
                .filter(|v| {
                    v.winner.is_none() && v.reasons.iter().any(|r| r.starts_with("error: "))
                })
                .count(),
            position_flip_rate: Rate::of(flips, both),
            tie_rate: Rate::of(count("tie"), judged),
            agrees_with_scores: Rate::of(count("chosen"), judged),
            prefers_rejected: Rate::of(rejected, judged),
            dropped: 0,
            disagreements,
            tokens_in: verdicts.iter().map(|v| v.tokens_in).sum(),
            tokens_out: verdicts.iter().map(|v| v.tokens_out).sum(),
            cached: verdicts.iter().filter(|v| v.cached).count(),
            warnings,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn replies_read_as_the_whole_value() {
        let w = |t: &str| read_reply(t).0;
        assert_eq!(
            w(r#"{"winner": "A", "reason": "right tool"}"#),
            Some(Winner::A)
        );
        assert_eq!(
            w(r#"Sure. {"winner": " b ", "reason": "x"} done"#),
            Some(Winner::B)
        );
        assert_eq!(w(r#"{"winner": "TIE"}"#), Some(Winner::Tie));
        // The reference reads these as B and A (a prefix match); neither names a winner.
        assert_eq!(w(r#"winner: "Both""#), None);
        assert_eq!(w(r#"winner: "a tie""#), None);
        assert_eq!(w(r#"{"winner": "Both"}"#), None);
        // Written out, not as JSON.
        assert_eq!(
            w("The winner: B, because it checked the order."),
            Some(Winner::B)
        );
        assert_eq!(w("winner = tie"), Some(Winner::Tie));
        assert_eq!(w("I cannot decide."), None);
        assert_eq!(read_reply(r#"{"winner": "a", "reason": "why"}"#).1, "why");
    }

    #[test]
    fn rates_carry_their_interval_and_n() {
        let r = Rate::of(3, 10);
        assert_eq!(r.value, Some(0.3));
        let [lo, hi] = r.ci95.unwrap();
        assert!(lo < 0.3 && hi > 0.3 && lo > 0.0 && hi < 1.0, "{lo} {hi}");
        assert_eq!(r.n, 10);
        assert_eq!(Rate::of(0, 0).value, None);
        assert_eq!(Rate::of(0, 0).to_string(), "- (n=0)");
    }
}
