//! The builtin GPU profile catalog: what a `GpuNodePool` gets by naming `spec.gpu.profile`.
//!
//! Values follow the real products (NVML names, framebuffer sizes in MiB as NVML reports them,
//! driver/CUDA pairs seen on such machines), because node selectors, CEL expressions and
//! dashboards are written against real GPUs. Every upstream builtin profile name (`a100`, `b200`,
//! `gb200`, `gb300`, `h100`, `l40s`, `t4`) is here, plus a few common parts upstream lacks.
//! Where a number is not known from a real device it is marked in a comment.

use std::fmt;

/// A GPU architecture, as NVIDIA's DRA driver spells it in the `architecture` device attribute.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Architecture {
    Kepler,
    Volta,
    Turing,
    Ampere,
    AdaLovelace,
    Hopper,
    Blackwell,
}

impl Architecture {
    /// The spelling of go-nvlib's `GetArchitectureAsString()`, used in DRA device attributes.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Kepler => "Kepler",
            Self::Volta => "Volta",
            Self::Turing => "Turing",
            Self::Ampere => "Ampere",
            Self::AdaLovelace => "Ada Lovelace",
            Self::Hopper => "Hopper",
            Self::Blackwell => "Blackwell",
        }
    }
}

impl Architecture {
    /// The architecture of a compute capability, for products the catalog does not know.
    pub fn from_compute_capability(cc: ComputeCapability) -> Option<Self> {
        Some(match (cc.major, cc.minor) {
            (3, _) => Self::Kepler,
            (7, 0..=4) => Self::Volta,
            (7, _) => Self::Turing,
            (8, 0..=8) => Self::Ampere,
            (8, _) => Self::AdaLovelace,
            (9, _) => Self::Hopper,
            (10 | 12, _) => Self::Blackwell,
            _ => return None,
        })
    }
}

impl fmt::Display for Architecture {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A CUDA compute capability, `major.minor`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ComputeCapability {
    pub major: u32,
    pub minor: u32,
}

impl ComputeCapability {
    pub const fn new(major: u32, minor: u32) -> Self {
        Self { major, minor }
    }

    /// GPU feature discovery's `nvidia.com/gpu.family` value for this compute capability.
    pub fn family(self) -> &'static str {
        match (self.major, self.minor) {
            (3, _) => "kepler",
            (5, _) => "maxwell",
            (6, _) => "pascal",
            (7, 0..=4) => "volta",
            (7, _) => "turing",
            (8, 0..=8) => "ampere",
            (8, _) => "ada-lovelace",
            (9, _) => "hopper",
            (10 | 12, _) => "blackwell",
            (13, _) => "rubin",
            _ => "undefined",
        }
    }
}

impl fmt::Display for ComputeCapability {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}.{}", self.major, self.minor)
    }
}

/// Memory slices of a MIG-capable GPU; instances occupy aligned runs of them.
pub const MIG_MEMORY_SLICES: u32 = 8;

/// Compute slices of a MIG-capable GPU (the `7` of `7g.80gb`).
pub const MIG_COMPUTE_SLICES: u32 = 7;

/// One MIG GPU-instance profile a product supports.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MigProfile {
    /// Profile name as NVML and nvidia-smi spell it (`1g.10gb`, `1g.10gb+me`); labels and
    /// resource names publish it through [`published_mig_name`].
    pub name: &'static str,
    /// NVML GPU-instance profile id (19 for 1g.*, 14 for 2g.*, ...); part of DRA MIG device names.
    pub gi_profile_id: u32,
    /// Compute slices (the `Ng` in the name).
    pub compute_slices: u32,
    /// Memory slices out of the GPU's eight.
    pub memory_slices: u32,
    /// How many instances of this profile fit on one GPU.
    pub max_instances: u32,
    /// Framebuffer of one instance, MiB.
    pub memory_mib: u64,
    /// Streaming multiprocessors of one instance.
    pub multiprocessors: u32,
    /// Copy and media engines of one instance (GFD's `engines.*` labels, DRA capacities).
    pub engines: MigEngines,
}

