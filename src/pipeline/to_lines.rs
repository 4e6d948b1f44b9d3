//! A stage's JSON lines, wired to their files: the rows read for it as one Parquet table (JSONL
//! inputs converted in scratch space first, every input pinned so a file changed during the run
//! stops it), a query over all of them before the first batch, then every batch in file order;
//! the lines written on their own thread ([`LinesOut`]), and nothing kept until the caller has
//! read the report and calls [`Written::keep`]. A dropped [`Written`] leaves nothing behind.
//!
//! What is kept is a file (and, line for line, a file beside it), or a datasets folder: the
//! lines as Parquet shards under `data/` and a card, built beside the destination and moved into
//! place whole ([`Target::Datasets`]).

use std::path::{Path, PathBuf};

use datafusion::arrow::array::RecordBatch;
use datafusion::arrow::datatypes::Schema;
use datafusion::prelude::SessionContext;

use super::context::Context;
use super::io::OnBadRow;
use super::lines_out::{LinesOut, Sink};
use super::read::Reader;
use super::scratch::{Scratch, scratch};
use super::source::{self, Input, Pin};
use super::{session, shards, tables};
use crate::error::Result;
use crate::report::envelope::Output;

/// Pushes every batch of rows, in order, to the function it is given.
pub type Batches = Box<dyn FnOnce(&mut dyn FnMut(RecordBatch) -> Result<()>) -> Result<()>>;

/// Where the lines go.
pub enum Target {
    /// A JSONL file and, when given, the file of lines beside it.
    File {
        /// The file of lines.
        out: PathBuf,
        /// The file beside it (a chunk's second lines).
        beside: Option<PathBuf>,
    },
    /// A datasets folder made of the lines.
    Datasets {
        /// The folder.
        out: PathBuf,
        /// The shards' schema, from the one inferred from the lines.
        schema: fn(&Schema) -> Schema,
        /// The card (`README.md`), from the schema, the number of shards and the folder as named.
        card: fn(&Schema, usize, &Path) -> String,
    },
}

impl Target {
    /// A JSONL file `out` and, when given, the file `beside` it.
    pub fn file(out: &Path, beside: Option<&Path>) -> Self {
        Self::File {
            out: out.to_path_buf(),
            beside: beside.map(Path::to_path_buf),
        }
    }

    /// A datasets folder `out`: shards of `schema` and the `card`.
    pub fn datasets(
        out: &Path,
        schema: fn(&Schema) -> Schema,
        card: fn(&Schema, usize, &Path) -> String,
    ) -> Self {
        Self::Datasets {
            out: out.to_path_buf(),
            schema,
            card,
        }
    }

    fn open(&self, what: &'static str) -> Result<LinesOut> {
        match self {
            Self::File { out, beside } => LinesOut::file(out, beside.as_deref(), what),
            Self::Datasets { out, .. } => LinesOut::folder(out, what),
        }
    }
}

/// The rows of a run's inputs, registered as the table `rows` of a session of their own.
pub struct RowTable<'a> {
    ctx: &'a Context,
    context: SessionContext,
    inputs: Vec<Input>,
    pins: Vec<Option<Pin>>,
    /// Where converted JSONL inputs live, as long as the table.
    scratch: Scratch,
}

impl<'a> RowTable<'a> {
    /// The resolved `inputs` as Parquet (JSONL converted first), pinned and registered.
    pub fn open(ctx: &'a Context, inputs: Vec<Input>) -> Result<Self> {
        let scratch = scratch()?;
        let inputs = tables::as_parquet(ctx, inputs, scratch.path())?;
        let pins = source::pin(&inputs)?;
        let context = session::new_context(None)?;
        ctx.runtime
            .block_on(session::register_parquet(&context, "rows", &inputs))?;
        Ok(Self {
            ctx,
            context,
            inputs,
            pins,
            scratch,
        })
    }

    /// The batches of `sql` over the rows, in file order.
    pub fn query(&self, sql: &str) -> Result<Vec<RecordBatch>> {
        self.ctx
            .runtime
            .block_on(session::collect_in_file_order(&self.context, sql))
    }

