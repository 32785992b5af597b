//! The fake nvidia-smi: what a container given simulated GPUs sees when it runs `nvidia-smi`.
//!
//! It reads its node's GPUs from the node's document that the node agent gives the container
//! for the NVML library (`FAKEGPU_NVML_TOPOLOGY`), drawing each pod's utilization as the
//! exporter does, or asks the exporter ([`fakegpu_model::report::NodeReport`]) without one or for
//! Knative request rates, so the utilization matches `DCGM_FI_DEV_GPU_UTIL` either way; it keeps
//! the ones the container was given
//! (`NVIDIA_VISIBLE_DEVICES`, set by the device plugin and the DRA plugin's CDI spec) and prints
//! them in the real tool's layouts: the default table, `-L`, `--query-gpu` and
//! `--query-compute-apps` as CSV, `--version`.

mod args;
mod fetch;
mod gpus;
mod query;
mod table;

use std::{io::Write, path::Path};

use fakegpu_model::{report::NodeReport, topology::NodeTopology};

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

/// The node's GPUs: from the node's document in the container when the node agent put it there
/// (no network, and the same draws as the exporter's; the exporter is asked when a pod on the
/// node takes Knative request rates, which only it knows), else from the exporter. Errors are
/// written to `out`/`err` and returned as the exit code.
fn report(env: &Environment, out: &mut dyn Write, err: &mut dyn Write) -> Result<NodeReport, i32> {
    let local = env
        .document
        .as_deref()
        .and_then(|path| std::fs::read_to_string(path).ok())
        .and_then(|text| NodeTopology::from_yaml(&text).ok())
        .map(|document| {
            let node = env.node.as_deref().unwrap_or_default();
            NodeReport::drawn(node, &document, env.draw_period)
        });
    let local = match local {
        Some(report) if !report.topology.wants_knative() => return Ok(report),
        other => other,
    };
    let node = env.node.as_deref().filter(|n| !n.is_empty());
    let url = env.exporter_url.as_deref().filter(|u| !u.is_empty());
    let (Some(node), Some(url)) = (node, url) else {
        if let Some(report) = local {
            return Ok(report);
        }
        let _ = if node.is_none() {
            writeln!(
                err,
                "NVIDIA-SMI has failed because NODE_NAME is not set: it names the node whose \
                 GPUs to show. Containers given GPUs by fakegpu's device plugin or DRA driver \
                 have it; elsewhere set it, e.g. from the downward API (spec.nodeName)."
            )
        } else {
            writeln!(
                err,
                "NVIDIA-SMI has failed because FAKEGPU_EXPORTER_URL is not set: it says where \
                 fakegpu's exporter serves the node's GPUs (http://fakegpu-exporter.<namespace>.svc:9400)."
            )
        };
        return Err(exit::DRIVER_NOT_LOADED);
    };
    match (node_report(url, node), local) {
        (Ok(report), _) => Ok(report),
        // The exporter was asked for Knative rates only: without it, the document's draws.
        (Err(FetchError::Unreachable { .. }), Some(local)) => Ok(local),
        (Err(FetchError::NoNode), _) => {
            let _ = writeln!(out, "No devices were found");
            Err(exit::NOT_FOUND)
        }
        (Err(error @ FetchError::Unreachable { .. }), None) => {
            let _ = writeln!(
                err,
                "NVIDIA-SMI has failed because it couldn't communicate with the fakegpu \
                 exporter: {error}. Make sure it is running."
            );
            Err(exit::DRIVER_NOT_LOADED)
        }
        (Err(error), _) => {
            let _ = writeln!(err, "Failed to parse devices data: {error}");
            Err(exit::UNKNOWN)
        }
    }
}

/// The node's GPUs in a container NVIDIA's toolkit gave GPUs: the driver-root agent's socket
/// is all it has of the driver.
fn socket_report(env: &Environment, socket: &Path, err: &mut dyn Write) -> Result<NodeReport, i32> {
    let fetched = fakegpu_model::document_source::fetch(socket)
        .and_then(|text| NodeTopology::from_yaml(&text).map_err(std::io::Error::other));
    match fetched {
        Ok(document) => {
            let node = env.node.as_deref().unwrap_or_default();
            Ok(NodeReport::drawn(node, &document, env.draw_period))
        }
        Err(error) => {
            let _ = writeln!(
                err,
                "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver: \
                 {}: {error}. Make sure fakegpu's driver-root agent is running on this node.",
                socket.display()
            );
            Err(exit::DRIVER_NOT_LOADED)
        }
    }
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
    let toolkit = env.toolkit_socket();
    let answered = match toolkit {
        Some(socket) => socket_report(env, socket, err),
        None => report(env, out, err),
    };
    let report = match answered {
        Ok(report) => report,
        Err(code) => return code,
    };
    let given;
    let env = match toolkit {
        Some(_) => {
            given = env.given_by_device_nodes(&report.topology);
            &given
        }
        None => env,
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
