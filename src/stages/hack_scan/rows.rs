//! One row's built-in features (the hand tier of the measure spec's §7.2) and the text the auto
//! tier reads, from a batch of rows.
//!
//! The conversation is read by [`crate::stages::conversation`].

use std::hash::{BuildHasher, Hasher as _};
use std::sync::LazyLock;

use datafusion::arrow::array::{
    Array, AsArray, BooleanArray, Float64Array, Int64Array, ListArray, MapArray, RecordBatch,
    StringArray, StructArray,
};
use regex::Regex;

use crate::error::{Error, Result};
use crate::stages::conversation::{Conversations, reply_length, usize_of};
use crate::stages::ending::{is_space, looks_finished, words};
use crate::stages::terms::is_space_byte;

/// The built-in features every row has, in the order the reference creates them.
pub(super) const FIXED: [&str; 9] = [
    "reply_length",
    "tool_calls",
    "assistant_turns",
    "truncated",
    "n:words",
    "n:digits",
    "n:newlines",
    "n:punct",
    "frac:upper",
];

/// A feature's name in a row (borrowed from the batch).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(super) enum Name<'a> {
    /// One of [`FIXED`].
    Fixed(u8),
    /// `tool:NAME`.
    Tool(&'a str),
    /// `logprob_mean`.
    LogprobMean,
    /// `marker:NAME`.
    Marker(&'a str),
    /// The user's feature at this index.
    User(u16),
}

impl Name<'_> {
    /// Whether this is the feature called `name`.
    fn is(&self, name: &str) -> bool {
        match self {
            Self::Fixed(k) => FIXED[*k as usize] == name,
            Self::Tool(t) => name.strip_prefix("tool:") == Some(t),
            Self::LogprobMean => name == "logprob_mean",
            Self::Marker(m) => name.strip_prefix("marker:") == Some(m),
            Self::User(_) => false,
        }
    }

    /// A hash of the name.
    fn hash(&self, user_names: &[String]) -> u64 {
        let mut h = foldhash::fast::FixedState::with_seed(0x9f0f_11e5).build_hasher();
        match self {
            Self::Fixed(k) => h.write(FIXED[*k as usize].as_bytes()),
            Self::Tool(t) => {
                h.write(b"tool:");
                h.write(t.as_bytes());
            }
            Self::LogprobMean => h.write(b"logprob_mean"),
            Self::Marker(m) => {
                h.write(b"marker:");
                h.write(m.as_bytes());
            }
            Self::User(j) => h.write(user_names[*j as usize].as_bytes()),
        }
        h.finish()
    }
}

/// The built-in feature `name` spells, if any (`reply_length`, `tool:NAME`, `marker:NAME`, ...).
pub(super) fn spelled(name: &str) -> Option<Name<'_>> {
    if let Some(k) = FIXED.iter().position(|f| *f == name) {
        return Some(Name::Fixed(u8::try_from(k).unwrap_or(0)));
    }
    if name == "logprob_mean" {
        return Some(Name::LogprobMean);
    }
    name.strip_prefix("tool:")
        .map(Name::Tool)
        .or_else(|| name.strip_prefix("marker:").map(Name::Marker))
}

/// What one graded row gives the scan.
#[derive(Debug)]
pub(super) struct Row<'a> {
    /// The task (the group).
    pub task: &'a str,
    pub reward: f64,
    /// The hand tier and the user's features, in the order the reference's row dict has them.
    pub features: Vec<(Name<'a>, f64)>,
    /// Everything the agent said: the reply and its other assistant turns.
    pub text: String,
    /// A hash of the text and the features: rows that are the same rollout.
    pub profile: u64,
}

