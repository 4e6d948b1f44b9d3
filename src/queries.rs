//! Canned SQL, one query a file in `queries/`, embedded at build time.
//!
//! Each file opens with a comment: its first line is the one-line description `wai sql --list`
//! shows; the next lines name the input tables, `$params` and output columns.

macro_rules! query {
    ($name:literal) => {
        Query {
            name: $name,
            sql: include_str!(concat!(
                env!("CARGO_MANIFEST_DIR"),
                "/queries/",
                $name,
                ".sql"
            )),
        }
    };
}

/// One canned query.
#[derive(Debug, Clone, Copy)]
pub struct Query {
    /// Its name (the file stem).
    pub name: &'static str,
    /// The whole file.
    pub sql: &'static str,
}

impl Query {
    /// The one-line description: the first comment line.
    pub fn description(&self) -> &'static str {
        self.sql
            .lines()
            .next()
            .and_then(|l| l.strip_prefix("--"))
            .map_or("", str::trim)
    }

    /// The `$params` it takes, in order of first use.
    pub fn params(&self) -> Vec<&'static str> {
        let mut out: Vec<&'static str> = Vec::new();
        for line in self
            .sql
            .lines()
            .filter(|l| !l.trim_start().starts_with("--"))
        {
            let mut rest = line;
            while let Some(i) = rest.find('$') {
                let tail = &rest[i + 1..];
                let end = tail
                    .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
                    .unwrap_or(tail.len());
                if end > 0 && !out.contains(&&tail[..end]) {
                    out.push(&tail[..end]);
                }
                rest = &tail[end..];
            }
        }
        out
    }
}

/// Every canned query, by name.
pub const QUERIES: [Query; 10] = [
    query!("failures_by_tool_tier"),
    query!("judge_status"),
    query!("lake_compare_history"),
    query!("lake_judge_versions"),
    query!("lake_pass_at_trend"),
    query!("marker_rates"),
    query!("pass_at_k_by_slice"),
    query!("pass_rate_by_dim"),
    query!("rewards_by_task"),
    query!("tool_errors"),
];

/// Queries that stages run (not listed by `wai sql --list`).
pub mod stage {
    use super::Query;

    /// Per-task counts for pass@k.
    pub const PASS_AT_TASKS: Query = query!("pass_at_tasks");
    /// Per-slice facts for pass@k's notes and config.
    pub const PASS_AT_FACTS: Query = query!("pass_at_facts");
    /// Spoken replies of rows with a blank final text.
    pub const PASS_AT_BLANK_REPLIES: Query = query!("pass_at_blank_replies");
    /// Per-(marker, task) values.
    pub const MARKER_TASKS: Query = query!("marker_tasks");
}

/// The canned query called `name`.
pub fn find(name: &str) -> Option<Query> {
    QUERIES.iter().copied().find(|q| q.name == name)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_query_has_a_description_and_known_params() {
        for q in QUERIES {
            assert!(!q.description().is_empty(), "{}", q.name);
        }
        assert_eq!(
            find("pass_rate_by_dim").map(|q| q.params()),
            Some(vec!["key"])
        );
        assert!(find("marker_rates").is_some_and(|q| q.params().is_empty()));
    }
}
