//! The Python package (`python/`, `import wai`): its pytest suite and `mypy --strict`, run with
//! `WAI_PY_PYTHON`, a python whose environment has the package built from this checkout
//! (`maturin develop` in `python/`; `.ci/run` makes it). Skipped without it, outside CI.

use std::path::Path;

/// The python with the package, or `None` (a skip) outside CI; CI must name it.
#[allow(clippy::print_stderr, reason = "a skipped test says why")]
fn python() -> Option<String> {
    let found = std::env::var("WAI_PY_PYTHON").ok();
    assert!(
        found.is_some() || std::env::var_os("CI").is_none(),
        "CI must set WAI_PY_PYTHON (see .ci/run)"
    );
    if found.is_none() {
        eprintln!(
            "skipped: set WAI_PY_PYTHON to a python with python/requirements-test.txt and the package built into it (`maturin develop` in python/)"
        );
    }
    found
}

fn package_dir() -> &'static Path {
    Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/python"))
}

#[test]
fn the_python_package_passes_its_tests() {
    let Some(python) = python() else { return };
    let out = std::process::Command::new(&python)
        .args(["-m", "pytest", "-q", "-p", "no:cacheprovider", "tests"])
        .current_dir(package_dir())
        .env("PYTHONDONTWRITEBYTECODE", "1")
        // The model tests' deterministic server (`src/bin/model_server.rs`).
        .env("WAI_MODEL_SERVER", env!("CARGO_BIN_EXE_wai-model-server"))
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "pytest failed:\n{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    // Every test ran: none skipped for a missing library.
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(!text.contains("skipped"), "{text}");
}

#[test]
fn the_python_package_is_typed_strictly() {
    let Some(python) = python() else { return };
    let out = std::process::Command::new(&python)
        .args(["-m", "mypy", "--strict", "--no-incremental", "tests", "wai"])
        .current_dir(package_dir())
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "mypy --strict:\n{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}
