//! Scalar functions registered in every session.
//!
//! - `wilson_low(successes, n)` and `wilson_high(successes, n)`: the bounds of the 95% Wilson
//!   interval ([`crate::stats::wilson`]), null when `n <= 0` or either argument is null. Numeric
//!   arguments of any type are coerced to `DOUBLE`.
//! - `pass_at_k(n, c, k)` and `pass_pow_k(n, c, k)`: pass@k and pass^k of one task with `n`
//!   graded rollouts of which `c` passed ([`crate::stats::passk`]).
//! - `think_state(text)` and `last_assistant_text(messages)`: what the pass@k run config reads
//!   to tell whether a reply was spoken.
//! - `stable_hash(text)`: a hash of the text, the same in every process.
//! - `wai_contaminated(index, task_id, prompt, field, ...)`: decontamination's lexical rules on a
//!   cluster's worker ([`crate::stages::decontaminate::Contaminated`]).

use std::sync::Arc;

use datafusion::arrow::array::{Array, ArrayRef, AsArray, Float64Array, Int32Array, StringArray};
use datafusion::arrow::datatypes::{ArrowNativeType, DataType, Float64Type, Int64Type};
use datafusion::common::Result as DfResult;
use datafusion::logical_expr::{
    ColumnarValue, ScalarFunctionArgs, ScalarUDF, ScalarUDFImpl, Signature, Volatility,
};

use crate::schema::{col, row_schema};
use crate::stats::{passk, wilson};

/// A kernel: argument arrays (already coerced to the signature) in, one array out.
type Kernel = fn(&[ArrayRef]) -> ArrayRef;

/// A scalar function defined by its name, signature, return type and kernel: the one
/// `ScalarUDFImpl` every function here shares. Two are the same function when their names,
/// signatures and return types are (names are unique here; kernels are not comparable).
#[derive(Debug)]
struct Function {
    name: &'static str,
    signature: Signature,
    returns: DataType,
    kernel: Kernel,
}

impl PartialEq for Function {
    fn eq(&self, other: &Self) -> bool {
        (self.name, &self.signature, &self.returns)
            == (other.name, &other.signature, &other.returns)
    }
}

impl Eq for Function {}

impl std::hash::Hash for Function {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        (self.name, &self.signature, &self.returns).hash(state);
    }
}

