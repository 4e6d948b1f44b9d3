//! What a user's SQL (`wai sql`, SQL judges, feature expressions) may take: memory and time.
//!
//! DataFusion's memory pool counts what its operators hold (sorts, joins, aggregates), and the
//! rows `wai sql` gathers for a table are counted there too, but one scalar function can build
//! one huge value the pool never sees (`repeat('x', 2000000000)` built 7.8 GB before it failed).
//! So the functions that can make an output far larger than their inputs (`repeat`, `lpad`,
//! `rpad`, `replace`, `regexp_replace`, `array_repeat`, `array_resize`, `range`,
//! `generate_series`) are wrapped, in every session, by a guard that bounds the output from the
//! arguments before the function runs: one value at most [`VALUE_CAP`] (or the memory limit, if
//! smaller), one call's values together at most the memory limit.

use std::hash::Hash;
use std::sync::Arc;
use std::time::Duration;

use datafusion::arrow::array::{Array, ArrayRef, AsArray};
use datafusion::arrow::compute::cast;
use datafusion::arrow::datatypes::{DataType, FieldRef, Int64Type, TimeUnit};
use datafusion::common::ScalarValue;
use datafusion::error::{DataFusionError, Result as DfResult};
use datafusion::execution::FunctionRegistry;
use datafusion::logical_expr::simplify::{ExprSimplifyResult, SimplifyContext};
use datafusion::logical_expr::{
    ColumnarValue, Documentation, Expr, ReturnFieldArgs, ScalarFunctionArgs, ScalarUDF,
    ScalarUDFImpl, Signature,
};
use datafusion::prelude::SessionContext;

use crate::error::{Error, Result};

/// The largest value one guarded function may build (before the memory limit, if smaller).
pub const VALUE_CAP: u64 = 256 << 20;
/// The memory limit when the machine's memory cannot be read.
const FALLBACK_MEMORY: u64 = 4 << 30;

/// The limits a user's query runs under.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Bytes the query's operators and its gathered result may hold.
    pub memory: u64,
    /// How long the query may run (none: as long as it takes).
    pub timeout: Option<Duration>,
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            memory: default_memory(),
            timeout: None,
        }
    }
}

/// Half of the machine's memory (`MemTotal` of `/proc/meminfo`), else 4 GiB (read once).
pub fn default_memory() -> u64 {
    static MEMORY: std::sync::OnceLock<u64> = std::sync::OnceLock::new();
    *MEMORY.get_or_init(machine_half)
}

fn machine_half() -> u64 {
    std::fs::read_to_string("/proc/meminfo")
        .ok()
        .and_then(|info| {
            let line = info.lines().find(|l| l.starts_with("MemTotal:"))?;
            let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
            Some(kib * 1024 / 2)
        })
        .filter(|&b| b > 0)
        .unwrap_or(FALLBACK_MEMORY)
}

/// A size such as `2G`, `512M`, `1.5GiB` or `1000000` (bytes): K, M, G and T are powers of 1024,
/// with or without `B` or `iB` after them.
///
/// # Errors
/// Not a size, or zero.
pub fn parse_size(s: &str) -> std::result::Result<u64, String> {
    let t = s.trim();
    let split = t
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(t.len());
    let (number, unit) = t.split_at(split);
    let shift = match unit.trim().to_ascii_uppercase().as_str() {
        "" | "B" => 0,
        "K" | "KB" | "KIB" => 10,
        "M" | "MB" | "MIB" => 20,
        "G" | "GB" | "GIB" => 30,
        "T" | "TB" | "TIB" => 40,
        _ => {
            return Err(format!(
                "`{s}` is not a size: write a number of bytes, or one with K, M, G or T (2G, 512M)"
            ));
        }
    };
    let x: f64 = number
        .parse()
        .map_err(|_| format!("`{s}` is not a size: write it as 2G, 512M or 1000000"))?;
    #[allow(
        clippy::cast_possible_truncation,
        clippy::cast_sign_loss,
        reason = "finite, positive and checked under 2^63 first"
    )]
    let bytes = match x * 2f64.powi(shift) {
        b if (1.0..9.2e18).contains(&b) => b as u64,
        _ => return Err(format!("`{s}` must be at least 1 byte and under 8 EiB")),
    };
    Ok(bytes)
}

