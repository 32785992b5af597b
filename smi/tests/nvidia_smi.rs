//! The fake nvidia-smi against a real HTTP socket serving a node report, as the exporter does:
//! golden outputs for every builtin profile, and the errors a user meets.
//!
//! Regenerate the golden files after an intended layout change with
//! `FAKEGPU_BLESS=1 cargo test -p fakegpu-node-agent --test nvidia_smi`, and read the diff.

use std::{collections::BTreeMap, net::TcpListener, path::PathBuf, process::Command};

use anyhow::Context;
use fakegpu_model::{
    profiles::{GpuProfile, PROFILES},
    report::NodeReport,
    topology::{AllocatedBy, CallerEnv, GpuStatus, MigDevice, PodGpuUsage, gpu_uuid, mig_uuid},
};
use fakegpu_smi::Environment;

mod common;

use common::{DATE, NODE, QUERY, environment, report, serve, smi};

/// What a pod given GPU 0 (and a host-wide view) sees for `profile`.
fn transcript(profile: &GpuProfile) -> anyhow::Result<String> {
    let url = serve(&report(profile))?;
    let host = environment(&url);
    let pod = Environment {
        identity: CallerEnv {
            visible_devices: Some(gpu_uuid(NODE, 0)),
            hostname: Some("train-0".into()),
            ..Default::default()
        },
        ..environment(&url)
    };
    let mut text = String::new();
    for (who, env, args) in [
        ("host", &host, ""),
        ("host", &host, "-L"),
        ("host", &host, QUERY),
        ("pod train-0", &pod, ""),
        ("pod train-0", &pod, "-L"),
        (
            "pod train-0",
            &pod,
            "--query-gpu=index,memory.used,utilization.gpu --format=csv,noheader,nounits",
        ),
        (
            "pod train-0",
            &pod,
            "--query-compute-apps=pid,process_name,used_memory --format=csv",
        ),
    ] {
        let (code, out, err) = smi(args, env);
        assert_eq!(code, 0, "{} {args}: {err}", profile.name);
        text.push_str(&format!("### {who}: nvidia-smi {args}\n{out}\n"));
    }
    Ok(text)
}

#[test]
fn every_builtin_profile_matches_its_golden_output() -> anyhow::Result<()> {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/golden/nvidia-smi");
    let bless = std::env::var_os("FAKEGPU_BLESS").is_some();
    let mut mismatched = Vec::new();
    for profile in PROFILES {
        let text = transcript(profile)?;
        let path = dir.join(format!("{}.txt", profile.name));
        if bless {
            std::fs::write(&path, &text)?;
            continue;
        }
        let golden = std::fs::read_to_string(&path).unwrap_or_default();
        if golden != text {
            mismatched.push(format!(
                "{}: differs from {}\n--- got ---\n{text}",
                profile.name,
                path.display()
            ));
        }
    }
    assert!(mismatched.is_empty(), "{}", mismatched.join("\n"));
    Ok(())
}

#[test]
fn a_pod_sees_its_own_gpus_memory_and_process() -> anyhow::Result<()> {
    let profile = fakegpu_model::profiles::profile("h100").context("h100 profile")?;
    let url = serve(&report(profile))?;
    let pod = Environment {
        identity: CallerEnv {
            visible_devices: Some(gpu_uuid(NODE, 0)),
            hostname: Some("train-0".into()),
            ..Default::default()
        },
        ..environment(&url)
    };
    let (_, out, _) = smi(
        "--query-gpu=index,uuid,memory.used,utilization.gpu --format=csv,noheader",
        &pod,
    );
    assert_eq!(out, format!("0, {}, 12288 MiB, 40 %\n", gpu_uuid(NODE, 0)));
    // A fractional pod sees its share of the memory.
    let half = Environment {
        identity: CallerEnv {
            visible_devices: Some(gpu_uuid(NODE, 1)),
            pod_uid: Some("uid-half-a".into()),
            ..Default::default()
        },
        gpu_share: Some("0.5".into()),
        ..environment(&url)
    };
    let (_, out, _) = smi(
        "--query-gpu=memory.used,memory.total --format=csv,noheader,nounits",
        &half,
    );
    assert_eq!(out, format!("2048, {}\n", profile.memory_mib / 2));
    // -i picks by index or UUID; an unknown one is not found.
    let host = environment(&url);
    let (code, out, _) = smi(&format!("-L -i 3,{}", gpu_uuid(NODE, 2)), &host);
    assert_eq!(code, 0);
    assert_eq!(out.lines().count(), 2);
    assert!(
        out.starts_with("GPU 3: NVIDIA H100 80GB HBM3 (UUID: GPU-"),
        "{out}"
    );
    assert_eq!(smi("-L -i 99", &host).0, 6);
    // Devices the container was not given are not shown; none at all is "No devices".
    let none = Environment {
        identity: CallerEnv {
            visible_devices: Some("void".into()),
            ..Default::default()
        },
        ..environment(&url)
    };
    let (code, out, _) = smi("", &none);
    assert_eq!((code, out.as_str()), (6, "No devices were found\n"));
    Ok(())
}

