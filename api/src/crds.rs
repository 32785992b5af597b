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
    let mut nrt = serde_json::to_value(crate::nrt::crd()?)?;
    let mut compute_domain = serde_json::to_value(ComputeDomain::crd())?;
    for schema in [&mut crd, &mut nrt, &mut compute_domain] {
        use_kubernetes_integer_formats(schema);
        descriptions_as_prose(schema);
    }
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

/// Doc comments are wrapped at 100 columns, and `kubectl explain` wraps each description again
/// at its own width: line breaks left in the CRD cut sentences into ragged fragments ("XID
/// errors, ECC" / "errors," / "thermal throttling"). Every `description` becomes prose: the
/// lines of a paragraph joined by spaces, with blank lines, list items, table rows and code
/// blocks kept on lines of their own.
fn descriptions_as_prose(value: &mut Value) {
    match value {
        Value::Object(map) => {
            for (key, field) in map.iter_mut() {
                match field {
                    Value::String(text) if key == "description" => *text = prose(text),
                    _ => descriptions_as_prose(field),
                }
            }
        }
        Value::Array(items) => items.iter_mut().for_each(descriptions_as_prose),
        _ => {}
    }
}

/// One description as prose (see [`descriptions_as_prose`]).
fn prose(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut previous: Option<&str> = None;
    let mut in_code = false;
    for line in text.split('\n') {
        let fence = line.trim_start().starts_with("```");
        let joined = previous.is_some_and(|previous| {
            !in_code
                && !fence
                && !previous.trim_start().starts_with("```")
                && !previous.trim().is_empty()
                && !line.trim().is_empty()
                && !starts_own_line(line)
        });
        if previous.is_some() {
            out.push(if joined { ' ' } else { '\n' });
        }
        out.push_str(if joined { line.trim() } else { line.trim_end() });
        if fence {
            in_code = !in_code;
        }
        previous = Some(line);
    }
    out
}

/// A Markdown line that must not be joined to the one before it: a list item or a table row.
fn starts_own_line(line: &str) -> bool {
    let line = line.trim_start();
    let numbered = line.split_once(". ").is_some_and(|(number, _)| {
        !number.is_empty() && number.bytes().all(|b| b.is_ascii_digit())
    });
    numbered || line.starts_with("- ") || line.starts_with("* ") || line.starts_with('|')
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
    fn descriptions_are_prose_for_kubectl_explain() {
        let cases = [
            (
                "Faults (XID errors, ECC\nerrors, thermal\nthrottling).",
                "Faults (XID errors, ECC errors, thermal throttling).",
            ),
            ("One.\n\nTwo\nlines.", "One.\n\nTwo lines."),
            (
                "Modes:\n- `a`: one\n  more\n- `b`",
                "Modes:\n- `a`: one more\n- `b`",
            ),
            ("Steps:\n1. first\n2. second", "Steps:\n1. first\n2. second"),
            (
                "Table:\n| a | b |\n|---|---|",
                "Table:\n| a | b |\n|---|---|",
            ),
            (
                "Code:\n```\nx\ny\n```\nafter\nit",
                "Code:\n```\nx\ny\n```\nafter it",
            ),
            ("Version 1.2.\nNext", "Version 1.2. Next"),
        ];
        for (doc, want) in cases {
            assert_eq!(super::prose(doc), want, "{doc:?}");
        }
    }

    #[test]
    fn no_description_breaks_a_sentence() -> Result<(), Box<dyn std::error::Error>> {
        for (file, yaml) in super::render()? {
            let crd: serde_yaml::Value = serde_yaml::from_str(&yaml)?;
            let mut descriptions = Vec::new();
            collect_descriptions(&crd, &mut descriptions);
            assert!(!descriptions.is_empty(), "{file} has no description");
            for text in descriptions {
                for pair in text.split('\n').collect::<Vec<_>>().windows(2) {
                    let [before, after] = pair else { continue };
                    assert!(
                        before.trim().is_empty()
                            || after.trim().is_empty()
                            || super::starts_own_line(after)
                            || text.contains("```"),
                        "{file}: a line break inside a sentence: {before:?} / {after:?}"
                    );
                }
            }
        }
        Ok(())
    }

    fn collect_descriptions(value: &serde_yaml::Value, out: &mut Vec<String>) {
        match value {
            serde_yaml::Value::Mapping(map) => {
                for (key, field) in map {
                    match (key.as_str(), field) {
                        (Some("description"), serde_yaml::Value::String(text)) => {
                            out.push(text.clone())
                        }
                        _ => collect_descriptions(field, out),
                    }
                }
            }
            serde_yaml::Value::Sequence(items) => items
                .iter()
                .for_each(|item| collect_descriptions(item, out)),
            _ => {}
        }
    }

    #[test]
    fn no_unsigned_formats_reach_the_api_server() -> Result<(), Box<dyn std::error::Error>> {
        for (_, yaml) in super::render()? {
            assert!(!yaml.contains("uint32") && !yaml.contains("uint64"));
        }
        Ok(())
    }
}
