//! The reference chart's Helm values, as `fakegpu-convert` reads them from a user's file: any
//! text is pools or an error, and pools convert to YAML.
#![no_main]

use fakegpu_api::convert;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|text: &str| {
    if let Ok(converted) = convert::convert(text) {
        convert::to_yaml(&converted).expect("converted pools serialize");
    }
});
