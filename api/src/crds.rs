//! The CRDs fakegpu installs, rendered the way `config/crd/` holds them.

use kube::CustomResourceExt;
use serde_json::Value;

use crate::{GpuNodePool, compute_domain::ComputeDomain};

/// Why a CRD could not be rendered.
#[derive(Debug, thiserror::Error)]
pub enum RenderError {
    #[error("serialising CRD: {0}")]
    Json(#[from] serde_json::Error),
    #[error("writing CRD as YAML: {0}")]
    Yaml(#[from] serde_yaml::Error),
}

/// Every CRD as `(file name under config/crd/, YAML)`.
pub fn render() -> Result<Vec<(&'static str, String)>, RenderError> {
    let mut crd = serde_json::to_value(GpuNodePool::crd())?;
    use_kubernetes_integer_formats(&mut crd);
    let mut nrt = serde_json::to_value(crate::nrt::crd()?)?;
    use_kubernetes_integer_formats(&mut nrt);
    let mut compute_domain = serde_json::to_value(ComputeDomain::crd())?;
    use_kubernetes_integer_formats(&mut compute_domain);
    Ok(vec![
        (
            "fakegpu.dev_gpunodepools.yaml",
            serde_yaml::to_string(&crd)?,
        ),
        (
            "topology.node.k8s.io_noderesourcetopologies.yaml",
            serde_yaml::to_string(&nrt)?,
        ),
        (
            "resource.nvidia.com_computedomains.yaml",
            serde_yaml::to_string(&compute_domain)?,
        ),
    ])
}

/// schemars writes `uint32`/`uint64` for unsigned fields; the API server does not know those
/// formats and warns on every `kubectl apply`. The bounds are already in `minimum`/`maximum`.
fn use_kubernetes_integer_formats(value: &mut Value) {
    match value {
        Value::Object(map) => {
            if let Some(format) = map.get_mut("format") {
                match format.as_str() {
                    Some("uint32") => *format = Value::from("int32"),
                    Some("uint64") => *format = Value::from("int64"),
                    _ => {}
                }
            }
            map.values_mut().for_each(use_kubernetes_integer_formats);
        }
        Value::Array(items) => items.iter_mut().for_each(use_kubernetes_integer_formats),
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    #[test]
    fn committed_crds_are_current() -> Result<(), Box<dyn std::error::Error>> {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../config/crd");
        for (file, yaml) in super::render()? {
            let committed = std::fs::read_to_string(dir.join(file)).unwrap_or_default();
            assert!(
                committed == yaml,
                "config/crd/{file} is stale: run `cargo run -p fakegpu-api --bin crdgen -- config/crd`"
            );
        }
        Ok(())
    }

    #[test]
    fn no_unsigned_formats_reach_the_api_server() -> Result<(), Box<dyn std::error::Error>> {
        for (_, yaml) in super::render()? {
            assert!(!yaml.contains("uint32") && !yaml.contains("uint64"));
        }
        Ok(())
    }
}
