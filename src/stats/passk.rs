//! The k-rollout estimators over one task with `n` graded rollouts of which `c` passed.
//!
//! - pass@k (Chen et al. 2021, unbiased): `1 − C(n−c, k) / C(n, k)`, the chance that at least one
//!   of k rollouts drawn without replacement passes.
//! - pass^k (τ-bench, Yao et al. 2024): `C(c, k) / C(n, k)`, the chance that all k pass.
//!
//! Neither is a plug-in power of the pass rate. Both divide exact binomial coefficients and round
//! once, as the reference's integer arithmetic does: the coefficients are exact in `u128` up to
//! about n = 125, and the division is correctly rounded; past that the product form is used
//! (equal to within a few ulps).

/// `C(n, k)` exactly, or `None` when it does not fit in a `u128`.
pub fn binomial(n: u64, k: u64) -> Option<u128> {
    if k > n {
        return Some(0);
    }
    let k = k.min(n - k);
    let mut acc: u128 = 1;
    for i in 0..k {
        // acc * (n - i) / (i + 1) stays an integer at every step.
        acc = acc.checked_mul(u128::from(n - i))? / u128::from(i + 1);
    }
    Some(acc)
}

/// `a / b` correctly rounded to the nearest f64 (ties to even), for `0 <= a <= b`, `b > 0`.
fn ratio(a: u128, b: u128) -> f64 {
    const EXACT: u128 = 1 << 53;
    if a == 0 {
        return 0.0;
    }
    if a == b {
        return 1.0;
    }
    if a <= EXACT && b <= EXACT {
        #[allow(clippy::cast_precision_loss)]
        return a as f64 / b as f64;
    }
    // Long division, one bit at a time, until 64 significant bits; then round to 53.
    let (mut r, mut zeros, mut m, mut bits) = (a, 0i32, 0u64, 0);
    while bits < 64 {
        r <<= 1;
        let bit = r >= b;
        if bit {
            r -= b;
        }
        if bits == 0 && !bit {
            zeros += 1;
            continue;
        }
        m = (m << 1) | u64::from(bit);
        bits += 1;
    }
    let sticky = r != 0;
    let low = m & 0x7ff;
    let mut top = m >> 11;
    if low > 0x400 || (low == 0x400 && (sticky || top & 1 == 1)) {
        top += 1;
    }
    #[allow(clippy::cast_precision_loss)]
    let mantissa = top as f64;
    mantissa * 2f64.powi(-(zeros + 53))
}

/// pass@k of one task, or `None` when `k > n` or `k == 0`.
pub fn pass_at_k(n: u64, c: u64, k: u64) -> Option<f64> {
    if k == 0 || k > n || c > n {
        return None;
    }
    match (binomial(n - c, k), binomial(n, k)) {
        (Some(fail), Some(all)) if all < (1 << 126) => Some(1.0 - ratio(fail, all)),
        _ => {
            // 1 − Π_{i=n−c+1..n} (1 − k/i)
            if n - c < k {
                return Some(1.0);
            }
            #[allow(clippy::cast_precision_loss)]
            let prod: f64 = (n - c + 1..=n).map(|i| 1.0 - k as f64 / i as f64).product();
            Some(1.0 - prod)
        }
    }
}

/// pass^k of one task, or `None` when `k > n` or `k == 0`.
pub fn pass_pow_k(n: u64, c: u64, k: u64) -> Option<f64> {
    if k == 0 || k > n || c > n {
        return None;
    }
    match (binomial(c, k), binomial(n, k)) {
        (Some(good), Some(all)) if all < (1 << 126) => Some(ratio(good, all)),
        _ => {
            if c < k {
                return Some(0.0);
            }
            // Π_{i=0..k−1} (c − i) / (n − i)
            #[allow(clippy::cast_precision_loss)]
            let prod: f64 = (0..k).map(|i| (c - i) as f64 / (n - i) as f64).product();
            Some(prod)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn small_cases_match_the_reference() {
        // pass^2 per task for (1,1,1,1), (1,0,1,0), (0,0,0,0), (1,1,0,1), (0,1,0,0): 1, 1/6, 0, 1/2, 0.
        assert_eq!(pass_pow_k(4, 4, 2), Some(1.0));
        assert_eq!(pass_pow_k(4, 2, 2), Some(1.0 / 6.0));
        assert_eq!(pass_pow_k(4, 3, 2), Some(0.5));
        assert_eq!(pass_pow_k(4, 1, 2), Some(0.0));
        // pass@2: 1, 5/6, 0, 1, 1/2.
        assert_eq!(pass_at_k(4, 2, 2), Some(1.0 - 1.0 / 6.0));
        assert_eq!(pass_at_k(4, 0, 2), Some(0.0));
        assert_eq!(pass_at_k(4, 3, 2), Some(1.0));
        assert_eq!(pass_at_k(4, 1, 2), Some(0.5));
        assert_eq!(pass_at_k(3, 1, 4), None);
    }

    #[test]
    fn correctly_rounded_division_agrees_with_plain_division_where_both_are_exact() {
        for n in 1..=60u64 {
            for k in 1..=n {
                for c in 0..=n {
                    let (good, all) = (binomial(c, k).unwrap(), binomial(n, k).unwrap());
                    if all <= 1 << 53 {
                        #[allow(clippy::cast_precision_loss)]
                        let plain = good as f64 / all as f64;
                        assert_eq!(ratio(good, all), plain, "{good}/{all}");
                    }
                }
            }
        }
    }

    #[test]
    fn long_division_rounds_correctly() {
        // 1/3 with a numerator and denominator above 2^53.
        let b: u128 = 3 << 60;
        assert_eq!(ratio(1 << 60, b), 1.0 / 3.0);
        assert_eq!(ratio((1 << 61) + (1 << 60), 1 << 62), 0.75);
        // Large n: the estimators stay in [0, 1] and ordered.
        let (n, c) = (200, 150);
        for k in [1, 2, 10, 50] {
            let (at, pow) = (pass_at_k(n, c, k).unwrap(), pass_pow_k(n, c, k).unwrap());
            assert!(
                (0.0..=1.0).contains(&at)
                    && (0.0..=1.0).contains(&pow)
                    && pow <= 0.75
                    && at >= 0.75
            );
        }
    }
}
