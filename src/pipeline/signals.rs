//! Ending cleanly on SIGTERM, SIGINT and SIGHUP.
//!
//! Judge and agent workers lead process groups of their own (so a terminal's Ctrl-C reaches
//! wai, not them, and wai decides what happens to the rows they hold). Without this module they
//! would outlive wai. [`install`] starts a thread that waits for the three signals; on one, it
//! kills every worker group still registered here, waits for each group leader and for the group
//! to empty, removes the temporary files registered here (half-written outputs, scratch
//! folders), and exits with 128 + the signal: 143 for SIGTERM, 130 for SIGINT, 129 for SIGHUP.
//! What a rerun resumes from (a simulate checkpoint, a grade's verdict log) is not temporary and
//! stays.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, LazyLock, Mutex};
use std::time::{Duration, Instant};

use signal_hook::consts::{SIGHUP, SIGINT, SIGTERM};

use crate::error::{Error, Result};

/// A worker process, shared between its pool and the signal thread.
pub type SharedChild = Arc<Mutex<Child>>;

/// Worker process groups by leader pid.
static GROUPS: LazyLock<Mutex<HashMap<u32, SharedChild>>> = LazyLock::new(Mutex::default);
/// Temporary files and folders to remove on a signal.
static TEMPS: LazyLock<Mutex<Vec<PathBuf>>> = LazyLock::new(Mutex::default);
/// How long to wait for a killed group to empty.
const GROUP_WAIT: Duration = Duration::from_secs(2);

/// Starts the thread that ends the run on SIGTERM, SIGINT or SIGHUP.
///
/// # Errors
/// The signal handlers cannot be installed.
pub fn install() -> Result<()> {
    install_for(&[SIGTERM, SIGINT, SIGHUP])
}

fn install_for(which: &[i32]) -> Result<()> {
    // Once per process: a program that runs many commands in-process (the benches,
    // `run_command_line`) gets one handler thread, not one per command.
    if INSTALLED.get().is_some() {
        return Ok(());
    }
    let mut signals = signal_hook::iterator::Signals::new(which)
        .map_err(|e| Error::Internal(format!("cannot install the signal handlers: {e}")))?;
    std::thread::Builder::new()
        .name("wai-signals".into())
        .spawn(move || {
            if let Some(signal) = signals.forever().next() {
                end_workers();
                remove_temps();
                std::process::exit(128 + signal);
            }
        })
        .map_err(|e| Error::Internal(format!("cannot start the signal thread: {e}")))?;
    let _ = INSTALLED.set(());
    Ok(())
}

/// Set once the handler is installed, or once the host keeps signals ([`leave_to_host`]).
static INSTALLED: std::sync::OnceLock<()> = std::sync::OnceLock::new();

/// Leaves SIGINT to the program wai runs in (the Python package: Ctrl-C is the interpreter's
/// `KeyboardInterrupt`, not the end of the process); SIGTERM and SIGHUP still end the worker
/// process groups and remove temporary files before the process exits, as in the binary.
/// [`install`] does nothing from then on.
///
/// # Errors
/// The signal handlers cannot be installed.
pub fn leave_to_host() -> Result<()> {
    install_for(&[SIGTERM, SIGHUP])
}

/// Ends every worker process group a pool started (the host's Ctrl-C abandoned a command).
pub fn end_all_workers() {
    end_workers();
}

/// Registers a worker that leads its own process group.
pub fn add_group(child: &SharedChild) {
    let pid = child.lock().map_or(0, |c| c.id());
    if let Ok(mut groups) = GROUPS.lock() {
        groups.insert(pid, Arc::clone(child));
    }
}

/// Forgets a worker (its pool ended it).
pub fn remove_group(pid: u32) {
    if let Ok(mut groups) = GROUPS.lock() {
        groups.remove(&pid);
    }
}

/// Registers a temporary file or folder to remove on a signal.
pub fn add_temp(path: &Path) {
    if let Ok(mut temps) = TEMPS.lock() {
        temps.push(path.to_path_buf());
    }
}

/// Forgets a temporary path (it was renamed into place or removed).
pub fn remove_temp(path: &Path) {
    if let Ok(mut temps) = TEMPS.lock() {
        temps.retain(|p| p != path);
    }
}

/// Sends SIGKILL to process group `pid`; whether the group still had a member.
pub fn kill_group(pid: u32, signal: &str) -> bool {
    Command::new("kill")
        .args([signal, "--", &format!("-{pid}")])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

/// Kills every registered worker group, reaps each leader, and waits for the groups to empty.
fn end_workers() {
    let groups: Vec<(u32, SharedChild)> = GROUPS
        .lock()
        .map(|g| g.iter().map(|(pid, c)| (*pid, Arc::clone(c))).collect())
        .unwrap_or_default();
    for (pid, _) in &groups {
        kill_group(*pid, "-KILL");
    }
    for (_, child) in &groups {
        if let Ok(mut child) = child.lock() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
    let deadline = Instant::now() + GROUP_WAIT;
    for (pid, _) in &groups {
        while kill_group(*pid, "-0") && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(10));
        }
    }
}

fn remove_temps() {
    let temps = TEMPS.lock().map(|t| t.clone()).unwrap_or_default();
    for path in temps {
        if path.is_dir() {
            let _ = std::fs::remove_dir_all(&path);
        } else {
            let _ = std::fs::remove_file(&path);
        }
    }
}