/// The columns of a batch the rows are read from.
pub(super) struct Columns<'a> {
    task: &'a StringArray,
    reward: &'a Float64Array,
    conversations: Conversations<'a>,
    finish_reason: &'a StringArray,
    reason: &'a StringArray,
    grader_reason: &'a StringArray,
    logprob: &'a Float64Array,
    n_tokens: &'a Int64Array,
    steps: Option<Steps<'a>>,
    markers: Option<(&'a MapArray, &'a StringArray, &'a Float64Array)>,
    user: Vec<&'a Float64Array>,
}

struct Steps<'a> {
    list: &'a ListArray,
    tool: &'a StringArray,
    truncated: Option<&'a BooleanArray>,
}

fn column<'a>(b: &'a RecordBatch, name: &str) -> Result<&'a dyn Array> {
    b.column_by_name(name)
        .map(AsRef::as_ref)
        .ok_or_else(|| Error::Internal(format!("hack scan: no column `{name}`")))
}

fn strings<'a>(b: &'a RecordBatch, name: &str) -> Result<&'a StringArray> {
    column(b, name)?
        .as_string_opt::<i32>()
        .ok_or_else(|| Error::Internal(format!("hack scan: `{name}` is not Utf8")))
}

fn floats<'a>(b: &'a RecordBatch, name: &str) -> Result<&'a Float64Array> {
    column(b, name)?
        .as_primitive_opt()
        .ok_or_else(|| Error::Internal(format!("hack scan: `{name}` is not Float64")))
}

fn field<'a>(s: &'a StructArray, name: &str) -> Option<&'a StringArray> {
    s.column_by_name(name)
        .and_then(|a| a.as_string_opt::<i32>())
}

impl<'a> Columns<'a> {
    /// The columns of `b`, as the scan's query selects them (`user` features named `__user_J`).
    pub(super) fn of(b: &'a RecordBatch, n_user: usize) -> Result<Self> {
        let steps = column(b, "steps")?.as_list_opt::<i32>().and_then(|l| {
            let s = l.values().as_struct_opt()?;
            Some(Steps {
                list: l,
                tool: field(s, "tool")?,
                truncated: s
                    .column_by_name("truncated")
                    .and_then(|a| a.as_boolean_opt()),
            })
        });
        Ok(Self {
            task: strings(b, "task_id")?,
            reward: floats(b, "reward")?,
            conversations: Conversations::of(b)?,
            finish_reason: strings(b, "finish_reason")?,
            reason: strings(b, "reason")?,
            grader_reason: strings(b, "grader_reason")?,
            logprob: floats(b, "logprob")?,
            n_tokens: column(b, "n_tokens")?
                .as_primitive_opt()
                .ok_or_else(|| Error::Internal("hack scan: `n_tokens` is not Int64".into()))?,
            steps,
            markers: column(b, "markers")?.as_map_opt().and_then(|m| {
                Some((
                    m,
                    m.keys().as_string_opt::<i32>()?,
                    m.values().as_primitive_opt()?,
                ))
            }),
            user: (0..n_user)
                .map(|j| floats(b, &format!("__user_{j}")))
                .collect::<Result<_>>()?,
        })
    }

    /// Row `i`, with the user's features named `user_names`.
    pub(super) fn row(&self, i: usize, user_names: &[String]) -> Row<'a> {
        let text_of = |a: &'a StringArray| if a.is_valid(i) { a.value(i) } else { "" };
        let final_text = self.conversations.final_text(i);
        let turns = self.conversations.turns(i);
        let tools = self.tools(i);
        let reply_length = reply_length(&turns, final_text);
        let n_assistant = turns.iter().filter(|t| t.assistant).count();

        let mut text = String::from(final_text);
        for t in turns.iter().filter(|t| t.assistant) {
            if !t.content.is_empty() && t.content != final_text {
                if !text.is_empty() {
                    text.push('\n');
                }
                text.push_str(&t.content);
            }
        }

