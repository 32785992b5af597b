//! fakegpu-operator: the central controller that turns GpuNodePools into node labels, topology
//! ConfigMaps, DeviceClasses, ResourceSlices and status.
//!
//! Not written yet; this crate only holds its place in the workspace. Its reconcilers are the
//! "Operator core" issue. Until then the binary refuses to pretend it runs.

use std::process::ExitCode;

fn main() -> ExitCode {
    eprintln!(
        "fakegpu-operator {}: no reconcilers yet (see the Operator core issue)",
        env!("CARGO_PKG_VERSION")
    );
    ExitCode::from(2)
}
