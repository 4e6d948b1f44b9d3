//! Reading a project for `wai init-evals`: the files one folder deep (skipping environments and
//! the output folder), the agent function, the tools file and the policy file they hold; and
//! writing the evals folder.

use std::path::{Path, PathBuf};
use std::sync::LazyLock;

use regex::Regex;
use serde_json::Value;

use crate::error::{Error, Result};
use crate::stages::init_evals::{AgentPick, File};
use crate::stages::simulate::tools::{Tool, parse_tools};

/// Folders never scanned.
const SKIP: [&str; 15] = [
    "venv",
    ".venv",
    "env",
    "node_modules",
    "site-packages",
    "build",
    "dist",
    "target",
    "__pycache__",
    "tests",
    "test",
    ".git",
    ".tox",
    ".mypy_cache",
    ".pytest_cache",
];
const AGENT_NAMES: [&str; 7] = ["answer", "respond", "chat", "run", "handle", "reply", "ask"];
const POLICY_NAMES: [&str; 8] = [
    "policy",
    "system_prompt",
    "system-prompt",
    "systemprompt",
    "prompt",
    "instructions",
    "system",
    "agent_prompt",
];

static AGENT_DEF: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r"(?m)^def (answer|respond|chat|run|handle|reply|ask)\(\s*(\w+)\s*(?::\s*str\s*)?\)")
        .expect("a valid pattern")
});
static RUNNER_DEF: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r"(?m)^def (run_tool|call_tool|execute_tool|_run_tool|_call_tool)\(\s*\w+")
        .expect("a valid pattern")
});

/// Files at the root and one folder down, in path order, skipping the output folder and the
/// usual environment folders.
fn candidates(root: &Path, out: &Path, ext: &[&str]) -> Vec<PathBuf> {
    let mut found = Vec::new();
    let mut dirs = vec![(root.to_path_buf(), 0)];
    while let Some((dir, depth)) = dirs.pop() {
        let Ok(entries) = std::fs::read_dir(&dir) else {
            continue;
        };
        let mut entries: Vec<PathBuf> = entries.flatten().map(|e| e.path()).collect();
        entries.sort();
        for p in entries {
            let name = p.file_name().and_then(|n| n.to_str()).unwrap_or("");
            if p.is_dir() {
                if depth == 0 && !name.starts_with('.') && !SKIP.contains(&name) && p != out {
                    dirs.push((p, 1));
                }
            } else if p
                .extension()
                .and_then(|e| e.to_str())
                .is_some_and(|e| ext.contains(&e))
                && name != "setup.py"
            {
                found.push(p);
            }
        }
    }
    found.sort_by_key(|p| (p.components().count(), p.clone()));
    found
}

/// `p` relative to `root`, as text.
pub fn relative(p: &Path, root: &Path) -> String {
    p.strip_prefix(root).unwrap_or(p).display().to_string()
}

/// The agent function of the project at `root` (skipping `out`): the best-named function taking
/// one argument, in the first file that has one.
pub fn guess_agent(root: &Path, out: &Path) -> Option<AgentPick> {
    let mut best: Option<(usize, AgentPick)> = None;
    for p in candidates(root, out, &["py"]) {
        let Ok(text) = std::fs::read_to_string(&p) else {
            continue;
        };
        for c in AGENT_DEF.captures_iter(&text) {
            let name = c.get(1).map_or("", |m| m.as_str());
            let rank = AGENT_NAMES.iter().position(|n| *n == name).unwrap_or(99);
            if best.as_ref().is_none_or(|(r, _)| rank < *r) {
                let module = relative(&p, root);
                best = Some((
                    rank,
                    AgentPick {
                        in_package: in_package(root, &module),
                        module,
                        function: name.to_owned(),
                        runner: runner_in(&text),
                        is_file: true,
                    },
                ));
            }
        }
    }
    best.map(|(_, a)| a)
}

/// The first JSON file of the project that reads as a tool list (files named like tools first).
pub fn guess_tools(root: &Path, out: &Path) -> Option<(PathBuf, Vec<Tool>)> {
    let mut files = candidates(root, out, &["json"]);
    // Files named like tools first.
    files.sort_by_key(|p| {
        (
            !p.file_name()
                .and_then(|n| n.to_str())
                .unwrap_or("")
                .contains("tool"),
            p.components().count(),
            p.clone(),
        )
    });
    files.into_iter().find_map(|p| {
        let text = super::world_files::read_text(&p).ok()?;
        let value: Value = serde_json::from_str(&text).ok()?;
        let tools = parse_tools(&value, &p.display().to_string()).ok()?;
        (!tools.is_empty()).then_some((p, tools))
    })
}

