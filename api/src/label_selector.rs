//! The API server's rules for a label selector, which its OpenAPI schema does not carry: a
//! CRD's `LabelSelector` field stores whatever has the right shape, and only code that turns it
//! into a selector (apimachinery's `LabelSelectorAsSelector`, here the operator) finds that a
//! key is no label key or that `In` has no values. The rules are those of apimachinery's
//! `labels.NewRequirement`.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;

use crate::meta::{is_dns_subdomain, is_label_name, is_label_value};

/// What is wrong with a selector: the field under the selector (`matchExpressions[0].values`)
/// and why.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{field}: {problem}")]
pub struct SelectorError {
    pub field: String,
    pub problem: String,
}

/// The operators a `LabelSelectorRequirement` may name.
pub const OPERATORS: [&str; 4] = ["In", "NotIn", "Exists", "DoesNotExist"];

const NAME_RULE: &str = "at most 63 letters, digits, '-', '_' or '.', beginning and ending \
                         with a letter or digit";

/// The first problem of `selector` in field order, or none: what the API server would refuse
/// if the field were a built-in type's selector.
pub fn validate(selector: &LabelSelector) -> Result<(), SelectorError> {
    let error = |field: String, problem: String| Err(SelectorError { field, problem });
    for (key, value) in selector.match_labels.iter().flatten() {
        let field = format!("matchLabels[{key:?}]");
        if let Err(problem) = label_key(key) {
            return error(field, problem);
        }
        if let Err(problem) = label_value(value) {
            return error(field, problem);
        }
    }
    for (i, requirement) in selector.match_expressions.iter().flatten().enumerate() {
        let field = |name: &str| format!("matchExpressions[{i}].{name}");
        if let Err(problem) = label_key(&requirement.key) {
            return error(field("key"), problem);
        }
        let values = requirement.values.as_deref().unwrap_or_default();
        let operator = requirement.operator.as_str();
        match operator {
            "In" | "NotIn" if values.is_empty() => {
                return error(
                    field("values"),
                    format!("operator {operator} needs at least one value"),
                );
            }
            "Exists" | "DoesNotExist" if !values.is_empty() => {
                return error(
                    field("values"),
                    format!("operator {operator} takes no values"),
                );
            }
            _ if !OPERATORS.contains(&operator) => {
                return error(
                    field("operator"),
                    format!(
                        "{operator:?} is no label selector operator (one of {})",
                        OPERATORS.join(", ")
                    ),
                );
            }
            _ => {}
        }
        for (j, value) in values.iter().enumerate() {
            if let Err(problem) = label_value(value) {
                return error(field(&format!("values[{j}]")), problem);
            }
        }
    }
    Ok(())
}

/// A label key: a name, optionally under a DNS-subdomain prefix and `/`.
fn label_key(key: &str) -> Result<(), String> {
    let (prefix, name) = match key.split_once('/') {
        Some((prefix, name)) => (Some(prefix), name),
        None => (None, key),
    };
    let problem = if let Some(prefix) = prefix.filter(|p| !is_dns_subdomain(p)) {
        Some(format!(
            "its prefix {prefix:?} is no DNS subdomain (lowercase letters, digits, '-' and '.', \
             at most 253)"
        ))
    } else if !is_label_name(name) {
        Some(format!("its name {name:?} is not {NAME_RULE}"))
    } else {
        None
    };
    match problem {
        Some(problem) => Err(format!("{key:?} is no label key: {problem}")),
        None => Ok(()),
    }
}

fn label_value(value: &str) -> Result<(), String> {
    if is_label_value(value) {
        Ok(())
    } else {
        Err(format!(
            "{value:?} is no label value: empty, or {NAME_RULE}"
        ))
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn check(selector: serde_json::Value) -> Result<(), SelectorError> {
        validate(&serde_json::from_value(selector).expect("test selector"))
    }

    fn field_of(selector: serde_json::Value) -> String {
        check(selector).expect_err("refused").field
    }

    #[test]
    fn selectors_the_api_server_accepts_pass() {
        check(json!({
            "matchLabels": {"run.ai/simulated-gpu-node-pool": "a100", "tier": "", "x_y.z": "V-1"},
            "matchExpressions": [
                {"key": "pool", "operator": "In", "values": ["a", "b"]},
                {"key": "example.com/gpu", "operator": "NotIn", "values": ["x"]},
                {"key": "zone", "operator": "Exists"},
                {"key": "zone2", "operator": "DoesNotExist", "values": []},
            ],
        }))
        .expect("valid");
        check(json!({"matchLabels": {"k": "a".repeat(63)}})).expect("63 characters");
    }

    #[test]
    fn each_rule_of_the_api_server_names_its_field() {
        let error = check(json!({"matchLabels": {"bad key!": "x"}})).expect_err("refused");
        assert_eq!(error.field, r#"matchLabels["bad key!"]"#);
        assert!(error.problem.contains("is no label key"), "{error}");
        assert_eq!(
            field_of(json!({"matchLabels": {"Bad.Prefix/k": "x"}})),
            r#"matchLabels["Bad.Prefix/k"]"#
        );
        assert_eq!(
            field_of(json!({"matchLabels": {"a/b/c": "x"}})),
            r#"matchLabels["a/b/c"]"#
        );
        assert_eq!(
            field_of(json!({"matchLabels": {"k": "a b"}})),
            r#"matchLabels["k"]"#
        );
        assert_eq!(
            field_of(json!({"matchLabels": {"k": "a".repeat(64)}})),
            r#"matchLabels["k"]"#
        );
        assert_eq!(
            field_of(json!({"matchLabels": {"": "x"}})),
            r#"matchLabels[""]"#
        );
        let expression = |e: serde_json::Value| json!({"matchExpressions": [{"key": "ok", "operator": "Exists"}, e]});
        let error = check(expression(
            json!({"key": "k", "operator": "In", "values": []}),
        ))
        .expect_err("refused");
        assert_eq!(
            error.to_string(),
            "matchExpressions[1].values: operator In needs at least one value"
        );
        assert_eq!(
            field_of(expression(json!({"key": "k", "operator": "NotIn"}))),
            "matchExpressions[1].values"
        );
        assert_eq!(
            field_of(expression(
                json!({"key": "k", "operator": "Exists", "values": ["x"]})
            )),
            "matchExpressions[1].values"
        );
        assert_eq!(
            field_of(expression(
                json!({"key": "k", "operator": "in", "values": ["x"]})
            )),
            "matchExpressions[1].operator"
        );
        assert_eq!(
            field_of(expression(json!({"key": "k!", "operator": "Exists"}))),
            "matchExpressions[1].key"
        );
        assert_eq!(
            field_of(expression(
                json!({"key": "k", "operator": "In", "values": ["ok", "not ok"]})
            )),
            "matchExpressions[1].values[1]"
        );
    }
}
