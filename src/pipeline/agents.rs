//! The agent an `--agent` spec names: the seeded agent in this process, a command agent (a pool
//! of worker processes, which is why it is made here and not in the stage), or a model agent.

use std::sync::Arc;

use crate::error::{Error, Result};
use crate::models::{Model, ModelSpec};
use crate::pipeline::judges::Workers;
use crate::stages::simulate::agent::{Agent, AgentSpec, SeededAgent};
use crate::stages::simulate::command::CommandAgent;
use crate::stages::simulate::model::{self, ModelAgent};

/// The agent `spec` names (`seeded`, `seeded:RATE` with `behaviors`, `cmd:COMMAND` run by
/// `workers`, or a model spec, played as `model` says and called as `workers.models` says).
///
/// # Errors
/// A spec that is none of these, an unknown behaviour or rate, a command that does not start,
/// a bad model spec or a missing key.
pub(crate) fn agent(
    spec: &str,
    behaviors: &[String],
    workers: &Workers,
    model: &model::Options,
) -> Result<Box<dyn Agent>> {
    match AgentSpec::parse(spec).map_err(|e| Error::Usage(format!("--agent `{spec}`: {e}")))? {
        AgentSpec::Model(text) => {
            let m = Model::new(ModelSpec::parse(&text)?, workers.models.settings.clone())?;
            Ok(Box::new(ModelAgent::new(Arc::new(m), model.clone())?))
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
        assert!(agent("seeded:0.2", &[], &workers, &m).is_ok());
        let err = agent("bogus", &[], &workers, &m).err().unwrap().to_string();
        assert!(err.starts_with("--agent `bogus`: "), "{err}");
        let err = agent("seeded", &["nope".into()], &workers, &m)
            .err()
            .unwrap();
        assert!(err.to_string().contains("no behaviour `nope`"), "{err}");
    }
}
