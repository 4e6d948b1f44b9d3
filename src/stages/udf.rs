//! Scalar functions registered in every session.
//!
//! - `wilson_low(successes, n)` and `wilson_high(successes, n)`: the bounds of the 95% Wilson
//!   interval ([`crate::stats::wilson`]), null when `n <= 0` or either argument is null. Numeric
//!   arguments of any type are coerced to `DOUBLE`.
//! - `pass_at_k(n, c, k)` and `pass_pow_k(n, c, k)`: pass@k and pass^k of one task with `n`
//!   graded rollouts of which `c` passed ([`crate::stats::passk`]).
//! - `think_state(text)` and `last_assistant_text(messages)`: what the pass@k run config reads
//!   to tell whether a reply was spoken.

use std::sync::Arc;

use datafusion::arrow::array::{Array, ArrayRef, AsArray, Float64Array, Int32Array, StringArray};
use datafusion::arrow::datatypes::{ArrowNativeType, DataType, Float64Type, Int64Type};
use datafusion::common::Result as DfResult;
use datafusion::logical_expr::{
    ColumnarValue, ScalarFunctionArgs, ScalarUDF, ScalarUDFImpl, Signature, Volatility,
};

use crate::stats::{passk, wilson};

#[derive(Debug, PartialEq, Eq, Hash)]
struct WilsonBound {
    name: &'static str,
    upper: bool,
    signature: Signature,
}

