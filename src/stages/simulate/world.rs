//! The mock tool world: answers each tool call with a record-shaped result, fires the faults a
//! rollout is scheduled to meet, and plays the cell's world state.
//!
//! Every answer is a pure function of the run's seed, the call and what the rollout did before
//! (records it created or deleted), so the same call gets the same answer on any thread.
//! Differences from the reference's world: ids written in tool descriptions or asks exist (the
//! reference decided existence by a draw and ignored them); read verbs (`lookup`, `check`
//! included) never answer `already_done`; a write on a missing record is `not_found` whatever its
//! verb; `entity missing` applies to calls that name a record, not to every call.

use serde_json::{Map, Value, json};
use sha2::Digest;

use super::hash::{draw, pick_index, uniform};
use super::tools::{REFERENCE_PARAM, Tool};
use crate::pipeline::row::canonical_json;

pub use super::faults::{Fault, Plan, Scene};

/// What the world remembers within one rollout.
#[derive(Debug, Clone, Default)]
pub struct Memory {
    pub(super) created: Vec<(String, Value)>,
    pub(super) deleted: Vec<String>,
    pub(super) calls: u32,
}

/// One answered call.
#[derive(Debug, Clone, PartialEq)]
pub struct Answer {
    /// The result as the agent sees it.
    pub result: Value,
    /// The fault that fired, if one did.
    pub injected: Option<Fault>,
}

/// Statuses that mean the call worked.
pub const SUCCESS: [&str; 8] = [
    "ok",
    "created",
    "success",
    "done",
    "updated",
    "deleted",
    "cancelled",
    "sent",
];
/// Share of unknown references that exist.
pub const EXISTS_SHARE: f64 = 0.7;
pub(super) const GARBLED: &str = "\u{fffd}\u{fffd}<<res#ponse trunc@ted";
const ADJECTIVES: [&str; 8] = [
    "primary", "standard", "express", "annual", "weekly", "premium", "basic", "shared",
];
const STATUSES: [&str; 6] = [
    "completed",
    "in_progress",
    "pending",
    "active",
    "approved",
    "open",
];
const PEOPLE: [&str; 8] = [
    "amara osei",
    "liang wei",
    "sofia rossi",
    "jonas berg",
    "priya nair",
    "diego alvarez",
    "hana sato",
    "noah klein",
];
pub(super) const MONEY_WORDS: [&str; 12] = [
    "price", "cost", "fee", "amount", "balance", "total", "charge", "refund", "pay", "invoice",
    "bill", "order",
];
const DELIVERY_WORDS: [&str; 5] = ["order", "shipment", "delivery", "package", "purchase"];
const PLACEHOLDERS: [&str; 10] = [
    "string",
    "placeholder",
    "xxx",
    "todo",
    "tbd",
    "your email",
    "first name",
    "order id",
    "the record",
    "n/a",
];

/// The world of one run.
pub struct World<'a> {
    tools: &'a [Tool],
    /// Ids that exist (from tool descriptions and seed asks), lowercased.
    known: Vec<String>,
    pub(super) seed: String,
}

impl<'a> World<'a> {
    /// A world over `tools` where every id in `known` exists.
    pub fn new(tools: &'a [Tool], known: &[String], seed: u64) -> Self {
        Self {
            tools,
            known: known.iter().map(|k| k.to_lowercase()).collect(),
            seed: seed.to_string(),
        }
    }

