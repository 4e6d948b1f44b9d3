//! The stage: the gain a task count detects and the tasks a gain needs, from the model or from
//! earlier rows.

use serde::Serialize;

use super::{Detectable, Options, Report, TaskRate, detectable, size};
use crate::error::Result;

/// What the stage reads: per-task binary pass rates of earlier rows, sorted by task (none:
/// the binomial model alone), and the task count to read the detectable gain at.
#[derive(Debug, Clone, Default)]
pub struct Inputs {
    /// The before rows' rates.
    pub before: Option<Vec<TaskRate>>,
    /// The after rows' rates (paired with `before`).
    pub after: Option<Vec<TaskRate>>,
    /// A task count: report the gain it detects.
    pub tasks: Option<usize>,
    /// Whether to size the holdout (the tasks a gain of `effect` needs).
    pub size: bool,
}

/// The stage's report: the gain a task count detects, and the tasks a gain needs.
#[derive(Debug, Clone, Serialize)]
pub struct Sizing {
    /// The sizing (its keys at the top).
    #[serde(flatten)]
    pub size: Option<Report>,
    /// The gain `tasks` detects.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub detectable_effect: Option<Detectable>,
}

impl std::fmt::Display for Sizing {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if let Some(d) = &self.detectable_effect {
            write!(f, "{d}")?;
        }
        if let Some(r) = &self.size {
            write!(f, "{r}")?;
        }
        Ok(())
    }
}

/// The stage: holdout sizing.
pub struct HoldoutStage;

impl crate::stages::Stage for HoldoutStage {
    type Inputs = Inputs;
    type Options = Options;
    type Report = Sizing;
    const NAME: &'static str = "holdout-size";

    async fn run(
        _session: &crate::stages::Session,
        inputs: Inputs,
        options: &Options,
    ) -> Result<Sizing> {
        let (before, after) = (inputs.before.as_deref(), inputs.after.as_deref());
        let detectable_effect = inputs
            .tasks
            .map(|n| detectable(n, options, before))
            .transpose()?;
        let size = inputs
            .size
            .then(|| size(options, before, after))
            .transpose()?;
        Ok(Sizing {
            size,
            detectable_effect,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn the_stage_sizes_and_reads_a_task_count_as_asked() {
        let session = crate::stages::Session::new().unwrap();
        let inputs = Inputs {
            tasks: Some(200),
            size: true,
            ..Inputs::default()
        };
        let r = crate::stages::run::<HoldoutStage>(&session, inputs, &Options::default())
            .await
            .unwrap();
        let sized = r.size.as_ref().unwrap();
        assert_eq!(
            sized.n_tasks,
            size(&Options::default(), None, None).unwrap().n_tasks
        );
        assert!(r.detectable_effect.is_some());
        let json = serde_json::to_value(&r).unwrap();
        assert!(json.get("n_tasks").is_some() && json.get("detectable_effect").is_some());
        let bad = Options {
            effect: 1.5,
            ..Options::default()
        };
        let e = crate::stages::run::<HoldoutStage>(&session, Inputs::default(), &bad).await;
        assert!(matches!(e, Err(crate::Error::Option { key, .. }) if key == "effect"));
    }
}