/// `bytes` for a person: `2.0 GiB`, `512.0 MiB`, `300 B`.
pub fn human(bytes: u64) -> String {
    const UNITS: [&str; 5] = ["KiB", "MiB", "GiB", "TiB", "PiB"];
    if bytes < 1024 {
        return format!("{bytes} B");
    }
    #[allow(
        clippy::cast_precision_loss,
        reason = "a size to one decimal for a message"
    )]
    let mut x = bytes as f64 / 1024.0;
    let mut unit = 0;
    while x >= 1024.0 && unit + 1 < UNITS.len() {
        x /= 1024.0;
        unit += 1;
    }
    format!("{x:.1} {}", UNITS[unit])
}

/// How a guarded function's output grows with its arguments.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum Growth {
    /// `repeat(text, n)`: the text's bytes times n.
    Repeat,
    /// `lpad` and `rpad(text, n[, fill])`: n characters.
    Pad,
    /// `replace(text, from, to)`: every `from` becomes `to`.
    Replace,
    /// `regexp_replace(text, pattern, replacement[, flags])`: matches become the replacement.
    RegexpReplace,
    /// `array_repeat(value, n)`: n values.
    ArrayRepeat,
    /// `array_resize(list, n[, value])`: n values.
    ArrayResize,
    /// `range` and `generate_series([start,] stop[, step])`: a list of that many values.
    Series,
}

/// The functions guarded, and how each grows.
const GUARDED: [(&str, Growth); 9] = [
    ("repeat", Growth::Repeat),
    ("lpad", Growth::Pad),
    ("rpad", Growth::Pad),
    ("replace", Growth::Replace),
    ("regexp_replace", Growth::RegexpReplace),
    ("array_repeat", Growth::ArrayRepeat),
    ("array_resize", Growth::ArrayResize),
    ("range", Growth::Series),
    ("generate_series", Growth::Series),
];

/// Wraps the functions of [`GUARDED`] in `ctx` with a guard for a memory limit of `memory`.
///
/// # Errors
/// A function cannot be re-registered.
pub fn guard(ctx: &SessionContext, memory: u64) -> Result<()> {
    for (name, growth) in GUARDED {
        let Ok(inner) = ctx.udf(name) else {
            continue;
        };
        let inner = inner.as_ref().clone();
        ctx.register_udf(ScalarUDF::new_from_impl(Guarded {
            inner,
            growth,
            value_cap: VALUE_CAP.min(memory),
            call_cap: memory,
        }));
    }
    Ok(())
}

/// One argument read row by row: a scalar's value for every row, or an array's.
enum PerRow {
    One(Option<i128>),
    Many(Vec<Option<i128>>),
}

impl PerRow {
    fn get(&self, i: usize) -> Option<i128> {
        match self {
            Self::One(x) => *x,
            Self::Many(v) => v.get(i).copied().flatten(),
        }
    }
}

/// The byte lengths of a text argument (other types: their size in memory, per row).
fn lengths(v: &ColumnarValue) -> PerRow {
    match v {
        ColumnarValue::Scalar(s) => PerRow::One(match s {
            ScalarValue::Utf8(t) | ScalarValue::LargeUtf8(t) | ScalarValue::Utf8View(t) => {
                t.as_ref().map(|t| t.len() as i128)
            }
            other if other.is_null() => None,
            other => Some(other.size() as i128),
        }),
        ColumnarValue::Array(a) => PerRow::Many(array_lengths(a)),
    }
}

fn array_lengths(a: &ArrayRef) -> Vec<Option<i128>> {
    let of = |valid: bool, n: usize| valid.then_some(n as i128);
    match a.data_type() {
        DataType::Utf8 => {
            let s = a.as_string::<i32>();
            (0..a.len())
                .map(|i| of(s.is_valid(i), s.value(i).len()))
                .collect()
        }
        DataType::LargeUtf8 => {
            let s = a.as_string::<i64>();
            (0..a.len())
                .map(|i| of(s.is_valid(i), s.value(i).len()))
                .collect()
        }
        DataType::Utf8View => {
            let s = a.as_string_view();
            (0..a.len())
                .map(|i| of(s.is_valid(i), s.value(i).len()))
                .collect()
        }
        _ => {
            let each = a.get_array_memory_size() / a.len().max(1);
            (0..a.len())
                .map(|i| of(a.is_valid(i), each.max(1)))
                .collect()
        }
    }
}

