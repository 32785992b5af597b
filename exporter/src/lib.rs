//! fakegpu-exporter: per GPU of every pool node (KWOK nodes included, served centrally as the
//! reference's KWOK status exporter does), the metrics dcgm-exporter publishes, with its names
//! and labels, so that NVIDIA's Grafana dashboard and queries written for real GPUs work.
//!
//! - [`documents`]: the topology ConfigMaps, watched, parsed once per version;
//! - [`draws`]: utilization values drawn from each pod's range, kept for an interval;
//! - [`knative`]: inference pods' utilization from their request rate, asked of Prometheus;
//! - [`energy`]: each GPU's power integrated into its energy counter;
//! - [`fields`]: the DCGM fields served, and what each reads of a sample;
//! - [`xids`]: each GPU's XIDs in the trailing window;
//! - [`render`]: documents and draws into samples (pure);
//! - [`exposition`]: samples into the text format, written chunk by chunk;
//! - [`bodies`]: a scrape's body, its chunks written into buffers kept for the chunks after.

pub mod bodies;
pub mod documents;
pub mod draws;
pub mod energy;
pub mod exposition;
pub mod fields;
pub mod knative;
pub mod render;
pub mod xids;
