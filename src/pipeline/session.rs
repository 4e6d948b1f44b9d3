//! The DataFusion session every query runs in: JSON functions registered, object stores
//! registered as inputs need them, SQL read-only.

use std::sync::Arc;

use datafusion::datasource::file_format::parquet::ParquetFormat;
use datafusion::datasource::listing::{
    ListingOptions, ListingTable, ListingTableConfig, ListingTableUrl,
};
use datafusion::execution::context::{SQLOptions, SessionConfig, SessionContext};

use super::limits::Limits;
use super::source::{Format, Input, Location};
use crate::error::{Error, Result};

/// A session with the JSON functions (`json_get_str`, `json_get_float`, `->`, `->>`, ...)
/// registered. `target_partitions` of `None` uses every core. The functions that can build a huge
/// value from small arguments are guarded for the default memory limit ([`super::limits`]); the
/// session's memory is not pooled (stages size their own work).
pub fn new_context(target_partitions: Option<usize>) -> Result<SessionContext> {
    let runtime = Arc::new(datafusion::execution::runtime_env::RuntimeEnv::default());
    let memory = super::limits::default_memory();
    let ctx = super::cluster::context(session_config(target_partitions), runtime, Some(memory))?;
    finish(ctx, memory)
}

/// A session for a user's query (`wai sql`, a SQL query judge): as [`new_context`], with its
/// operators and guarded functions held to `limits.memory` (DataFusion's memory pool). Past the
/// limit a query fails with a memory error; nothing spills to disk. DataFusion 55's
/// `RepartitionExec` can deadlock when two of its inputs spill at once (apache/datafusion#24883,
/// fixed after 55.2 by #24891): a grouped query under a small limit then waited forever, about
/// one run in three here. Without a disk manager nothing spills, so it fails instead.
pub fn limited_context(
    target_partitions: Option<usize>,
    limits: &Limits,
) -> Result<SessionContext> {
    use datafusion::execution::disk_manager::{DiskManagerBuilder, DiskManagerMode};
    let memory = usize::try_from(limits.memory).unwrap_or(usize::MAX);
    let runtime = datafusion::execution::runtime_env::RuntimeEnvBuilder::new()
        .with_memory_limit(memory, 1.0)
        .with_disk_manager_builder(
            DiskManagerBuilder::default().with_mode(DiskManagerMode::Disabled),
        )
        .build_arc()?;
    let ctx = super::cluster::context(
        session_config(target_partitions),
        runtime,
        Some(limits.memory),
    )?;
    finish(ctx, limits.memory)
}

fn session_config(target_partitions: Option<usize>) -> SessionConfig {
    let mut config = SessionConfig::new().with_information_schema(true);
    // Read strings as the row schema types them (Utf8), not as views, so stage schema checks and
    // the UDF signatures see one type for one column whatever file it came from.
    config
        .options_mut()
        .execution
        .parquet
        .schema_force_view_types = false;
    if let Some(n) = target_partitions {
        config = config.with_target_partitions(n.max(1));
    }
    config
}

/// Registers the JSON functions and ours in `ctx`, then guards the growing functions for
/// `memory`.
fn finish(mut ctx: SessionContext, memory: u64) -> Result<SessionContext> {
    register_functions(&mut ctx, memory)?;
    Ok(ctx)
}

/// Registers in `ctx` every function a wai session has (the JSON functions, wai's scalar and
/// aggregate functions) and guards the growing ones for `memory`: a coordinator's sessions and a
/// worker's alike.
///
/// # Errors
/// A function cannot be registered.
pub(crate) fn register_functions(ctx: &mut SessionContext, memory: u64) -> Result<()> {
    datafusion_functions_json::register_all(ctx)?;
    for udf in crate::stages::udf::all() {
        ctx.register_udf(udf);
    }
    for udaf in crate::stages::udaf::all() {
        ctx.register_udaf(udaf);
    }
    super::limits::guard(ctx, memory)
}

/// Turns on Parquet late materialization for `ctx`: a filter is applied to its own columns before
/// the other columns of a row group are decoded. Worth it for selective filters (a few labeled
/// rows among millions), so stages ask for it rather than every session having it.
///
/// # Errors
/// The setting is refused.
pub async fn late_materialization(ctx: &SessionContext) -> Result<()> {
    ctx.sql("SET datafusion.execution.parquet.pushdown_filters = true")
        .await?
        .collect()
        .await?;
    Ok(())
}