/// An argument as whole numbers (temporal values as nanoseconds, days or months; intervals as
/// nanoseconds, a month read as 30 days), none where it is not one.
fn numbers(v: &ColumnarValue) -> PerRow {
    let array = match v {
        ColumnarValue::Scalar(ScalarValue::IntervalMonthDayNano(x)) => {
            return PerRow::One(x.map(|x| {
                (i128::from(x.months) * 30 + i128::from(x.days)) * 86_400_000_000_000
                    + i128::from(x.nanoseconds)
            }));
        }
        ColumnarValue::Scalar(s) => match s.to_array_of_size(1) {
            Ok(a) => a,
            Err(_) => return PerRow::One(None),
        },
        ColumnarValue::Array(a) => Arc::clone(a),
    };
    let target = match array.data_type() {
        DataType::Date32 | DataType::Date64 | DataType::Timestamp(..) => {
            DataType::Timestamp(TimeUnit::Nanosecond, None)
        }
        _ => DataType::Int64,
    };
    let ints = cast(&array, &target).and_then(|a| cast(&a, &DataType::Int64));
    let values: Vec<Option<i128>> = match ints {
        Ok(a) => {
            let a = a.as_primitive::<Int64Type>();
            (0..a.len())
                .map(|i| a.is_valid(i).then(|| i128::from(a.value(i))))
                .collect()
        }
        Err(_) => vec![None; array.len()],
    };
    match v {
        ColumnarValue::Scalar(_) => PerRow::One(values.first().copied().flatten()),
        ColumnarValue::Array(_) => PerRow::Many(values),
    }
}

/// How many `$` and `\` a replacement holds (each may stand for a whole match).
fn references(v: &ColumnarValue) -> i128 {
    match v {
        ColumnarValue::Scalar(
            ScalarValue::Utf8(Some(t))
            | ScalarValue::LargeUtf8(Some(t))
            | ScalarValue::Utf8View(Some(t)),
        ) => t.chars().filter(|c| matches!(c, '$' | '\\')).count() as i128,
        ColumnarValue::Scalar(_) => 0,
        // A replacement per row: count as if every character were a reference.
        ColumnarValue::Array(_) => -1,
    }
}

/// Whether the `flags` argument (a scalar) asks for every match.
fn global(flags: Option<&ColumnarValue>) -> bool {
    match flags {
        Some(ColumnarValue::Scalar(
            ScalarValue::Utf8(Some(t))
            | ScalarValue::LargeUtf8(Some(t))
            | ScalarValue::Utf8View(Some(t)),
        )) => t.contains('g'),
        Some(ColumnarValue::Scalar(_)) | None => false,
        Some(ColumnarValue::Array(_)) => true,
    }
}

/// The most bytes (an upper bound, to within the 4 bytes of a character) row `i` of a call of
/// `growth` on `args` can give; `None` when the arguments do not say.
fn bound(growth: Growth, args: &[PerRow], extra: (i128, bool), i: usize) -> Option<i128> {
    let arg = |k: usize| args.get(k).and_then(|a| a.get(i));
    let count = |k: usize| arg(k).map(|n| n.max(0));
    Some(match growth {
        Growth::Repeat => arg(0)?.saturating_mul(count(1)?),
        Growth::Pad => count(1)?,
        Growth::Replace => {
            let (s, from, to) = (arg(0)?, arg(1)?, arg(2)?);
            // Each match of `from` becomes `to`; an empty `from` matches between characters.
            let (matches, grows) = if from == 0 {
                (s + 1, to)
            } else {
                (s / from, (to - from).max(0))
            };
            s.saturating_add(matches.saturating_mul(grows))
        }
        Growth::RegexpReplace => {
            let (s, to) = (arg(0)?, arg(2)?);
            let (refs, every) = extra;
            let refs = if refs < 0 { to } else { refs };
            let matches = if every { s + 1 } else { 1 };
            s.saturating_add(matches.saturating_mul(to))
                .saturating_add(refs.saturating_mul(s))
        }
        Growth::ArrayRepeat => arg(0)?.max(8).saturating_mul(count(1)?),
        Growth::ArrayResize => args
            .get(2)
            .and_then(|a| a.get(i))
            .unwrap_or(8)
            .max(8)
            .saturating_mul(count(1)?),
        Growth::Series => {
            let (from, to, by) = match args.len() {
                1 => (0, arg(0)?, 1),
                2 => (arg(0)?, arg(1)?, 1),
                _ => (arg(0)?, arg(1)?, arg(2)?),
            };
            if by == 0 {
                return None;
            }
            (to.abs_diff(from) / by.unsigned_abs())
                .try_into()
                .unwrap_or(i128::MAX)
                .saturating_add(1)
                .saturating_mul(8)
        }
    })
}