/// The policy file of the project, found by its name.
pub fn guess_policy(root: &Path, out: &Path) -> Option<PathBuf> {
    candidates(root, out, &["md", "txt"]).into_iter().find(|p| {
        let stem = p
            .file_stem()
            .and_then(|s| s.to_str())
            .unwrap_or("")
            .to_lowercase();
        POLICY_NAMES.contains(&stem.as_str())
    })
}

/// The tool runner a module's text defines (`run_tool`, `call_tool`, ...).
fn runner_in(text: &str) -> Option<String> {
    RUNNER_DEF
        .captures(text)
        .and_then(|c| c.get(1))
        .map(|m| m.as_str().to_owned())
}

/// The tool runner of the file `module` (relative to `root`).
///
/// # Errors
/// The file cannot be read.
pub fn runner_of(root: &Path, module: &str) -> Result<Option<String>> {
    let path = root.join(module);
    let text = std::fs::read_to_string(&path).map_err(|e| Error::io(&path, e))?;
    Ok(runner_in(&text))
}

/// Whether the file `module` (relative to `root`) sits in a package (its folder has an
/// `__init__.py`), so it is imported as a module of the package and its imports work.
pub fn in_package(root: &Path, module: &str) -> bool {
    Path::new(module)
        .parent()
        .is_some_and(|d| !d.as_os_str().is_empty() && root.join(d).join("__init__.py").exists())
}

/// Writes `files` into `out` (each atomically), the scripts executable.
///
/// # Errors
/// The folder or a file cannot be written.
pub fn write_folder(out: &Path, files: &[File]) -> Result<()> {
    std::fs::create_dir_all(out).map_err(|e| Error::io(out, e))?;
    for f in files {
        let path = out.join(f.name);
        let file = crate::pipeline::io::AtomicFile::create(&path)?;
        std::io::Write::write_all(&mut file.handle()?, f.text.as_bytes())
            .map_err(|e| Error::io(&path, e))?;
        file.commit()?;
    }
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        for name in ["run.sh", "agent.py", "judge.py", "test_judge.py"] {
            let p = out.join(name);
            if p.exists() {
                let _ = std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o755));
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_agent_tools_and_policy_are_found_and_the_output_folder_skipped() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        std::fs::create_dir_all(root.join("pkg")).unwrap();
        std::fs::create_dir_all(root.join("evals")).unwrap();
        std::fs::write(root.join("pkg/__init__.py"), "").unwrap();
        std::fs::write(
            root.join("pkg/bot.py"),
            "def run_tool(name, args):\n    pass\n\ndef respond(q):\n    pass\n\ndef answer(q: str):\n    pass\n",
        )
        .unwrap();
        std::fs::write(root.join("evals/tools.json"), r#"[{"name": "skipped"}]"#).unwrap();
        std::fs::write(root.join("my_tools.json"), r#"[{"name": "lookup_order"}]"#).unwrap();
        std::fs::write(root.join("system_prompt.txt"), "Be kind.").unwrap();
        let out = root.join("evals");
        let pick = guess_agent(root, &out).unwrap();
        assert_eq!(pick.module, "pkg/bot.py");
        assert_eq!(pick.function, "answer");
        assert_eq!(pick.runner.as_deref(), Some("run_tool"));
        assert!(pick.in_package);
        let (path, tools) = guess_tools(root, &out).unwrap();
        assert_eq!(relative(&path, root), "my_tools.json");
        assert_eq!(tools[0].name, "lookup_order");
        let policy = guess_policy(root, &out).unwrap();
        assert_eq!(relative(&policy, root), "system_prompt.txt");
        assert!(!in_package(root, "bot.py"));
        let files = [File {
            name: "run.sh",
            text: "echo hi\n".into(),
        }];
        write_folder(&out, &files).unwrap();
        assert_eq!(
            std::fs::read_to_string(out.join("run.sh")).unwrap(),
            "echo hi\n"
        );
    }

    #[test]
    fn a_tools_file_with_a_byte_order_mark_is_guessed() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        std::fs::write(
            root.join("tools.json"),
            "\u{feff}[{\"name\": \"lookup_order\"}]",
        )
        .unwrap();
        let (_, tools) = guess_tools(root, &root.join("evals")).unwrap();
        assert_eq!(tools[0].name, "lookup_order");
    }
}
