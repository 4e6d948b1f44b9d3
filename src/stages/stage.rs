//! The stage contract: every operator is run the same way.
//!
//! A stage is a type implementing [`Stage`]: it takes a [`Session`] (where its queries run), its
//! `Inputs` (data frames or rows already read, never paths), and its `Options` (checked by
//! [`Options::check`] before any work starts, errors naming the option's key), and returns a
//! `Report` (serde for programs, `Display` for people). Stages never open files, print, or change
//! the caller's session: each run gets its own [`Session::scope`], whose views and settings are
//! its own.
//!
//! ```no_run
//! # async fn demo(rows: datafusion::prelude::DataFrame) -> wai::Result<()> {
//! use wai::stages::pass_at::{self, PassAtStage};
//! use wai::stages::{Session, run};
//! let session = Session::new()?;
//! let report = run::<PassAtStage>(&session, pass_at::Inputs::new(rows), &pass_at::Options::default()).await?;
//! println!("{report}");
//! # Ok(()) }
//! ```

use std::sync::Arc;

use datafusion::execution::context::{SessionConfig, SessionContext};
use datafusion::prelude::DataFrame;

use crate::error::Result;

/// Options of a stage: plain data, checked before a run.
pub trait Options {
    /// Checks every option; an error names the option's key (`Error::Option`).
    ///
    /// # Errors
    /// An option out of range, or two that contradict each other.
    fn check(&self) -> Result<()> {
        Ok(())
    }
}

/// One operator over rows.
pub trait Stage {
    /// What the stage reads: data frames or rows, never file names.
    type Inputs;
    /// How it runs.
    type Options: Options;
    /// What it found: serializable for `--json`, displayable for people.
    type Report: serde::Serialize + std::fmt::Display;

    /// The stage's name, as commands and reports spell it (`pass-at`).
    const NAME: &'static str;

    /// Runs the stage. Callers go through [`run`], which checks the options first.
    fn run(
        session: &Session,
        inputs: Self::Inputs,
        options: &Self::Options,
    ) -> impl Future<Output = Result<Self::Report>>;
}

/// Runs stage `S`: checks its options, then runs it in its own scope of `session`.
///
/// # Errors
/// An option is wrong (before any work), or the stage failed.
pub async fn run<S: Stage>(
    session: &Session,
    inputs: S::Inputs,
    options: &S::Options,
) -> Result<S::Report> {
    options.check()?;
    let started = std::time::Instant::now();
    let report = S::run(session, inputs, options).await;
    tracing::debug!(stage = S::NAME, elapsed = ?started.elapsed(), ok = report.is_ok(), "stage done");
    report
}

/// Where stages run their queries: one DataFusion engine (memory pool, object stores, settings)
/// that every stage of a run shares, and a fresh catalog and settings for each stage.
#[derive(Clone)]
pub struct Session {
    ctx: SessionContext,
}

impl Session {
    /// A session using every core, with wai's functions registered.
    ///
    /// # Errors
    /// The functions could not be registered.
    pub fn new() -> Result<Self> {
        Ok(Self {
            ctx: crate::pipeline::session::new_context(None)?,
        })
    }

    /// A session over an existing context (its settings and object stores are kept; wai's
    /// functions must be registered in it, as [`crate::pipeline::session::new_context`] does).
    pub fn from_context(ctx: SessionContext) -> Self {
        Self { ctx }
    }

    /// The caller's context: tables registered here are the caller's.
    pub fn context(&self) -> &SessionContext {
        &self.ctx
    }

    /// A context for one stage: the same engine (memory, object stores) and settings as the
    /// session, but its own catalog and its own copy of the settings, so the views a stage
    /// registers and the `SET`s it runs end with it.
    ///
    /// # Errors
    /// wai's functions could not be registered.
    pub fn scope(&self) -> Result<SessionContext> {
        let state = self.ctx.state();
        let config: SessionConfig = state.config().clone();
        let mut scope =
            crate::pipeline::cluster::context(config, Arc::clone(state.runtime_env()), None)?;
        datafusion_functions_json::register_all(&mut scope)?;
        // The session's own functions over the defaults: wai's, and the size-guarded ones
        // ([`crate::pipeline::limits::guard`]), so a stage's query (a user's feature
        // expression among them) is held to the same bound as the session's.
        for udf in state.scalar_functions().values() {
            scope.register_udf(udf.as_ref().clone());
        }
        for udaf in state.aggregate_functions().values() {
            scope.register_udaf(udaf.as_ref().clone());
        }
        Ok(scope)
    }

    /// A scope (as [`Session::scope`]) with `tables` registered as views under their names.
    ///
    /// # Errors
    /// A name is taken twice, or the functions could not be registered.
    pub fn scope_with(&self, tables: &[(&str, DataFrame)]) -> Result<SessionContext> {
        let scope = self.scope()?;
        for (name, frame) in tables {
            scope.register_table(*name, frame.clone().into_view())?;
        }
        Ok(scope)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_scope_keeps_the_sessions_guard_on_growing_functions() {
        let session = Session::new().expect("session");
        let scope = session.scope().expect("scope");
        let e = scope
            .sql("SELECT length(repeat('x', 300000000)) AS n")
            .await
            .expect("planned")
            .collect()
            .await
            .expect_err("refused");
        assert!(
            e.to_string()
                .contains("a bound on functions that can exhaust memory"),
            "{e}"
        );
        // wai's functions are there too.
        let rows = scope
            .sql("SELECT pass_at_k(4, 2, 1) AS p")
            .await
            .expect("planned")
            .collect()
            .await
            .expect("ran");
        assert_eq!(rows[0].num_rows(), 1);
    }

    #[tokio::test]
    async fn a_scope_keeps_its_views_and_settings_to_itself() {
        let session = Session::new().unwrap();
        let rows = session.context().sql("SELECT 1 AS x").await.unwrap();
        let scope = session.scope_with(&[("rows", rows)]).unwrap();
        scope
            .sql("SET datafusion.execution.batch_size = 17")
            .await
            .unwrap()
            .collect()
            .await
            .unwrap();
        let n = scope
            .sql("SELECT x FROM rows")
            .await
            .unwrap()
            .count()
            .await
            .unwrap();
        assert_eq!(n, 1);
        // Neither the view nor the setting reached the caller's context.
        assert!(session.context().table("rows").await.is_err());
        assert_ne!(session.context().state().config().batch_size(), 17);
        // ... but the functions did reach the scope.
        scope
            .sql("SELECT wilson_low(1.0, 2.0)")
            .await
            .unwrap()
            .collect()
            .await
            .unwrap();
    }
}
