//! Converts the reference fake GPU operator's Helm values into GpuNodePools.
//!
//! `fakegpu-convert values.yaml` (or `-` / no argument for stdin) prints the pools as one YAML
//! stream, ready for `kubectl apply -f -`; what has no pool field is said as comments at the
//! top and on stderr.

use std::{io::Read, process::ExitCode};

fn main() -> ExitCode {
    let path = std::env::args().nth(1).filter(|p| p != "-");
    let mut text = String::new();
    let read = match &path {
        Some(path) => std::fs::read_to_string(path).map(|t| text = t),
        None => std::io::stdin().read_to_string(&mut text).map(drop),
    };
    if let Err(error) = read {
        eprintln!(
            "fakegpu-convert: {}: {error}",
            path.as_deref().unwrap_or("stdin")
        );
        return ExitCode::FAILURE;
    }
    let converted = match fakegpu_api::convert::convert(&text) {
        Ok(converted) => converted,
        Err(error) => {
            eprintln!("fakegpu-convert: {error}");
            return ExitCode::FAILURE;
        }
    };
    for note in &converted.notes {
        eprintln!("fakegpu-convert: note: {note}");
    }
    match fakegpu_api::convert::to_yaml(&converted) {
        Ok(yaml) => {
            print!("{yaml}");
            ExitCode::SUCCESS
        }
        Err(error) => {
            eprintln!("fakegpu-convert: {error}");
            ExitCode::FAILURE
        }
    }
}