    /// The declared tools.
    pub fn tools(&self) -> &'a [Tool] {
        self.tools
    }

    pub(super) fn exists(&self, value: &str, memory: &Memory) -> bool {
        let low = value.to_lowercase();
        if memory.deleted.iter().any(|d| d.eq_ignore_ascii_case(value)) {
            return false;
        }
        if memory
            .created
            .iter()
            .any(|(id, _)| id.eq_ignore_ascii_case(value))
            || self.known.contains(&low)
        {
            return true;
        }
        uniform(&[&self.seed, "exists", &low]) < EXISTS_SHARE
    }

    /// Answers `tool(arguments)` for a rollout in `scene`.
    pub fn call(
        &self,
        scene: &Scene,
        memory: &mut Memory,
        tool: &str,
        arguments: &Value,
    ) -> Answer {
        memory.calls += 1;
        let Some(t) = self.tools.iter().find(|t| t.name == tool) else {
            return plain(json!({"status": "error", "reason": "unknown_tool", "tool": tool}));
        };
        let canonical = canonical_json(arguments);
        let refs = references(arguments);
        // Faults come first: the world never got to look.
        if let Some(fault) = self.fault_on(scene, memory, t, arguments, &canonical, &refs) {
            return fault;
        }
        if let Some(result) = self.refusal(t, scene, arguments, &refs, memory) {
            return plain(result);
        }
        plain(self.act(t, scene, arguments, &canonical, &refs, memory))
    }

    /// The fault the rollout's plan schedules for this call, if one fires: what `--execute`
    /// answers before the user's program sees the call. A tool the world does not declare meets
    /// no fault.
    pub fn scheduled_fault(
        &self,
        scene: &Scene,
        memory: &mut Memory,
        tool: &str,
        arguments: &Value,
    ) -> Option<Answer> {
        let t = self.tools.iter().find(|t| t.name == tool)?;
        let canonical = canonical_json(arguments);
        let refs = references(arguments);
        self.fault_on(scene, memory, t, arguments, &canonical, &refs)
    }

    fn fault_on(
        &self,
        scene: &Scene,
        memory: &mut Memory,
        t: &Tool,
        arguments: &Value,
        canonical: &str,
        refs: &[(String, String)],
    ) -> Option<Answer> {
        let plan = scene.plan.as_ref()?;
        let hit = (plan.tool == "*" || plan.tool == t.name)
            && (plan.rate >= 1.0
                || uniform(&[&self.seed, &t.name, canonical, "fault"]) < plan.rate);
        hit.then(|| Answer {
            result: self.fault(plan.mode, t, arguments, refs, memory),
            injected: Some(plan.mode),
        })
    }

    /// The attributes of the record a reference names: the same on every tool and rollout.
    pub(super) fn entity(&self, value: &str) -> Map<String, Value> {
        let key = value.to_lowercase();
        // One digest, cut into independent 32-bit draws.
        let digest = sha2::Sha256::digest(format!("{}|entity|{key}", self.seed).as_bytes());
        let n = |salt: &str| {
            let at = match salt {
                "status" => 0,
                "amount" => 4,
                "delivered" => 8,
                "owner" => 12,
                "year" => 16,
                "month" => 20,
                _ => 24,
            };
            u64::from(u32::from_be_bytes([
                digest[at],
                digest[at + 1],
                digest[at + 2],
                digest[at + 3],
            ]))
        };
        let mut m = Map::new();
        m.insert(
            "status".into(),
            Value::String(STATUSES[pick_index(n("status"), STATUSES.len())].into()),
        );
        // Amounts from $5 to $300, two decimals: about a third over $200.
        let cents = 500 + n("amount") % 29_500;
        m.insert("amount".into(), json!((cents as f64) / 100.0));
        m.insert("days_since_delivery".into(), json!(n("delivered") % 45));
        m.insert(
            "owner".into(),
            Value::String(PEOPLE[pick_index(n("owner"), PEOPLE.len())].into()),
        );
        m.insert(
            "updated_at".into(),
            Value::String(format!(
                "{}-{:02}-{:02}",
                2022 + n("year") % 5,
                1 + n("month") % 12,
                1 + n("day") % 28
            )),
        );
        m
    }

    /// A record-shaped result for `tool(arguments)`.
    pub(super) fn payload(
        &self,
        t: &Tool,
        arguments: &Value,
        refs: &[(String, String)],
        memory: &Memory,
    ) -> Value {
        if let Some((_, prior)) = refs.first().and_then(|(_, v)| {
            memory
                .created
                .iter()
                .find(|(id, _)| id.eq_ignore_ascii_case(v))
        }) {
            return json!({"status": "ok", "data": prior});
        }
        let canonical = canonical_json(arguments);
        let digest = draw(&[&self.seed, &t.name, &canonical]);
        // Which fields a record of this tool has: from its name words and parameter names.
        let mentions = |list: &[&str]| {
            t.words.iter().any(|w| list.iter().any(|m| w.contains(m)))
                || t.params
                    .iter()
                    .any(|p| list.iter().any(|m| p.name.to_lowercase().contains(m)))
        };
        let money = mentions(&MONEY_WORDS);
        let delivery = mentions(&DELIVERY_WORDS);
        let record = |key: Option<&str>, salt: u64| -> Value {
            let mut m = Map::new();
            let attrs = key.map_or_else(
                || self.entity(&format!("{}#{salt}", t.name)),
                |k| self.entity(k),
            );
            m.insert(
                "id".into(),
                key.map_or_else(
                    || json!(1000 + (digest.wrapping_add(salt)) % 89_000),
                    |k| Value::String(k.to_owned()),
                ),
            );
            m.insert(
                "name".into(),
                Value::String(format!(
                    "{} {}",
                    ADJECTIVES[((digest >> 8).wrapping_add(salt) % 8) as usize],
                    t.noun()
                )),
            );
            for (k, v) in attrs {
                let keep = match k.as_str() {
                    "amount" => money,
                    "days_since_delivery" => delivery,
                    _ => true,
                };
                if keep {
                    m.insert(k, v);
                }
            }
            if money {
                m.insert("currency".into(), Value::String("USD".into()));
            }
            if let Value::Object(args) = arguments {
                for (k, v) in args {
                    m.entry(k.clone()).or_insert_with(|| v.clone());
                }
            }
            m.insert(
                "ref".into(),
                Value::String(format!("{:08x}", (digest >> 32) as u32)),
            );
            Value::Object(m)
        };
        let first = t.words.first().map_or("", String::as_str);
        if matches!(first, "search" | "list" | "find" | "query") {
            let count = 1 + digest % 6;
            let items: Vec<Value> = (0..count).map(|i| record(None, i)).collect();
            return json!({"status": "ok", "query": arguments, "count": count, "items": items});
        }
        json!({"status": "ok", "data": record(refs.first().map(|(_, v)| v.as_str()), 0)})
    }
}

