//! What a pool's `spec.gpu` amounts to once the profile catalog is applied.

use fakegpu_model::profiles::{
    self, Architecture, ComputeCapability, DEFAULT_CUDA_VERSION, DEFAULT_DRIVER_VERSION, GpuProfile,
};

use super::{
    GpuNodePoolSpec, GpuSpec, MigStrategy,
    mig::{self, MigError, MigPlan},
};

/// The GPUs of every node of a pool, with every value decided.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ResolvedGpu {
    /// NVML product name, unsanitised.
    pub product: String,
    pub count: u32,
    pub memory_mib: u64,
    pub driver_version: String,
    pub cuda_version: String,
    /// Unknown for an explicit product the catalog does not know.
    pub compute_capability: Option<ComputeCapability>,
    /// The catalog entry the values came from: the named profile, or the entry whose product
    /// the pool names explicitly.
    pub catalog: Option<&'static GpuProfile>,
    /// The MIG instances of each node's GPUs, when the pool partitions them (see
    /// [`resolve_pool`]).
    pub mig: Option<MigPlan>,
}

impl ResolvedGpu {
    /// go-nvlib's architecture string; `Unknown` (also a go-nvlib value) when neither the catalog
    /// nor the compute capability tells.
    pub fn architecture(&self) -> &'static str {
        self.catalog
            .map(|p| p.architecture)
            .or_else(|| {
                self.compute_capability
                    .and_then(Architecture::from_compute_capability)
            })
            .map_or("Unknown", Architecture::as_str)
    }

    /// The MIG strategy as GPU feature discovery names it (`nvidia.com/mig.strategy`, the
    /// topology document's `migStrategy`): `none` without MIG.
    pub fn mig_strategy_name(&self) -> &'static str {
        match self.mig.as_ref().map(|m| m.strategy) {
            None => "none",
            Some(MigStrategy::Single) => "single",
            Some(MigStrategy::Mixed) => "mixed",
        }
    }

    /// go-nvlib's brand string: the catalog's, else `Nvidia` (what every current data-centre
    /// part reports).
    pub fn brand(&self) -> &'static str {
        self.catalog.map_or("Nvidia", |p| p.brand)
    }
}

/// Why a pool's GPUs cannot be resolved; reported as a pool condition, never a crash.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ResolveError {
    #[error("{}", unknown_profile(.0))]
    UnknownProfile(String),
    #[error("without a profile, spec.gpu.{0} is required")]
    Missing(&'static str),
    #[error("computeCapability {0:?} is not MAJOR.MINOR")]
    BadComputeCapability(String),
    #[error("spec.mig: {0}")]
    Mig(#[from] MigError),
    /// Out of the CRD's bounds: stored under an older CRD, or written past it.
    #[error("spec: {0}")]
    OutOfBounds(String),
}

/// What the condition and Event say of a profile the catalog lacks: the builtin ones, and the
/// one the name most likely meant.
fn unknown_profile(name: &str) -> String {
    let builtin: Vec<&str> = profiles::PROFILES.iter().map(|p| p.name).collect();
    let hint = profiles::closest_profile(name)
        .map(|p| format!("; did you mean {:?}?", p.name))
        .unwrap_or_default();
    format!(
        "profile {name:?} is not a builtin profile (builtin: {}){hint}",
        builtin.join(", ")
    )
}

impl ResolveError {
    /// Condition reason (CamelCase) for this error.
    pub fn reason(&self) -> &'static str {
        match self {
            Self::UnknownProfile(_) => "UnknownProfile",
            Self::Missing(_) | Self::BadComputeCapability(_) | Self::OutOfBounds(_) => {
                "InvalidSpec"
            }
            Self::Mig(_) => "InvalidMigLayout",
        }
    }
}

