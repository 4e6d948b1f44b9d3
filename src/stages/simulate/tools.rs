//! The agent's tools, read from the three shapes people write them in, and what the simulator
//! reads off them: verbs, nouns, reference-like parameters, and the ids the descriptions name.

use std::sync::LazyLock;

use regex::Regex;
use serde_json::{Map, Value};

use crate::error::{Error, Result};

/// One parameter of a tool (a property of its JSON schema, nested objects flattened by path).
#[derive(Debug, Clone, PartialEq)]
pub struct Param {
    /// The property name (`customer.email` for a nested one).
    pub name: String,
    /// The JSON schema type, when given.
    pub kind: Option<String>,
    /// The description, when given.
    pub description: Option<String>,
    /// Required at its level.
    pub required: bool,
}

/// One tool: its name, description, parameters and the schema as given.
#[derive(Debug, Clone, PartialEq)]
pub struct Tool {
    /// The function name.
    pub name: String,
    /// The description ("" when none).
    pub description: String,
    /// Top-level and nested parameters, in schema order.
    pub params: Vec<Param>,
    /// The OpenAI function object (`{name, description, parameters}`).
    pub function: Value,
    /// The name split into lowercase words (`issue_refund`, `issueRefund` → `issue`, `refund`;
    /// see [`name_tokens`]).
    pub words: Vec<String>,
    /// The tool came with a parameter schema (else an empty one stands in).
    pub declared_schema: bool,
}

/// What a tool does, read off the first word of its name.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verb {
    /// Reads and changes nothing (`get`, `lookup`, `check`, `search`, `list`, ...).
    Read,
    /// Makes something new (`create`, `add`, `issue`, `book`, ...).
    Create,
    /// Removes something (`delete`, `remove`, ...).
    Delete,
    /// Cancels something.
    Cancel,
    /// Changes something (`update`, `set`, `change`, ...).
    Update,
    /// Sends something (`send`, `notify`, `email`, ...).
    Send,
    /// Anything else (`escalate`, `refund`, `transfer`, ...).
    Other,
}

/// Read verbs: the grid, the writer and the world agree on this one list (the reference's world
/// left out `lookup` and `check`, so a lookup could answer "already done").
pub const READ_VERBS: [&str; 18] = [
    "get", "read", "list", "inspect", "search", "fetch", "find", "show", "describe", "cat", "view",
    "lookup", "look", "check", "query", "retrieve", "count", "status",
];
const CREATE_VERBS: [&str; 29] = [
    "create", "add", "make", "new", "post", "insert", "generate", "write", "upload", "submit",
    "open", "issue", "book", "place", "request", "schedule", "reserve", "start", "initiate",
    "begin", "launch", "register", "file", "log", "raise", "apply", "grant", "refund", "pay",
];
const DELETE_VERBS: [&str; 5] = ["delete", "remove", "drop", "destroy", "purge"];
const UPDATE_VERBS: [&str; 8] = [
    "update", "change", "modify", "edit", "set", "patch", "rename", "move",
];
const SEND_VERBS: [&str; 6] = ["send", "notify", "email", "message", "reply", "forward"];
/// Tokens that make a tool destructive: a wrong call costs something.
const DESTRUCTIVE: [&str; 25] = [
    "delete",
    "remove",
    "pay",
    "refund",
    "transfer",
    "publish",
    "send",
    "cancel",
    "execute",
    "destroy",
    "drop",
    "close",
    "terminate",
    "revoke",
    "uninstall",
    "reset",
    "clear",
    "erase",
    "wipe",
    "purge",
    "disable",
    "deactivate",
    "unpublish",
    "unshare",
    "unsend",
];

/// A parameter that names a record: the world checks these exist.
pub static REFERENCE_PARAM: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r"(?i)^id$|_id$|^path$|_path$|^file$|^name$|^key$|^ref$|^reference$|_ref$|^number$|^repo$|^asin$|^sku$")
        .expect("a valid pattern")
});
/// Ids written out in descriptions and asks (`A1001`, `ORD-2231`, `12B`).
pub static KNOWN_ID: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r"\b(?:[A-Z]{1,4}[-_]?\d{3,6}|\d{1,4}[A-Z]{1,2})\b").expect("a valid pattern")
});

impl Tool {
    /// What the tool does, from its first word.
    pub fn verb(&self) -> Verb {
        let first = self.words.first().map_or("", String::as_str);
        if READ_VERBS.contains(&first) {
            Verb::Read
        } else if first == "cancel" {
            Verb::Cancel
        } else if DELETE_VERBS.contains(&first) {
            Verb::Delete
        } else if UPDATE_VERBS.contains(&first) {
            Verb::Update
        } else if SEND_VERBS.contains(&first) {
            Verb::Send
        } else if CREATE_VERBS.contains(&first) {
            Verb::Create
        } else {
            Verb::Other
        }
    }

