//! Reading a summary of every row, in file order, decoding few columns: the leaf columns a
//! summary needs are read first (a local Parquet file's row groups each summarized where they
//! are decoded, into its own part of the result, from the footer's row counts); the rows the
//! summarizer leaves to the general path are then read whole. `select` reads its row summaries
//! this way.

use datafusion::arrow::array::RecordBatch;
use rayon::prelude::*;

use super::read::{LocalParquet, Reader};
use super::row::BatchView;
use super::source::Input;
use crate::error::{Error, Result};

/// Fills the slots of a batch's rows with their summaries (`None`: the row needs the general
/// path).
pub type Fill<'a, T> = dyn Fn(&RecordBatch, &mut [Option<T>]) -> Result<()> + Sync + 'a;

/// The summary of row `i` of a whole-row batch.
pub type General<'a, T> = dyn Fn(&BatchView<'_>, usize) -> Result<T> + Sync + 'a;

/// Every row's summary from `inputs` (Parquet files) in order, and each file's row count (the
/// summaries made by `fill` from a batch of the `leaves` columns, or by `general` from the
/// whole row where `fill` leaves a `None`). The
/// first reading decodes only `leaves` (about a third less to decode than every column); the
/// rows the column path leaves to the general one (no messages, or an `extra` that overrides a
/// column) are then read whole, alone, and summarized the general way.
///
/// # Errors
/// A read failure, or a file that changed between the two readings.
pub fn read_summaries<T: Send>(
    reader: &mut Reader<'_>,
    inputs: &[Input],
    leaves: &[&str],
    fill: &Fill<'_, T>,
    general: &General<'_, T>,
) -> Result<(Vec<T>, Vec<usize>)> {
    // Sized up front: grown by doubling, a million summaries were copied about twice over into
    // fresh pages (a fifth of the first reading's page faults).
    let files = inputs
        .iter()
        .map(LocalParquet::open)
        .collect::<Result<Vec<_>>>()?;
    let groups: Vec<Option<Vec<usize>>> = files
        .iter()
        .map(|f| f.as_ref().map(LocalParquet::group_rows))
        .collect();
    let rows = groups.iter().flatten().flatten().sum();
    let mut infos: Vec<Option<T>> = Vec::with_capacity(rows);
    let mut counts = Vec::with_capacity(inputs.len());
    for ((input, file), groups) in inputs.iter().zip(&files).zip(groups) {
        let before = infos.len();
        if let (Some(file), Some(groups)) = (file, groups) {
            // A local file: its row groups are summarized where they are decoded, each into
            // its own part of the vector (the decoders do not wait on one consumer).
            let rows: usize = groups.iter().sum();
            // Written in parallel: the first touch of a few hundred megabytes is page faults,
            // taken on every core.
            infos.par_extend((0..rows).into_par_iter().map(|_| None));
            let mut parts = Vec::with_capacity(groups.len());
            let mut rest = &mut infos[before..];
            for n in groups {
                let (part, after) = rest.split_at_mut(n);
                parts.push(std::sync::Mutex::new(part));
                rest = after;
            }
            let summarize = |group: usize, at: usize, batch: RecordBatch| -> Result<()> {
                let mut part = parts[group]
                    .lock()
                    .map_err(|_| Error::Internal("a summarizing thread panicked".into()))?;
                let slots = part.get_mut(at..at + batch.num_rows()).ok_or_else(|| {
                    Error::Internal(format!(
                        "`{}`: row group {group} has more rows than its footer says",
                        input.display
                    ))
                })?;
                fill(&batch, slots)
            };
            reader.par_leaves(file, leaves, &summarize)?;
            counts.push(rows);
            continue;
        }
        reader.read_leaves(input, leaves, &mut |batch| {
            let start = infos.len();
            infos.resize_with(start + batch.num_rows(), || None);
            fill(&batch, &mut infos[start..])
        })?;
        counts.push(infos.len() - before);
    }
    // The rows left to the general path, read whole.
    let rest: Vec<usize> = (0..infos.len()).filter(|&i| infos[i].is_none()).collect();
    tracing::info!(
        rows = infos.len(),
        object_path = rest.len(),
        "summaries read from the columns; rows read whole for the object path (a tool_trace for steps, an extra field over a column)"
    );
    if !rest.is_empty() {
        let (batches, at) = reader.read_positions(inputs, &counts, &rest)?;
        let views = batches
            .iter()
            .map(BatchView::new)
            .collect::<Result<Vec<_>>>()?;
        let general: Vec<T> = at
            .par_iter()
            .map(|&(b, j)| general(&views[b], j))
            .collect::<Result<_>>()?;
        for (i, info) in rest.into_iter().zip(general) {
            infos[i] = Some(info);
        }
    }
    let infos = infos
        .into_iter()
        .map(|i| i.ok_or_else(|| Error::Internal("a row without a summary".into())))
        .collect::<Result<_>>()?;
    Ok((infos, counts))
}
