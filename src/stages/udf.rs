//! Scalar functions registered in every session.
//!
//! - `wilson_low(successes, n)` and `wilson_high(successes, n)`: the bounds of the 95% Wilson
//!   interval ([`crate::stats::wilson`]), null when `n <= 0` or either argument is null. Numeric
//!   arguments of any type are coerced to `DOUBLE`.

use std::sync::Arc;

use datafusion::arrow::array::{ArrayRef, AsArray, Float64Array};
use datafusion::arrow::datatypes::{DataType, Float64Type};
use datafusion::common::Result as DfResult;
use datafusion::logical_expr::{
    ColumnarValue, ScalarFunctionArgs, ScalarUDF, ScalarUDFImpl, Signature, Volatility,
};

use crate::stats::wilson;

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