impl ScalarUDFImpl for Function {
    fn name(&self) -> &str {
        self.name
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    fn return_type(&self, _args: &[DataType]) -> DfResult<DataType> {
        Ok(self.returns.clone())
    }

    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> DfResult<ColumnarValue> {
        let arrays = ColumnarValue::values_to_arrays(&args.args)?;
        Ok(ColumnarValue::Array((self.kernel)(&arrays)))
    }
}

fn function(
    name: &'static str,
    signature: Signature,
    returns: DataType,
    kernel: Kernel,
) -> ScalarUDF {
    ScalarUDF::new_from_impl(Function {
        name,
        signature,
        returns,
        kernel,
    })
}

fn wilson_bound(arrays: &[ArrayRef], upper: bool) -> ArrayRef {
    let (s, n) = (
        arrays[0].as_primitive::<Float64Type>(),
        arrays[1].as_primitive::<Float64Type>(),
    );
    let out: Float64Array = s
        .iter()
        .zip(n.iter())
        .map(|(s, n)| {
            let (lo, hi) = wilson::interval(s?, n?, wilson::Z_95)?;
            Some(if upper { hi } else { lo })
        })
        .collect();
    Arc::new(out)
}

/// `wilson_low` and `wilson_high`.
pub fn wilson_udfs() -> [ScalarUDF; 2] {
    let signature = || Signature::uniform(2, vec![DataType::Float64], Volatility::Immutable);
    [
        function("wilson_low", signature(), DataType::Float64, |a| {
            wilson_bound(a, false)
        }),
        function("wilson_high", signature(), DataType::Float64, |a| {
            wilson_bound(a, true)
        }),
    ]
}

/// Applies a per-task estimator to `(n, c, k)` columns; null when an argument is null or
/// negative, or `k` is 0 or exceeds `n`.
fn pass_k(arrays: &[ArrayRef], estimator: fn(u64, u64, u64) -> Option<f64>) -> ArrayRef {
    let int = |i: usize| arrays[i].as_primitive::<Int64Type>();
    let (n, c, k) = (int(0), int(1), int(2));
    let out: Float64Array = (0..n.len())
        .map(|i| {
            if n.is_null(i) || c.is_null(i) || k.is_null(i) {
                return None;
            }
            let arg = |a: &datafusion::arrow::array::Int64Array| u64::try_from(a.value(i)).ok();
            estimator(arg(n)?, arg(c)?, arg(k)?)
        })
        .collect();
    Arc::new(out)
}

/// `pass_at_k(n, c, k)` and `pass_pow_k(n, c, k)`.
pub fn pass_k_udfs() -> [ScalarUDF; 2] {
    let signature = || Signature::uniform(3, vec![DataType::Int64], Volatility::Immutable);
    [
        function("pass_at_k", signature(), DataType::Float64, |a| {
            pass_k(a, passk::pass_at_k)
        }),
        function("pass_pow_k", signature(), DataType::Float64, |a| {
            pass_k(a, passk::pass_pow_k)
        }),
    ]
}

/// What a reply says once reasoning is set aside: closed `<think>…</think>` blocks (any case,
/// across lines, with the white space after them) are removed, and an unclosed `<think>` hides
/// everything after it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Spoken {
    /// Something non-blank is left to read.
    pub answered: bool,
    /// An unclosed `<think>` was present.
    pub unclosed: bool,
}

/// Where `needle` (which starts with `<`) next occurs in `haystack` from `from`, ignoring ASCII
/// case: only the `<` positions are compared, found with `memchr`.
fn find_ci(haystack: &str, needle: &str, from: usize) -> Option<usize> {
    let h = haystack.as_bytes();
    let n = needle.as_bytes();
    memchr::memchr_iter(b'<', h.get(from..)?)
        .map(|i| from + i)
        .find(|&i| {
            h.get(i..i + n.len())
                .is_some_and(|w| w.eq_ignore_ascii_case(n))
        })
}

/// Splits `text` into spoken reply and reasoning, as the reference's `split_reasoning` does.
pub fn spoken(text: &str) -> Spoken {
    // Reads the pieces outside reasoning in place: the reply is answered when any of them holds
    // a non-blank character (no copy of the text is made).
    let blank = |piece: &str| piece.trim().is_empty();
    let mut pos = 0;
    let mut answered = false;
    let mut unclosed = false;
    while let Some(open) = find_ci(text, "<think>", pos) {
        answered = answered || !blank(&text[pos..open]);
        if let Some(close) = find_ci(text, "</think>", open + 7) {
            pos = close + 8;
        } else {
            unclosed = true;
            pos = text.len();
            break;
        }
    }
    answered = answered || !blank(&text[pos.min(text.len())..]);
    Spoken { answered, unclosed }
}

/// `think_state(text)`: null for a null text, else a bit set: 1 = answered (a spoken reply is
/// left), 2 = an unclosed `<think>`, 4 = the whole text is blank.
fn think_state(arrays: &[ArrayRef]) -> ArrayRef {
    let out: Int32Array = arrays[0]
        .as_string::<i32>()
        .iter()
        .map(|t| {
            t.map(|t| {
                if t.trim().is_empty() {
                    return 4;
                }
                let s = spoken(t);
                i32::from(s.answered) | (i32::from(s.unclosed) << 1)
            })
        })
        .collect();
    Arc::new(out)
}

