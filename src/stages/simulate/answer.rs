//! How the world answers a call: a scheduled fault, a refusal (the record is missing, an
//! argument is absent or a placeholder), or the tool's verb acted out.

use serde_json::{Map, Value, json};

use super::faults::{Fault, Scene};
use super::hash::draw;
use super::tools::{Tool, Verb};
use super::world::{GARBLED, MONEY_WORDS, Memory, World, missing, placeholder_fields};

impl World<'_> {
    /// The result of a call `mode` hits.
    pub(super) fn fault(
        &self,
        mode: Fault,
        t: &Tool,
        arguments: &Value,
        refs: &[(String, String)],
        memory: &mut Memory,
    ) -> Value {
        let tool = t.name.as_str();
        match mode {
            Fault::Timeout => json!({"status": "timeout", "error": "request timed out"}),
            Fault::Malformed => json!({"status": "ok", "data": GARBLED}),
            Fault::Stale => {
                let mut r = self.payload(t, arguments, refs, memory);
                if let Value::Object(m) = &mut r {
                    m.insert("stale".into(), Value::Bool(true));
                    m.insert("as_of".into(), Value::String("3 days ago".into()));
                }
                r
            }
            Fault::PermissionDenied => {
                json!({"status": "permission_denied", "error": format!("this caller may not run {tool}")})
            }
            Fault::NotFound => json!({"status": "not_found", "missing": missing(refs)}),
            Fault::RateLimited => json!({"status": "rate_limited", "retry_after_s": 30}),
            Fault::Partial => {
                let full = self.payload(t, arguments, refs, memory);
                let mut data = full.get("data").cloned().unwrap_or(Value::Null);
                let mut dropped = Vec::new();
                if let Value::Object(m) = &mut data {
                    let keys: Vec<String> = m
                        .keys()
                        .filter(|k| !matches!(k.as_str(), "id" | "ref"))
                        .cloned()
                        .collect();
                    for k in keys.iter().skip(keys.len() / 2) {
                        m.shift_remove(k);
                        dropped.push(Value::String(k.clone()));
                    }
                }
                json!({"status": "partial", "data": data, "missing_fields": dropped})
            }
        }
    }

    /// Why the world refuses the call, if it does: the scene's world state, a required
    /// argument absent or a placeholder, or a record that does not exist.
    pub(super) fn refusal(
        &self,
        t: &Tool,
        scene: &Scene,
        arguments: &Value,
        refs: &[(String, String)],
        memory: &Memory,
    ) -> Option<Value> {
        let verb = t.verb();
        match scene.world_state.as_deref() {
            Some("entity missing") if !refs.is_empty() => {
                return Some(json!({"status": "not_found", "missing": missing(refs)}));
            }
            Some("entity already acted on") if verb != Verb::Read => {
                return Some(json!({"status": "already_done", "reason": "already_acted_on"}));
            }
            _ => {}
        }
        let absent: Vec<Value> = t
            .required()
            .iter()
            .filter(|p| p.required)
            .filter(|p| {
                arguments
                    .get(&p.name)
                    .is_none_or(|v| v.is_null() || v.as_str().is_some_and(|s| s.trim().is_empty()))
            })
            .map(|p| Value::String(p.name.clone()))
            .collect();
        if !absent.is_empty() {
            return Some(
                json!({"status": "rejected", "reason": "missing_required", "fields": absent}),
            );
        }
        let placeholders = placeholder_fields(arguments, "");
        if !placeholders.is_empty() {
            return Some(
                json!({"status": "rejected", "reason": "placeholder_argument", "fields": placeholders, "hint": "ask the person for the actual value"}),
            );
        }
        let entity_exists = scene.world_state.as_deref() == Some("entity exists");
        let dangling: Vec<&(String, String)> = refs
            .iter()
            .filter(|(_, v)| !entity_exists && !self.exists(v, memory))
            .collect();
        // A create that names only its own new id is not dangling.
        let creates_its_id = verb == Verb::Create
            && dangling.len() == refs.len()
            && refs.iter().all(|(k, _)| k == "id");
        if !dangling.is_empty() && !creates_its_id {
            let names: Vec<Value> = dangling
                .iter()
                .map(|(_, v)| Value::String(v.clone()))
                .collect();
            return Some(json!({"status": "not_found", "missing": names}));
        }
        None
    }

    /// The tool's verb acted out: what it read, deleted, created, cancelled, sent or updated.
    pub(super) fn act(
        &self,
        t: &Tool,
        scene: &Scene,
        arguments: &Value,
        canonical: &str,
        refs: &[(String, String)],
        memory: &mut Memory,
    ) -> Value {
        let tool = t.name.as_str();
        match t.verb() {
            Verb::Read => {
                let mut r = self.payload(t, arguments, refs, memory);
                if scene.world_state.as_deref() == Some("duplicate entity")
                    && let Some(data) = r.get("data").cloned()
                {
                    let mut second = data.clone();
                    if let Value::Object(m) = &mut second {
                        m.insert(
                            "ref".into(),
                            Value::String(format!(
                                "{}-b",
                                m.get("ref").and_then(Value::as_str).unwrap_or("")
                            )),
                        );
                    }
                    r = json!({"status": "ok", "matches": 2, "items": [data, second]});
                }
                r
            }
            Verb::Delete => {
                for (_, v) in refs {
                    memory.deleted.push(v.clone());
                }
                json!({"status": "deleted", "removed": missing(refs)})
            }
            Verb::Create => {
                let digest = draw(&[&self.seed, tool, canonical, &memory.calls.to_string()]);
                let id = arguments.get("id").and_then(Value::as_str).map_or_else(
                    || format!("{}_{}", t.noun().replace(' ', "_"), digest % 100_000),
                    str::to_owned,
                );
                let mut out = Map::new();
                out.insert("status".into(), Value::String("created".into()));
                out.insert("id".into(), Value::String(id.clone()));
                if let Value::Object(args) = arguments {
                    for (k, v) in args {
                        out.entry(k.clone()).or_insert_with(|| v.clone());
                    }
                }
                if let Some(amount) = refs
                    .first()
                    .and_then(|(_, v)| self.entity(v).get("amount").cloned())
                    && t.words.iter().any(|w| MONEY_WORDS.contains(&w.as_str()))
                {
                    out.entry("amount").or_insert(amount);
                }
                let value = Value::Object(out);
                memory.created.push((id, value.clone()));
                value
            }
            Verb::Cancel => {
                json!({"status": "cancelled", "data": self.payload(t, arguments, refs, memory).get("data").cloned().unwrap_or(Value::Null)})
            }
            Verb::Send => {
                json!({"status": "sent", "id": format!("msg_{}", draw(&[&self.seed, tool, canonical]) % 100_000)})
            }
            Verb::Update | Verb::Other => {
                let mut r = self.payload(t, arguments, refs, memory);
                if scene.world_state.as_deref() == Some("partially completed")
                    && let Some(Value::Object(m)) = r.get_mut("data")
                {
                    m.insert("status".into(), Value::String("partially_completed".into()));
                }
                r
            }
        }
    }
}