impl ScalarUDFImpl for WilsonBound {
    fn name(&self) -> &str {
        self.name
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    fn return_type(&self, _args: &[DataType]) -> DfResult<DataType> {
        Ok(DataType::Float64)
    }

    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> DfResult<ColumnarValue> {
        let arrays = ColumnarValue::values_to_arrays(&args.args)?;
        let (s, n) = (arrays[0].as_primitive::<Float64Type>(), arrays[1].as_primitive::<Float64Type>());
        let out: Float64Array = s
            .iter()
            .zip(n.iter())
            .map(|(s, n)| {
                let (lo, hi) = wilson::interval(s?, n?, wilson::Z_95)?;
                Some(if self.upper { hi } else { lo })
            })
            .collect();
        Ok(ColumnarValue::Array(Arc::new(out) as ArrayRef))
    }
}

/// `wilson_low` and `wilson_high`.
pub fn wilson_udfs() -> [ScalarUDF; 2] {
    let signature = || Signature::uniform(2, vec![DataType::Float64], Volatility::Immutable);
    [
        ScalarUDF::new_from_impl(WilsonBound { name: "wilson_low", upper: false, signature: signature() }),
        ScalarUDF::new_from_impl(WilsonBound { name: "wilson_high", upper: true, signature: signature() }),
    ]
}

/// `pass_at_k(n, c, k)` and `pass_pow_k(n, c, k)`: the per-task estimators of
/// [`crate::stats::passk`] over integer counts; null when `k` is 0 or exceeds `n`, or an argument
/// is null or negative.
#[derive(Debug, PartialEq, Eq, Hash)]
struct PassK {
    name: &'static str,
    all: bool,
    signature: Signature,
}

impl ScalarUDFImpl for PassK {
    fn name(&self) -> &str {
        self.name
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    fn return_type(&self, _args: &[DataType]) -> DfResult<DataType> {
        Ok(DataType::Float64)
    }

    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> DfResult<ColumnarValue> {
        let arrays = ColumnarValue::values_to_arrays(&args.args)?;
        let int = |i: usize| arrays[i].as_primitive::<Int64Type>();
        let (n, c, k) = (int(0), int(1), int(2));
        let out: Float64Array = (0..n.len())
            .map(|i| {
                if n.is_null(i) || c.is_null(i) || k.is_null(i) {
                    return None;
                }
                let (n, c, k) = (
                    u64::try_from(n.value(i)).ok()?,
                    u64::try_from(c.value(i)).ok()?,
                    u64::try_from(k.value(i)).ok()?,
                );
                if self.all { passk::pass_pow_k(n, c, k) } else { passk::pass_at_k(n, c, k) }
            })
            .collect();
        Ok(ColumnarValue::Array(Arc::new(out) as ArrayRef))
    }
}

/// `pass_at_k` and `pass_pow_k`.
pub fn pass_k_udfs() -> [ScalarUDF; 2] {
    let signature = || Signature::uniform(3, vec![DataType::Int64], Volatility::Immutable);
    [
        ScalarUDF::new_from_impl(PassK { name: "pass_at_k", all: false, signature: signature() }),
        ScalarUDF::new_from_impl(PassK { name: "pass_pow_k", all: true, signature: signature() }),
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

fn find_ci(haystack: &str, needle: &str, from: usize) -> Option<usize> {
    let h = haystack.as_bytes();
    let n = needle.as_bytes();
    if from + n.len() > h.len() {
        return None;
    }
    (from..=h.len() - n.len()).find(|&i| h[i..i + n.len()].eq_ignore_ascii_case(n))
}

/// Splits `text` into spoken reply and reasoning, as the reference's `split_reasoning` does.
pub fn spoken(text: &str) -> Spoken {
    let mut out = String::with_capacity(text.len());
    let mut pos = 0;
    let mut unclosed = false;
    while let Some(open) = find_ci(text, "<think>", pos) {
        out.push_str(&text[pos..open]);
        match find_ci(text, "</think>", open + 7) {
            Some(close) => {
                let after = close + 8;
                pos = after + (text[after..].len() - text[after..].trim_start().len());
            }
            None => {
                unclosed = true;
                pos = text.len();
                break;
            }
        }
    }
    out.push_str(&text[pos.min(text.len())..]);
    Spoken { answered: !out.trim().is_empty(), unclosed }
}

/// `think_state(text)`: null for a null text, else a bit set: 1 = answered (a spoken reply is
/// left), 2 = an unclosed `<think>`.
#[derive(Debug, PartialEq, Eq, Hash)]
struct ThinkState {
    signature: Signature,
}

impl ScalarUDFImpl for ThinkState {
    fn name(&self) -> &str {
        "think_state"
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    fn return_type(&self, _args: &[DataType]) -> DfResult<DataType> {
        Ok(DataType::Int32)
    }

    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> DfResult<ColumnarValue> {
        let arrays = ColumnarValue::values_to_arrays(&args.args)?;
        let text = arrays[0].as_string::<i32>();
        let out: Int32Array = text
            .iter()
            .map(|t| {
                t.map(|t| {
                    let s = spoken(t);
                    i32::from(s.answered) | (i32::from(s.unclosed) << 1)
                })
            })
            .collect();
        Ok(ColumnarValue::Array(Arc::new(out) as ArrayRef))
    }
}

/// `last_assistant_text(messages)`: the content of the last assistant message whose content is
/// not blank, else `''` when there are messages, else null.
#[derive(Debug, PartialEq, Eq, Hash)]
struct LastAssistantText {
    signature: Signature,
}

impl ScalarUDFImpl for LastAssistantText {
    fn name(&self) -> &str {
        "last_assistant_text"
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    fn return_type(&self, _args: &[DataType]) -> DfResult<DataType> {
        Ok(DataType::Utf8)
    }

    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> DfResult<ColumnarValue> {
        let arrays = ColumnarValue::values_to_arrays(&args.args)?;
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
                    role.is_valid(j) && role.value(j) == "assistant" && content.is_valid(j) && !content.value(j).trim().is_empty()
                });
                Some(found.map_or(String::new(), |j| content.value(j).to_owned()))
            })
            .collect();
        Ok(ColumnarValue::Array(Arc::new(out) as ArrayRef))
    }
}

/// `think_state` and `last_assistant_text`.
pub fn reply_udfs() -> [ScalarUDF; 2] {
    [
        ScalarUDF::new_from_impl(ThinkState { signature: Signature::exact(vec![DataType::Utf8], Volatility::Immutable) }),
        ScalarUDF::new_from_impl(LastAssistantText {
            signature: Signature::exact(vec![crate::schema::row_schema().field_with_name(crate::schema::col::MESSAGES).map_or(DataType::Null, |f| f.data_type().clone())], Volatility::Immutable),
        }),
    ]
}

/// Every function `wai` registers in a session.
pub fn all() -> Vec<ScalarUDF> {
    wilson_udfs().into_iter().chain(pass_k_udfs()).chain(reply_udfs()).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spoken_reply_sets_reasoning_aside() {
        assert_eq!(spoken("Your order shipped."), Spoken { answered: true, unclosed: false });
        assert_eq!(spoken("<think>still thinking"), Spoken { answered: false, unclosed: true });
        assert_eq!(spoken("<THINK>a\nb</Think>\n  "), Spoken { answered: false, unclosed: false });
        assert_eq!(spoken("<think>a</think> Done. <think>more"), Spoken { answered: true, unclosed: true });
        assert_eq!(spoken(""), Spoken { answered: false, unclosed: false });
    }
}
