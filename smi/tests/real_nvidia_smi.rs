//! NVIDIA's own nvidia-smi, run against fakegpu's `libnvidia-ml.so.1`, prints what fakegpu's
//! nvidia-smi prints for the same node: the default table (apart from its date), `-L`,
//! `--query-gpu` and `--query-compute-apps`, for every builtin profile's idle GPUs, and the
//! load readings of busy ones (utilization drawn alike by the library and the exporter), with each
//! real binary `hack/nvidia-smi.sh` fetched (NVIDIA's, from Debian's non-free archive, never
//! committed). hack/test.sh runs it with FAKEGPU_REAL_NVIDIA_SMI naming the fetched binaries'
//! folder and FAKEGPU_NVML_LIBRARY the built library; and again, once the images are built,
//! with the library they ship under an older distribution's glibc (FAKEGPU_GLIBC_ROOT).

use std::{collections::BTreeMap, path::PathBuf, process::Command};

use anyhow::{Context, ensure};
use fakegpu_model::{
    names::{
        container_env::{HOSTNAME, POD_UUID, VISIBLE_DEVICES},
        exporter,
    },
    profiles::{GpuProfile, PROFILES, profile},
    report::NodeReport,
    telemetry,
    topology::{
        CallerEnv, GpuStatus, MigDevice, PodGpuUsage, UtilizationBounds, gpu_uuid, mig_uuid,
    },
};
use fakegpu_smi::Environment;

mod common;

use common::{NODE, QUERY, environment, report, serve, smi};

const APPS: &str = "--query-compute-apps=pid,process_name,used_memory --format=csv";

/// The fetched binaries: `<folder>/<driver version>/nvidia-smi`.
fn real_binaries() -> anyhow::Result<BTreeMap<String, PathBuf>> {
    let folder = std::env::var_os("FAKEGPU_REAL_NVIDIA_SMI")
        .context("FAKEGPU_REAL_NVIDIA_SMI must name hack/nvidia-smi.sh's folder")?;
    let mut binaries = BTreeMap::new();
    for entry in std::fs::read_dir(&folder)? {
        let entry = entry?;
        let binary = entry.path().join("nvidia-smi");
        if binary.is_file() {
            binaries.insert(entry.file_name().to_string_lossy().into_owned(), binary);
        }
    }
    ensure!(!binaries.is_empty(), "no nvidia-smi under {folder:?}");
    Ok(binaries)
}

/// A folder holding `libnvidia-ml.so.1` (fakegpu's library), for the real binary's loader.
fn library_folder(scratch: &std::path::Path) -> anyhow::Result<PathBuf> {
    let library = std::env::var_os("FAKEGPU_NVML_LIBRARY")
        .context("FAKEGPU_NVML_LIBRARY must name the built library")?;
    let folder = scratch.join("lib");
    std::fs::create_dir_all(&folder)?;
    std::os::unix::fs::symlink(
        std::fs::canonicalize(library)?,
        folder.join("libnvidia-ml.so.1"),
    )?;
    Ok(folder)
}

/// `report` with every GPU idle: seen from the host, fakegpu's nvidia-smi lists busy GPUs'
/// pods by name where the library lists the host's processes of them (none here), so their
/// Processes boxes differ (see the README).
fn idle(mut report: NodeReport, driver_version: &str) -> NodeReport {
    report.topology.driver_version = driver_version.to_owned();
    for gpu in &mut report.topology.gpus {
        gpu.status = GpuStatus::default();
    }
    for utilization in report.utilization.values_mut() {
        *utilization = 0;
    }
    report
}

/// How NVIDIA's binary is started: with fakegpu's library first on its loader's path, under
/// this machine's glibc or under another distribution's (`glibc`: a folder holding
/// `lib/x86_64-linux-gnu/`, from hack/glibc-root.sh), whose loader then runs it.
struct Launch {
    library: PathBuf,
    glibc: Option<PathBuf>,
}

impl Launch {
    fn run(
        &self,
        binary: &PathBuf,
        document: &PathBuf,
        args: &str,
        container: Option<&Container>,
    ) -> anyhow::Result<String> {
        let mut command = match &self.glibc {
            None => {
                let mut command = Command::new(binary);
                command.env("LD_LIBRARY_PATH", &self.library);
                command
            }
            Some(root) => {
                let libraries = root.join("lib/x86_64-linux-gnu");
                let mut command = Command::new(libraries.join("ld-linux-x86-64.so.2"));
                command
                    .arg("--library-path")
                    .arg(std::env::join_paths([&self.library, &libraries])?)
                    .arg(binary);
                command
            }
        };
        // Who the binary runs as is only what `container` says, whatever this test's own
        // environment holds.
        for name in [HOSTNAME, VISIBLE_DEVICES, POD_UUID] {
            command.env_remove(name);
        }
        if let Some(container) = container {
            command
                .env(HOSTNAME, &container.hostname)
                .env(VISIBLE_DEVICES, &container.visible_devices);
        }
        let output = command
            .args(args.split_whitespace())
            .env(
                exporter::DRAW_INTERVAL_ENV,
                DRAW_INTERVAL.as_secs().to_string(),
            )
            .env("FAKEGPU_NVML_TOPOLOGY", document)
            .output()?;
        ensure!(
            output.status.success(),
            "{} {args}: {}{}",
            binary.display(),
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        );
        Ok(String::from_utf8(output.stdout)?)
    }
}

