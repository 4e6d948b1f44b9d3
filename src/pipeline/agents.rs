//! The agent an `--agent` spec names: the seeded agent in this process, a command agent (a pool
//! of worker processes, which is why it is made here and not in the stage), or a model agent.

use std::sync::Arc;

use crate::error::{Error, Result};
use crate::models::{Model, ModelSpec};
use crate::pipeline::judges::Workers;
use crate::stages::simulate::agent::{Agent, AgentSpec, SeededAgent};
use crate::stages::simulate::command::CommandAgent;
use crate::stages::simulate::execute::Executor;
use crate::stages::simulate::model::{self, ModelAgent};

/// What a model agent may have beside its model: a model playing the person (`--user-model`)
/// and a program answering its tool calls (`--execute cmd:PROGRAM`).
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct ModelExtras<'a> {
    /// The user model's spec.
    pub user: Option<&'a str>,
    /// The tool program's command line.
    pub execute: Option<&'a str>,
}

/// The agent `spec` names (`seeded`, `seeded:RATE` with `behaviors`, `cmd:COMMAND` run by
/// `workers`, or a model spec, played as `model` says and called as `workers.models` says, with
/// the model `user` names playing the person it serves when one is given).
///
/// # Errors
/// A spec that is none of these, an unknown behaviour or rate, a command that does not start,
/// a bad model spec or a missing key.
pub(crate) fn agent(
    spec: &str,
    behaviors: &[String],
    workers: &Workers,
    model: &model::Options,
    extras: ModelExtras<'_>,
) -> Result<Box<dyn Agent>> {
    match AgentSpec::parse(spec).map_err(|e| Error::Usage(format!("--agent `{spec}`: {e}")))? {
        AgentSpec::Model(text) => {
            let mut settings = workers.models.settings.clone();
            if !workers.models.timeout_given {
                settings.timeout = model::call_timeout(model.max_tokens);
            }
            let m = Model::new(ModelSpec::parse(&text)?, settings)?;
            let mut agent = ModelAgent::new(Arc::new(m), model.clone())?;
            if let Some(user) = extras.user {
                let spec = ModelSpec::parse(user)
                    .map_err(|e| Error::Usage(format!("--user-model: {e}")))?;
                let u = Model::new(spec, workers.models.settings.clone())?;
                agent = agent.with_user_model(Arc::new(u));
            }
            if let Some(command) = extras.execute {
                let program = Executor::start(workers.options(command.to_owned(), "tool world"))?;
                agent = agent.with_executor(program);
            }
            Ok(Box::new(agent))
        }
        AgentSpec::Command(command) => Ok(Box::new(CommandAgent::start(
            workers.options(command, "agent"),
        )?)),
        AgentSpec::Seeded(rate) => Ok(Box::new(
            SeededAgent::new(rate, behaviors).map_err(Error::Usage)?,
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_spec_names_the_seeded_agent_or_is_refused_with_its_flag() {
        let workers = Workers {
            workers: 1,
            timeout: std::time::Duration::from_secs(1),
            forward: Vec::new(),
            models: crate::pipeline::judges::Models::default(),
        };
        let m = model::Options::default();
        assert!(agent("seeded:0.2", &[], &workers, &m, ModelExtras::default()).is_ok());
        let err = agent("bogus", &[], &workers, &m, ModelExtras::default())
            .err()
            .unwrap()
            .to_string();
        assert!(err.starts_with("--agent `bogus`: "), "{err}");
        let err = agent(
            "seeded",
            &["nope".into()],
            &workers,
            &m,
            ModelExtras::default(),
        )
        .err()
        .unwrap();
        assert!(err.to_string().contains("no behaviour `nope`"), "{err}");
    }
}