/// Keeps each scan partition of `ctx` on its own contiguous range of the files, in order: turns
/// off round-robin repartitioning (which deals the batches of a one-partition scan out to the
/// cores) and the file stream's work stealing (with which whichever partition is idle first
/// takes the next file range, so partition 0 may read the second half of a file).
pub(crate) async fn keep_file_order(ctx: &SessionContext) -> Result<()> {
    for setting in [
        "SET datafusion.optimizer.enable_round_robin_repartition = false",
        "SET datafusion.execution.enable_file_stream_work_stealing = false",
    ] {
        ctx.sql(setting).await?.collect().await?;
    }
    Ok(())
}

/// The batches of `sql` on `ctx` in file order, whatever the core count: scan partitions are
/// contiguous ranges of the files, and round-robin repartitioning (which deals a one-partition
/// scan's batches out to the cores) is turned off for the session, so reading the partitions in
/// turn gives the rows in order. For queries without `ORDER BY` whose consumer depends on order.
///
/// # Errors
/// A query failure.
pub async fn collect_in_file_order(
    ctx: &SessionContext,
    sql: &str,
) -> Result<Vec<datafusion::arrow::array::RecordBatch>> {
    // A distributed scan returns a file's ranges in no fixed order: read here.
    let ctx = &super::cluster::here(ctx);
    keep_file_order(ctx).await?;
    let partitions = ctx.sql(sql).await?.collect_partitioned().await?;
    Ok(partitions.into_iter().flatten().collect())
}

/// The partitions of `sql` on `ctx`, in file order, each decoding on its own task into a buffer
/// of two batches (a closed receiver stops its decoding).
async fn decoding_ahead(
    ctx: &SessionContext,
    sql: &str,
) -> Result<
    Vec<
        futures::channel::mpsc::Receiver<
            datafusion::error::Result<datafusion::arrow::array::RecordBatch>,
        >,
    >,
> {
    use futures::{SinkExt, StreamExt};
    // A distributed scan returns a file's ranges in no fixed order: read here.
    let ctx = &super::cluster::here(ctx);
    keep_file_order(ctx).await?;
    let streams = ctx.sql(sql).await?.execute_stream_partitioned().await?;
    Ok(streams
        .into_iter()
        .map(|mut stream| {
            let (mut tx, rx) = futures::channel::mpsc::channel(2);
            tokio::spawn(async move {
                while let Some(batch) = stream.next().await {
                    let failed = batch.is_err();
                    if tx.send(batch).await.is_err() || failed {
                        break;
                    }
                }
            });
            rx
        })
        .collect())
}

/// Calls `f` on the batches of `sql` on `ctx` in file order (as [`collect_in_file_order`]),
/// holding only a few batches at a time: each partition decodes ahead into a small buffer while
/// the partitions before it are consumed.
///
/// # Errors
/// A query failure, or the first error of `f`.
pub async fn for_each_in_file_order(
    ctx: &SessionContext,
    sql: &str,
    mut f: impl FnMut(datafusion::arrow::array::RecordBatch) -> Result<()>,
) -> Result<()> {
    use futures::StreamExt;
    for mut rx in decoding_ahead(ctx, sql).await? {
        while let Some(batch) = rx.next().await {
            f(batch?)?;
        }
    }
    Ok(())
}

/// The result of `sql` on `ctx` as one batch, rows in file order (a small result: a sample, the
/// labeled rows).
///
/// # Errors
/// A query failure.
pub async fn one_batch(
    ctx: &SessionContext,
    sql: &str,
) -> Result<datafusion::arrow::array::RecordBatch> {
    let schema = std::sync::Arc::new(ctx.sql(sql).await?.schema().as_arrow().clone());
    let batches = collect_in_file_order(ctx, sql).await?;
    Ok(datafusion::arrow::compute::concat_batches(
        &schema, &batches,
    )?)
}

/// SQL options for user queries: no DDL, no DML, no `SET`/`COPY` statements, so a query can
/// neither create tables over other files nor write anything.
pub fn read_only() -> SQLOptions {
    SQLOptions::new()
        .with_allow_ddl(false)
        .with_allow_dml(false)
        .with_allow_statements(false)
}