/// The engines of one MIG instance, as NVML's GPU-instance profile info counts them. GPU
/// feature discovery publishes them as `engines.copy/.decoder/.encoder/.jpeg/.ofa`, NVIDIA's DRA
/// driver as the capacities `copyEngines`, `decoders`, `encoders`, `jpegEngines`, `ofaEngines`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct MigEngines {
    pub copy: u32,
    pub decoder: u32,
    pub encoder: u32,
    pub jpeg: u32,
    pub ofa: u32,
}

/// Engines in nvidia-smi's `mig -lgip` order of reading: copy, decoder, encoder, JPEG, OFA.
const fn engines(copy: u32, decoder: u32, encoder: u32, jpeg: u32, ofa: u32) -> MigEngines {
    MigEngines {
        copy,
        decoder,
        encoder,
        jpeg,
        ofa,
    }
}

/// A builtin GPU profile.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct GpuProfile {
    /// The name a pool uses in `spec.gpu.profile`.
    pub name: &'static str,
    /// NVML device name, unsanitised (`NVIDIA H100 80GB HBM3`).
    pub product: &'static str,
    /// go-nvlib brand string (`Nvidia` for data-centre parts).
    pub brand: &'static str,
    pub architecture: Architecture,
    pub compute_capability: ComputeCapability,
    /// Framebuffer per GPU, MiB.
    pub memory_mib: u64,
    /// GPUs per node unless the pool overrides the count.
    pub gpus_per_node: u32,
    /// Driver version string as NVML reports it (`550.163.01`).
    pub driver_version: &'static str,
    /// Highest CUDA version the driver supports (`12.4`).
    pub cuda_version: &'static str,
    /// Board power limit, watts (nvidia-smi, power metrics).
    pub power_limit_watts: u32,
    /// Supported MIG profiles; empty when the product cannot do MIG.
    pub mig_profiles: &'static [MigProfile],
}

impl GpuProfile {
    pub fn mig_capable(&self) -> bool {
        !self.mig_profiles.is_empty()
    }

    pub fn mig_profile(&self, name: &str) -> Option<&'static MigProfile> {
        self.mig_profiles.iter().find(|p| p.name == name)
    }
}

/// One row of a catalog table. Positional, so each table below reads as one line per profile,
/// like the `nvidia-smi mig -lgip` transcripts its numbers come from.
#[allow(clippy::too_many_arguments)]
const fn mig(
    name: &'static str,
    gi_profile_id: u32,
    compute_slices: u32,
    memory_slices: u32,
    max_instances: u32,
    memory_mib: u64,
    multiprocessors: u32,
    engines: MigEngines,
) -> MigProfile {
    MigProfile {
        name,
        gi_profile_id,
        compute_slices,
        memory_slices,
        max_instances,
        memory_mib,
        multiprocessors,
        engines,
    }
}

// A100 40GB: profile ids from the reference's mig-faker table; sizes as `nvidia-smi mig -lgip`.
// Engines (A100 has no encoders) as NVIDIA's MIG user guide lists them per profile; the user
// guide gives the 80 GB part the same engines under its own profile names.
const A100_40GB_MIG: &[MigProfile] = &[
    mig("1g.5gb", 19, 1, 1, 7, 4864, 14, engines(1, 0, 0, 0, 0)),
    mig("1g.5gb+me", 20, 1, 1, 1, 4864, 14, engines(1, 1, 0, 1, 1)),
    mig("1g.10gb", 15, 1, 2, 4, 9984, 14, engines(1, 1, 0, 0, 0)),
    mig("2g.10gb", 14, 2, 2, 3, 9984, 28, engines(2, 1, 0, 0, 0)),
    mig("3g.20gb", 9, 3, 4, 2, 20096, 42, engines(3, 2, 0, 0, 0)),
    mig("4g.20gb", 5, 4, 4, 1, 20096, 56, engines(4, 2, 0, 0, 0)),
    mig("7g.40gb", 0, 7, 8, 1, 40192, 98, engines(7, 5, 0, 1, 1)),
];

