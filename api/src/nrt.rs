//! NodeResourceTopology (`topology.node.k8s.io/v1alpha2`): the per-node NUMA description that
//! topology-aware schedulers (the scheduler-plugins NodeResourceTopologyMatch plugin, KAI) read.
//! fakegpu publishes one per node of a pool with `numa`, and ships a CRD for clusters that have
//! none (generated here from these types, as the group's own definition describes them).
//!
//! The object has no spec/status (its fields are top-level), so it is not a kube-derive
//! `CustomResource`; `Resource` is implemented by hand.

use std::borrow::Cow;

use k8s_openapi::{
    apiextensions_apiserver::pkg::apis::apiextensions::v1::{
        CustomResourceDefinition, CustomResourceDefinitionNames, CustomResourceDefinitionSpec,
        CustomResourceDefinitionVersion, CustomResourceValidation,
    },
    apimachinery::pkg::api::resource::Quantity,
};
use kube::{
    Resource,
    api::ObjectMeta,
    core::{ClusterResourceScope, schema},
};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

pub const GROUP: &str = "topology.node.k8s.io";
pub const VERSION: &str = "v1alpha2";
pub const KIND: &str = "NodeResourceTopology";
pub const PLURAL: &str = "noderesourcetopologies";

/// A node's resources by topology zone.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(description = "NodeResourceTopology describes node resources and their topology.")]
pub struct NodeResourceTopology {
    #[serde(default)]
    #[schemars(schema_with = "object")]
    pub metadata: ObjectMeta,
    /// Deprecated in v1alpha2 in favour of `attributes`; still read by older schedulers.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub topology_policies: Vec<String>,
    /// Node-wide attributes (`topologyManagerPolicy`, `topologyManagerScope`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub attributes: Vec<AttributeInfo>,
    pub zones: Vec<Zone>,
}

fn object(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
    schemars::json_schema!({"type": "object"})
}

/// A topology zone: a NUMA node, socket, die or core.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
pub struct Zone {
    pub name: String,
    #[serde(rename = "type")]
    pub type_: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub parent: String,
    /// Distance to each zone.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub costs: Vec<CostInfo>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub attributes: Vec<AttributeInfo>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub resources: Vec<ResourceInfo>,
}

/// One resource of a zone.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
pub struct ResourceInfo {
    pub name: String,
    /// Total of the resource in the zone.
    pub capacity: Quantity,
    /// What pods may use.
    pub allocatable: Quantity,
    /// Allocatable minus what running pods reserve.
    pub available: Quantity,
}

/// The cost (distance) from a zone to the named zone.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
pub struct CostInfo {
    pub name: String,
    pub value: i64,
}

#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
pub struct AttributeInfo {
    pub name: String,
    pub value: String,
}

impl Resource for NodeResourceTopology {
    type DynamicType = ();
    type Scope = ClusterResourceScope;

    fn kind(_: &()) -> Cow<'_, str> {
        KIND.into()
    }
    fn group(_: &()) -> Cow<'_, str> {
        GROUP.into()
    }
    fn version(_: &()) -> Cow<'_, str> {
        VERSION.into()
    }
    fn plural(_: &()) -> Cow<'_, str> {
        PLURAL.into()
    }
    fn meta(&self) -> &ObjectMeta {
        &self.metadata
    }
    fn meta_mut(&mut self) -> &mut ObjectMeta {
        &mut self.metadata
    }
}

/// The CRD, for clusters where no topology exporter installed one.
pub fn crd() -> Result<CustomResourceDefinition, serde_json::Error> {
    let generator = schemars::generate::SchemaSettings::openapi3()
        .with(|s| {
            s.inline_subschemas = true;
            s.meta_schema = None;
        })
        .with_transform(schemars::transform::AddNullable::default())
        .with_transform(schema::StructuralSchemaRewriter)
        .with_transform(schema::OptionalIntOrString)
        .into_generator();
    let mut schema =
        serde_json::to_value(generator.into_root_schema_for::<NodeResourceTopology>())?;
    // Every object carries these; the type itself leaves them to the client.
    if let Some(properties) = schema["properties"].as_object_mut() {
        properties.insert("apiVersion".into(), serde_json::json!({"type": "string"}));
        properties.insert("kind".into(), serde_json::json!({"type": "string"}));
    }
    if let Some(map) = schema.as_object_mut() {
        map.remove("title");
    }
    if let Some(metadata) = schema["properties"]["metadata"].as_object_mut() {
        metadata.remove("default");
    }
    let validation = CustomResourceValidation {
        open_api_v3_schema: Some(serde_json::from_value(schema)?),
    };
    Ok(CustomResourceDefinition {
        metadata: ObjectMeta {
            name: Some(format!("{PLURAL}.{GROUP}")),
            annotations: Some(
                [(
                    // topology.node.k8s.io is a protected (*.k8s.io) group: the API server wants
                    // the approval on record. This is the KEP's approval.
                    "api-approved.kubernetes.io".to_owned(),
                    "https://github.com/kubernetes/enhancements/pull/1870".to_owned(),
                )]
                .into(),
            ),
            ..Default::default()
        },
        spec: CustomResourceDefinitionSpec {
            group: GROUP.into(),
            names: CustomResourceDefinitionNames {
                kind: KIND.into(),
                list_kind: Some(format!("{KIND}List")),
                plural: PLURAL.into(),
                singular: Some("noderesourcetopology".into()),
                short_names: Some(vec!["node-res-topo".into()]),
                ..Default::default()
            },
            scope: "Cluster".into(),
            versions: vec![CustomResourceDefinitionVersion {
                name: VERSION.into(),
                served: true,
                storage: true,
                schema: Some(validation),
                ..Default::default()
            }],
            ..Default::default()
        },
        status: None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn crd_requires_zones_and_allows_quantities_as_numbers_or_strings() {
        let crd = serde_json::to_value(crd().expect("renders")).expect("json");
        let schema = &crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"];
        assert_eq!(schema["required"], serde_json::json!(["zones"]));
        let resource = &schema["properties"]["zones"]["items"]["properties"]["resources"]["items"];
        assert_eq!(
            resource["properties"]["capacity"]["x-kubernetes-int-or-string"],
            true
        );
        assert_eq!(crd["spec"]["scope"], "Cluster");
        assert!(!crd.to_string().contains("$ref"));
    }
}
