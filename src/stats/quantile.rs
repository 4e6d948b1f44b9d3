//! Normal and Student-t quantiles, and the noise band they give, as the reference computes them.
//!
//! At the 95% level the reference uses `z = 1.96` exactly and a printed t table for up to 30
//! degrees of freedom (then a Cornish–Fisher expansion); those values are kept here exactly, so
//! bands and verdicts agree to the last digit. Other levels use the exact distributions.

use statrs::distribution::{ContinuousCDF, Normal, StudentsT};

/// The 95% normal quantile the reference uses wherever the level is 0.95.
pub const Z_95: f64 = 1.96;

/// Two-sided 97.5% t quantiles for 1 to 30 degrees of freedom, as printed in tables.
const T_975: [f64; 30] = [
    12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228, 2.201, 2.179, 2.160,
    2.145, 2.131, 2.120, 2.110, 2.101, 2.093, 2.086, 2.080, 2.074, 2.069, 2.064, 2.060, 2.056,
    2.052, 2.048, 2.045, 2.042,
];

/// Why a quantile cannot be had.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum QuantileError {
    /// The level is not strictly between 0 and 1.
    #[error("a confidence level is strictly between 0 and 1, not {0}")]
    Level(f64),
    /// A run count below 1.
    #[error("each side needs at least one run, not {0}")]
    Runs(u32),
}

/// The two-sided normal quantile for `level`: 1.96 at exactly 0.95.
pub fn z_level(level: f64) -> Result<f64, QuantileError> {
    if !(level > 0.0 && level < 1.0) {
        return Err(QuantileError::Level(level));
    }
    if level == 0.95 {
        return Ok(Z_95);
    }
    Ok(Normal::standard().inverse_cdf(f64::midpoint(1.0, level)))
}

/// The two-sided Student-t quantile for `df` degrees of freedom (truncated, at least 1).
pub fn t_quantile(df: f64, level: f64) -> Result<f64, QuantileError> {
    if !(level > 0.0 && level < 1.0) {
        return Err(QuantileError::Level(level));
    }
    #[allow(
        clippy::cast_possible_truncation,
        clippy::cast_sign_loss,
        reason = "df is a small count, truncated as the reference's int(df)"
    )]
    let n = if df.is_finite() && df >= 1.0 {
        df as u64
    } else {
        1
    };
    if level == 0.95 {
        #[allow(clippy::cast_possible_truncation, reason = "n <= 30 here")]
        if n <= 30 {
            return Ok(T_975[n as usize - 1]);
        }
        #[allow(clippy::cast_precision_loss, reason = "n is a small count")]
        let n = n as f64;
        let z = Z_95;
        return Ok(z
            + (z.powi(3) + z) / (4.0 * n)
            + (5.0 * z.powi(5) + 16.0 * z.powi(3) + 3.0 * z) / (96.0 * n * n));
    }
    #[allow(clippy::cast_precision_loss, reason = "n is a small count")]
    let t = StudentsT::new(0.0, 1.0, n as f64).map_err(|_| QuantileError::Level(level))?;
    Ok(t.inverse_cdf(f64::midpoint(1.0, level)))
}

/// The smallest difference between two arms' means that re-running alone would not explain:
/// `q · run_std · sqrt(1/n_a + 1/n_b)`, with `q` normal, or Student-t at `df` when given.
pub fn noise_band(
    run_std: f64,
    n_a: u32,
    n_b: u32,
    df: Option<f64>,
    level: f64,
) -> Result<f64, QuantileError> {
    if n_a < 1 {
        return Err(QuantileError::Runs(n_a));
    }
    if n_b < 1 {
        return Err(QuantileError::Runs(n_b));
    }
    let q = match df {
        None => z_level(level)?,
        Some(df) => t_quantile(df, level)?,
    };
    Ok(q * run_std * (1.0 / f64::from(n_a) + 1.0 / f64::from(n_b)).sqrt())
}

/// The re-run sd of two arms measured from their eval runs' means, as `compare` pools it: each
/// arm's sample sd (rounded to 4 places, as the reference rounds it), pooled by degrees of
/// freedom, `sqrt((s_b²(n_b − 1) + s_a²(n_a − 1)) / (n_b + n_a − 2))`; `None` when an arm has
/// fewer than two runs.
pub fn pooled_run_std(before: &[f64], after: &[f64]) -> Option<f64> {
    let side = |v: &[f64]| super::sum::sample_sd(v).map(|s| (super::round_places(s, 4), v.len()));
    let (sb, nb) = side(before)?;
    let (sa, na) = side(after)?;
    #[allow(clippy::cast_precision_loss, reason = "run counts")]
    let (wb, wa) = ((nb - 1) as f64, (na - 1) as f64);
    Some(((sb * sb * wb + sa * sa * wa) / (wb + wa)).sqrt())
}

#[cfg(test)]
mod tests {
    use serde_json::Value;

    use super::*;

    fn vectors() -> Value {
        serde_json::from_str(include_str!("../../tests/fixtures/vectors_measure.json"))
            .expect("vectors")
    }

    #[test]
    fn t_quantiles_match_the_reference() {
        let v = vectors();
        for case in v["t_quantile_975"].as_array().expect("cases") {
            let df = case["df"].as_f64().expect("df");
            let want = case["t"].as_f64().expect("t");
            assert_eq!(t_quantile(df, 0.95), Ok(want), "df {df}");
        }
        // Other levels: the reference bisects to 1e-10; the exact distribution agrees to that.
        for case in v["t_quantile_other_level"].as_array().expect("cases") {
            let df = case["df"].as_f64().expect("df");
            let level = case["level"].as_f64().expect("level");
            let want = case["t"].as_f64().expect("t");
            let got = t_quantile(df, level).expect("quantile");
            assert!(
                (got - want).abs() < 1e-9,
                "df {df} level {level}: {got} vs {want}"
            );
        }
    }

    #[test]
    fn noise_bands_match_the_reference() {
        for case in vectors()["noise_band"].as_array().expect("cases") {
            let a = &case["args"];
            let got = noise_band(
                a["run_std"].as_f64().expect("std"),
                u32::try_from(a["n_a"].as_u64().expect("n_a")).expect("small"),
                u32::try_from(a["n_b"].as_u64().expect("n_b")).expect("small"),
                a["df"].as_f64(),
                a["level"].as_f64().expect("level"),
            )
            .expect("band");
            let want = case["band"].as_f64().expect("band");
            assert!((got - want).abs() < 1e-12, "{a}: {got} vs {want}");
        }
        assert_eq!(
            noise_band(0.05, 0, 1, None, 0.95),
            Err(QuantileError::Runs(0))
        );
        assert_eq!(z_level(1.0), Err(QuantileError::Level(1.0)));
    }
}