/// A function that refuses, before it runs, to build more than its caps allow.
#[derive(Debug, PartialEq, Eq, Hash)]
struct Guarded {
    inner: ScalarUDF,
    growth: Growth,
    value_cap: u64,
    call_cap: u64,
}

impl Guarded {
    /// Refuses a call whose output could pass a cap.
    fn check(&self, args: &ScalarFunctionArgs) -> DfResult<()> {
        let read: Vec<PerRow> = args
            .args
            .iter()
            .enumerate()
            .map(|(k, v)| match (self.growth, k) {
                (Growth::Repeat | Growth::Pad | Growth::ArrayRepeat | Growth::ArrayResize, 1)
                | (Growth::Series, _) => numbers(v),
                _ => lengths(v),
            })
            .collect();
        let extra = match self.growth {
            Growth::RegexpReplace => (
                args.args.get(2).map_or(0, references),
                global(args.args.get(3)),
            ),
            _ => (0, false),
        };
        let rows = if args
            .args
            .iter()
            .all(|a| matches!(a, ColumnarValue::Scalar(_)))
        {
            1
        } else {
            args.number_rows
        };
        let mut total: i128 = 0;
        for i in 0..rows {
            let Some(b) = bound(self.growth, &read, extra, i) else {
                continue;
            };
            if b > i128::from(self.value_cap) {
                return Err(self.refused(&format!(
                    "could build a value of {} (row {} of the batch); one value may hold at most {}",
                    human(u64::try_from(b).unwrap_or(u64::MAX)),
                    i + 1,
                    human(self.value_cap)
                )));
            }
            total = total.saturating_add(b);
        }
        if total > i128::from(self.call_cap) {
            return Err(self.refused(&format!(
                "could build {} for one batch of {rows} rows, over the memory limit of {}",
                human(u64::try_from(total).unwrap_or(u64::MAX)),
                human(self.call_cap)
            )));
        }
        Ok(())
    }

    fn refused(&self, what: &str) -> DataFusionError {
        DataFusionError::External(Box::new(Error::Usage(format!(
            "`{}` {what}: a bound on functions that can exhaust memory",
            self.inner.name()
        ))))
    }
}

impl ScalarUDFImpl for Guarded {
    fn name(&self) -> &str {
        self.inner.name()
    }

    fn aliases(&self) -> &[String] {
        self.inner.aliases()
    }

    fn schema_name(&self, args: &[Expr]) -> DfResult<String> {
        self.inner.inner().schema_name(args)
    }

    fn signature(&self) -> &Signature {
        self.inner.signature()
    }

    fn return_type(&self, arg_types: &[DataType]) -> DfResult<DataType> {
        self.inner.inner().return_type(arg_types)
    }

    fn return_field_from_args(&self, args: ReturnFieldArgs) -> DfResult<FieldRef> {
        self.inner.inner().return_field_from_args(args)
    }

    fn is_strict(&self) -> bool {
        self.inner.inner().is_strict()
    }

    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> DfResult<ColumnarValue> {
        self.check(&args)?;
        self.inner.inner().invoke_with_args(args)
    }

    fn simplify(&self, args: Vec<Expr>, info: &SimplifyContext) -> DfResult<ExprSimplifyResult> {
        self.inner.inner().simplify(args, info)
    }

