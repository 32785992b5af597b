//! Writes fakegpu's CustomResourceDefinitions as YAML.
//!
//! `crdgen` prints them to stdout; `crdgen <dir>` writes one file per CRD into `<dir>`
//! (`config/crd/`, committed). A unit test fails when the committed files are stale.

use std::{env, fs, path::Path, process::ExitCode};

fn main() -> ExitCode {
    let documents = match fakegpu_api::crds::render() {
        Ok(documents) => documents,
        Err(error) => {
            eprintln!("crdgen: {error}");
            return ExitCode::FAILURE;
        }
    };
    match env::args().nth(1) {
        None => {
            for (_, yaml) in &documents {
                print!("---\n{yaml}");
            }
        }
        Some(dir) => {
            for (file, yaml) in &documents {
                let path = Path::new(&dir).join(file);
                if let Err(error) = fs::write(&path, yaml) {
                    eprintln!("crdgen: writing {}: {error}", path.display());
                    return ExitCode::FAILURE;
                }
            }
        }
    }
    ExitCode::SUCCESS
}
