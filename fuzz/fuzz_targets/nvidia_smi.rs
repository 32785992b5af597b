//! nvidia-smi as a container's user runs it: arguments (one per line of the input), then
//! `NVIDIA_VISIBLE_DEVICES` and `RUNAI_NUM_OF_GPUS` from the input's first two lines, against a
//! node of each builtin profile. Output and one of nvidia-smi's exit codes, never a panic.
#![no_main]

use std::sync::LazyLock;

use fakegpu_model::{
    profiles::PROFILES,
    topology::{CallerEnv, GpuTopology, NodeTopology, gpu_uuid},
};
use fakegpu_smi::{self as smi, Environment, exit};
use libfuzzer_sys::fuzz_target;

const NODE: &str = "node-1";

/// Each builtin profile's node, written as the node agent gives it to a container.
static DOCUMENTS: LazyLock<Vec<String>> = LazyLock::new(|| {
    let dir = std::env::temp_dir().join(format!("fakegpu-fuzz-smi-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temporary directory");
    PROFILES
        .iter()
        .map(|profile| {
            let mut document = NodeTopology {
                version: 1,
                gpu_product: profile.product.to_owned(),
                gpu_memory: profile.memory_mib,
                ..Default::default()
            };
            document.gpus = (0..profile.gpus_per_node)
                .map(|index| GpuTopology {
                    id: gpu_uuid(NODE, index),
                    index,
                    ..Default::default()
                })
                .collect();
            let path = dir.join(format!("{}.yml", profile.name));
            std::fs::write(&path, document.to_yaml().expect("yaml")).expect("written");
            path.to_string_lossy().into_owned()
        })
        .collect()
});

fuzz_target!(|input: &str| {
    let mut lines = input.lines();
    let visible = lines.next().map(str::to_owned);
    let share = lines.next().map(str::to_owned);
    let args: Vec<String> = lines.map(str::to_owned).collect();
    let which = input.len() % DOCUMENTS.len();
    let env = Environment {
        node: Some(NODE.into()),
        document: Some(DOCUMENTS[which].clone()),
        identity: CallerEnv {
            visible_devices: visible.filter(|v| !v.is_empty()),
            ..Default::default()
        },
        gpu_share: share.filter(|s| !s.is_empty()),
        process_id: 7,
        process_name: "python3".into(),
        ..Default::default()
    };
    let (mut out, mut err) = (Vec::new(), Vec::new());
    let code = smi::run(&args, &env, "Mon Dec  7 09:00:00 2026", &mut out, &mut err);
    assert!(
        [
            exit::OK,
            exit::INVALID_ARGUMENT,
            exit::NOT_FOUND,
            exit::DRIVER_NOT_LOADED,
            exit::UNKNOWN
        ]
        .contains(&code),
        "exit {code}"
    );
});
