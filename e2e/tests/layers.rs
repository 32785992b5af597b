//! The workspace's files as layers: no file imports a file that imports it. Such a pair can be
//! changed only together, and it hides which of the two is the lower layer (a node controller's
//! `mod.rs` whose children import its types back, the node agent's CDI specs and checkpoint
//! once sharing one write helper). Needs no cluster: hack/test.sh runs it with the unit tests.
//!
//! An import is a `use` of, or a path through, another module of the same crate (`crate::`,
//! `super::`, `self::` or a child module's name), resolved to the file of the longest module
//! path that has one; code after a file's `#[cfg(test)] mod tests` is a test's and left out.
//!
//! And the crates as layers: what GPU containers load (the NVML and CUDA libraries, nvidia-smi)
//! is built from the serde-only model, with no Kubernetes client, TLS or async runtime in it.

use std::{
    collections::{BTreeMap, BTreeSet},
    path::{Path, PathBuf},
};

/// The crates whose library (or binary, where there is no library) is checked.
const CRATES: &[&str] = &[
    "model",
    "api",
    "runtime",
    "operator",
    "node-agent",
    "smi",
    "exporter",
    "nvml",
    "cuda",
    "e2e",
];

type ModulePath = Vec<String>;

/// The module path of a source file relative to `src/`: `node/mod.rs` and `node.rs` are
/// `node`, `lib.rs` the crate root.
fn module_path(relative: &Path) -> ModulePath {
    let mut parts: ModulePath = relative
        .with_extension("")
        .components()
        .map(|c| c.as_os_str().to_string_lossy().into_owned())
        .collect();
    if parts
        .last()
        .is_some_and(|last| ["lib", "main", "mod"].contains(&last.as_str()))
    {
        parts.pop();
    }
    parts
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) -> std::io::Result<()> {
    for entry in std::fs::read_dir(dir)? {
        let path = entry?.path();
        if path.is_dir() {
            rust_files(&path, out)?;
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
    Ok(())
}

/// The source a file's imports are read from: without comments, and without its tests.
fn code_of(text: &str) -> String {
    // `#[cfg(test)]` and then `mod tests {`, `pub(crate) mod tests {`.
    let tests = text
        .match_indices("#[cfg(test)]\n")
        .find(|(at, attribute)| {
            let next = text[at + attribute.len()..]
                .lines()
                .next()
                .unwrap_or_default();
            next.trim_end().ends_with("mod tests {")
        });
    let text = tests.map_or(text, |(at, _)| &text[..at]);
    text.lines()
        .map(|line| line.find("//").map_or(line, |at| &line[..at]))
        .collect::<Vec<_>>()
        .join("\n")
}

/// The paths a `use` tree names: `a::{b, c::{d, e}}` is `a::b`, `a::c::d`, `a::c::e`.
fn expand_use(tree: &str) -> Vec<String> {
    let tree: String = tree.split_whitespace().collect::<Vec<_>>().join(" ");
    let Some(open) = tree.find('{') else {
        let plain = tree.split(" as ").next().unwrap_or_default();
        return vec![plain.replace(' ', "")];
    };
    let close = tree.rfind('}').unwrap_or(tree.len());
    let prefix = tree[..open].replace(' ', "");
    let mut items = Vec::new();
    let (mut depth, mut current) = (0, String::new());
    for c in tree[open + 1..close].chars() {
        match c {
            '{' => depth += 1,
            '}' => depth -= 1,
            ',' if depth == 0 => {
                items.push(std::mem::take(&mut current));
                continue;
            }
            _ => {}
        }
        current.push(c);
    }
    items.push(current);
    items
        .iter()
        .filter(|item| !item.trim().is_empty())
        .flat_map(|item| expand_use(item))
        .map(|path| format!("{prefix}{path}"))
        .collect()
}

/// Every path in `code` that may name a module: `use` trees, and paths written inline
/// (`crate::fs::write_atomic(..)`, `labels::desired_labels(..)`).
fn named_paths(code: &str) -> Vec<String> {
    let mut paths = Vec::new();
    // The code less its `use` items, whose paths are read as trees.
    let mut inline = String::new();
    let mut rest = code;
    while let Some(at) = rest.find("use ") {
        let before = rest[..at].chars().next_back();
        inline.push_str(&rest[..at]);
        if before.is_some_and(|c| c.is_alphanumeric() || c == '_') {
            inline.push_str("use ");
            rest = &rest[at + 4..];
            continue;
        }
        let Some(end) = rest[at..].find(';') else {
            rest = &rest[at..];
            break;
        };
        paths.extend(expand_use(&rest[at + 4..at + end]));
        rest = &rest[at + end..];
    }
    inline.push_str(rest);
    let is_ident = |c: char| c.is_alphanumeric() || c == '_' || c == ':';
    let chars: Vec<char> = inline.chars().collect();
    let mut start = 0;
    while start < chars.len() {
        if is_ident(chars[start]) && (start == 0 || !is_ident(chars[start - 1])) {
            let end = (start..chars.len())
                .find(|&i| !is_ident(chars[i]))
                .unwrap_or(chars.len());
            let word: String = chars[start..end].iter().collect();
            if word.contains("::") && !word.ends_with("::") {
                paths.push(word);
            }
            start = end;
        } else {
            start += 1;
        }
    }
    paths
}

/// The module a `path` written in module `here` leads into, of `modules`; `None` for one of
/// another crate.
fn resolve(
    path: &str,
    here: &ModulePath,
    modules: &BTreeMap<ModulePath, String>,
) -> Option<ModulePath> {
    let mut segments: Vec<&str> = path.split("::").filter(|s| !s.is_empty()).collect();
    let mut full: ModulePath = match segments.first().copied()? {
        "crate" => {
            segments.remove(0);
            Vec::new()
        }
        "super" | "self" => {
            let mut base = here.clone();
            while let Some(first) = segments.first().copied() {
                match first {
                    "super" => drop(base.pop()),
                    "self" => {}
                    _ => break,
                }
                segments.remove(0);
            }
            base
        }
        child => {
            let mut candidate = here.clone();
            candidate.push(child.to_owned());
            if !modules.contains_key(&candidate) {
                return None;
            }
            here.clone()
        }
    };
    full.extend(segments.iter().map(|s| (*s).to_owned()));
    (0..=full.len())
        .rev()
        .map(|n| full[..n].to_vec())
        .find(|prefix| modules.contains_key(prefix))
}

/// Each file (relative to the workspace) and the files of its crate it imports.
fn file_imports(workspace: &Path) -> std::io::Result<BTreeMap<String, BTreeSet<String>>> {
    let mut imports: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for krate in CRATES {
        let src = workspace.join(krate).join("src");
        let mut files = Vec::new();
        rust_files(&src, &mut files)?;
        let library = src.join("lib.rs").exists();
        let modules: BTreeMap<ModulePath, String> = files
            .iter()
            .filter_map(|file| {
                let relative = file.strip_prefix(&src).ok()?;
                // Binaries are crates of their own; main.rs beside a library is one too.
                if relative.starts_with("bin") || (library && relative == Path::new("main.rs")) {
                    return None;
                }
                Some((
                    module_path(relative),
                    format!("{krate}/src/{}", relative.display()),
                ))
            })
            .collect();
        for (here, file) in &modules {
            let code = code_of(&std::fs::read_to_string(workspace.join(file))?);
            for path in named_paths(&code) {
                if let Some(target) = resolve(&path, here, &modules)
                    && target != *here
                {
                    imports
                        .entry(file.clone())
                        .or_default()
                        .insert(modules[&target].clone());
                }
            }
        }
    }
    Ok(imports)
}

/// The workspace's root: the e2e crate's parent.
fn workspace() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .unwrap_or_else(|| Path::new(".."))
}

/// The pairs of files (relative to the workspace) that import each other.
fn import_cycles(workspace: &Path) -> std::io::Result<BTreeSet<(String, String)>> {
    let imports = file_imports(workspace)?;
    let mut cycles = BTreeSet::new();
    for (file, targets) in &imports {
        for target in targets {
            if imports.get(target).is_some_and(|back| back.contains(file)) {
                let pair = if file < target {
                    (file.clone(), target.clone())
                } else {
                    (target.clone(), file.clone())
                };
                cycles.insert(pair);
            }
        }
    }
    Ok(cycles)
}

#[test]
fn no_file_imports_a_file_that_imports_it() -> std::io::Result<()> {
    let workspace = workspace();
    let found = import_cycles(workspace)?;
    assert!(
        found.is_empty(),
        "files that import each other (move what both need into a file of its own): {found:#?}"
    );
    Ok(())
}

/// The dependency graph `cargo metadata` resolves from Cargo.lock for the platform the images
/// are built for: each package's normal dependencies, by package id, and each id's name.
struct Graph {
    names: BTreeMap<String, String>,
    normal_deps: BTreeMap<String, Vec<String>>,
}

impl Graph {
    fn read(workspace: &Path) -> anyhow::Result<Self> {
        let output = std::process::Command::new(std::env::var("CARGO").unwrap_or("cargo".into()))
            .args(["metadata", "--format-version", "1", "--locked"])
            .args(["--filter-platform", "x86_64-unknown-linux-gnu"])
            .current_dir(workspace)
            .output()?;
        anyhow::ensure!(output.status.success(), "cargo metadata: {output:?}");
        let metadata: serde_json::Value = serde_json::from_slice(&output.stdout)?;
        fn list(value: &serde_json::Value) -> &[serde_json::Value] {
            value.as_array().map_or(&[], Vec::as_slice)
        }
        let text = |value: &serde_json::Value| value.as_str().map(str::to_owned);
        let names = list(&metadata["packages"])
            .iter()
            .filter_map(|p| Some((text(&p["id"])?, text(&p["name"])?)))
            .collect();
        let normal_deps = list(&metadata["resolve"]["nodes"])
            .iter()
            .filter_map(|node| {
                let normal = list(&node["deps"])
                    .iter()
                    .filter(|dep| {
                        list(&dep["dep_kinds"])
                            .iter()
                            .any(|kind| kind["kind"].is_null())
                    })
                    .filter_map(|dep| text(&dep["pkg"]))
                    .collect();
                Some((text(&node["id"])?, normal))
            })
            .collect();
        Ok(Self { names, normal_deps })
    }

    /// The packages `package` is built from (normal dependencies, transitively), by name.
    fn built_from(&self, package: &str) -> anyhow::Result<BTreeSet<&str>> {
        let root = self
            .names
            .iter()
            .find(|(_, name)| *name == package)
            .map(|(id, _)| id.as_str())
            .ok_or_else(|| anyhow::anyhow!("no package {package} in the workspace"))?;
        let mut seen = BTreeSet::new();
        let mut next = vec![root];
        while let Some(id) = next.pop() {
            for dep in self.normal_deps.get(id).into_iter().flatten() {
                if seen.insert(self.names.get(dep).map_or(dep.as_str(), String::as_str)) {
                    next.push(dep);
                }
            }
        }
        Ok(seen)
    }
}

#[test]
fn what_gpu_containers_load_is_built_from_the_model_alone() -> anyhow::Result<()> {
    let graph = Graph::read(workspace())?;
    // A Kubernetes client, TLS or an async runtime in them would be megabytes and minutes of
    // build in every process that loads the libraries, for nothing they do.
    let not_wanted = [
        "fakegpu-api",
        "kube",
        "k8s-openapi",
        "tokio",
        "hyper",
        "rustls",
        "schemars",
    ];
    for package in [
        "fakegpu-model",
        "fakegpu-nvml",
        "fakegpu-cuda",
        "fakegpu-smi",
    ] {
        let deps = graph.built_from(package)?;
        let found: Vec<_> = not_wanted.iter().filter(|d| deps.contains(**d)).collect();
        assert!(found.is_empty(), "{package} is built from {found:?}");
    }
    assert!(
        graph.built_from("fakegpu-operator")?.contains("kube"),
        "the check reads the dependency graph"
    );
    Ok(())
}

/// The operator's generic machinery (watch caches, the write path, pacing, retries, leader
/// election, Events, conditions, metrics) knows nothing of GPUs or of the controllers that use
/// it: it could be a crate of its own.
#[test]
fn the_operator_s_kit_imports_nothing_of_the_operator_outside_it() -> std::io::Result<()> {
    let workspace = workspace();
    const KIT: &str = "operator/src/kit/";
    let imports = file_imports(workspace)?;
    assert!(workspace.join(KIT).join("mod.rs").exists(), "{KIT} is read");
    let outside: BTreeSet<(&String, &String)> = imports
        .iter()
        .filter(|(file, _)| file.starts_with(KIT))
        .flat_map(|(file, targets)| targets.iter().map(move |target| (file, target)))
        .filter(|(_, target)| !target.starts_with(KIT))
        .collect();
    assert!(
        outside.is_empty(),
        "the kit imports the operator's own modules: {outside:#?}"
    );
    Ok(())
}

#[test]
fn imports_are_read_from_use_trees_and_inline_paths() {
    assert_eq!(
        expand_use("crate::{a::X, b::{c, d as e}}"),
        ["crate::a::X", "crate::b::c", "crate::b::d"]
    );
    let modules: BTreeMap<ModulePath, String> = [
        (vec![], "lib.rs"),
        (vec!["dra".into()], "dra/mod.rs"),
        (vec!["dra".into(), "cdi".into()], "dra/cdi.rs"),
        (vec!["fs".into()], "fs.rs"),
    ]
    .into_iter()
    .map(|(path, file)| (path, file.to_owned()))
    .collect();
    let cdi = vec!["dra".to_owned(), "cdi".to_owned()];
    let code = code_of(
        "use super::checkpoint::X; // crate::fs::no\nfn f() { crate::fs::write(); }\n\
         #[cfg(test)]\npub(crate) mod tests {\n use crate::dra::Y; }",
    );
    let resolved: Vec<_> = named_paths(&code)
        .iter()
        .filter_map(|p| resolve(p, &cdi, &modules))
        .collect();
    // `super::checkpoint` is no file here: the longest module it names is `dra`.
    assert_eq!(resolved, [vec!["dra".to_owned()], vec!["fs".to_owned()]]);
    let dra = vec!["dra".to_owned()];
    assert_eq!(
        resolve("cdi::write", &dra, &modules),
        Some(cdi.clone()),
        "a child module by name"
    );
    assert_eq!(resolve("serde::Serialize", &dra, &modules), None);
}