/// An A100 80GB node whose GPU 1 is partitioned and whose power limit is unknown: the GPU
/// rows of a MIG-enabled GPU (ECC `On`, utilization `N/A`), the `N/A` power column and the
/// MIG devices table.
fn partitioned(driver_version: &str) -> anyhow::Result<NodeReport> {
    let product = profile("a100-80gb").context("a100-80gb profile")?;
    let mut report = idle(report(product), driver_version);
    report.topology.power_limit_watts = 0;
    report.topology.mig_strategy = "mixed".into();
    let mut instances = Vec::new();
    for (name, start) in [("3g.40gb", 0), ("1g.10gb", 4)] {
        let mig = product.mig_profile(name).context("catalog profile")?;
        instances.push(MigDevice::new(mig_uuid(NODE, 1, start), mig, start));
    }
    report.topology.gpus[1].mig_devices = instances;
    Ok(report)
}

/// The readings that follow a GPU's load; busy GPUs are compared on these (the Processes box
/// differs, see [`idle`]).
const LOAD_QUERY: &str =
    "--query-gpu=index,uuid,utilization.gpu,temperature.gpu,power.draw,clocks.sm --format=csv";

/// How long a draw holds for both sides: the library reads it from the environment, the
/// report below is drawn with it, as the exporter draws.
const DRAW_INTERVAL: std::time::Duration = std::time::Duration::from_secs(10);

/// A node of `profile` whose GPUs 0 and 1 are held by pods drawing from 0-100 %: the document
/// NVIDIA's binary reads through the library, and the report fakegpu's nvidia-smi reads, with
/// the utilization the exporter publishes for draw period `period`.
fn busy(profile: &GpuProfile, driver_version: &str, period: u64) -> NodeReport {
    let mut report = report(profile);
    report.topology.driver_version = driver_version.to_owned();
    for gpu in &mut report.topology.gpus {
        for usage in gpu.status.pod_gpu_usage_status.values_mut() {
            usage.utilization = UtilizationBounds { min: 0, max: 100 };
        }
        report.utilization.insert(
            gpu.id.clone(),
            telemetry::drawn_total(&gpu.status, &gpu.id, period),
        );
    }
    report
}

/// A node of `profile` whose pods hold steady loads (no draw): GPU 0's pod at 5 %, GPU 1's two
/// at 7 % each. At 5 % a K80 draws 21605 mW, which NVIDIA's tool prints as 21.60 W (it divides
/// the driver's milliwatts in single precision), where fakegpu's printed 21.61: the draws met
/// such loads only now and then.
fn steady(profile: &GpuProfile, driver_version: &str) -> NodeReport {
    let mut report = report(profile);
    report.topology.driver_version = driver_version.to_owned();
    for (load, gpu) in [5, 7].into_iter().zip(&mut report.topology.gpus) {
        for usage in gpu.status.pod_gpu_usage_status.values_mut() {
            usage.utilization = UtilizationBounds {
                min: load,
                max: load,
            };
        }
        report.utilization.insert(
            gpu.id.clone(),
            telemetry::drawn_total(&gpu.status, &gpu.id, 0),
        );
    }
    report
}

fn period_now() -> u64 {
    telemetry::draw_period(std::time::SystemTime::now(), DRAW_INTERVAL)
}

/// What is compared of the output of `args`: all of it, but a table's first line, the time it
/// was printed.
fn comparable(args: &str, text: &str) -> String {
    if args.is_empty() {
        text.lines().skip(1).collect::<Vec<_>>().join("\n")
    } else {
        text.to_owned()
    }
}

#[test]
#[ignore = "needs NVIDIA's nvidia-smi (hack/nvidia-smi.sh) and the built library: hack/test.sh runs it"]
fn nvidia_s_nvidia_smi_prints_what_fakegpu_s_prints() -> anyhow::Result<()> {
    in_scratch("this-glibc", |scratch| {
        compare(
            scratch,
            &Launch {
                library: library_folder(scratch)?,
                glibc: None,
            },
        )
    })
}