fn plain(result: Value) -> Answer {
    Answer {
        result,
        injected: None,
    }
}

pub(super) fn missing(refs: &[(String, String)]) -> Vec<Value> {
    if refs.is_empty() {
        vec![Value::String("entity".into())]
    } else {
        refs.iter().map(|(_, v)| Value::String(v.clone())).collect()
    }
}

/// `(key, value)` of every argument that names a record, nested objects included.
pub fn references(arguments: &Value) -> Vec<(String, String)> {
    fn walk(v: &Value, out: &mut Vec<(String, String)>) {
        if let Value::Object(m) = v {
            for (k, x) in m {
                match x {
                    Value::String(s) if REFERENCE_PARAM.is_match(k) && !s.trim().is_empty() => {
                        out.push((k.clone(), s.clone()));
                    }
                    Value::Number(n) if REFERENCE_PARAM.is_match(k) => {
                        out.push((k.clone(), n.to_string()));
                    }
                    Value::Object(_) => walk(x, out),
                    _ => {}
                }
            }
        }
    }
    let mut out = Vec::new();
    walk(arguments, &mut out);
    out
}

pub(super) fn placeholder_fields(v: &Value, path: &str) -> Vec<Value> {
    let mut out = Vec::new();
    if let Value::Object(m) = v {
        for (k, x) in m {
            let here = if path.is_empty() {
                k.clone()
            } else {
                format!("{path}.{k}")
            };
            match x {
                Value::String(s) => {
                    let low = s.trim().to_lowercase();
                    let wrapped = (low.starts_with('<') && low.ends_with('>'))
                        || (low.starts_with('[') && low.ends_with(']'))
                        || (low.starts_with('{') && low.ends_with('}'));
                    if wrapped
                        || PLACEHOLDERS.contains(&low.as_str())
                        || low.ends_with("@example.com")
                    {
                        out.push(Value::String(here));
                    }
                }
                Value::Object(_) => out.extend(placeholder_fields(x, &here)),
                _ => {}
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::stages::simulate::tools::parse_tools;

    fn tools() -> Vec<Tool> {
        parse_tools(&json!([
            {"name": "lookup_order", "description": "Orders on file: A1001, A1002.", "parameters": {"type": "object", "properties": {"order_id": {"type": "string"}}, "required": ["order_id"]}},
            {"name": "issue_refund", "parameters": {"type": "object", "properties": {"order_id": {"type": "string"}}, "required": ["order_id"]}},
        ]), "t").unwrap()
    }

    #[test]
    fn described_ids_exist_and_reads_never_say_already_done() {
        let tools = tools();
        let world = World::new(&tools, &["A1001".to_owned(), "A1002".to_owned()], 0);
        let mut mem = Memory::default();
        for id in ["A1001", "a1002"] {
            let a = world.call(
                &Scene::default(),
                &mut mem,
                "lookup_order",
                &json!({"order_id": id}),
            );
            assert_eq!(a.result["status"], "ok", "{id}: {}", a.result);
            assert_eq!(a.result["data"]["order_id"], id);
        }
        let done = Scene {
            plan: None,
            world_state: Some("entity already acted on".into()),
        };
        assert_eq!(
            world
                .call(
                    &done,
                    &mut mem,
                    "lookup_order",
                    &json!({"order_id": "A1001"})
                )
                .result["status"],
            "ok"
        );
        assert_eq!(
            world
                .call(
                    &done,
                    &mut mem,
                    "issue_refund",
                    &json!({"order_id": "A1001"})
                )
                .result["status"],
            "already_done"
        );
        let gone = Scene {
            plan: None,
            world_state: Some("entity missing".into()),
        };
        assert_eq!(
            world
                .call(
                    &gone,
                    &mut mem,
                    "lookup_order",
                    &json!({"order_id": "A1001"})
                )
                .result["status"],
            "not_found"
        );
        // The same record on every tool.
        let a = world.call(
            &Scene::default(),
            &mut mem,
            "lookup_order",
            &json!({"order_id": "A1001"}),
        );
        let b = world.call(
            &Scene::default(),
            &mut mem,
            "lookup_order",
            &json!({"order_id": "A1001"}),
        );
        assert_eq!(a, b);
        assert!(a.result["data"]["amount"].is_number());
    }

    #[test]
    fn scheduled_faults_fire_at_rate_one() {
        let tools = tools();
        let world = World::new(&tools, &[], 7);
        for mode in [
            Fault::Timeout,
            Fault::Malformed,
            Fault::Stale,
            Fault::PermissionDenied,
            Fault::NotFound,
            Fault::RateLimited,
            Fault::Partial,
        ] {
            let scene = Scene {
                plan: Some(Plan {
                    tool: "*".into(),
                    mode,
                    rate: 1.0,
                }),
                world_state: None,
            };
            let a = world.call(
                &scene,
                &mut Memory::default(),
                "lookup_order",
                &json!({"order_id": "Z9"}),
            );
            assert_eq!(a.injected, Some(mode));
            assert_eq!(
                Plan::from_json(&scene.plan.as_ref().unwrap().to_json()),
                scene.plan
            );
        }
        let a = world.call(
            &Scene::default(),
            &mut Memory::default(),
            "lookup_order",
            &json!({"order_id": "<order id>"}),
        );
        assert_eq!(a.result["reason"], "placeholder_argument");
        let a = world.call(
            &Scene::default(),
            &mut Memory::default(),
            "lookup_order",
            &json!({}),
        );
        assert_eq!(a.result["reason"], "missing_required");
    }
}