        let truncated = self.truncated(i, final_text);
        let (chars, uppers, digits, punct) = counts(&text);
        #[allow(clippy::cast_precision_loss, reason = "counts far below 2^52")]
        let fixed = [
            reply_length as f64,
            tools.len() as f64,
            n_assistant as f64,
            if truncated { 1.0 } else { 0.0 },
            words(&text) as f64,
            digits as f64,
            memchr::memchr_iter(b'\n', text.as_bytes()).count() as f64,
            punct as f64,
            if chars == 0 {
                0.0
            } else {
                uppers as f64 / chars as f64
            },
        ];
        let mut features: Vec<(Name<'a>, f64)> = fixed
            .iter()
            .enumerate()
            .map(|(k, v)| (Name::Fixed(u8::try_from(k).unwrap_or(0)), *v))
            .collect();
        let mut distinct: Vec<&str> = tools.clone();
        distinct.sort_unstable();
        distinct.dedup();
        features.extend(distinct.iter().map(|t| (Name::Tool(t), 1.0)));
        if self.logprob.is_valid(i) && self.n_tokens.is_valid(i) && self.n_tokens.value(i) > 0 {
            #[allow(clippy::cast_precision_loss, reason = "counts far below 2^52")]
            let mean = self.logprob.value(i) / self.n_tokens.value(i) as f64;
            features.push((Name::LogprobMean, mean));
        }
        if let Some((m, names, values)) = self.markers.filter(|(m, _, _)| m.is_valid(i)) {
            let o = m.value_offsets();
            for k in usize_of(o[i])..usize_of(o[i + 1]) {
                if values.is_valid(k) {
                    features.push((Name::Marker(names.value(k)), values.value(k)));
                }
            }
        }
        // The user's features: a value replaces a built-in of the same name (in its place), and
        // a null leaves it.
        for (j, (name, col)) in user_names.iter().zip(&self.user).enumerate() {
            if !col.is_valid(i) {
                continue;
            }
            let v = col.value(i);
            let same = features.iter().position(|(n, _)| n.is(name));
            match same {
                Some(at) => features[at].1 = v,
                None => features.push((Name::User(u16::try_from(j).unwrap_or(u16::MAX)), v)),
            }
        }
        let profile = profile(&text, &features, user_names);
        Row {
            task: text_of(self.task),
            reward: self.reward.value(i),
            features,
            text,
            profile,
        }
    }

    /// Tool names of the steps that call one.
    fn tools(&self, i: usize) -> Vec<&'a str> {
        let Some(s) = &self.steps else {
            return Vec::new();
        };
        if s.list.is_null(i) {
            return Vec::new();
        }
        let o = s.list.value_offsets();
        (usize_of(o[i])..usize_of(o[i + 1]))
            .filter(|&j| s.tool.is_valid(j) && !s.tool.value(j).is_empty())
            .map(|j| s.tool.value(j))
            .collect()
    }

    /// Whether the reply did not end on its own: the engine's stamp, the grader's reason, or a
    /// long reply whose text does not look finished.
    fn truncated(&self, i: usize, final_text: &str) -> bool {
        if self.finish_reason.is_valid(i) && self.finish_reason.value(i) == "length" {
            return true;
        }
        if let Some(s) = &self.steps
            && let Some(t) = s.truncated
            && s.list.is_valid(i)
        {
            let o = s.list.value_offsets();
            if (usize_of(o[i])..usize_of(o[i + 1])).any(|j| t.is_valid(j) && t.value(j)) {
                return true;
            }
        }
        let reason = if self.reason.is_valid(i) && !self.reason.value(i).is_empty() {
            self.reason.value(i)
        } else if self.grader_reason.is_valid(i) {
            self.grader_reason.value(i)
        } else {
            ""
        };
        if says_cut(reason) {
            return true;
        }
        let reply = final_text.trim_end_matches(is_space);
        reply.chars().count() >= TRUNCATION_MIN_CHARS && !looks_finished(reply)
    }
}

