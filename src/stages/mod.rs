//! Operators over rows. Each stage plans a `DataFrame` and reports what it found; stages know
//! nothing about files, the command line or progress bars. [`stage`] is the contract every
//! stage keeps: [`Stage`], its [`Options`], the [`Session`] it runs in, and [`run`].

mod cells;
pub mod compare;
mod conversation;
pub mod coverage;
pub mod decontaminate;
pub mod embed;
pub mod ending;
pub mod export;
pub mod grade;
pub mod hack_scan;
pub mod holdout;
pub mod init_evals;
pub(crate) mod json_string;
pub mod judge_trust;
pub mod labels;
pub mod leak;
pub mod markers;
pub mod messages;
pub mod normalize;
pub mod pass_at;
pub mod select;
pub mod simulate;
pub mod stage;
pub mod task_key;
pub mod terms;
pub mod udaf;
pub mod udf;
pub mod variance;

pub use stage::{Options, Session, Stage, run};

/// The most bootstrap draws an interval takes: 10,000 already give bounds steady to the third
/// decimal, and each draw resamples every task (a billion would not finish, or fill memory).
pub const MAX_DRAWS: u32 = 1_000_000;

/// Refuses option `key` (a size) over `max`, saying why the bound is there: `must be at most
/// 1,000,000, not 1,000,000,000: WHY`.
///
/// # Errors
/// `value` is over `max`.
pub fn at_most(key: &str, value: u64, max: u64, why: &str) -> crate::error::Result<()> {
    if value <= max {
        return Ok(());
    }
    Err(crate::error::Error::option(
        key,
        format!(
            "must be at most {}, not {}: {why}",
            grouped(max),
            grouped(value)
        ),
    ))
}

/// `n` with a comma between each group of three digits.
pub fn grouped(n: u64) -> String {
    let digits = n.to_string();
    let mut out = String::with_capacity(digits.len() + digits.len() / 3);
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

#[cfg(test)]
mod tests {
    #[test]
    fn sizes_over_their_bound_say_both_and_why() {
        assert_eq!(super::grouped(1_000_000_000), "1,000,000,000");
        assert_eq!(super::grouped(999), "999");
        assert!(super::at_most("draws", 5, 5, "x").is_ok());
        let e = super::at_most("draws", 1_000_000_000, 1_000_000, "too many")
            .unwrap_err()
            .to_string();
        assert_eq!(
            e,
            "option `draws` must be at most 1,000,000, not 1,000,000,000: too many"
        );
    }
}
