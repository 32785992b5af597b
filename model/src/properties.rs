//! Properties of what the model parses from text anyone with a pod or a node can write: any
//! input gives a value or an error, never a panic; what fakegpu writes reads back the same.

use std::collections::BTreeMap;

use crate::{
    faults::GpuFaults,
    profiles::MigEngines,
    quantity::{format_bytes, format_cpu, parse_milli},
    topology::{
        AllocatedBy, GpuStatus, GpuTopology, Health, MigDevice, NodeTopology, OtherDevice,
        PodGpuUsage, UtilizationBounds, parse_gpu_indices,
    },
    utilization::UtilizationRange,
};
use proptest::prelude::*;

/// Text that YAML and the parsers treat specially, beside arbitrary strings: what a document's
/// strings must survive (`"yes"`, `"~"`, `"1e3"` read back as strings, not a bool, null or a
/// number).
fn tricky_text() -> impl Strategy<Value = String> {
    prop_oneof![
        any::<String>(),
        "[ -~]{0,12}",
        Just("yes".to_owned()),
        Just("~".to_owned()),
        Just("null".to_owned()),
        Just("1e3".to_owned()),
        Just("0x1F".to_owned()),
        Just("- a".to_owned()),
        Just(": b".to_owned()),
        Just(" padded ".to_owned()),
        Just("line\nbreak".to_owned()),
        Just("#comment".to_owned()),
    ]
}

fn faults() -> impl Strategy<Value = GpuFaults> {
    (
        proptest::option::of(any::<u32>()),
        0..120_u32,
        any::<u64>(),
        any::<u64>(),
        any::<bool>(),
    )
        .prop_map(
            |(xid, xid_per_minute, ecc_correctable, ecc_uncorrectable, thermal_throttling)| {
                GpuFaults {
                    xid,
                    xid_per_minute,
                    ecc_correctable,
                    ecc_uncorrectable,
                    thermal_throttling,
                }
            },
        )
}

fn status() -> impl Strategy<Value = GpuStatus> {
    // A holder is a pod, named, or nobody: the operator writes it whole or not at all.
    let pod = tricky_text().prop_filter("a pod has a name", |pod| !pod.is_empty());
    let holder = proptest::option::of((tricky_text(), pod, tricky_text())).prop_map(|holder| {
        holder.map_or_else(AllocatedBy::default, |(namespace, pod, container)| {
            AllocatedBy {
                namespace,
                pod,
                container,
            }
        })
    });
    let usage = (any::<u8>(), any::<u8>(), any::<u64>(), any::<bool>()).prop_map(
        |(a, b, fb_used, use_knative_utilization)| PodGpuUsage {
            utilization: UtilizationBounds {
                min: a.min(b),
                max: a.max(b),
            },
            fb_used,
            use_knative_utilization,
        },
    );
    (
        holder,
        proptest::collection::btree_map(tricky_text(), usage, 0..3),
    )
        .prop_map(|(allocated_by, pod_gpu_usage_status)| GpuStatus {
            allocated_by,
            pod_gpu_usage_status,
        })
}

fn mig_device() -> impl Strategy<Value = MigDevice> {
    (
        tricky_text(),
        tricky_text(),
        (any::<u32>(), 0..8_u32, 1..9_u32, 1..8_u32),
        (any::<u64>(), any::<u32>()),
        (0..8_u32, 0..8_u32, 0..8_u32, 0..8_u32, 0..2_u32),
        status(),
    )
        .prop_map(
            |(uuid, profile, slices, (memory, multiprocessors), engines, status)| MigDevice {
                uuid,
                profile,
                gi_profile_id: slices.0,
                placement_start: slices.1,
                memory_slices: slices.2,
                compute_slices: slices.3,
                memory,
                multiprocessors,
                engines: MigEngines {
                    copy: engines.0,
                    decoder: engines.1,
                    encoder: engines.2,
                    jpeg: engines.3,
                    ofa: engines.4,
                },
                status,
            },
        )
}

fn gpu() -> impl Strategy<Value = GpuTopology> {
    (
        tricky_text(),
        any::<u32>(),
        proptest::option::of(any::<u32>()),
        (tricky_text(), tricky_text()),
        any::<bool>(),
        faults(),
        proptest::collection::vec(mig_device(), 0..3),
        status(),
    )
        .prop_map(
            |(id, index, numa_node, (pci_bus_id, pcie_root), healthy, faults, migs, status)| {
                GpuTopology {
                    id,
                    index,
                    numa_node,
                    pci_bus_id,
                    pcie_root,
                    health: if healthy {
                        Health::Healthy
                    } else {
                        Health::Unhealthy
                    },
                    faults,
                    mig_devices: migs,
                    status,
                }
            },
        )
}

