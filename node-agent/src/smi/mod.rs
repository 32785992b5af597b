//! The fake nvidia-smi: what a container given simulated GPUs sees when it runs `nvidia-smi`.
//!
//! It asks the exporter for its node's GPUs ([`fakegpu_api::report::NodeReport`], so the
//! utilization matches `DCGM_FI_DEV_GPU_UTIL`), keeps the ones the container was given
//! (`NVIDIA_VISIBLE_DEVICES`, set by the device plugin and the DRA plugin's CDI spec) and prints
//! them in the real tool's layouts: the default table, `-L`, `--query-gpu` and
//! `--query-compute-apps` as CSV, `--version`.

mod args;
mod fetch;
mod gpus;
mod query;
mod table;

use std::io::Write;

pub use args::{Command, parse};
pub use fetch::{FetchError, node_report};
pub use gpus::{Environment, Gpu, Machine, Process, machine};
pub use query::{list, query_apps, query_gpus, version};
pub use table::table;

/// nvidia-smi's exit codes that scripts test for.
pub mod exit {
    pub const OK: i32 = 0;
    /// Bad arguments.
    pub const INVALID_ARGUMENT: i32 = 2;
    /// No GPU matched (`No devices were found`).
    pub const NOT_FOUND: i32 = 6;
    /// The driver cannot be reached; for the fake, the exporter or `NODE_NAME`.
    pub const DRIVER_NOT_LOADED: i32 = 9;
    pub const UNKNOWN: i32 = 255;
}

/// Runs nvidia-smi with `args` (without the program name) in `env`; `date` is the first line of
/// the table view. Returns the exit code.
pub fn run(
    args: &[String],
    env: &Environment,
    date: &str,
    out: &mut dyn Write,
    err: &mut dyn Write,
) -> i32 {
    let command = match parse(args) {
        Ok(command) => command,
        Err(message) => {
            let _ = writeln!(err, "{message}\nPlease run 'nvidia-smi -h' for help.");
            return exit::INVALID_ARGUMENT;
        }
    };
    if let Command::Help = command {
        let _ = out.write_all(args::HELP.as_bytes());
        return exit::OK;
    }
    let Some(node) = env.node.as_deref().filter(|n| !n.is_empty()) else {
        let _ = writeln!(
            err,
            "NVIDIA-SMI has failed because NODE_NAME is not set: it names the node whose \
             GPUs to show. Containers given GPUs by fakegpu's device plugin or DRA driver \
             have it; elsewhere set it, e.g. from the downward API (spec.nodeName)."
        );
        return exit::DRIVER_NOT_LOADED;
    };
    let Some(url) = env.exporter_url.as_deref().filter(|u| !u.is_empty()) else {
        let _ = writeln!(
            err,
            "NVIDIA-SMI has failed because FAKEGPU_EXPORTER_URL is not set: it says where \
             fakegpu's exporter serves the node's GPUs (http://fakegpu-exporter.<namespace>.svc:9400)."
        );
        return exit::DRIVER_NOT_LOADED;
    };
    let report = match node_report(url, node) {
        Ok(report) => report,
        Err(FetchError::NoNode) => {
            let _ = writeln!(out, "No devices were found");
            return exit::NOT_FOUND;
        }
        Err(error @ FetchError::Unreachable { .. }) => {
            let _ = writeln!(
                err,
                "NVIDIA-SMI has failed because it couldn't communicate with the fakegpu \
                 exporter: {error}. Make sure it is running."
            );
            return exit::DRIVER_NOT_LOADED;
        }
        Err(error) => {
            let _ = writeln!(err, "Failed to parse devices data: {error}");
            return exit::UNKNOWN;
        }
    };
    let machine = machine(&report, env);
    let selected = match command.selection() {
        Some(ids) => match machine.select(ids) {
            Ok(machine) => machine,
            Err(id) => {
                let _ = writeln!(err, "No devices were found matching {id:?}");
                return exit::NOT_FOUND;
            }
        },
        None => machine,
    };
    if selected.gpus.is_empty() && !matches!(command, Command::Version) {
        let _ = writeln!(out, "No devices were found");
        return exit::NOT_FOUND;
    }
    let text = match &command {
        Command::Table { .. } => Ok(table(&selected, date)),
        Command::List { .. } => Ok(list(&selected)),
        Command::QueryGpu { fields, format, .. } => query_gpus(&selected, fields, *format),
        Command::QueryApps { fields, format, .. } => query_apps(&selected, fields, *format),
        Command::Version => Ok(version(&selected)),
        Command::Help => Ok(String::new()),
    };
    match text {
        Ok(text) => {
            let _ = out.write_all(text.as_bytes());
            exit::OK
        }
        Err(message) => {
            let _ = writeln!(err, "{message}");
            exit::INVALID_ARGUMENT
        }
    }
}