/// The most chaining operators (`AND`, `OR`, `NOT`, arithmetic, `||`) one SQL statement may
/// hold, and the deepest nesting of parentheses: a
/// longer chain (a 4,000-term `OR`, a 20,000-term `1+1+...`) makes DataFusion's planner recurse
/// past the stack and abort the process. Real statements stay far below.
pub const SQL_MAX_OPERATORS: usize = 1000;
const SQL_MAX_NESTING: usize = 64;
/// The longest SQL text taken.
const SQL_MAX_BYTES: usize = 256 * 1024;

/// Refuses SQL (a query, a judge, a feature expression; `what` names it) too long or too deep
/// to plan safely, before DataFusion sees it: a usage error that says how to write it instead.
pub fn bounded_sql(sql: &str, what: &str) -> Result<()> {
    use datafusion::sql::sqlparser::dialect::GenericDialect;
    use datafusion::sql::sqlparser::keywords::Keyword;
    use datafusion::sql::sqlparser::tokenizer::{Token, Tokenizer};
    if sql.len() > SQL_MAX_BYTES {
        return Err(Error::Usage(format!(
            "{what} is {} bytes of SQL; the limit is {SQL_MAX_BYTES}: move long lists into a table",
            sql.len()
        )));
    }
    // A text that does not tokenize is left to the parser, which says why.
    let Ok(tokens) = Tokenizer::new(&GenericDialect {}, sql).tokenize() else {
        return Ok(());
    };
    let (mut operators, mut depth, mut deepest) = (0usize, 0usize, 0usize);
    for t in &tokens {
        match t {
            Token::LParen => {
                depth += 1;
                deepest = deepest.max(depth);
            }
            Token::RParen => depth = depth.saturating_sub(1),
            Token::Plus
            | Token::Minus
            | Token::Mul
            | Token::Div
            | Token::Mod
            | Token::StringConcat => operators += 1,
            Token::Word(w) if matches!(w.keyword, Keyword::AND | Keyword::OR | Keyword::NOT) => {
                operators += 1;
            }
            _ => {}
        }
    }
    if operators > SQL_MAX_OPERATORS {
        return Err(Error::Usage(format!(
            "{what} chains {operators} operators; the limit is {SQL_MAX_OPERATORS} (deeper expressions overflow the planner): write a long list of alternatives as `x IN (...)`, or put the values in a table and join"
        )));
    }
    if deepest > SQL_MAX_NESTING {
        return Err(Error::Usage(format!(
            "{what} nests parentheses {deepest} deep; the limit is {SQL_MAX_NESTING}"
        )));
    }
    Ok(())
}

/// The Parquet files this run registered as tables or read (errors must name them).
pub(crate) static REGISTERED: std::sync::Mutex<Vec<String>> = std::sync::Mutex::new(Vec::new());

/// Forgets the files earlier runs in this process read: a run's errors name its own.
pub fn forget_files() {
    if let Ok(mut files) = REGISTERED.lock() {
        files.clear();
    }
}

/// Notes a Parquet file a reader read row by row (outside any table), for errors that surface
/// after its rows left the reader.
pub fn note_read(display: &str) {
    if let Ok(mut files) = REGISTERED.lock()
        && !files.iter().any(|f| f == display)
    {
        files.push(display.to_owned());
    }
}

/// The Parquet files registered as tables so far (JSONL inputs by their converted copies'
/// sources are named as they were given).
pub fn registered_files() -> Vec<String> {
    REGISTERED.lock().map(|f| f.clone()).unwrap_or_default()
}

