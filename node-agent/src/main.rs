//! fakegpu-node-agent: serves the kubelet's device-plugin and DRA gRPC APIs on nodes with a real
//! kubelet, from the node's topology.
//!
//! Not written yet; this crate only holds its place in the workspace. Its servers are the
//! "Node agent" issue. Until then the binary refuses to pretend it runs.

use std::process::ExitCode;

fn main() -> ExitCode {
    eprintln!(
        "fakegpu-node-agent {}: no kubelet plugins yet (see the Node agent issue)",
        env!("CARGO_PKG_VERSION")
    );
    ExitCode::from(2)
}
