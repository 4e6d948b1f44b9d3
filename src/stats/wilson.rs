//! The Wilson score interval for a binomial proportion.
//!
//! With `p = s/n`: `denom = 1 + z²/n`, `center = (p + z²/(2n)) / denom`,
//! `half = z·sqrt(p(1−p)/n + z²/(4n²)) / denom`, clipped to `[0, 1]`. `None` when `n <= 0`.
//! The operations run in the reference's order, so the bounds agree with it bit for bit.

/// The z the reference uses for a 95% interval (exactly 1.96, not the normal quantile).
pub const Z_95: f64 = 1.96;

/// The Wilson interval `(low, high)` for `successes` out of `n`, or `None` when `n <= 0`.
pub fn interval(successes: f64, n: f64, z: f64) -> Option<(f64, f64)> {
    if n <= 0.0 || n.is_nan() || successes.is_nan() {
        return None;
    }
    let p = successes / n;
    let z2 = z * z;
    let denom = 1.0 + z2 / n;
    let center = (p + z2 / (2.0 * n)) / denom;
    let half = z * (p * (1.0 - p) / n + z2 / (4.0 * n * n)).sqrt() / denom;
    Some(((center - half).max(0.0), (center + half).min(1.0)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn matches_the_reference_vectors() {
        assert_eq!(
            interval(20.0, 20.0, Z_95),
            Some((0.838_869_874_505_066_7, 1.0))
        );
        assert_eq!(
            interval(14.0, 14.0, Z_95),
            Some((0.784_682_988_072_818_6, 1.0))
        );
        assert_eq!(
            interval(16.0, 16.0, Z_95),
            Some((0.806_386_581_727_280_2, 1.0))
        );
        assert_eq!(
            interval(25.0, 30.0, Z_95),
            Some((0.664_352_948_143_198_2, 0.926_635_657_596_483_1))
        );
        assert_eq!(
            interval(36.0, 40.0, Z_95),
            Some((0.769_479_256_195_261_1, 0.960_421_112_404_425_2))
        );
        assert_eq!(
            interval(0.0, 10.0, Z_95),
            Some((0.0, 0.277_540_168_766_616_6))
        );
        assert_eq!(
            interval(5.0, 10.0, Z_95),
            Some((0.236_589_593_615_487_31, 0.763_410_406_384_512_6))
        );
        assert_eq!(interval(0.0, 0.0, Z_95), None);
    }
}