/// Registers Parquet `inputs` as one table `name` (a listing table over all the files).
pub async fn register_parquet(ctx: &SessionContext, name: &str, inputs: &[Input]) -> Result<()> {
    if let Ok(mut files) = REGISTERED.lock() {
        files.extend(inputs.iter().map(|i| i.display.clone()));
    }
    let mut urls = Vec::with_capacity(inputs.len());
    for input in inputs {
        if input.format != Format::Parquet {
            return Err(Error::Internal(format!(
                "`{}` registered as Parquet but is not",
                input.display
            )));
        }
        let url = match &input.location {
            Location::Local(path) => {
                let abs = std::path::absolute(path).map_err(|e| Error::io(path, e))?;
                ListingTableUrl::parse(abs.to_string_lossy())?
            }
            Location::Remote { store, root, .. } => {
                ctx.register_object_store(root, Arc::clone(store));
                ListingTableUrl::parse(&input.display)?
            }
        };
        urls.push(url);
    }
    let format = ParquetFormat::default().with_options(ctx.state().table_options().parquet.clone());
    let options = ListingOptions::new(Arc::new(format)).with_file_extension("");
    // A footer the decoder cannot read can make it panic: that is a file that does not decode.
    let inferred = futures::FutureExt::catch_unwind(std::panic::AssertUnwindSafe(
        ListingTableConfig::new_with_multi_paths(urls)
            .with_listing_options(options)
            .infer_schema(&ctx.state()),
    ))
    .await;
    let config = match inferred {
        Ok(config) => config,
        Err(panic) => {
            // Caught and named here: not a later error's.
            let _ = crate::pipeline::read::take_decoder_panic();
            return Err(Error::Input {
                stage: "read".into(),
                message: format!(
                    "a Parquet footer is not readable ({}) in {}",
                    crate::pipeline::read::panic_text(&*panic),
                    inputs
                        .iter()
                        .map(|i| format!("`{}`", i.display))
                        .collect::<Vec<_>>()
                        .join(", ")
                ),
            });
        }
    }?;
    // The row schema's columns have the row schema's kinds, as when rows are read one by one
    // (in a table of rows: one with a `task_id`; other tables, as a datasets folder, are not
    // rows).
    if let Some(found) = config
        .file_schema
        .as_ref()
        .filter(|s| s.field_with_name(crate::schema::col::TASK_ID).is_ok())
    {
        let rows = crate::schema::row_schema();
        for field in found.fields() {
            if let Ok(want) = rows.field_with_name(field.name())
                && !crate::pipeline::io::column_fits(want.data_type(), field.data_type())
            {
                return Err(Error::Input {
                    stage: "read".into(),
                    message: format!(
                        "column `{}` is {}, not {}, in {}",
                        field.name(),
                        field.data_type(),
                        want.data_type(),
                        inputs
                            .iter()
                            .map(|i| format!("`{}`", i.display))
                            .collect::<Vec<_>>()
                            .join(", ")
                    ),
                });
            }
        }
    }
    // Under a `wai run`, the measures' reads of the same files share one scan.
    let table = super::shared_scan::share(inputs, Arc::new(ListingTable::try_new(config)?))?;
    ctx.register_table(name, table)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use datafusion::arrow::array::{AsArray, Int64Array, RecordBatch};
    use datafusion::arrow::datatypes::{DataType, Field, Int64Type, Schema};
    use datafusion::parquet::arrow::ArrowWriter;
    use datafusion::parquet::file::properties::WriterProperties;
    use datafusion::prelude::ParquetReadOptions;

    use super::*;

    /// A file of 0..n in row groups of 500, read by four partitions.
    fn numbered(n: i64) -> (tempfile::TempDir, SessionContext) {
        let dir = tempfile::tempdir().expect("temp dir");
        let path = dir.path().join("n.parquet");
        let schema = Arc::new(Schema::new(vec![Field::new("n", DataType::Int64, false)]));
        let props = WriterProperties::builder()
            .set_max_row_group_row_count(Some(500))
            .build();
        let file = std::fs::File::create(&path).expect("file");
        let mut w = ArrowWriter::try_new(file, schema.clone(), Some(props)).expect("writer");
        let batch =
            RecordBatch::try_new(schema, vec![Arc::new(Int64Array::from_iter_values(0..n))])
                .expect("batch");
        w.write(&batch).expect("written");
        w.close().expect("closed");
        let ctx = new_context(Some(4)).expect("context");
        let rt = tokio::runtime::Runtime::new().expect("runtime");
        rt.block_on(ctx.register_parquet(
            "t",
            path.to_str().expect("utf-8"),
            ParquetReadOptions::default(),
        ))
        .expect("registered");
        (dir, ctx)
    }

    #[test]
    fn partitions_read_their_own_ranges_in_file_order() {
        // With the file stream's work stealing on, an idle partition takes the next range, so the
        // partitions' order is not the file's: seen as rows out of order within a few runs.
        let (_dir, ctx) = numbered(200_000);
        let rt = tokio::runtime::Runtime::new().expect("runtime");
        for _ in 0..10 {
            let batches = rt
                .block_on(collect_in_file_order(&ctx, "SELECT n FROM t"))
                .expect("read");
            let got: Vec<i64> = batches
                .iter()
                .flat_map(|b| b.column(0).as_primitive::<Int64Type>().values().to_vec())
                .collect();
            assert_eq!(got.len(), 200_000);
            assert!(
                got.windows(2).all(|w| w[0] + 1 == w[1]),
                "rows out of file order"
            );
        }
    }
}