fn parse_compute_capability(text: &str) -> Result<ComputeCapability, ResolveError> {
    let bad = || ResolveError::BadComputeCapability(text.to_owned());
    let (major, minor) = text.split_once('.').ok_or_else(bad)?;
    Ok(ComputeCapability::new(
        major.parse().map_err(|_| bad())?,
        minor.parse().map_err(|_| bad())?,
    ))
}

/// Applies the catalog: the named profile gives every value, the spec's fields override them.
/// Without a profile, product, count and memory come from the spec and the rest from the
/// catalog entry of that product, if there is one.
pub fn resolve(spec: &GpuSpec) -> Result<ResolvedGpu, ResolveError> {
    let catalog = match &spec.profile {
        Some(name) => Some(
            profiles::profile(name).ok_or_else(|| ResolveError::UnknownProfile(name.clone()))?,
        ),
        None => spec
            .product
            .as_deref()
            .and_then(profiles::profile_by_product),
    };
    let named = spec.profile.is_some().then_some(catalog).flatten();

    let product = match (&spec.product, named) {
        (Some(product), _) => product.clone(),
        (None, Some(profile)) => profile.product.to_owned(),
        (None, None) => return Err(ResolveError::Missing("product")),
    };
    let count = spec
        .count
        .or(named.map(|p| p.gpus_per_node))
        .ok_or(ResolveError::Missing("count"))?;
    let memory_mib = spec
        .memory_mib
        .or(named.map(|p| p.memory_mib))
        .ok_or(ResolveError::Missing("memoryMiB"))?;
    let compute_capability = match &spec.compute_capability {
        Some(text) => Some(parse_compute_capability(text)?),
        None => catalog.map(|p| p.compute_capability),
    };
    Ok(ResolvedGpu {
        product,
        count,
        memory_mib,
        driver_version: spec
            .driver_version
            .clone()
            .or_else(|| catalog.map(|p| p.driver_version.to_owned()))
            .unwrap_or_else(|| DEFAULT_DRIVER_VERSION.to_owned()),
        cuda_version: spec
            .cuda_version
            .clone()
            .or_else(|| catalog.map(|p| p.cuda_version.to_owned()))
            .unwrap_or_else(|| DEFAULT_CUDA_VERSION.to_owned()),
        compute_capability,
        catalog,
        mig: None,
    })
}

