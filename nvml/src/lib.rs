//! fakegpu's `libnvidia-ml.so.1`: NVML answered from a node's topology document, so that
//! NVIDIA's own components (GPU feature discovery, the device plugin, the DRA driver,
//! nvidia-smi, anything built on go-nvml) run on simulated GPUs and see exactly the GPUs the
//! operator published for the node.
//!
//! - [`machine`]: what NVML reports, computed from the document (pure);
//! - [`mig`]: GPU- and compute-instance profiles and instances, as the driver numbers them;
//! - [`source`]: where the document is read from, and which GPUs this process sees;
//! - [`events`]: the XID errors GPUs the document marks unhealthy raise;
//! - [`host`]: pods' processes as this process's `/proc` shows them (a host-side caller's view);
//! - `ffi`: the C ABI, the crate's only unsafe code, with every other NVML function of
//!   `nvml.h` answering `NVML_ERROR_NOT_SUPPORTED` (a caller binding one gets an error rather
//!   than a missing symbol).

pub mod events;
mod ffi;
pub mod host;
pub mod machine;
pub mod mig;
pub mod source;

pub use ffi::{
    ERROR_DRIVER_NOT_LOADED, ERROR_INSUFFICIENT_SIZE, ERROR_INVALID_ARGUMENT, ERROR_NOT_FOUND,
    ERROR_NOT_SUPPORTED, ERROR_UNINITIALIZED, Return, SUCCESS,
};
