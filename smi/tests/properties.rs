//! Properties of nvidia-smi's handling of what a container's user and environment give it:
//! any arguments, any `NVIDIA_VISIBLE_DEVICES`, any fractional share give output and one of
//! nvidia-smi's exit codes, never a panic.
// Test code: its helpers may state assumptions with expect, as #[test]s do (clippy.toml).
#![cfg(test)]

use std::sync::LazyLock;

use fakegpu_model::{
    profiles::PROFILES,
    topology::{CallerEnv, gpu_uuid},
};
use fakegpu_smi::{self as smi, Environment, exit};
use proptest::{prelude::*, test_runner::FileFailurePersistence};

mod common;

use common::{DATE, NODE, report};

/// Documents of a node of each builtin profile, written once, as the node agent gives them to
/// containers.
static DOCUMENTS: LazyLock<Vec<String>> = LazyLock::new(|| {
    let dir = std::env::temp_dir().join(format!("fakegpu-smi-properties-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temporary directory");
    PROFILES
        .iter()
        .map(|profile| {
            let path = dir.join(format!("{}.yml", profile.name));
            let document = report(profile).topology.to_yaml().expect("yaml");
            std::fs::write(&path, document).expect("document written");
            path.to_string_lossy().into_owned()
        })
        .collect()
});

/// Arguments nvidia-smi knows, near misses of them, and values they take.
fn argument() -> impl Strategy<Value = String> {
    prop_oneof![
        Just("-L".to_owned()),
        Just("--list-gpus".to_owned()),
        Just("--version".to_owned()),
        Just("-i".to_owned()),
        Just("--id".to_owned()),
        Just("-q".to_owned()),
        Just("-h".to_owned()),
        Just("--format=csv".to_owned()),
        Just("--format=csv,noheader,nounits".to_owned()),
        "--format=[a-z,]{0,16}",
        "--query-gpu=(index|name|uuid|memory.used|memory.total|utilization.gpu|temperature.gpu|power.draw|pci.bus_id|mig.mode.current|bogus|)(,(index|name|uuid|memory.used|clocks.sm|compute_cap|xyz|)){0,5}",
        "--query-compute-apps=(pid|process_name|used_memory|gpu_uuid|nope|)(,(pid|used_memory|gpu_uuid)){0,3}",
        "--id=[0-9,a-zA-Z:-]{0,12}",
        "-i=?[0-9,]{0,6}",
        "[0-9,]{0,5}",
        "--?[a-z-]{0,12}(=[a-z0-9,.]{0,8})?",
        any::<String>(),
    ]
}

fn visible_devices() -> impl Strategy<Value = Option<String>> {
    proptest::option::of(prop_oneof![
        Just("all".to_owned()),
        Just("none".to_owned()),
        Just("void".to_owned()),
        "[0-9,]{0,8}",
        (0..9_u32).prop_map(|i| gpu_uuid(NODE, i)),
        (0..9_u32, 0..9_u32).prop_map(|(a, b)| format!("{},{}", gpu_uuid(NODE, a), b)),
        "MIG-[0-9a-f-]{0,36}",
        any::<String>(),
    ])
}

proptest! {
    #![proptest_config(config(512))]

    #[test]
    fn any_arguments_are_a_command_or_an_error(args in proptest::collection::vec(any::<String>(), 0..6)) {
        let _ = smi::parse(&args);
    }

    #[test]
    fn any_invocation_prints_and_exits_with_an_nvidia_smi_code(
        args in proptest::collection::vec(argument(), 0..5),
        document in any::<prop::sample::Index>(),
        visible in visible_devices(),
        share in proptest::option::of(prop_oneof!["0?\\.[0-9]{0,3}", "[0-9]{0,3}", any::<String>()]),
        hostname in proptest::option::of("[a-z0-9-]{0,12}"),
    ) {
        let env = Environment {
            node: Some(NODE.into()),
            document: Some(DOCUMENTS[document.index(DOCUMENTS.len())].clone()),
            identity: CallerEnv { visible_devices: visible, hostname, ..Default::default() },
            gpu_share: share,
            process_id: 7,
            process_name: "python3".into(),
            ..Default::default()
        };
        let (mut out, mut err) = (Vec::new(), Vec::new());
        let code = smi::run(&args, &env, DATE, &mut out, &mut err);
        prop_assert!(
            [exit::OK, exit::INVALID_ARGUMENT, exit::NOT_FOUND, exit::DRIVER_NOT_LOADED, exit::UNKNOWN]
                .contains(&code),
            "{args:?}: exit {code}"
        );
        // A failure says why.
        prop_assert!(code == exit::OK || !err.is_empty() || !out.is_empty(), "{args:?}: exit {code}, silent");
    }
}

/// `cases` cases; a failing input is kept beside this file and tried first on every later run
/// (proptest's default place is beside the crate's lib.rs, which an integration test has not).
fn config(cases: u32) -> ProptestConfig {
    ProptestConfig {
        cases,
        failure_persistence: Some(Box::new(FileFailurePersistence::Direct(
            "tests/properties.proptest-regressions",
        ))),
        ..ProptestConfig::default()
    }
}
