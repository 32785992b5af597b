//! The commit a binary is built from, for `--version` and the start-up log line:
//! `FAKEGPU_GIT_COMMIT` when set (a release built from a source archive), else git's HEAD,
//! else `unknown`.

use std::process::Command;

fn main() {
    println!("cargo:rerun-if-env-changed=FAKEGPU_GIT_COMMIT");
    let commit = std::env::var("FAKEGPU_GIT_COMMIT")
        .ok()
        .filter(|commit| !commit.is_empty())
        .or_else(git_head)
        .unwrap_or_else(|| "unknown".to_owned());
    println!("cargo:rustc-env=FAKEGPU_GIT_COMMIT={commit}");
}

/// HEAD's commit, abbreviated as git does for humans; the build runs again when HEAD moves.
fn git_head() -> Option<String> {
    for path in [
        Some("HEAD".to_owned()),
        git(&["symbolic-ref", "-q", "HEAD"]),
    ]
    .into_iter()
    .flatten()
    .chain(["packed-refs".to_owned()])
    {
        // A file that does not exist would make cargo run this script at every build.
        if let Some(file) = git(&["rev-parse", "--git-path", &path])
            .filter(|file| std::path::Path::new(file).exists())
        {
            println!("cargo:rerun-if-changed={file}");
        }
    }
    git(&["rev-parse", "--short=12", "HEAD"])
}

fn git(args: &[&str]) -> Option<String> {
    let output = Command::new("git").args(args).output().ok()?;
    let text = String::from_utf8(output.stdout).ok()?;
    (output.status.success() && !text.trim().is_empty()).then(|| text.trim().to_owned())
}
