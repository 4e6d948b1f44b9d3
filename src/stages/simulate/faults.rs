//! The faults a rollout is scheduled to meet (a tool times out, is denied, answers garbage...),
//! the plan a row records them in, and the scene of one rollout.

use serde_json::{Value, json};

/// A scheduled fault.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Fault {
    /// The call times out.
    Timeout,
    /// The result is garbage.
    Malformed,
    /// The record is days old.
    Stale,
    /// The caller may not run the tool.
    PermissionDenied,
    /// The record is not there.
    NotFound,
    /// Too many requests.
    RateLimited,
    /// Only part of the record comes back.
    Partial,
}

impl Fault {
    /// The fault a `tool_condition` schedules (`None` for `success`).
    pub fn of_condition(condition: &str) -> Option<Self> {
        Some(match condition {
            "timeout" => Self::Timeout,
            "malformed_result" | "malformed" => Self::Malformed,
            "stale_result" | "stale" => Self::Stale,
            "permission_denied" => Self::PermissionDenied,
            "not_found" => Self::NotFound,
            "rate_limited" | "rate_limit" => Self::RateLimited,
            "partial_result" | "partial" => Self::Partial,
            _ => return None,
        })
    }

    /// The `tool_condition` that schedules this fault (the inverse of [`Fault::of_condition`]).
    pub fn condition(self) -> &'static str {
        match self {
            Self::Timeout => "timeout",
            Self::Malformed => "malformed_result",
            Self::Stale => "stale_result",
            Self::PermissionDenied => "permission_denied",
            Self::NotFound => "not_found",
            Self::RateLimited => "rate_limited",
            Self::Partial => "partial_result",
        }
    }

    /// The mode's name on a row's fault plan.
    pub fn name(self) -> &'static str {
        match self {
            Self::Timeout => "timeout",
            Self::Malformed => "malformed",
            Self::Stale => "stale",
            Self::PermissionDenied => "permission_denied",
            Self::NotFound => "not_found",
            Self::RateLimited => "rate_limited",
            Self::Partial => "partial",
        }
    }

    /// Reads a mode name back.
    pub fn of_name(name: &str) -> Option<Self> {
        Self::of_condition(name)
    }
}

/// The fault plan a rollout runs under: `mode` on `tool` (`*` = every tool) at `rate`.
#[derive(Debug, Clone, PartialEq)]
pub struct Plan {
    /// Which tool (`*` for all).
    pub tool: String,
    /// What goes wrong.
    pub mode: Fault,
    /// Chance per call.
    pub rate: f64,
}

impl Plan {
    /// The plan as the reference writes it on a row: `{"*": {"mode": "timeout", "rate": 1.0}}`.
    pub fn to_json(&self) -> Value {
        json!({ self.tool.clone(): {"mode": self.mode.name(), "rate": self.rate} })
    }

    /// Reads a row's plan back (the first tool-keyed entry).
    pub fn from_json(v: &Value) -> Option<Self> {
        let (tool, spec) = v.as_object()?.iter().find(|(_, s)| s.is_object())?;
        Some(Self {
            tool: tool.clone(),
            mode: Fault::of_name(spec.get("mode")?.as_str()?)?,
            rate: spec.get("rate").and_then(Value::as_f64).unwrap_or(1.0),
        })
    }
}

/// What one rollout meets: its fault plan and the world state.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Scene {
    /// The fault plan kept for this rollout.
    pub plan: Option<Plan>,
    /// The cell's world state (`None` when it has no effect).
    pub world_state: Option<String>,
}