/// [`resolve`]s the pool's GPUs and plans its MIG layout on them.
pub fn resolve_pool(spec: &GpuNodePoolSpec) -> Result<ResolvedGpu, ResolveError> {
    // The API server checks these bounds on writes; a pool stored before a bound existed is
    // checked here, so it cannot reach the nodes.
    validator::Validate::validate(spec)
        .map_err(|errors| ResolveError::OutOfBounds(errors.to_string().replace('\n', "; ")))?;
    let mut gpu = resolve(&spec.gpu)?;
    gpu.mig = mig::plan(spec, &gpu.product, gpu.count, gpu.catalog)?;
    Ok(gpu)
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn gpu(value: serde_json::Value) -> GpuSpec {
        serde_json::from_value(value).expect("test GPU spec")
    }

    #[test]
    fn profile_gives_every_value() {
        let resolved = resolve(&gpu(json!({"profile": "h100"}))).expect("resolves");
        assert_eq!(resolved.product, "NVIDIA H100 80GB HBM3");
        assert_eq!((resolved.count, resolved.memory_mib), (8, 81559));
        assert_eq!(
            (
                resolved.driver_version.as_str(),
                resolved.cuda_version.as_str()
            ),
            ("550.163.01", "12.4")
        );
        assert_eq!(
            resolved.compute_capability,
            Some(ComputeCapability::new(9, 0))
        );
    }

    #[test]
    fn spec_fields_override_the_profile() {
        let resolved = resolve(&gpu(
            json!({"profile": "h100", "count": 2, "memoryMiB": 95830,
            "product": "NVIDIA H100 NVL", "driverVersion": "570.1", "cudaVersion": "12.8"}),
        ))
        .expect("resolves");
        assert_eq!(resolved.product, "NVIDIA H100 NVL");
        assert_eq!((resolved.count, resolved.memory_mib), (2, 95830));
        assert_eq!(
            (
                resolved.driver_version.as_str(),
                resolved.cuda_version.as_str()
            ),
            ("570.1", "12.8")
        );
        assert_eq!(resolved.catalog.map(|p| p.name), Some("h100"));
    }

    #[test]
    fn explicit_catalog_product_inherits_its_facts() {
        let resolved = resolve(&gpu(
            json!({"product": "Tesla-K80", "count": 2, "memoryMiB": 11441}),
        ))
        .expect("resolves");
        assert_eq!(
            resolved.compute_capability,
            Some(ComputeCapability::new(3, 7))
        );
        assert_eq!(resolved.driver_version, "470.129.06");
        assert_eq!(resolved.product, "Tesla-K80");
    }

    #[test]
    fn unknown_products_get_defaults_and_no_capability() {
        let resolved = resolve(&gpu(
            json!({"product": "Imaginary", "count": 1, "memoryMiB": 1}),
        ))
        .expect("resolves");
        assert_eq!(resolved.compute_capability, None);
        assert_eq!(
            (resolved.architecture(), resolved.brand()),
            ("Unknown", "Nvidia")
        );
        let with_capability = resolve(&gpu(
            json!({"product": "Imaginary", "count": 1, "memoryMiB": 1, "computeCapability": "8.9"}),
        ))
        .expect("resolves");
        assert_eq!(with_capability.architecture(), "Ada Lovelace");
        assert_eq!(resolved.driver_version, DEFAULT_DRIVER_VERSION);
        assert!(resolved.catalog.is_none());
    }

    #[test]
    fn an_unknown_profile_lists_the_builtin_ones_and_the_closest() {
        let said = |name: &str| ResolveError::UnknownProfile(name.into()).to_string();
        let unknown = said("future-gpu");
        assert!(unknown.starts_with("profile \"future-gpu\" is not a builtin profile (builtin: "));
        for profile in fakegpu_model::profiles::PROFILES {
            assert!(
                unknown.contains(profile.name),
                "{unknown} lacks {}",
                profile.name
            );
        }
        assert!(!unknown.contains("did you mean"), "{unknown}");
        for (typed, meant) in [
            ("H100", "h100"),
            ("h100-sxm5", "h100"),
            ("a100-80gb-pcie", "a100-80gb"),
            ("a10080gb", "a100-80gb"),
            ("L40S", "l40s"),
            ("gb20O", "gb200"),
        ] {
            assert!(
                said(typed).ends_with(&format!("; did you mean \"{meant}\"?")),
                "{typed}: {}",
                said(typed)
            );
        }
    }

    #[test]
    fn errors_name_what_is_wrong() {
        assert_eq!(
            resolve(&gpu(json!({"profile": "future-gpu"}))),
            Err(ResolveError::UnknownProfile("future-gpu".into()))
        );
        assert_eq!(
            resolve(&gpu(json!({"product": "X", "count": 1}))),
            Err(ResolveError::Missing("memoryMiB"))
        );
        assert_eq!(
            resolve(&gpu(json!({}))),
            Err(ResolveError::Missing("product"))
        );
        assert_eq!(
            resolve(&gpu(json!({"profile": "a100", "computeCapability": "x"}))),
            Err(ResolveError::BadComputeCapability("x".into()))
        );
    }

    #[test]
    fn a_pool_beyond_the_crd_s_bounds_does_not_resolve() {
        // As a pool stored before the bound existed would read.
        let spec: GpuNodePoolSpec = serde_json::from_value(json!({
            "nodeSelector": {"gpu": "true"}, "gpu": {"profile": "t4", "count": 0},
        }))
        .expect("test spec");
        let error = resolve_pool(&spec).expect_err("count 0 is out of bounds");
        assert_eq!(error.reason(), "InvalidSpec");
        assert!(error.to_string().contains("count"), "{error}");
    }
}