#[test]
fn mig_instances_are_listed_under_their_gpu() -> anyhow::Result<()> {
    let profile = fakegpu_model::profiles::profile("a100-80gb").context("a100-80gb profile")?;
    let mut report = report(profile);
    report.topology.mig_strategy = "mixed".into();
    report.topology.gpus[1].mig_devices = [("3g.40gb", 0), ("1g.10gb", 4)]
        .map(|(name, start)| {
            let mig = profile.mig_profile(name).expect("catalog profile");
            MigDevice::new(mig_uuid(NODE, 1, start), mig, start)
        })
        .to_vec();
    report.topology.gpus[1].status = GpuStatus::default();
    report.topology.gpus[1].mig_devices[1].status = GpuStatus {
        allocated_by: AllocatedBy {
            namespace: "team-b".into(),
            pod: "mig-0".into(),
            container: "main".into(),
        },
        pod_gpu_usage_status: BTreeMap::from([(
            "uid-mig-0".into(),
            PodGpuUsage {
                fb_used: 5000,
                ..Default::default()
            },
        )]),
    };
    let url = serve(&report)?;
    let (_, out, _) = smi("-L -i 1", &environment(&url));
    assert_eq!(
        out,
        format!(
            "GPU 1: NVIDIA A100-SXM4-80GB (UUID: {})\n  MIG 3g.40gb     Device  0: (UUID: {})\n  MIG 1g.10gb     Device  1: (UUID: {})\n",
            gpu_uuid(NODE, 1),
            mig_uuid(NODE, 1, 0),
            mig_uuid(NODE, 1, 4)
        )
    );
    // A container given one instance sees its GPU with that instance only, as its GPU 0 (NVML
    // numbers what a container sees from 0; NVIDIA's nvidia-smi prints 0 there too).
    let given = Environment {
        identity: CallerEnv {
            visible_devices: Some(mig_uuid(NODE, 1, 4)),
            ..Default::default()
        },
        ..environment(&url)
    };
    let (_, out, _) = smi("-L", &given);
    assert_eq!(out.lines().count(), 2, "{out}");
    assert!(out.contains("MIG 1g.10gb"), "{out}");
    let (_, out, _) = smi(
        "--query-gpu=index,mig.mode.current --format=csv,noheader",
        &given,
    );
    assert_eq!(out, "0, Enabled\n");
    // The default view lists the instances with their driver IDs, memory, SMs and engines; the
    // 1g.10gb at slice 4 is GI 11 and runs the pod's process.
    let (_, out, _) = smi("-i 1", &environment(&url));
    let golden = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/golden/a100-80gb-mig.txt");
    if std::env::var_os("FAKEGPU_BLESS").is_some() {
        std::fs::write(&golden, &out)?;
    }
    assert_eq!(out, std::fs::read_to_string(&golden)?, "{out}");
    Ok(())
}

#[test]
fn errors_are_clear_and_exit_non_zero() -> anyhow::Result<()> {
    let profile = fakegpu_model::profiles::profile("l40s").context("l40s profile")?;
    let url = serve(&report(profile))?;
    let env = environment(&url);
    let (code, _, err) = smi("--query-gpu=name,bogus.field --format=csv", &env);
    assert_eq!(code, 2);
    assert!(
        err.contains("\"bogus.field\" is not a valid field"),
        "{err}"
    );
    let (code, _, err) = smi("--query-gpu=name", &env);
    assert_eq!(code, 2);
    assert!(err.contains("--format"), "{err}");
    // A node the exporter does not know has no devices.
    let other = Environment {
        node: Some("not-a-gpu-node".into()),
        ..environment(&url)
    };
    assert_eq!(smi("", &other).0, 6);
    // Nothing listening: the driver (here, the exporter) cannot be reached.
    let closed = TcpListener::bind("127.0.0.1:0")?;
    let dead = format!("http://{}", closed.local_addr()?);
    drop(closed);
    let (code, _, err) = smi("", &environment(&dead));
    assert_eq!(code, 9);
    assert!(
        err.contains("couldn't communicate with the fakegpu exporter"),
        "{err}"
    );
    Ok(())
}