// 80 GB A100 and H100 share profile names and ids; sizes approximate (scaled from the 40 GB part).
const A100_80GB_MIG: &[MigProfile] = &[
    mig("1g.10gb", 19, 1, 1, 7, 9856, 14, engines(1, 0, 0, 0, 0)),
    mig("1g.10gb+me", 20, 1, 1, 1, 9856, 14, engines(1, 1, 0, 1, 1)),
    mig("1g.20gb", 15, 1, 2, 4, 19968, 14, engines(1, 1, 0, 0, 0)),
    mig("2g.20gb", 14, 2, 2, 3, 19968, 28, engines(2, 1, 0, 0, 0)),
    mig("3g.40gb", 9, 3, 4, 2, 40192, 42, engines(3, 2, 0, 0, 0)),
    mig("4g.40gb", 5, 4, 4, 1, 40192, 56, engines(4, 2, 0, 0, 0)),
    mig("7g.80gb", 0, 7, 8, 1, 80384, 98, engines(7, 5, 0, 1, 1)),
];

// H100: SMs and engines from a real `nvidia-smi mig -lgip` on an H100 80GB HBM3 (the full
// instance has eight copy engines; Hopper has no encoders in MIG instances).
const H100_80GB_MIG: &[MigProfile] = &[
    mig("1g.10gb", 19, 1, 1, 7, 9856, 16, engines(1, 1, 0, 1, 0)),
    mig("1g.10gb+me", 20, 1, 1, 1, 9856, 16, engines(1, 1, 0, 1, 1)),
    mig("1g.20gb", 15, 1, 2, 4, 19968, 26, engines(1, 1, 0, 1, 0)),
    mig("2g.20gb", 14, 2, 2, 3, 19968, 32, engines(2, 2, 0, 2, 0)),
    mig("3g.40gb", 9, 3, 4, 2, 40192, 60, engines(3, 3, 0, 3, 0)),
    mig("4g.40gb", 5, 4, 4, 1, 40192, 64, engines(4, 4, 0, 4, 0)),
    mig("7g.80gb", 0, 7, 8, 1, 80384, 132, engines(8, 7, 0, 7, 1)),
];

// H200 141 GB: names and counts as mig-parted lists them; sizes approximate; SMs and engines
// those of the H100, whose die it shares (not checked against an H200).
const H200_MIG: &[MigProfile] = &[
    mig("1g.18gb", 19, 1, 1, 7, 17920, 16, engines(1, 1, 0, 1, 0)),
    mig("1g.18gb+me", 20, 1, 1, 1, 17920, 16, engines(1, 1, 0, 1, 1)),
    mig("1g.35gb", 15, 1, 2, 4, 35840, 26, engines(1, 1, 0, 1, 0)),
    mig("2g.35gb", 14, 2, 2, 3, 35840, 32, engines(2, 2, 0, 2, 0)),
    mig("3g.71gb", 9, 3, 4, 2, 71680, 60, engines(3, 3, 0, 3, 0)),
    mig("4g.71gb", 5, 4, 4, 1, 71680, 64, engines(4, 4, 0, 4, 0)),
    mig("7g.141gb", 0, 7, 8, 1, 143360, 132, engines(8, 7, 0, 7, 1)),
];

// B200: sizes and SM counts from go-nvml's B200 mock table, ids as real NVML reports them. The
// mock's 7g.180gb (184320 MiB) is its whole 184320 MiB GPU; a real B200 has 183359 MiB, so the
// full instance here keeps the share of the total that A100's 7g.40gb has (about 98%). Engines
// from the same table.
const B200_MIG: &[MigProfile] = &[
    mig("1g.23gb", 19, 1, 1, 7, 23552, 18, engines(1, 1, 0, 0, 0)),
    mig("1g.23gb+me", 20, 1, 1, 1, 23552, 18, engines(1, 1, 1, 1, 1)),
    mig("1g.45gb", 15, 1, 2, 4, 46080, 18, engines(1, 1, 0, 0, 0)),
    mig("2g.45gb", 14, 2, 2, 3, 46080, 36, engines(2, 2, 1, 1, 1)),
    mig("3g.90gb", 9, 3, 4, 2, 92160, 54, engines(3, 3, 2, 2, 2)),
    mig("4g.90gb", 5, 4, 4, 1, 92160, 72, engines(4, 4, 2, 2, 2)),
    mig("7g.180gb", 0, 7, 8, 1, 179712, 126, engines(7, 7, 4, 4, 4)),
];

