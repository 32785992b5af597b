//! What a simulated GPU node is, with serde alone: the topology document every component reads,
//! the GPU profile catalog, telemetry, faults, utilization and every externally visible name.
//! It knows nothing of Kubernetes' client or API types, so the libraries and the binary that
//! GPU containers load (`nvml`, `cuda`, nvidia-smi) build from it alone; `fakegpu-api` adds the
//! custom resources on top.

pub mod document_source;
pub mod faults;
pub mod mig_slices;
pub mod names;
pub mod profiles;
#[cfg(test)]
mod properties;
pub mod quantity;
pub mod report;
pub mod telemetry;
pub mod topology;
pub mod utilization;