    /// A wrong call costs something (any name word in the destructive list).
    pub fn destructive(&self) -> bool {
        self.words.iter().any(|t| DESTRUCTIVE.contains(&t.as_str()))
    }

    /// The object the tool acts on: the name words after the verb (`issue_refund` → `refund`,
    /// `lookup_order` → `order`, `escalate_to_human` → `human`), or `request`.
    pub fn noun(&self) -> String {
        let tokens = &self.words;
        let rest: Vec<&str> = tokens
            .iter()
            .skip(1)
            .map(String::as_str)
            .filter(|t| !matches!(*t, "to" | "a" | "an" | "the" | "for" | "by" | "of" | "on"))
            .collect();
        if rest.is_empty() {
            if self.verb() == Verb::Other {
                return tokens.first().cloned().unwrap_or_else(|| "request".into());
            }
            return "request".into();
        }
        rest.join(" ")
    }

    /// The required parameters, or the first parameter when none is required.
    pub fn required(&self) -> Vec<&Param> {
        let top: Vec<&Param> = self
            .params
            .iter()
            .filter(|p| !p.name.contains('.'))
            .collect();
        let required: Vec<&Param> = top.iter().copied().filter(|p| p.required).collect();
        if required.is_empty() {
            top.into_iter().take(1).collect()
        } else {
            required
        }
    }

    /// Whether any parameter names a record.
    pub fn has_reference(&self) -> bool {
        self.params
            .iter()
            .any(|p| REFERENCE_PARAM.is_match(p.name.rsplit('.').next().unwrap_or(&p.name)))
    }
}

/// `issue_refund`, `issueRefund`, `Issue-Refund` → `["issue", "refund"]`.
pub fn name_tokens(name: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut word = String::new();
    let mut prev_lower = false;
    for c in name.chars() {
        if !c.is_alphanumeric() {
            if !word.is_empty() {
                out.push(std::mem::take(&mut word));
            }
            prev_lower = false;
            continue;
        }
        if c.is_uppercase() && prev_lower && !word.is_empty() {
            out.push(std::mem::take(&mut word));
        }
        prev_lower = c.is_lowercase() || c.is_ascii_digit();
        word.extend(c.to_lowercase());
    }
    if !word.is_empty() {
        out.push(word);
    }
    out
}

/// Reads a tool list: a JSON array (or `{"tools": [...]}`) of OpenAI envelopes (`{"type":
/// "function", "function": {...}}`), bare `{name, description, parameters}` objects, or Anthropic
/// tools (`input_schema`). `source` names the file in errors.
pub fn parse_tools(value: &Value, source: &str) -> Result<Vec<Tool>> {
    let list = match value {
        Value::Array(a) => a,
        Value::Object(o) => match o.get("tools") {
            Some(Value::Array(a)) => a,
            _ => {
                return Err(bad(
                    source,
                    "expected a JSON array of tools, or an object with a `tools` array",
                ));
            }
        },
        _ => return Err(bad(source, "expected a JSON array of tools")),
    };
    let mut tools = Vec::with_capacity(list.len());
    for (i, item) in list.iter().enumerate() {
        let Value::Object(obj) = item else {
            return Err(bad(source, &format!("tool {i}: expected an object")));
        };
        let f = match obj.get("function") {
            Some(Value::Object(f)) => f,
            Some(_) => {
                return Err(bad(
                    source,
                    &format!("tool {i}: field `function`: expected an object"),
                ));
            }
            None => obj,
        };
        let Some(name) = f
            .get("name")
            .and_then(Value::as_str)
            .filter(|n| !n.trim().is_empty())
        else {
            return Err(bad(
                source,
                &format!("tool {i}: field `name`: missing or not a string"),
            ));
        };
        if tools.iter().any(|t: &Tool| t.name == name) {
            return Err(bad(
                source,
                &format!("tool {i}: the name `{name}` is declared twice"),
            ));
        }
        let description = f
            .get("description")
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_owned();
        let schema = f
            .get("parameters")
            .or_else(|| f.get("input_schema"))
            .cloned();
        let declared_schema = schema.as_ref().is_some_and(Value::is_object);
        let schema = match schema {
            None | Some(Value::Null) => Value::Object(Map::from_iter([
                ("type".to_owned(), Value::String("object".into())),
                ("properties".to_owned(), Value::Object(Map::new())),
            ])),
            Some(s @ Value::Object(_)) => s,
            Some(_) => {
                return Err(bad(
                    source,
                    &format!(
                        "tool {i} (`{name}`): field `parameters`: expected a JSON schema object"
                    ),
                ));
            }
        };
        let mut params = Vec::new();
        flatten(&schema, "", &mut params);
        let function = Value::Object(Map::from_iter([
            ("name".to_owned(), Value::String(name.to_owned())),
            ("description".to_owned(), Value::String(description.clone())),
            ("parameters".to_owned(), schema),
        ]));
        tools.push(Tool {
            name: name.to_owned(),
            description,
            params,
            function,
            words: name_tokens(name),
            declared_schema,
        });
    }
    Ok(tools)
}

