//! Correctly rounded floating-point sums (Shewchuk's exact partials, as Python's `math.fsum`).
//!
//! A mean over tasks must not depend on the order the tasks arrive in (partitions, threads,
//! sort order). A correctly rounded sum is the one order-free answer, and it equals the plain
//! left-to-right sum whenever that sum is exact (every reference vector).

/// The correctly rounded sum of `values` (finite inputs).
pub fn fsum(values: impl IntoIterator<Item = f64>) -> f64 {
    let mut p = Partials::default();
    for x in values {
        p.add(x);
    }
    p.value()
}

/// An exact running sum: non-overlapping partials whose sum is the sum of every value added, so
/// two of them merge exactly ([`Partials::merge`]) and the correctly rounded value does not
/// depend on the order the values came in.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Partials(Vec<f64>);

impl Partials {
    /// Adds `x` (finite) exactly.
    pub fn add(&mut self, mut x: f64) {
        let partials = &mut self.0;
        let mut i = 0;
        for j in 0..partials.len() {
            let mut y = partials[j];
            if x.abs() < y.abs() {
                std::mem::swap(&mut x, &mut y);
            }
            let hi = x + y;
            let lo = y - (hi - x);
            if lo != 0.0 {
                partials[i] = lo;
                i += 1;
            }
            x = hi;
        }
        partials.truncate(i);
        partials.push(x);
    }

    /// Adds every value `other` holds.
    pub fn merge(&mut self, other: &[f64]) {
        for x in other {
            self.add(*x);
        }
    }

    /// The partials, smallest first.
    pub fn parts(&self) -> &[f64] {
        &self.0
    }

    /// Whether the sum went past the largest double on the way (a partial is infinite): its
    /// [`Partials::value`] is then not the sum, and depends on the order the values came in.
    pub fn overflowed(&self) -> bool {
        self.0.iter().any(|p| !p.is_finite())
    }

    /// The bytes the partials hold on the heap.
    pub fn heap_bytes(&self) -> usize {
        self.0.capacity() * size_of::<f64>()
    }

    /// The correctly rounded sum.
    pub fn value(&self) -> f64 {
        let partials = &self.0;
        // Add the partials from the top, rounding the last step half-to-even as fsum does.
        let mut n = partials.len();
        if n == 0 {
            return 0.0;
        }
        n -= 1;
        let mut hi = partials[n];
        let mut lo = 0.0;
        while n > 0 {
            let x = hi;
            n -= 1;
            let y = partials[n];
            hi = x + y;
            let yr = hi - x;
            lo = y - yr;
            if lo != 0.0 {
                break;
            }
        }
        if n > 0 && ((lo < 0.0 && partials[n - 1] < 0.0) || (lo > 0.0 && partials[n - 1] > 0.0)) {
            let y = lo * 2.0;
            let x = hi + y;
            let yr = x - hi;
            if y == yr {
                hi = x;
            }
        }
        hi
    }
}

/// The correctly rounded mean, or `None` for no values.
pub fn mean(values: &[f64]) -> Option<f64> {
    (!values.is_empty()).then(|| fsum(values.iter().copied()) / values.len() as f64)
}

/// The sample standard deviation (n − 1) with correctly rounded sums, or `None` under two values.
pub fn sample_sd(values: &[f64]) -> Option<f64> {
    if values.len() < 2 {
        return None;
    }
    let mean = mean(values)?;
    #[allow(clippy::cast_precision_loss, reason = "a count")]
    let n = values.len() as f64;
    Some((fsum(values.iter().map(|v| (v - mean) * (v - mean))) / (n - 1.0)).sqrt())
}

/// The population variance (n) with correctly rounded sums, or `None` for no values.
pub fn population_var(values: &[f64]) -> Option<f64> {
    let mean = mean(values)?;
    #[allow(clippy::cast_precision_loss, reason = "a count")]
    let n = values.len() as f64;
    Some(fsum(values.iter().map(|v| (v - mean) * (v - mean))) / n)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn partials_merged_in_any_order_give_one_sum() {
        let values: Vec<f64> = (1..200)
            .map(|i| 1.0 / f64::from(i) * 1e-3 + 1e6 * f64::from(i % 3))
            .collect();
        let whole = fsum(values.iter().copied());
        for cut in [1, 50, 123, 198] {
            let (mut a, mut b) = (Partials::default(), Partials::default());
            values[..cut].iter().for_each(|x| a.add(*x));
            values[cut..].iter().rev().for_each(|x| b.add(*x));
            let mut ab = a.clone();
            ab.merge(b.parts());
            b.merge(a.parts());
            assert_eq!(ab.value(), whole);
            assert_eq!(b.value(), whole);
        }
    }

    #[test]
    fn exact_where_plain_sums_are_not() {
        assert_eq!(fsum([0.1; 10]), 1.0);
        assert_ne!([0.1; 10].iter().sum::<f64>(), 1.0);
        assert_eq!(fsum([1e100, 1.0, -1e100, 1e-100]), 1.0);
        assert_eq!(fsum([]), 0.0);
    }

    #[test]
    fn spreads_match_the_textbook() {
        assert_eq!(sample_sd(&[1.0]), None);
        assert_eq!(
            sample_sd(&[2.0, 4.0, 4.0, 4.0, 5.0, 5.0, 7.0, 9.0]),
            Some((32.0f64 / 7.0).sqrt())
        );
        assert_eq!(
            population_var(&[2.0, 4.0, 4.0, 4.0, 5.0, 5.0, 7.0, 9.0]),
            Some(4.0)
        );
    }

    #[test]
    fn order_does_not_matter() {
        let v: Vec<f64> = (1..200).map(|i| 1.0 / f64::from(i)).collect();
        let mut r = v.clone();
        r.reverse();
        assert_eq!(fsum(v.iter().copied()), fsum(r));
    }
}