/// Whether a grader's reason says the reply was cut: lowercased, its white space runs made one
/// space, it holds `truncat` or `cut off`. Most reasons hold neither word in any case (checked
/// on the bytes first: lowercasing maps no other character onto these letters), and are not
/// rewritten.
fn says_cut(reason: &str) -> bool {
    let holds =
        |word: &[u8]| (reason.as_bytes().windows(word.len())).any(|w| w.eq_ignore_ascii_case(word));
    if !(holds(b"truncat") || (holds(b"cut") && holds(b"off"))) {
        return false;
    }
    let reason = reason
        .split_whitespace()
        .collect::<Vec<_>>()
        .join(" ")
        .to_lowercase();
    reason.contains("truncat") || reason.contains("cut off")
}

/// `Some(())` for a digit as Python's `isdigit` reads it: a decimal digit of any script
/// (Unicode `Nd`), or a superscript, subscript or circled digit.
fn u_digit(c: char) -> Option<()> {
    if c.is_ascii_digit() {
        return Some(());
    }
    if c.is_ascii() || !c.is_numeric() {
        return None;
    }
    let other_digit = matches!(c,
        '\u{b2}' | '\u{b3}' | '\u{b9}' | '\u{2070}' | '\u{2074}'..='\u{2079}'
        | '\u{2080}'..='\u{2089}' | '\u{2460}'..='\u{2468}' | '\u{2474}'..='\u{247c}'
        | '\u{2488}'..='\u{2490}' | '\u{24ea}' | '\u{24f5}'..='\u{24fd}' | '\u{24ff}'
        | '\u{2776}'..='\u{277e}' | '\u{2780}'..='\u{2788}' | '\u{278a}'..='\u{2792}'
        | '\u{1369}'..='\u{1371}' | '\u{19da}');
    (other_digit || DIGIT.is_match(c.encode_utf8(&mut [0; 4]))).then_some(())
}

static DIGIT: LazyLock<Regex> =
    LazyLock::new(|| Regex::new(r"^\d$").unwrap_or_else(|e| unreachable!("a fixed pattern: {e}")));

static WORD: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r"^[\p{L}\p{N}_]$").unwrap_or_else(|e| unreachable!("a fixed pattern: {e}"))
});

/// `[^\w\s]`: neither a word character (a letter, a number, `_`) nor white space.
fn is_punct(c: char) -> bool {
    if c.is_ascii() {
        return !(c.is_ascii_alphanumeric() || c == '_' || is_space(c));
    }
    !(is_space(c) || WORD.is_match(c.encode_utf8(&mut [0; 4])))
}

/// Characters, `[A-Z]`, digits and `[^\w\s]` of `text`.
#[allow(
    clippy::needless_bitwise_bool,
    reason = "branch-free in the per-byte loop"
)]
fn counts(text: &str) -> (usize, usize, usize, usize) {
    if text.is_ascii() {
        return text.bytes().fold((0, 0, 0, 0), |(n, u, d, p), b| {
            (
                n + 1,
                u + usize::from(b.is_ascii_uppercase()),
                d + usize::from(b.is_ascii_digit()),
                p + usize::from(!(b.is_ascii_alphanumeric() | (b == b'_') | is_space_byte(b))),
            )
        });
    }
    text.chars().fold((0, 0, 0, 0), |(n, u, d, p), c| {
        (
            n + 1,
            u + usize::from(c.is_ascii_uppercase()),
            u_digit(c).map_or(d, |()| d + 1),
            p + usize::from(is_punct(c)),
        )
    })
}

