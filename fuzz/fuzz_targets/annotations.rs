//! The one-line values users and schedulers write on pods and nodes: utilization ranges,
//! `fakegpu.dev/unhealthy-gpus`, `fakegpu.dev/gpu-faults`, quantities. Any text is a value or an
//! error; a value reads back as printed.
#![no_main]

use fakegpu_api::faults::parse_annotation;
use fakegpu_model::{
    quantity::{format_bytes, format_cpu, parse_milli},
    topology::parse_gpu_indices,
    utilization::UtilizationRange,
};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|text: &str| {
    if let Ok(range) = text.parse::<UtilizationRange>() {
        assert!(range.min <= range.max && range.max <= 100);
        assert_eq!(range.to_string().parse::<UtilizationRange>(), Ok(range));
    }
    let (indices, bad) = parse_gpu_indices(text);
    let entries = text
        .split(',')
        .map(str::trim)
        .filter(|e| !e.is_empty())
        .count();
    assert_eq!(indices.len() + bad.len(), entries);
    if let Ok(faults) = parse_annotation(text) {
        let written = serde_json::to_string(&faults).expect("faults serialize");
        assert_eq!(parse_annotation(&written), Ok(faults));
    }
    if let Some(milli) = parse_milli(text) {
        // What fakegpu prints of a quantity it read reads back the same.
        assert_eq!(parse_milli(&format_cpu(milli)), Some(milli));
        if milli % 1000 == 0 {
            assert_eq!(parse_milli(&format_bytes(milli / 1000)), Some(milli));
        }
    }
});