    /// Runs `stage` over the rows with its lines going to `target`: `stage` is given the rows
    /// (batch by batch; their text as views into the decoded pages when `views`), where the lines
    /// go, and the session the rows are registered in. `what` names the writer in errors.
    ///
    /// # Errors
    /// The target cannot be made, an input changed during the run, a write failed (said before
    /// the stage's own error, which a stopped writer causes), or the stage failed.
    pub fn write<R>(
        self,
        target: Target,
        what: &'static str,
        views: bool,
        stage: impl FnOnce(Batches, Sink, SessionContext) -> Result<R>,
    ) -> Result<Written<R>> {
        let mut out = target.open(what)?;
        source::unchanged(&self.inputs, &self.pins, what)?;
        let (handle, read) = (self.ctx.runtime.handle().clone(), self.inputs.clone());
        let rows: Batches = Box::new(move |each| {
            let mut reader = Reader::new(handle, OnBadRow::Fail, Box::new(|_| {}));
            read.iter().try_for_each(|input| {
                if views {
                    reader.read_views(input, each)
                } else {
                    reader.read(input, each)
                }
            })
        });
        let report = stage(rows, out.sink(), self.context.clone());
        // The writer's error first: a full disk is the cause, the stopped reading its effect.
        out.finish()?;
        let report = report?;
        source::unchanged(&self.inputs, &self.pins, what)?;
        Ok(Written {
            report,
            out,
            target,
            what,
            inputs: self.inputs.iter().map(|i| i.display.clone()).collect(),
            _scratch: Some(self.scratch),
        })
    }
}

/// Runs `stage` with its lines going to `target`, for stages that read their inputs themselves;
/// `what` names the writer in errors.
///
/// # Errors
/// The target cannot be made, a write failed (said first), or the stage failed.
pub fn write<R>(
    target: Target,
    what: &'static str,
    stage: impl FnOnce(Sink) -> Result<R>,
) -> Result<Written<R>> {
    let mut out = target.open(what)?;
    let report = stage(out.sink());
    out.finish()?;
    Ok(Written {
        report: report?,
        out,
        target,
        what,
        inputs: Vec::new(),
        _scratch: None,
    })
}

/// A stage's report and its lines, written but not yet kept.
pub struct Written<R> {
    /// The stage's report.
    pub report: R,
    out: LinesOut,
    target: Target,
    what: &'static str,
    inputs: Vec<String>,
    _scratch: Option<Scratch>,
}

impl<R> Written<R> {
    /// The inputs as the user named them (none for [`write`]).
    pub fn inputs(&self) -> &[String] {
        &self.inputs
    }

    /// Keeps the lines and says what was written, each output of `rows` rows: the file and the
    /// file beside it, or the folder and its shards.
    ///
    /// # Errors
    /// A file could not be kept, or the lines share no Parquet schema.
    pub fn keep(self, rows: u64) -> Result<(R, Vec<Output>)> {
        let outputs = match &self.target {
            Target::File { out, beside } => {
                self.out.commit()?;
                std::iter::once(out)
                    .chain(beside)
                    .map(|p| Output::new(p.display(), "rows").rows(rows))
                    .collect()
            }
            Target::Datasets { out, schema, card } => {
                let what = self.what;
                let names = self.out.commit_folder(out, |jsonl, folder| {
                    let (schema, names) = shards::write_shards(jsonl, folder, what, *schema)?;
                    let text = card(&schema, names.len(), out);
                    shards::write_text(&folder.join("README.md"), &text)?;
                    Ok(names)
                })?;
                std::iter::once(Output::new(out.display(), "folder").rows(rows))
                    .chain(
                        names
                            .iter()
                            .map(|s| Output::new(out.join(s).display(), "rows")),
                    )
                    .collect()
            }
        };
        Ok((self.report, outputs))
    }
}

/// Where the metadata lines of `out` go: `train.jsonl` → `train.meta.jsonl`.
pub fn meta_path(out: &Path) -> PathBuf {
    let name = out
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let stem = name
        .strip_suffix(".jsonl")
        .or_else(|| name.strip_suffix(".json"))
        .unwrap_or(&name);
    out.with_file_name(format!("{stem}.meta.jsonl"))
}

#[cfg(test)]
mod tests {
    use datafusion::arrow::array::AsArray;
    use datafusion::arrow::datatypes::Int64Type;

    use super::*;