fn document() -> impl Strategy<Value = NodeTopology> {
    let strings = proptest::collection::vec(tricky_text(), 10);
    let other = (tricky_text(), any::<u32>()).prop_map(|(name, count)| OtherDevice { name, count });
    (
        (0..=1_u32, any::<u64>(), any::<u32>()),
        strings,
        proptest::collection::vec(other, 0..3),
        proptest::option::of(proptest::collection::vec(tricky_text(), 0..3)),
        proptest::option::of(any::<bool>()),
        proptest::collection::vec(gpu(), 0..4),
    )
        .prop_map(
            |((version, gpu_memory, power_limit_watts), s, other_devices, dra, plugin, gpus)| {
                NodeTopology {
                    version,
                    pool: s[0].clone(),
                    gpu_memory,
                    gpu_product: s[1].clone(),
                    driver_version: s[2].clone(),
                    cuda_version: s[3].clone(),
                    mig_strategy: s[4].clone(),
                    architecture: s[5].clone(),
                    brand: s[6].clone(),
                    compute_capability: s[7].clone(),
                    power_limit_watts,
                    other_devices,
                    dra_drivers: dra,
                    device_plugin: plugin,
                    gpus,
                }
            },
        )
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn a_document_reads_back_as_written(document in document()) {
        let text = document.to_yaml().expect("serializable");
        let read = NodeTopology::from_yaml(&text).expect("fakegpu reads what it writes");
        prop_assert_eq!(read, document);
    }

    #[test]
    fn a_document_in_a_configmap_reads_back(document in document()) {
        let data = BTreeMap::from([("topology.yml".to_owned(), document.to_yaml().expect("yaml"))]);
        prop_assert_eq!(NodeTopology::from_configmap_data(Some(&data)).expect("read"), document);
    }

    #[test]
    fn any_text_is_a_document_or_an_error(text in any::<String>()) {
        let _ = NodeTopology::from_yaml(&text);
    }

    /// A written document with one byte changed, cut short or repeated: what a hand edit or a
    /// torn write leaves.
    #[test]
    fn a_damaged_document_is_a_document_or_an_error(
        document in document(),
        at in any::<prop::sample::Index>(),
        byte in any::<u8>(),
        cut in any::<bool>(),
    ) {
        let mut bytes = document.to_yaml().expect("yaml").into_bytes();
        if !bytes.is_empty() {
            let at = at.index(bytes.len());
            if cut {
                bytes.truncate(at);
            } else {
                bytes[at] = byte;
            }
        }
        let text = String::from_utf8_lossy(&bytes);
        if let Ok(read) = NodeTopology::from_yaml(&text) {
            prop_assert!(read.version <= crate::topology::FORMAT_VERSION);
        }
    }

    #[test]
    fn a_newer_format_is_refused(document in document(), newer in 2..u32::MAX) {
        let newer = NodeTopology { version: newer, ..document };
        prop_assert!(NodeTopology::from_yaml(&newer.to_yaml().expect("yaml")).is_err());
    }

    #[test]
    fn any_utilization_text_is_a_range_or_an_error(text in any::<String>()) {
        if let Ok(range) = text.parse::<UtilizationRange>() {
            prop_assert!(range.min <= range.max && range.max <= 100, "{range:?}");
        }
    }

    #[test]
    fn near_miss_utilization_text_is_a_range_or_an_error(text in "[0-9 -]{0,9}") {
        if let Ok(range) = text.parse::<UtilizationRange>() {
            prop_assert!(range.min <= range.max && range.max <= 100, "{range:?}");
            // What the CRD's pattern lets through, trimmed.
            let trimmed = text.trim();
            prop_assert!(trimmed.bytes().all(|b| b.is_ascii_digit() || b == b'-'), "{text:?}");
        }
    }

    #[test]
    fn a_utilization_range_reads_back_as_printed(a in 0..=100_u8, b in 0..=100_u8) {
        let range = UtilizationRange { min: a.min(b), max: a.max(b) };
        prop_assert_eq!(range.to_string().parse::<UtilizationRange>(), Ok(range));
    }

    #[test]
    fn utilization_above_a_hundred_or_inverted_is_refused(a in 0..1000_u32, b in 0..1000_u32) {
        let parsed = format!("{a}-{b}").parse::<UtilizationRange>();
        prop_assert_eq!(parsed.is_ok(), a <= b && b <= 100);
    }

    #[test]
    fn any_unhealthy_gpus_text_splits_into_indices_and_the_rest(text in any::<String>()) {
        let (indices, bad) = parse_gpu_indices(&text);
        // Every entry lands on one side; nothing is lost or invented.
        let entries = text.split(',').map(str::trim).filter(|e| !e.is_empty()).count();
        prop_assert_eq!(indices.len() + bad.len(), entries);
    }

    #[test]
    fn unhealthy_gpu_indices_read_back(indices in proptest::collection::vec(any::<u32>(), 0..9)) {
        let text = indices.iter().map(u32::to_string).collect::<Vec<_>>().join(", ");
        prop_assert_eq!(parse_gpu_indices(&text), (indices, vec![]));
    }

    #[test]
    fn any_quantity_text_is_a_value_or_none(text in any::<String>()) {
        let _ = parse_milli(&text);
    }

    #[test]
    fn near_miss_quantities_are_a_value_or_none(text in "[-+]?[0-9]{0,40}(\\.[0-9]{0,12})?(m|k|M|G|T|P|E|Ki|Mi|Gi|Ti|Pi|Ei|x)?") {
        let _ = parse_milli(&text);
    }

    #[test]
    fn cpu_reads_back_as_printed(milli in -(1_i128 << 90)..(1_i128 << 90)) {
        prop_assert_eq!(parse_milli(&format_cpu(milli)), Some(milli));
    }

    #[test]
    fn bytes_read_back_as_printed(bytes in -(1_i128 << 80)..(1_i128 << 80)) {
        prop_assert_eq!(parse_milli(&format_bytes(bytes)), Some(bytes * 1000));
    }

    #[test]
    fn a_suffix_scales_a_whole_number(n in 0..1_000_000_i128, power in 0..6_u32) {
        let decimal = ["", "k", "M", "G", "T", "P"][power as usize];
        let binary = ["", "Ki", "Mi", "Gi", "Ti", "Pi"][power as usize];
        prop_assert_eq!(parse_milli(&format!("{n}{decimal}")), Some(n * 1000 * 1000_i128.pow(power)));
        prop_assert_eq!(parse_milli(&format!("{n}{binary}")), Some(n * 1000 * 1024_i128.pow(power)));
    }
}
