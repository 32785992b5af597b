//! The topology document, as the node agent, the exporter, nvidia-smi and the NVML library read
//! it from a ConfigMap anyone with write access to fakegpu's namespace can edit: any text is a
//! document or an error, and a document read back after writing is the same.
#![no_main]

use fakegpu_model::topology::{FORMAT_VERSION, NodeTopology};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|text: &str| {
    let Ok(document) = NodeTopology::from_yaml(text) else {
        return;
    };
    assert!(document.version <= FORMAT_VERSION);
    let written = document
        .to_yaml()
        .expect("a document read is one that writes");
    let read = NodeTopology::from_yaml(&written).expect("fakegpu reads what it writes");
    assert_eq!(read, document, "changed by a round trip through\n{written}");
});