#[test]
fn the_binary_refuses_to_run_without_node_name() -> anyhow::Result<()> {
    let output = Command::new(env!("CARGO_BIN_EXE_nvidia-smi"))
        .env_remove("NODE_NAME")
        .env("FAKEGPU_EXPORTER_URL", "http://127.0.0.1:1")
        .output()?;
    assert_eq!(output.status.code(), Some(9));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("NODE_NAME is not set"), "{stderr}");
    // With the environment a container gets, the binary prints the node's GPUs.
    let profile = fakegpu_model::profiles::profile("t4").context("t4 profile")?;
    let url = serve(&report(profile))?;
    let output = Command::new(env!("CARGO_BIN_EXE_nvidia-smi"))
        .arg("-L")
        .env("NODE_NAME", NODE)
        .env("FAKEGPU_EXPORTER_URL", &url)
        .env("NVIDIA_VISIBLE_DEVICES", gpu_uuid(NODE, 0))
        .output()?;
    assert_eq!(output.status.code(), Some(0));
    assert_eq!(
        String::from_utf8_lossy(&output.stdout),
        format!("GPU 0: Tesla T4 (UUID: {})\n", gpu_uuid(NODE, 0))
    );
    let table = Command::new(env!("CARGO_BIN_EXE_nvidia-smi"))
        .env("NODE_NAME", NODE)
        .env("FAKEGPU_EXPORTER_URL", &url)
        .output()?;
    let text = String::from_utf8_lossy(&table.stdout);
    // The first line is today's date in the ANSI C layout.
    let date = text.lines().next().unwrap_or_default().trim_end();
    assert_eq!(date.len(), DATE.len(), "{text}");
    assert!(text.contains("| NVIDIA-SMI 535.183.01 "), "{text}");
    Ok(())
}

/// In a container the node agent gave the node's document (`FAKEGPU_NVML_TOPOLOGY`),
/// nvidia-smi reads it and needs no exporter; it asks the exporter only when a pod's
/// utilization is a Knative request rate, and draws for that pod when the exporter cannot be
/// reached.
#[test]
fn the_document_in_the_container_serves_without_the_exporter() -> anyhow::Result<()> {
    let profile = fakegpu_model::profiles::profile("h100").context("h100 profile")?;
    // As the exporter publishes it: the pods' constant ranges (40 %) drawn, two on GPU 1.
    let served = NodeReport::drawn(NODE, &report(profile).topology, 0);
    let with_exporter = environment(&serve(&served)?);
    let scratch = std::env::temp_dir().join(format!("fakegpu-smi-doc-{}", std::process::id()));
    std::fs::create_dir_all(&scratch)?;
    let document = scratch.join("fakegpu-topology.yml");
    std::fs::write(&document, served.topology.to_yaml()?)?;
    let closed = TcpListener::bind("127.0.0.1:0")?;
    let dead = format!("http://{}", closed.local_addr()?);
    drop(closed);
    let local = Environment {
        document: Some(document.display().to_string()),
        ..environment(&dead)
    };
    for args in [
        "",
        "-L",
        QUERY,
        "--query-compute-apps=pid,used_memory --format=csv",
    ] {
        let (code, from_document, err) = smi(args, &local);
        assert_eq!(code, 0, "nvidia-smi {args} from the document: {err}");
        assert_eq!(
            from_document,
            smi(args, &with_exporter).1,
            "nvidia-smi {args}"
        );
    }

    // GPU 0's pod takes a Knative rate: the exporter's 77 %, or its draw without the exporter.
    let mut knative = served.clone();
    let gpu = &mut knative.topology.gpus[0];
    for usage in gpu.status.pod_gpu_usage_status.values_mut() {
        usage.use_knative_utilization = true;
    }
    knative.utilization.insert(gpu.id.clone(), 77);
    std::fs::write(&document, knative.topology.to_yaml()?)?;
    let utilization = |env: &Environment| {
        smi(
            "-i 0 --query-gpu=utilization.gpu --format=csv,noheader",
            env,
        )
        .1
    };
    let asked = Environment {
        document: Some(document.display().to_string()),
        ..environment(&serve(&knative)?)
    };
    assert_eq!(utilization(&asked), "77 %\n");
    assert_eq!(utilization(&local), "40 %\n");
    std::fs::remove_dir_all(&scratch)?;
    Ok(())
}

