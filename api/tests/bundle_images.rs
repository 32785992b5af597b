//! The install bundle names the images hack/images.sh builds: every `image:` under config/ is
//! tagged with the workspace version, so a release bump cannot leave the bundle pointing at
//! images that were never built (hack/images.sh takes its references from the bundle).

use std::path::{Path, PathBuf};

fn yaml_files(dir: &Path, into: &mut Vec<PathBuf>) -> std::io::Result<()> {
    for entry in std::fs::read_dir(dir)? {
        let path = entry?.path();
        if path.is_dir() {
            yaml_files(&path, into)?;
        } else if path.extension().is_some_and(|e| e == "yaml") {
            into.push(path);
        }
    }
    Ok(())
}

#[test]
fn bundle_images_carry_the_workspace_version() -> Result<(), Box<dyn std::error::Error>> {
    let config = Path::new(env!("CARGO_MANIFEST_DIR")).join("../config");
    let mut files = Vec::new();
    yaml_files(&config, &mut files)?;
    let tag = format!(":v{}", env!("CARGO_PKG_VERSION"));
    let mut images = Vec::new();
    for file in files {
        for line in std::fs::read_to_string(&file)?.lines() {
            if let Some(image) = line.trim().strip_prefix("image:") {
                let image = image.trim().to_owned();
                assert!(
                    image.starts_with("ghcr.io/fakegpu/fakegpu-") && image.ends_with(&tag),
                    "{}: image {image} is not a fakegpu image tagged {tag}",
                    file.display()
                );
                images.push(image);
            }
        }
    }
    images.sort();
    images.dedup();
    let names: Vec<&str> = images
        .iter()
        .filter_map(|i| i.strip_prefix("ghcr.io/fakegpu/"))
        .filter_map(|i| i.split(':').next())
        .collect();
    assert_eq!(
        names,
        ["fakegpu-exporter", "fakegpu-node-agent", "fakegpu-operator"],
        "hack/images.sh builds these three"
    );
    Ok(())
}