    fn short_circuits(&self) -> bool {
        self.inner.inner().short_circuits()
    }

    fn coerce_types(&self, arg_types: &[DataType]) -> DfResult<Vec<DataType>> {
        self.inner.inner().coerce_types(arg_types)
    }

    fn documentation(&self) -> Option<&Documentation> {
        self.inner.inner().documentation()
    }
}

/// `e` as an error of ours: a guard's refusal as it was written, else the engine's error.
pub fn engine_error(e: DataFusionError) -> Error {
    if let DataFusionError::External(inner) = e.find_root()
        && let Some(Error::Usage(why)) = inner.downcast_ref::<Error>()
    {
        return Error::Usage(why.clone());
    }
    Error::Engine(e)
}

/// The error for a query stopped by `limits`, if `e` is the memory pool's refusal (a usage
/// error that names the limit and what to do) or a guard's (as it was written). Other errors
/// pass through.
pub fn over_memory(e: Error, limits: &Limits) -> Error {
    let Error::Engine(df) = &e else {
        return e;
    };
    match df.find_root() {
        // A guard's refusal, as it was written.
        DataFusionError::External(inner) => match inner.downcast_ref::<Error>() {
            Some(Error::Usage(why)) => Error::Usage(why.clone()),
            _ => e,
        },
        DataFusionError::ResourcesExhausted(why) => Error::Usage(format!(
            "the query needs more memory than --memory-limit {} allows ({why}): raise the limit, or ask for less (fewer columns, a LIMIT, `--out FILE.parquet`, which streams)",
            human(limits.memory)
        )),
        _ => e,
    }
}

/// The error for a query that ran past `limits`' timeout.
pub fn over_time(limits: &Limits) -> Error {
    Error::Usage(format!(
        "the query ran past --query-timeout {} s and was stopped: raise the limit, or ask for less",
        limits.timeout.map_or(0.0, |t| t.as_secs_f64())
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_read_as_powers_of_1024() {
        assert_eq!(parse_size("2G"), Ok(2 << 30));
        assert_eq!(parse_size("512M"), Ok(512 << 20));
        assert_eq!(parse_size("512mib"), Ok(512 << 20));
        assert_eq!(parse_size("1.5GB"), Ok(3 << 29));
        assert_eq!(parse_size("1000"), Ok(1000));
        assert!(parse_size("0").is_err());
        assert!(parse_size("2X").is_err());
        assert!(parse_size("G").is_err());
        assert!(parse_size("-1G").is_err());
        assert!(parse_size("99999999T").is_err());
        assert_eq!(human(2 << 30), "2.0 GiB");
        assert_eq!(human(300), "300 B");
    }

    #[test]
    fn bounds_follow_the_arguments() {
        let one = |x: i128| PerRow::One(Some(x));
        // repeat('ab', 1e9): 2e9 bytes.
        assert_eq!(
            bound(Growth::Repeat, &[one(2), one(1_000_000_000)], (0, false), 0),
            Some(2_000_000_000)
        );
        // A replacement that shrinks or keeps the size stays the text's size.
        assert_eq!(
            bound(Growth::Replace, &[one(100), one(1), one(1)], (0, false), 0),
            Some(100)
        );
        assert_eq!(
            bound(Growth::Replace, &[one(100), one(4), one(1)], (0, false), 0),
            Some(100)
        );
        assert_eq!(
            bound(Growth::Replace, &[one(100), one(1), one(3)], (0, false), 0),
            Some(300)
        );
        // An empty `from` inserts between every character.
        assert_eq!(
            bound(Growth::Replace, &[one(3), one(0), one(2)], (0, false), 0),
            Some(11)
        );
        assert_eq!(
            bound(
                Growth::Series,
                &[one(1), one(1_000_000_001), one(10)],
                (0, false),
                0
            ),
            Some(800_000_008)
        );
        assert_eq!(
            bound(Growth::Series, &[one(1), one(5), one(0)], (0, false), 0),
            None
        );
        assert_eq!(
            bound(Growth::Pad, &[one(1), one(-5)], (0, false), 0),
            Some(0)
        );
    }
}