/// A GPU container loads the library with its image's glibc: Ubuntu 20.04's CUDA images have
/// 2.31, older than this machine's. The same comparison, through the loader and libraries of
/// the glibc FAKEGPU_GLIBC_ROOT names (hack/glibc-root.sh: Debian 11's 2.31), with the library
/// the images ship (FAKEGPU_NVML_LIBRARY; hack/images.sh builds it for glibc 2.17).
#[test]
#[ignore = "needs an older glibc (hack/glibc-root.sh), NVIDIA's nvidia-smi and the shipped library: hack/test.sh runs it"]
fn under_an_older_glibc_nvidia_s_nvidia_smi_prints_what_fakegpu_s_prints() -> anyhow::Result<()> {
    let glibc = std::env::var_os("FAKEGPU_GLIBC_ROOT")
        .context("FAKEGPU_GLIBC_ROOT must name hack/glibc-root.sh's folder")?;
    in_scratch("older-glibc", |scratch| {
        compare(
            scratch,
            &Launch {
                library: library_folder(scratch)?,
                glibc: Some(glibc.into()),
            },
        )
    })
}

/// Runs `test` with a scratch folder of its own, removed afterwards whatever it returned.
fn in_scratch(
    name: &str,
    test: impl FnOnce(&std::path::Path) -> anyhow::Result<()>,
) -> anyhow::Result<()> {
    let scratch =
        std::env::temp_dir().join(format!("fakegpu-real-smi-{name}-{}", std::process::id()));
    std::fs::create_dir_all(&scratch)?;
    let result = test(&scratch);
    std::fs::remove_dir_all(&scratch)?;
    result
}

/// A GPU container on the node, as both nvidia-smis learn it from the environment: its pod's
/// name and the GPUs it was given.
struct Container {
    hostname: String,
    visible_devices: String,
}

impl Container {
    /// fakegpu's nvidia-smi's view of the same container: the same main process (this
    /// machine's PID 1, which the library names for NVIDIA's binary).
    fn environment(&self, url: &str) -> Environment {
        Environment {
            identity: CallerEnv {
                hostname: Some(self.hostname.clone()),
                visible_devices: Some(self.visible_devices.clone()),
                ..Default::default()
            },
            process_name: Environment::from_process().process_name,
            ..environment(url)
        }
    }
}

/// A node's document written where NVIDIA's binary reads it, and its report served where
/// fakegpu's nvidia-smi asks for it.
struct Node {
    document: PathBuf,
    url: String,
}

impl Node {
    fn new(scratch: &std::path::Path, name: &str, report: &NodeReport) -> anyhow::Result<Self> {
        let document = scratch.join(format!("{name}.yml"));
        std::fs::write(&document, report.topology.to_yaml()?)?;
        Ok(Self {
            document,
            url: serve(report)?,
        })
    }

    /// What fakegpu's nvidia-smi and NVIDIA's print for `args` on this node: on the host, or
    /// in `container`.
    fn outputs(
        &self,
        binary: &PathBuf,
        launch: &Launch,
        args: &str,
        container: Option<&Container>,
    ) -> anyhow::Result<(String, String)> {
        let env = container.map_or_else(|| environment(&self.url), |c| c.environment(&self.url));
        let (code, ours, err) = smi(args, &env);
        ensure!(code == 0, "fakegpu's nvidia-smi {args}: {err}");
        let theirs = launch.run(binary, &self.document, args, container)?;
        Ok((comparable(args, &ours), comparable(args, &theirs)))
    }
}

/// The value of the first line of `-q`'s output `text` naming `field` (`Name : value`).
fn quiet_value<'a>(text: &'a str, field: &str) -> Option<&'a str> {
    text.lines().find_map(|line| {
        let (name, value) = line.split_once(" : ")?;
        (name.trim() == field).then_some(value.trim())
    })
}

impl Node {
    /// The power draw and limit of GPU 0 as fakegpu's `--query-gpu` prints them, and as
    /// NVIDIA's `-q` prints them (its field values; 550 names the draw "Instantaneous"),
    /// with its PCIe host link, which the library does not know: `N/A`, not what the binary's
    /// buffer held.
    fn quiet_power(&self, binary: &PathBuf, launch: &Launch) -> anyhow::Result<(String, String)> {
        let (code, ours, err) = smi(
            "-i 0 --query-gpu=power.draw,power.limit --format=csv,noheader",
            &environment(&self.url),
        );
        ensure!(code == 0, "fakegpu's nvidia-smi: {err}");
        let theirs = launch.run(binary, &self.document, "-q -i 0", None)?;
        let draw = quiet_value(&theirs, "Power Draw")
            .or_else(|| quiet_value(&theirs, "Instantaneous Power Draw"))
            .unwrap_or("(none)");
        let limit = quiet_value(&theirs, "Current Power Limit").unwrap_or("(none)");
        let host = quiet_value(&theirs, "Host Max").unwrap_or("(none)");
        Ok((
            format!("{}, host max N/A", ours.trim().replace("[N/A]", "N/A")),
            format!("{draw}, {limit}, host max {host}"),
        ))
    }
}