/// In a container NVIDIA's container toolkit gave GPUs on a `backend: mock` node, the toolkit
/// mounts the driver root's nvidia-smi and library but no document, and the driver-root
/// agent's socket: nvidia-smi asks the agent there (a real socket, served by the agent's own
/// code) and shows the GPUs whose device node the container has (`NVIDIA_VISIBLE_DEVICES` is
/// `void` under CDI), with the container's pod's process.
#[tokio::test]
async fn a_container_given_gpus_by_nvidia_s_toolkit_asks_the_driver_root_s_socket()
-> anyhow::Result<()> {
    use std::sync::Arc;

    use fakegpu_model::names::{container_env, nvml};
    use fakegpu_node_agent::document_socket::Served;

    let profile = fakegpu_model::profiles::profile("t4").context("t4 profile")?;
    let mut document = report(profile).topology;
    // GPU 2 is the container's: its pod holds it.
    document.gpus[2].status = GpuStatus {
        allocated_by: AllocatedBy {
            namespace: "team-b".into(),
            pod: "cuda-job".into(),
            container: "main".into(),
        },
        pod_gpu_usage_status: BTreeMap::from([(
            "uid-cuda-job".into(),
            PodGpuUsage {
                fb_used: 3000,
                ..Default::default()
            },
        )]),
    };
    let scratch = std::env::temp_dir().join(format!("fakegpu-smi-socket-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&scratch);
    let dev = scratch.join("dev");
    std::fs::create_dir_all(&dev)?;
    for node in ["nvidiactl", "nvidia-uvm", "nvidia2"] {
        std::fs::write(dev.join(node), b"")?;
    }
    let socket = scratch.join("socket");
    let (_sender, receiver) = tokio::sync::watch::channel(Some(Arc::new(document)));
    let served = Served::bind(&socket, receiver)?;
    let run = |args: &'static [&'static str]| {
        let (socket, dev) = (socket.clone(), dev.clone());
        tokio::task::spawn_blocking(move || {
            Command::new(env!("CARGO_BIN_EXE_nvidia-smi"))
                .args(args)
                .env_clear()
                .env(nvml::DOCUMENT_SOCKET_ENV, &socket)
                .env(nvml::DEVICE_DIR_ENV, &dev)
                .env(container_env::VISIBLE_DEVICES, "void")
                .env(container_env::HOSTNAME, "cuda-job")
                .output()
        })
    };
    let listed = run(&["-L"]).await??;
    assert_eq!(
        String::from_utf8_lossy(&listed.stdout),
        format!("GPU 0: Tesla T4 (UUID: {})\n", gpu_uuid(NODE, 2)),
        "{}",
        String::from_utf8_lossy(&listed.stderr)
    );
    let apps = run(&[
        "--query-compute-apps=gpu_uuid,pid,used_memory",
        "--format=csv,noheader",
    ])
    .await??;
    assert_eq!(
        String::from_utf8_lossy(&apps.stdout),
        format!("{}, 1, 3000 MiB\n", gpu_uuid(NODE, 2))
    );
    // No device node of a GPU: none, as NVML in such a container sees none.
    std::fs::remove_file(dev.join("nvidia2"))?;
    let none = run(&["-L"]).await??;
    assert_eq!(none.status.code(), Some(6));
    // The agent gone (its socket's listener with it): the driver cannot be reached.
    drop(served);
    let gone = run(&["-L"]).await??;
    assert_eq!(gone.status.code(), Some(9));
    let said = String::from_utf8_lossy(&gone.stderr);
    assert!(said.contains("fakegpu's driver-root agent"), "{said}");
    std::fs::remove_dir_all(&scratch)?;
    Ok(())
}
