//! The row memo: a rerun finds a row's cached reply without making its request again.
//!
//! The cache is keyed by the request ([`crate::models::cache::key`]), and making a row's request
//! is most of a cached rerun's work: the row made a JSON object, its payload written and cut to
//! the budget, the body serialised and hashed (about 25 µs a row, against a few for what is
//! left). So the judge also records, for every row it asked about, a digest of the row and of
//! everything its request is made from, beside the request's key
//! ([`crate::models::cache::Cache::memo_put_many`]). A rerun digests each row, looks the digest up, and
//! reads the reply under the key it finds; a digest it does not find, or a key whose reply is
//! gone, takes the full path.
//!
//! The digest is the SHA-256 of:
//! - the judge's salt ([`salt`]): [`MEMO_VERSION`], wai's version, the key of the judge's request
//!   with an empty user message (provider, model, URL, system prompt with its rubric, the reply
//!   budget, the dialect), and what the user message is made from beside the row (policy, tools,
//!   payload budget, privileged context);
//! - the batch's column names and types;
//! - the row's values in Arrow's row format ([`RowConverter`]), every column.
//!
//! A row the digest cannot be taken of (a column type the row format does not take) is not
//! memoised. The reply is read and the verdict made from it as on the full path, so only the
//! request is taken on trust: a change to how a request is made from a row must bump
//! [`MEMO_VERSION`] (a test pins the request of a fixed row to catch one).

use datafusion::arrow::array::RecordBatch;
use datafusion::arrow::row::{RowConverter, SortField};
use rayon::prelude::*;
use sha2::{Digest, Sha256};

/// The memo's own version: bump it when a row's request is made differently.
pub(super) const MEMO_VERSION: u32 = 1;

/// Rows put in the row format at once (bounds the memory a batch's digests take).
const CHUNK: usize = 1024;

/// A length-prefixed part of a digest.
fn part(h: &mut Sha256, bytes: &[u8]) {
    h.update((bytes.len() as u64).to_le_bytes());
    h.update(bytes);
}

/// The judge's salt from `empty_request_key` (its request with an empty user message) and what
/// a user message is made from beside the row.
pub(super) fn salt(
    empty_request_key: &[u8; 32],
    policy: &str,
    tools: &[serde_json::Value],
    payload_chars: usize,
    use_privileged: bool,
) -> [u8; 32] {
    let mut h = Sha256::new();
    part(&mut h, &MEMO_VERSION.to_le_bytes());
    part(&mut h, env!("CARGO_PKG_VERSION").as_bytes());
    part(&mut h, empty_request_key);
    part(&mut h, policy.as_bytes());
    part(
        &mut h,
        serde_json::to_string(tools).unwrap_or_default().as_bytes(),
    );
    part(&mut h, &(payload_chars as u64).to_le_bytes());
    part(&mut h, &[u8::from(use_privileged)]);
    h.finalize().into()
}

/// Each row's digest under `salt`, in order; `None` when a column's type is not one the row
/// format takes.
pub(super) fn digests(salt: &[u8; 32], batch: &RecordBatch) -> Option<Vec<[u8; 32]>> {
    let schema = batch.schema();
    let fields: Vec<SortField> = schema
        .fields()
        .iter()
        .map(|f| SortField::new(f.data_type().clone()))
        .collect();
    if !RowConverter::supports_fields(&fields) {
        return None;
    }
    let converter = RowConverter::new(fields).ok()?;
    let mut head = Sha256::new();
    part(&mut head, salt);
    for f in schema.fields() {
        part(&mut head, f.name().as_bytes());
        part(&mut head, format!("{}", f.data_type()).as_bytes());
    }
    let mut out = Vec::with_capacity(batch.num_rows());
    let mut at = 0;
    while at < batch.num_rows() {
        let len = CHUNK.min(batch.num_rows() - at);
        let rows = converter
            .convert_columns(batch.slice(at, len).columns())
            .ok()?;
        out.par_extend((0..len).into_par_iter().map(|i| {
            let mut h = head.clone();
            part(&mut h, rows.row(i).as_ref());
            <[u8; 32]>::from(h.finalize())
        }));
        at += len;
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use datafusion::arrow::array::{ArrayRef, Int64Array, StringArray};
    use datafusion::arrow::datatypes::{DataType, Field, Schema};

    use super::*;

    fn batch(names: &[&str], prompts: &[Option<&str>], ids: &[i64]) -> RecordBatch {
        let schema = Schema::new(vec![
            Field::new(names[0], DataType::Utf8, true),
            Field::new(names[1], DataType::Int64, false),
        ]);
        let cols: Vec<ArrayRef> = vec![
            Arc::new(StringArray::from(prompts.to_vec())),
            Arc::new(Int64Array::from(ids.to_vec())),
        ];
        RecordBatch::try_new(Arc::new(schema), cols).unwrap()
    }

    #[test]
    fn a_digest_follows_the_row_its_columns_and_the_salt_not_its_batch() {
        let salt = [7u8; 32];
        let names = ["prompt", "n"];
        let a = digests(
            &salt,
            &batch(&names, &[Some("a"), Some("b"), None], &[1, 2, 3]),
        )
        .unwrap();
        // The same row in another batch, at another place: the same digest.
        let b = digests(&salt, &batch(&names, &[Some("b")], &[2])).unwrap();
        assert_eq!(a[1], b[0]);
        // Every other row, a null, another salt, another column name: another digest.
        assert_ne!(a[0], a[1]);
        assert_ne!(
            a[2],
            digests(&salt, &batch(&names, &[Some("")], &[3])).unwrap()[0]
        );
        assert_ne!(
            digests(&[8u8; 32], &batch(&names, &[Some("b")], &[2])).unwrap()[0],
            b[0]
        );
        assert_ne!(
            digests(&salt, &batch(&["prompt", "m"], &[Some("b")], &[2])).unwrap()[0],
            b[0]
        );
        // Past one chunk the rows keep their order.
        let many: Vec<Option<String>> = (0..CHUNK + 5).map(|i| Some(format!("p{i}"))).collect();
        let many: Vec<Option<&str>> = many.iter().map(|s| s.as_deref()).collect();
        let ids: Vec<i64> = (0..CHUNK + 5).map(|i| i64::try_from(i).unwrap()).collect();
        let d = digests(&salt, &batch(&names, &many, &ids)).unwrap();
        let last = CHUNK + 4;
        let alone = digests(&salt, &batch(&names, &[many[last]], &[ids[last]])).unwrap();
        assert_eq!(d[last], alone[0]);
    }

    #[test]
    fn the_salt_follows_what_a_request_is_made_from() {
        let base = salt(&[1; 32], "p", &[], 8000, false);
        assert_eq!(base, salt(&[1; 32], "p", &[], 8000, false));
        for other in [
            salt(&[2; 32], "p", &[], 8000, false),
            salt(&[1; 32], "q", &[], 8000, false),
            salt(
                &[1; 32],
                "p",
                &[serde_json::json!({"name": "t"})],
                8000,
                false,
            ),
            salt(&[1; 32], "p", &[], 4000, false),
            salt(&[1; 32], "p", &[], 8000, true),
        ] {
            assert_ne!(base, other);
        }
    }
}