/// `last_assistant_text(messages)`: the content of the last assistant message whose content is
/// not blank, else `''` when there are messages, else null.
fn last_assistant_text(arrays: &[ArrayRef]) -> ArrayRef {
    let list = arrays[0].as_list::<i32>();
    let items = list.values().as_struct();
    let role = items.column(0).as_string::<i32>();
    let content = items.column(1).as_string::<i32>();
    let offsets = list.value_offsets();
    let out: StringArray = (0..list.len())
        .map(|i| {
            if list.is_null(i) {
                return None;
            }
            let (start, end) = (offsets[i].as_usize(), offsets[i + 1].as_usize());
            let found = (start..end).rev().find(|&j| {
                role.is_valid(j)
                    && role.value(j) == "assistant"
                    && content.is_valid(j)
                    && !content.value(j).trim().is_empty()
            });
            Some(found.map_or(String::new(), |j| content.value(j).to_owned()))
        })
        .collect();
    Arc::new(out)
}

/// `think_state` and `last_assistant_text`.
pub fn reply_udfs() -> [ScalarUDF; 2] {
    let messages = row_schema()
        .field_with_name(col::MESSAGES)
        .map_or(DataType::Null, |f| f.data_type().clone());
    [
        function(
            "think_state",
            Signature::exact(vec![DataType::Utf8], Volatility::Immutable),
            DataType::Int32,
            think_state,
        ),
        function(
            "last_assistant_text",
            Signature::exact(vec![messages], Volatility::Immutable),
            DataType::Utf8,
            last_assistant_text,
        ),
    ]
}

fn stable_hash(arrays: &[ArrayRef]) -> ArrayRef {
    use sha2::Digest;
    let text = arrays[0].as_string::<i32>();
    let out: datafusion::arrow::array::Int64Array = text
        .iter()
        .map(|t| {
            let digest = sha2::Sha256::digest(t?.as_bytes());
            let mut first = [0u8; 8];
            first.copy_from_slice(&digest[..8]);
            Some(i64::from_be_bytes(first))
        })
        .collect();
    Arc::new(out)
}

/// `stable_hash(text)`: the first 8 bytes of the text's SHA-256 as a signed integer, the same on
/// every machine and release (an order key for seeded, partition-independent row choices).
pub fn hash_udf() -> ScalarUDF {
    function(
        "stable_hash",
        Signature::exact(vec![DataType::Utf8], Volatility::Immutable),
        DataType::Int64,
        stable_hash,
    )
}

/// Every function `wai` registers in a session.
pub fn all() -> Vec<ScalarUDF> {
    wilson_udfs()
        .into_iter()
        .chain(pass_k_udfs())
        .chain(reply_udfs())
        .chain([
            hash_udf(),
            crate::stages::decontaminate::Contaminated::udf(),
        ])
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stable_hash_is_sha256_and_null_safe() {
        let input: ArrayRef = Arc::new(datafusion::arrow::array::StringArray::from(vec![
            Some("abc"),
            None,
        ]));
        let out = stable_hash(&[input]);
        let out = out.as_primitive::<Int64Type>();
        // SHA-256("abc") starts ba7816bf8f01cfea.
        assert_eq!(
            out.value(0),
            i64::from_be_bytes([0xba, 0x78, 0x16, 0xbf, 0x8f, 0x01, 0xcf, 0xea])
        );
        assert!(out.is_null(1));
    }

    #[test]
    fn spoken_reply_sets_reasoning_aside() {
        assert_eq!(
            spoken("Your order shipped."),
            Spoken {
                answered: true,
                unclosed: false
            }
        );
        assert_eq!(
            spoken("<think>still thinking"),
            Spoken {
                answered: false,
                unclosed: true
            }
        );
        assert_eq!(
            spoken("<THINK>a\nb</Think>\n  "),
            Spoken {
                answered: false,
                unclosed: false
            }
        );
        assert_eq!(
            spoken("<think>a</think> Done. <think>more"),
            Spoken {
                answered: true,
                unclosed: true
            }
        );
        assert_eq!(
            spoken(""),
            Spoken {
                answered: false,
                unclosed: false
            }
        );
    }
}