// GB200 NVL (189 GB): names from NVIDIA's DRA driver and mig-parted; sizes approximate; SMs and
// engines those of the B200 (same Blackwell die).
const GB200_MIG: &[MigProfile] = &[
    mig("1g.24gb", 19, 1, 1, 7, 23552, 18, engines(1, 1, 0, 0, 0)),
    mig("1g.24gb+me", 20, 1, 1, 1, 23552, 18, engines(1, 1, 1, 1, 1)),
    mig("1g.47gb", 15, 1, 2, 4, 47104, 18, engines(1, 1, 0, 0, 0)),
    mig("2g.47gb", 14, 2, 2, 3, 47104, 36, engines(2, 2, 1, 1, 1)),
    mig("3g.95gb", 9, 3, 4, 2, 94208, 54, engines(3, 3, 2, 2, 2)),
    mig("4g.95gb", 5, 4, 4, 1, 94208, 72, engines(4, 4, 2, 2, 2)),
    mig("7g.189gb", 0, 7, 8, 1, 188416, 126, engines(7, 7, 4, 4, 4)),
];

/// Every builtin profile, sorted by name.
pub const PROFILES: &[GpuProfile] = &[
    GpuProfile {
        name: "a100",
        product: "NVIDIA A100-SXM4-40GB",
        brand: "Nvidia",
        architecture: Architecture::Ampere,
        compute_capability: ComputeCapability::new(8, 0),
        memory_mib: 40960,
        gpus_per_node: 8,
        driver_version: "550.163.01",
        cuda_version: "12.4",
        power_limit_watts: 400,
        mig_profiles: A100_40GB_MIG,
    },
    GpuProfile {
        name: "a100-80gb",
        product: "NVIDIA A100-SXM4-80GB",
        brand: "Nvidia",
        architecture: Architecture::Ampere,
        compute_capability: ComputeCapability::new(8, 0),
        memory_mib: 81920,
        gpus_per_node: 8,
        driver_version: "550.127.05",
        cuda_version: "12.4",
        power_limit_watts: 400,
        mig_profiles: A100_80GB_MIG,
    },
    GpuProfile {
        name: "b200",
        product: "NVIDIA B200",
        brand: "Nvidia",
        architecture: Architecture::Blackwell,
        compute_capability: ComputeCapability::new(10, 0),
        memory_mib: 183359,
        gpus_per_node: 8,
        driver_version: "570.133.20",
        cuda_version: "12.8",
        power_limit_watts: 1000,
        mig_profiles: B200_MIG,
    },
    GpuProfile {
        name: "gb200",
        product: "NVIDIA GB200",
        brand: "Nvidia",
        architecture: Architecture::Blackwell,
        compute_capability: ComputeCapability::new(10, 0),
        memory_mib: 189471,
        gpus_per_node: 4,
        driver_version: "580.126.09",
        cuda_version: "13.0",
        power_limit_watts: 1200,
        mig_profiles: GB200_MIG,
    },
    // No real GB300 capture was available: name, memory and driver follow the reference's
    // nvml-mock profile, and no MIG profile list is known.
    GpuProfile {
        name: "gb300",
        product: "NVIDIA GB300 NVL",
        brand: "Nvidia",
        architecture: Architecture::Blackwell,
        compute_capability: ComputeCapability::new(10, 3),
        memory_mib: 294912,
        gpus_per_node: 4,
        driver_version: "570.124.06",
        cuda_version: "12.8",
        power_limit_watts: 1400,
        mig_profiles: &[],
    },
    GpuProfile {
        name: "h100",
        product: "NVIDIA H100 80GB HBM3",
        brand: "Nvidia",
        architecture: Architecture::Hopper,
        compute_capability: ComputeCapability::new(9, 0),
        memory_mib: 81559,
        gpus_per_node: 8,
        driver_version: "550.163.01",
        cuda_version: "12.4",
        power_limit_watts: 700,
        mig_profiles: H100_80GB_MIG,
    },
    GpuProfile {
        name: "h200",
        product: "NVIDIA H200",
        brand: "Nvidia",
        architecture: Architecture::Hopper,
        compute_capability: ComputeCapability::new(9, 0),
        memory_mib: 143771,
        gpus_per_node: 8,
        driver_version: "560.35.03",
        cuda_version: "12.6",
        power_limit_watts: 700,
        mig_profiles: H200_MIG,
    },
    GpuProfile {
        name: "k80",
        product: "Tesla K80",
        brand: "Tesla",
        architecture: Architecture::Kepler,
        compute_capability: ComputeCapability::new(3, 7),
        memory_mib: 11441,
        gpus_per_node: 2,
        driver_version: "470.129.06",
        cuda_version: "11.4",
        power_limit_watts: 149,
        mig_profiles: &[],
    },
    GpuProfile {
        name: "l4",
        product: "NVIDIA L4",
        brand: "Nvidia",
        architecture: Architecture::AdaLovelace,
        compute_capability: ComputeCapability::new(8, 9),
        memory_mib: 23034,
        gpus_per_node: 8,
        driver_version: "535.183.01",
        cuda_version: "12.2",
        power_limit_watts: 72,
        mig_profiles: &[],
    },
    GpuProfile {
        name: "l40s",
        product: "NVIDIA L40S",
        brand: "Nvidia",
        architecture: Architecture::AdaLovelace,
        compute_capability: ComputeCapability::new(8, 9),
        memory_mib: 46068,
        gpus_per_node: 8,
        driver_version: "550.127.05",
        cuda_version: "12.4",
        power_limit_watts: 350,
        mig_profiles: &[],
    },
    GpuProfile {
        name: "t4",
        product: "Tesla T4",
        brand: "Nvidia",
        architecture: Architecture::Turing,
        compute_capability: ComputeCapability::new(7, 5),
        memory_mib: 15360,
        gpus_per_node: 4,
        driver_version: "535.183.01",
        cuda_version: "12.2",
        power_limit_watts: 70,
        mig_profiles: &[],
    },
];