fn compare(scratch: &std::path::Path, launch: &Launch) -> anyhow::Result<()> {
    let mut differences = Vec::new();
    let mut differ = |what: String, ours: String, theirs: String| {
        if ours != theirs {
            differences.push(format!(
                "{what}\n--- NVIDIA's ---\n{theirs}\n--- fakegpu's ---\n{ours}"
            ));
        }
    };
    for (version, binary) in real_binaries()? {
        for profile in PROFILES {
            let name = format!("{}-{version}", profile.name);
            let node = Node::new(scratch, &name, &idle(report(profile), &version))?;
            for args in ["", "-L", QUERY, APPS] {
                let (ours, theirs) = node.outputs(&binary, launch, args, None)?;
                let what = format!("{} on {version}, nvidia-smi {args}", profile.name);
                differ(what, ours, theirs);
            }
            let (ours, theirs) = node.quiet_power(&binary, launch)?;
            differ(
                format!(
                    "{} on {version}, nvidia-smi -q power readings",
                    profile.name
                ),
                ours,
                theirs,
            );
        }
        // The topology matrix runs (the library answers what it asks of the driver).
        let node = Node::new(
            scratch,
            &format!("topo-{version}"),
            &idle(report(&PROFILES[0]), &version),
        )?;
        launch.run(&binary, &node.document, "topo -m", None)?;
        for profile in PROFILES {
            let name = format!("steady-{}-{version}", profile.name);
            let node = Node::new(scratch, &name, &steady(profile, &version))?;
            let (ours, theirs) = node.outputs(&binary, launch, LOAD_QUERY, None)?;
            let what = format!(
                "steady {} on {version}, nvidia-smi {LOAD_QUERY}",
                profile.name
            );
            differ(what, ours, theirs);
            // In the container of the pod holding GPU 0: that GPU alone, with its pod's work
            // as the container's own process in the table and the process query.
            let container = Container {
                hostname: "train-0".into(),
                visible_devices: gpu_uuid(NODE, 0),
            };
            for args in ["", QUERY, APPS] {
                let (ours, theirs) = node.outputs(&binary, launch, args, Some(&container))?;
                let what = format!(
                    "steady {} on {version}, in pod train-0's container: nvidia-smi {args}",
                    profile.name
                );
                differ(what, ours, theirs);
            }
        }
        // Busy GPUs: NVIDIA's binary reads the library's draws, fakegpu's the exporter's
        // report; both are the shared model's for the period (tried again when a period turns
        // between the two runs).
        for profile in PROFILES {
            for attempt in 0.. {
                let period = period_now();
                let name = format!("busy-{}-{version}-{attempt}", profile.name);
                let node = Node::new(scratch, &name, &busy(profile, &version, period))?;
                let (ours, theirs) = node.outputs(&binary, launch, LOAD_QUERY, None)?;
                if period_now() == period || attempt == 2 {
                    let what = format!(
                        "busy {} on {version}, nvidia-smi {LOAD_QUERY}",
                        profile.name
                    );
                    differ(what, ours, theirs);
                    break;
                }
            }
        }
        // MIG: the whole table, MIG devices included, on the host and in a container given
        // one instance (its GPU as GPU 0, its process with the instance's GI and CI IDs).
        let name = format!("partitioned-{version}");
        let node = Node::new(scratch, &name, &partitioned(&version)?)?;
        let (ours, theirs) = node.outputs(&binary, launch, "", None)?;
        differ(format!("partitioned a100-80gb on {version}"), ours, theirs);
        let mut report = partitioned(&version)?;
        let instance = &mut report.topology.gpus[1].mig_devices[1];
        instance.status.allocated_by.pod = "mig-0".into();
        instance.status.pod_gpu_usage_status.insert(
            "uid-mig-0".into(),
            PodGpuUsage {
                fb_used: 5000,
                ..Default::default()
            },
        );
        let container = Container {
            hostname: "mig-0".into(),
            visible_devices: instance.uuid.clone(),
        };
        let node = Node::new(scratch, &format!("mig-pod-{version}"), &report)?;
        for args in ["", APPS] {
            let (ours, theirs) = node.outputs(&binary, launch, args, Some(&container))?;
            let what =
                format!("partitioned a100-80gb on {version}, in pod mig-0's container: {args}");
            differ(what, ours, theirs);
        }
    }
    ensure!(differences.is_empty(), "{}", differences.join("\n"));
    Ok(())
}