    fn paths(outputs: &[Output]) -> Vec<(String, &'static str, Option<u64>)> {
        outputs
            .iter()
            .map(|o| {
                let name = Path::new(&o.path).file_name().unwrap().to_string_lossy();
                (name.into_owned(), o.kind, o.rows)
            })
            .collect()
    }

    #[test]
    fn lines_are_kept_with_the_file_beside_or_not_at_all() {
        let dir = tempfile::tempdir().unwrap();
        let out = dir.path().join("a.jsonl");
        let beside = meta_path(&out);
        assert_eq!(beside, dir.path().join("a.meta.jsonl"));
        assert_eq!(meta_path(Path::new("t.json")), Path::new("t.meta.jsonl"));
        assert_eq!(meta_path(Path::new("t")), Path::new("t.meta.jsonl"));
        let written = write(Target::file(&out, Some(&beside)), "test", |mut lines| {
            lines(b"1\n".to_vec(), b"m\n".to_vec())?;
            Ok(7)
        })
        .unwrap();
        assert!(written.inputs().is_empty() && !out.exists());
        let (report, outputs) = written.keep(1).unwrap();
        assert_eq!(report, 7);
        assert_eq!(
            paths(&outputs),
            [
                ("a.jsonl".to_owned(), "rows", Some(1)),
                ("a.meta.jsonl".to_owned(), "rows", Some(1))
            ]
        );
        assert_eq!(std::fs::read_to_string(&beside).unwrap(), "m\n");
        // A stage that fails, or a report not kept, leaves nothing.
        let failed = dir.path().join("b.jsonl");
        let err = write(Target::file(&failed, None), "test", |mut lines| {
            lines(b"1\n".to_vec(), Vec::new())?;
            Err::<(), _>(crate::Error::Internal("no".into()))
        });
        assert!(err.is_err());
        drop(write(Target::file(&failed, None), "test", |_| Ok(())).unwrap());
        assert!(!failed.exists());
    }

    #[test]
    fn a_datasets_folder_holds_the_shards_and_the_card() {
        let dir = tempfile::tempdir().unwrap();
        let out = dir.path().join("ds");
        let target = Target::datasets(&out, Clone::clone, |schema, shards, shown| {
            format!("{} {shards} {}", schema.fields().len(), shown.display())
        });
        let written = write(target, "test", |mut lines| {
            lines(b"{\"a\":1}\n{\"a\":2}\n".to_vec(), Vec::new())
        })
        .unwrap();
        let ((), outputs) = written.keep(2).unwrap();
        assert_eq!(
            paths(&outputs),
            [
                ("ds".to_owned(), "folder", Some(2)),
                ("train-00000-of-00001.parquet".to_owned(), "rows", None)
            ]
        );
        let card = std::fs::read_to_string(out.join("README.md")).unwrap();
        assert_eq!(card, format!("1 1 {}", out.display()));
    }

    #[test]
    fn the_rows_are_queried_whole_then_read_batch_by_batch() {
        let ctx = Context::new().unwrap();
        let fixture = concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/tests/fixtures/example_rows.jsonl"
        );
        let dir = tempfile::tempdir().unwrap();
        let out = dir.path().join("n.jsonl");
        for views in [false, true] {
            let inputs = ctx
                .runtime
                .block_on(source::resolve(&[fixture.to_owned()]))
                .unwrap();
            let table = RowTable::open(&ctx, inputs).unwrap();
            let counted = table.query("SELECT count(*) AS n FROM rows").unwrap();
            let n = counted[0].column(0).as_primitive::<Int64Type>().value(0);
            let target = Target::file(&out, None);
            let written = table
                .write(target, "test", views, |rows, mut lines, _| {
                    let mut seen = 0;
                    rows(&mut |b| {
                        seen += b.num_rows();
                        lines(format!("{}\n", b.num_rows()).into_bytes(), Vec::new())
                    })?;
                    Ok(seen)
                })
                .unwrap();
            assert_eq!(written.inputs(), [fixture]);
            assert_eq!(written.report, usize::try_from(n).unwrap());
            written.keep(0).unwrap();
            let lines = std::fs::read_to_string(&out).unwrap();
            let sum: usize = lines.lines().map(|l| l.parse::<usize>().unwrap()).sum();
            assert_eq!(sum, usize::try_from(n).unwrap(), "views {views}");
        }
    }
}
