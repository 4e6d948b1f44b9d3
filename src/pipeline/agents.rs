//! The agent an `--agent` spec names: the seeded agent in this process, or a command agent (a
//! pool of worker processes, which is why it is made here and not in the stage).

use crate::error::{Error, Result};
use crate::pipeline::judges::Workers;
use crate::stages::simulate::agent::{Agent, AgentSpec, SeededAgent};
use crate::stages::simulate::command::CommandAgent;

/// The agent `spec` names (`seeded`, `seeded:RATE` with `behaviors`, or `cmd:COMMAND` run by
/// `workers`).
///
/// # Errors
/// A spec that is none of these, an unknown behaviour or rate, a command that does not start.
pub(crate) fn agent(spec: &str, behaviors: &[String], workers: &Workers) -> Result<Box<dyn Agent>> {
    match AgentSpec::parse(spec).map_err(|e| Error::Usage(format!("--agent `{spec}`: {e}")))? {
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
        assert!(agent("seeded:0.2", &[], &workers).is_ok());
        let err = agent("bogus", &[], &workers).err().unwrap().to_string();
        assert!(err.starts_with("--agent `bogus`: "), "{err}");
        let err = agent("seeded", &["nope".into()], &workers).err().unwrap();
        assert!(err.to_string().contains("no behaviour `nope`"), "{err}");
    }
}