/// A hash of the rollout as the scan sees it: its text and its hand and user features (in any
/// order: the features' hashes are summed).
fn profile(text: &str, features: &[(Name<'_>, f64)], user_names: &[String]) -> u64 {
    let mut h = foldhash::fast::FixedState::with_seed(0x9f0f_11e6).build_hasher();
    h.write(text.as_bytes());
    let features = features.iter().fold(0u64, |acc, (n, v)| {
        let mut f = foldhash::fast::FixedState::with_seed(n.hash(user_names)).build_hasher();
        // 0.0 and -0.0 are one value.
        f.write_u64(if *v == 0.0 { 0 } else { v.to_bits() });
        acc.wrapping_add(f.finish())
    });
    h.write_u64(features);
    h.finish()
}

/// Replies this long or longer are read for a missing ending.
const TRUNCATION_MIN_CHARS: usize = 200;

#[cfg(test)]
mod tests {
    use super::*;

    /// The byte rules read white space as Python does, and count words as `len(text.split())`
    /// on texts of every ASCII byte in runs of every length.
    #[test]
    fn ascii_space_and_words_match_the_char_rules() {
        for b in 0..128u8 {
            assert_eq!(is_space_byte(b), is_space(char::from(b)), "byte {b}");
        }
        let want = |t: &str| t.split(is_space).filter(|w| !w.is_empty()).count();
        let mut texts: Vec<String> = vec![
            String::new(),
            " ".into(),
            "a".into(),
            "\x1f\x1ca\x0b".into(),
        ];
        for b in 0..128u8 {
            for run in [1, 2, 33] {
                let c = char::from(b).to_string().repeat(run);
                texts.push(format!("{c}word{c}"));
                texts.push(format!("x {c}y\t{c}"));
            }
        }
        for t in &texts {
            assert_eq!(words(t), want(t), "{t:?}");
        }
        // Non-ASCII texts take the char rule.
        assert_eq!(words("a\u{2003}b\u{85}c é"), 4);
    }

    #[test]
    fn a_reason_says_cut_in_any_case_and_spacing() {
        for (reason, cut) in [
            ("", false),
            ("looks fine", false),
            ("The reply was TRUNCATED", true),
            ("cut\u{2003}\n OFF mid-sentence", true),
            ("Cut-off", false),
            ("cut, then off", false),
            ("off the cuff, cut short", false),
            ("haircut off", true),
            ("Ürün truncated", true),
            // The Kelvin sign lowercases to `k`: no letter of the two words.
            ("\u{212a}ut off", false),
        ] {
            assert_eq!(says_cut(reason), cut, "{reason:?}");
            let slow = reason
                .split_whitespace()
                .collect::<Vec<_>>()
                .join(" ")
                .to_lowercase();
            assert_eq!(
                slow.contains("truncat") || slow.contains("cut off"),
                cut,
                "{reason:?}"
            );
        }
    }

    #[test]
    fn punctuation_and_digits_read_as_python_does() {
        assert!(is_punct('#') && is_punct('—') && !is_punct('_') && !is_punct('é'));
        // A combining vowel sign is neither a letter nor a number to Python's `\w`.
        assert!(is_punct('\u{947}') && !is_punct('न'));
        assert!(u_digit('7').is_some() && u_digit('٣').is_some() && u_digit('½').is_none());
        let digits = "x² + y³ = 10"
            .chars()
            .filter(|c| u_digit(*c).is_some())
            .count();
        assert_eq!(digits, 4);
        assert_eq!(words("a\x1cb  c\u{2028}d"), 4);
        // The ASCII and the general paths agree.
        for t in ["  two words ", "a\x1cb\tc", "", "x_y, 7 (Z)!", "é, 7 (Z)!"] {
            let general = t.split(is_space).filter(|w| !w.is_empty()).count();
            assert_eq!(words(t), general, "{t:?}");
            let chars: Vec<char> = t.chars().collect();
            let punct = chars.iter().filter(|c| is_punct(**c)).count();
            let digits = chars.iter().filter(|c| u_digit(**c).is_some()).count();
            let (n, _, d, p) = counts(t);
            assert_eq!((n, d, p), (chars.len(), digits, punct), "{t:?}");
        }
        // A sign-off after a Unicode line separator is an ending.
        assert!(looks_finished(
            "I booked it for you\u{2028}Best,\u{2028}Alex"
        ));
    }
}