/// Driver and CUDA version of a GPU that is neither a builtin profile nor a catalog product
/// (the reference's nvml-mock defaults).
pub const DEFAULT_DRIVER_VERSION: &str = "550.163.01";
pub const DEFAULT_CUDA_VERSION: &str = "12.4";

/// Looks a builtin profile up by the name a pool gives in `spec.gpu.profile`.
pub fn profile(name: &str) -> Option<&'static GpuProfile> {
    PROFILES.iter().find(|p| p.name == name)
}

/// The builtin profile a mistyped name most likely meant, to say so where a pool names a profile
/// the catalog lacks: the same name in other case, else the nearest by edit distance within a
/// third of the name (`a10080gb` → `a100-80gb`), else the longest builtin name the name
/// contains (`h100-sxm5` → `h100`). None when nothing is that close (`future-gpu`).
pub fn closest_profile(name: &str) -> Option<&'static GpuProfile> {
    let wanted = name.to_ascii_lowercase();
    if let Some(same) = PROFILES.iter().find(|p| p.name == wanted) {
        return Some(same);
    }
    let within = (wanted.chars().count() / 3).max(1);
    let nearest = PROFILES
        .iter()
        .map(|p| (edit_distance(&wanted, p.name), p))
        .filter(|(distance, _)| *distance <= within)
        .min_by_key(|(distance, _)| *distance)
        .map(|(_, p)| p);
    nearest.or_else(|| {
        PROFILES
            .iter()
            .filter(|p| wanted.contains(p.name))
            .max_by_key(|p| p.name.len())
    })
}

/// Levenshtein distance: the fewest single-character insertions, deletions and substitutions
/// that turn `a` into `b`.
fn edit_distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut row: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut diagonal = row[0];
        row[0] = i + 1;
        for (j, cb) in b.iter().enumerate() {
            let above = row[j + 1];
            row[j + 1] = if ca == *cb {
                diagonal
            } else {
                1 + diagonal.min(above).min(row[j])
            };
            diagonal = above;
        }
    }
    row[b.len()]
}

/// The catalog entry of a product name, written either as NVML reports it or as the
/// `nvidia.com/gpu.product` label carries it (`Tesla K80` or `Tesla-K80`).
pub fn profile_by_product(product: &str) -> Option<&'static GpuProfile> {
    let wanted = product_label_value(product);
    PROFILES
        .iter()
        .find(|p| product_label_value(p.product).eq_ignore_ascii_case(&wanted))
}

/// A MIG profile's name as GFD and NVIDIA's device plugin publish it in label keys, extended
/// resource names and the MIG product suffix: `+` (not valid there) becomes `.`
/// (`1g.10gb+me` is published as `1g.10gb.me`). NVML, nvidia-smi and DRA attributes keep `+`.
pub fn published_mig_name(profile: &str) -> String {
    profile.replace('+', ".")
}