/// A tool list that is wrong is bad input data (exit 65), as a bad row is.
fn bad(source: &str, message: &str) -> Error {
    Error::Input {
        stage: "read".into(),
        message: format!("`{source}`: {message}"),
    }
}

fn flatten(schema: &Value, prefix: &str, out: &mut Vec<Param>) {
    let Some(props) = schema.get("properties").and_then(Value::as_object) else {
        return;
    };
    let required: Vec<&str> = schema
        .get("required")
        .and_then(Value::as_array)
        .map(|a| a.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default();
    for (name, p) in props {
        let path = if prefix.is_empty() {
            name.clone()
        } else {
            format!("{prefix}.{name}")
        };
        out.push(Param {
            name: path.clone(),
            kind: p.get("type").and_then(Value::as_str).map(str::to_owned),
            description: p
                .get("description")
                .and_then(Value::as_str)
                .map(str::to_owned),
            required: required.contains(&name.as_str()),
        });
        if p.get("properties").is_some() {
            flatten(p, &path, out);
        }
    }
}

/// Every id the tool descriptions (and parameter descriptions) name, in order, without repeats.
pub fn described_ids(tools: &[Tool]) -> Vec<String> {
    let mut ids: Vec<String> = Vec::new();
    for t in tools {
        let texts = std::iter::once(t.description.as_str())
            .chain(t.params.iter().filter_map(|p| p.description.as_deref()));
        for text in texts {
            for m in KNOWN_ID.find_iter(text) {
                if !ids.iter().any(|i| i == m.as_str()) {
                    ids.push(m.as_str().to_owned());
                }
            }
        }
    }
    ids
}

/// The ids an ask names (for seeds: the world knows them).
pub fn ids_in(text: &str) -> Vec<String> {
    KNOWN_ID
        .find_iter(text)
        .map(|m| m.as_str().to_owned())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn three_shapes_read_alike() {
        let openai = json!([{"type": "function", "function": {"name": "lookup_order", "description": "Orders: A1001.", "parameters": {"type": "object", "properties": {"order_id": {"type": "string"}}, "required": ["order_id"]}}}]);
        let bare = json!([{"name": "lookup_order", "description": "Orders: A1001.", "parameters": {"type": "object", "properties": {"order_id": {"type": "string"}}, "required": ["order_id"]}}]);
        let anthropic = json!({"tools": [{"name": "lookup_order", "description": "Orders: A1001.", "input_schema": {"type": "object", "properties": {"order_id": {"type": "string"}}, "required": ["order_id"]}}]});
        let a = parse_tools(&openai, "a").unwrap();
        assert_eq!(a, parse_tools(&bare, "b").unwrap());
        assert_eq!(a, parse_tools(&anthropic, "c").unwrap());
        assert_eq!(a[0].verb(), Verb::Read);
        assert_eq!(a[0].noun(), "order");
        assert!(a[0].has_reference());
        assert_eq!(described_ids(&a), ["A1001"]);
        let err = parse_tools(&json!([{"description": "x"}]), "tools.json")
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("tools.json") && err.contains("tool 0") && err.contains("`name`"),
            "{err}"
        );
    }

    #[test]
    fn names_split_and_classify() {
        assert_eq!(name_tokens("issueRefund"), ["issue", "refund"]);
        assert_eq!(
            name_tokens("escalate_to_human"),
            ["escalate", "to", "human"]
        );
        let t = |n: &str| Tool {
            name: n.into(),
            description: String::new(),
            params: vec![],
            function: Value::Null,
            words: name_tokens(n),
            declared_schema: false,
        };
        assert_eq!(t("issue_refund").verb(), Verb::Create);
        assert!(t("issue_refund").destructive());
        assert_eq!(t("escalate_to_human").noun(), "human");
        assert_eq!(t("check_status").verb(), Verb::Read);
        assert_eq!(t("cancel_order").verb(), Verb::Cancel);
    }
}
