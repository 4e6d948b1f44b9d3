//! What a Parquet reading decodes: the leaves it projects, whether it is partial, and whether
//! its text is decoded as views.

use datafusion::arrow::array::RecordBatch;

use datafusion::arrow::datatypes::{DataType, Schema};
use datafusion::parquet::arrow::ProjectionMask;
use datafusion::parquet::schema::types::SchemaDescriptor;

/// What a decoding thread sends: a batch of its row group, or the row group's end.
pub(super) enum Piece {
    Batch(RecordBatch),
    End,
}

/// What to read of a Parquet file: which rows, which leaf columns (`None`: all).
#[derive(Clone, Copy, Default)]
pub(super) struct Plan<'a> {
    pub(super) rows: Option<&'a [bool]>,
    pub(super) leaves: Option<&'a [&'a str]>,
    /// Text stays as views (the consumer reads [`crate::pipeline::row::Text`]).
    pub(super) views: bool,
}

impl Plan<'_> {
    /// Some rows or some columns, not the whole file.
    pub(super) fn is_partial(&self) -> bool {
        self.rows.is_some() || self.leaves.is_some()
    }

    /// Text is decoded as views (see [`decoding`]).
    pub(super) fn decodes_views(&self) -> bool {
        self.views || self.is_partial()
    }
}

/// The projection of the leaf columns named by their field paths, lists looked through
/// (`messages.content`, `messages.tool_calls.name`), whatever names the file's writer gave its
/// list wrappers (`list.item`, `list.element`, ...): the leaves are walked in the Arrow schema,
/// in the order the Parquet schema holds them. `None` (read every column) when the two do not
/// line up.
pub(super) fn projection(
    parquet: &SchemaDescriptor,
    arrow: &Schema,
    leaves: &[&str],
) -> Option<ProjectionMask> {
    fn walk(path: &str, ty: &DataType, out: &mut Vec<String>) {
        match ty {
            DataType::Struct(fields) => {
                for f in fields {
                    walk(&format!("{path}.{}", f.name()), f.data_type(), out);
                }
            }
            DataType::List(f)
            | DataType::LargeList(f)
            | DataType::ListView(f)
            | DataType::LargeListView(f)
            | DataType::FixedSizeList(f, _) => walk(path, f.data_type(), out),
            DataType::Map(entries, _) => walk(path, entries.data_type(), out),
            _ => out.push(path.to_owned()),
        }
    }
    let mut paths = Vec::with_capacity(parquet.num_columns());
    for f in arrow.fields() {
        walk(f.name(), f.data_type(), &mut paths);
    }
    if paths.len() != parquet.num_columns() {
        return None;
    }
    let included: Vec<bool> = paths.iter().map(|p| leaves.contains(&p.as_str())).collect();
    // A field left out wholly is filled with nulls, so it must take them.
    let mut next = included.iter().copied();
    for f in arrow.fields() {
        let (any, _, fillable) = fill_check(f.data_type(), &mut next);
        if !fillable || (!any && !f.is_nullable()) {
            return None;
        }
    }
    let picked = (0..included.len()).filter(|&i| included[i]);
    Some(ProjectionMask::leaves(parquet, picked))
}

/// For a field of type `ty` whose leaves' inclusion `next` yields in order: whether any of its
/// leaves is included, whether all are, and whether every part of it left out wholly can be
/// filled with nulls (a struct read in part fills its left-out children; a part left out
/// wholly is filled by its parent; a map or another kind of list is read whole or not at all).
fn fill_check(ty: &DataType, next: &mut impl Iterator<Item = bool>) -> (bool, bool, bool) {
    match ty {
        DataType::Struct(fields) => {
            let parts: Vec<((bool, bool, bool), bool)> = fields
                .iter()
                .map(|f| (fill_check(f.data_type(), next), f.is_nullable()))
                .collect();
            let any = parts.iter().any(|((a, _, _), _)| *a);
            let all = parts.iter().all(|((_, l, _), _)| *l);
            let ok = parts.iter().all(|((_, _, o), _)| *o)
                && (!any || parts.iter().all(|((a, _, _), nullable)| *a || *nullable));
            (any, all, ok)
        }
        DataType::List(f) | DataType::LargeList(f) => fill_check(f.data_type(), next),
        DataType::Map(f, _)
        | DataType::ListView(f)
        | DataType::LargeListView(f)
        | DataType::FixedSizeList(f, _) => {
            let (any, all, ok) = fill_check(f.data_type(), next);
            (any, all, ok && (!any || all))
        }
        _ => {
            let included = next.next().unwrap_or(false);
            (included, included, true)
        }
    }
}