/// The `nvidia.com/gpu.product` label value of a product name, as the reference writes it:
/// characters outside `[A-Za-z0-9._-]` become `-`, at most 63 characters, no leading or
/// trailing non-alphanumerics (`NVIDIA A100-SXM4-40GB` stays, `NVIDIA H100 80GB HBM3` becomes
/// `NVIDIA-H100-80GB-HBM3`).
pub fn product_label_value(product: &str) -> String {
    let replaced: String = product
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-') {
                c
            } else {
                '-'
            }
        })
        .take(63)
        .collect();
    replaced
        .trim_matches(|c: char| !c.is_ascii_alphanumeric())
        .to_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_upstream_builtin_profile_exists() {
        for name in ["a100", "b200", "gb200", "gb300", "h100", "l40s", "t4"] {
            assert!(profile(name).is_some(), "missing upstream profile {name}");
        }
    }

    #[test]
    fn catalog_is_sorted_and_unique() {
        let names: Vec<_> = PROFILES.iter().map(|p| p.name).collect();
        let mut sorted = names.clone();
        sorted.sort_unstable();
        sorted.dedup();
        assert_eq!(names, sorted);
    }

    #[test]
    fn architecture_agrees_with_compute_capability_family() {
        for p in PROFILES {
            let family = p.compute_capability.family();
            let expected = p.architecture.as_str().to_lowercase().replace(' ', "-");
            assert_eq!(family, expected, "profile {}", p.name);
        }
    }

    #[test]
    fn mig_profiles_fit_their_gpu() {
        for p in PROFILES {
            for m in p.mig_profiles {
                assert!(m.memory_mib <= p.memory_mib, "{} {}", p.name, m.name);
                assert!(
                    m.compute_slices * m.max_instances <= 7,
                    "{} {}",
                    p.name,
                    m.name
                );
                assert!(
                    m.memory_slices * m.max_instances <= 8,
                    "{} {}",
                    p.name,
                    m.name
                );
                assert!(m.name.starts_with(&format!("{}g.", m.compute_slices)));
            }
        }
    }

    #[test]
    fn driver_versions_differ_between_product_generations() {
        let t4 = profile("t4").map(|p| p.driver_version);
        let b200 = profile("b200").map(|p| p.driver_version);
        let gb200 = profile("gb200").map(|p| p.driver_version);
        assert_ne!(t4, b200);
        assert_ne!(b200, gb200);
    }

    #[test]
    fn product_label_values() {
        let cases = [
            ("NVIDIA A100-SXM4-40GB", "NVIDIA-A100-SXM4-40GB"),
            ("NVIDIA H100 80GB HBM3", "NVIDIA-H100-80GB-HBM3"),
            ("Tesla K80", "Tesla-K80"),
            (" (weird) GPU/x ", "weird--GPU-x"),
        ];
        for (product, label) in cases {
            assert_eq!(product_label_value(product), label);
        }
        assert_eq!(product_label_value(&"A".repeat(100)).len(), 63);
    }

    #[test]
    fn products_are_found_by_name_or_label() {
        assert_eq!(profile_by_product("Tesla-K80").map(|p| p.name), Some("k80"));
        assert_eq!(
            profile_by_product("NVIDIA H100 80GB HBM3").map(|p| p.name),
            Some("h100")
        );
        assert_eq!(
            profile_by_product("nvidia-h100-80gb-hbm3").map(|p| p.name),
            Some("h100")
        );
        assert_eq!(profile_by_product("Imaginary GPU"), None);
    }

    #[test]
    fn family_follows_gpu_feature_discovery() {
        let cases = [
            ((7, 0), "volta"),
            ((7, 5), "turing"),
            ((8, 6), "ampere"),
            ((8, 9), "ada-lovelace"),
            ((9, 0), "hopper"),
            ((10, 0), "blackwell"),
            ((12, 0), "blackwell"),
            ((13, 0), "rubin"),
            ((1, 0), "undefined"),
        ];
        for ((major, minor), family) in cases {
            assert_eq!(ComputeCapability::new(major, minor).family(), family);
        }
    }
}
