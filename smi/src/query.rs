//! `-L`, `--query-gpu`, `--query-compute-apps` and `--version`.

use std::fmt::Write;

use fakegpu_model::telemetry;

use super::{
    args::CsvFormat,
    gpus::{Gpu, Machine, Process},
};

/// `nvidia-smi -L`: each GPU, and under it its MIG instances.
pub fn list(machine: &Machine) -> String {
    let mut out = String::new();
    for gpu in &machine.gpus {
        let _ = writeln!(out, "GPU {}: {} (UUID: {})", gpu.index, gpu.name, gpu.uuid);
        for (i, mig) in gpu.mig_devices.iter().enumerate() {
            let _ = writeln!(
                out,
                "  MIG {:<12}Device {i:>2}: (UUID: {})",
                mig.profile, mig.uuid
            );
        }
    }
    out
}

/// `nvidia-smi --version`.
pub fn version(machine: &Machine) -> String {
    let nvml: String = machine
        .driver_version
        .split('.')
        .take(2)
        .collect::<Vec<_>>()
        .join(".");
    format!(
        "NVIDIA-SMI version  : {driver}\nNVML version        : {nvml}\nDRIVER version      : {driver}\nCUDA Version        : {cuda}\n",
        driver = machine.driver_version,
        cuda = machine.cuda_version
    )
}

/// A value and, when it has one, its unit (`MiB`, `%`, `W`, `MHz`).
struct Value {
    text: String,
    unit: Option<&'static str>,
}

fn plain(text: impl ToString) -> Value {
    Value {
        text: text.to_string(),
        unit: None,
    }
}

fn with_unit(text: impl ToString, unit: &'static str) -> Value {
    Value {
        text: text.to_string(),
        unit: Some(unit),
    }
}

fn not_available() -> Value {
    plain("[N/A]")
}

/// `Enabled` / `Disabled`; a GPU that cannot do MIG has no mode (the table's `N/A`).
fn mig_mode(gpu: &Gpu) -> Value {
    if gpu.mig_mode == "N/A" {
        not_available()
    } else {
        plain(gpu.mig_mode)
    }
}

/// The canonical name and the value of GPU field `field`, `None` when nvidia-smi has no such
/// field.
fn gpu_field(field: &str, gpu: &Gpu, machine: &Machine) -> Option<(&'static str, Value)> {
    let watts =
        |w: Option<f64>| w.map_or_else(not_available, |w| with_unit(format!("{w:.2}"), "W"));
    let limit = gpu.power_limit.map(f64::from);
    Some(match field {
        "index" => ("index", plain(gpu.index)),
        "name" | "gpu_name" => ("name", plain(&gpu.name)),
        "uuid" | "gpu_uuid" => ("uuid", plain(&gpu.uuid)),
        "pci.bus_id" | "gpu_bus_id" => ("pci.bus_id", plain(&gpu.bus_id)),
        "driver_version" => ("driver_version", plain(&machine.driver_version)),
        "count" => ("count", plain(machine.gpus.len())),
        "memory.total" => ("memory.total", with_unit(gpu.memory_total, "MiB")),
        "memory.used" => ("memory.used", with_unit(gpu.memory_used, "MiB")),
        "memory.free" => ("memory.free", with_unit(gpu.memory_free(), "MiB")),
        "memory.reserved" => ("memory.reserved", with_unit(0, "MiB")),
        "utilization.gpu" => ("utilization.gpu", with_unit(gpu.utilization, "%")),
        "utilization.memory" => (
            "utilization.memory",
            with_unit(gpu.load().memory_utilization(), "%"),
        ),
        "temperature.gpu" => ("temperature.gpu", plain(gpu.temperature())),
        "temperature.memory" => ("temperature.memory", plain(gpu.load().memory_temperature())),
        // The driver's milliwatts as NVIDIA's tool prints them: divided in single precision,
        // then rounded to hundredths (21605 mW prints 21.60 and 14645 mW 14.65, where double
        // precision gives 21.61 and 14.64; both seen from its 535 and 550 binaries).
        "power.draw" => (
            "power.draw",
            watts(
                gpu.power_draw_milliwatts()
                    .map(|mw| f64::from(mw as f32 / 1000.0)),
            ),
        ),
        "power.limit" => ("power.limit", watts(limit)),
        "enforced.power.limit" => ("enforced.power.limit", watts(limit)),
        "power.default_limit" => ("power.default_limit", watts(limit)),
        "power.max_limit" => ("power.max_limit", watts(limit)),
        "clocks.sm" | "clocks.current.sm" => {
            ("clocks.current.sm", with_unit(gpu.sm_clock(), "MHz"))
        }
        "clocks.max.sm" | "clocks.max.sm_clock" => {
            ("clocks.max.sm", with_unit(telemetry::SM_CLOCK_MAX, "MHz"))
        }
        "clocks.mem" | "clocks.current.memory" => (
            "clocks.current.memory",
            with_unit(gpu.load().memory_clock(), "MHz"),
        ),
        "clocks.max.mem" | "clocks.max.memory" => (
            "clocks.max.memory",
            with_unit(telemetry::MEMORY_CLOCK, "MHz"),
        ),
        "compute_cap" => (
            "compute_cap",
            if gpu.compute_capability.is_empty() {
                not_available()
            } else {
                plain(&gpu.compute_capability)
            },
        ),
        "mig.mode.current" => ("mig.mode.current", mig_mode(gpu)),
        "mig.mode.pending" => ("mig.mode.pending", mig_mode(gpu)),
        "persistence_mode" => ("persistence_mode", plain("Enabled")),
        "pstate" => ("pstate", plain("P0")),
        "fan.speed" => ("fan.speed", not_available()),
        "display_mode" => ("display_mode", plain("Disabled")),
        "display_active" => ("display_active", plain("Disabled")),
        "compute_mode" => ("compute_mode", plain("Default")),
        "ecc.mode.current" => ("ecc.mode.current", plain("Enabled")),
        "ecc.errors.corrected.volatile.total" => (
            "ecc.errors.corrected.volatile.total",
            plain(gpu.faults.ecc_correctable),
        ),
        "ecc.errors.uncorrected.volatile.total" => (
            "ecc.errors.uncorrected.volatile.total",
            plain(gpu.faults.ecc_uncorrectable),
        ),
        "ecc.errors.corrected.aggregate.total" => (
            "ecc.errors.corrected.aggregate.total",
            plain(gpu.faults.ecc_correctable),
        ),
        "ecc.errors.uncorrected.aggregate.total" => (
            "ecc.errors.uncorrected.aggregate.total",
            plain(gpu.faults.ecc_uncorrectable),
        ),
        "clocks_event_reasons.hw_thermal_slowdown"
        | "clocks_throttle_reasons.hw_thermal_slowdown" => (
            "clocks_event_reasons.hw_thermal_slowdown",
            plain(if gpu.faults.thermal_throttling {
                "Active"
            } else {
                "Not Active"
            }),
        ),
        "serial" | "gpu_serial" => ("serial", plain(serial(&gpu.uuid))),
        "vbios_version" => ("vbios_version", plain("96.00.89.00.01")),
        _ => return None,
    })
}

/// A 13-digit board serial number, stable per GPU UUID.
fn serial(uuid: &str) -> String {
    let hash = uuid.bytes().fold(0xcbf2_9ce4_8422_2325u64, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x100_0000_01b3)
    });
    format!("165{:010}", hash % 10_000_000_000)
}

fn process_field(
    field: &str,
    process: &Process,
    machine: &Machine,
) -> Option<(&'static str, Value)> {
    let gpu = machine.gpus.iter().find(|g| g.uuid == process.gpu_uuid);
    Some(match field {
        "pid" => ("pid", process.pid.map_or_else(not_available, plain)),
        "process_name" | "name" => ("process_name", plain(&process.name)),
        "used_memory" | "used_gpu_memory" => {
            ("used_gpu_memory", with_unit(process.used_memory, "MiB"))
        }
        "gpu_uuid" => ("gpu_uuid", plain(&process.gpu_uuid)),
        "gpu_bus_id" => (
            "gpu_bus_id",
            gpu.map_or_else(not_available, |g| plain(&g.bus_id)),
        ),
        "gpu_name" => (
            "gpu_name",
            gpu.map_or_else(not_available, |g| plain(&g.name)),
        ),
        _ => return None,
    })
}

/// Rows of `field` values for each item, as CSV: a header with units, `, ` between values.
fn csv<T>(
    items: &[T],
    fields: &[String],
    format: CsvFormat,
    value: impl Fn(&str, &T) -> Option<(&'static str, Value)>,
    probe: Option<&T>,
) -> Result<String, String> {
    // Field names are checked before anything prints, even with nothing to print.
    let mut headers = Vec::new();
    for field in fields {
        let known = match probe {
            Some(item) => value(field, item).map(|(name, v)| (name, v.unit)),
            None => None,
        };
        match known {
            Some((name, unit)) => headers.push(match unit {
                Some(unit) if format.units => format!("{name} [{unit}]"),
                _ => name.to_owned(),
            }),
            None if probe.is_none() => headers.push(field.clone()),
            None => return Err(format!("Field \"{field}\" is not a valid field to query.")),
        }
    }
    let mut out = String::new();
    if format.header {
        let _ = writeln!(out, "{}", headers.join(", "));
    }
    for item in items {
        let row: Vec<String> = fields
            .iter()
            .filter_map(|f| value(f, item))
            .map(|(_, v)| match v.unit {
                Some(unit) if format.units && v.text != "[N/A]" => format!("{} {unit}", v.text),
                _ => v.text,
            })
            .collect();
        let _ = writeln!(out, "{}", row.join(", "));
    }
    Ok(out)
}

/// `--query-gpu=<fields> --format=csv...`.
pub fn query_gpus(
    machine: &Machine,
    fields: &[String],
    format: CsvFormat,
) -> Result<String, String> {
    csv(
        &machine.gpus,
        fields,
        format,
        |field, gpu| gpu_field(field, gpu, machine),
        machine.gpus.first(),
    )
}

/// `--query-compute-apps=<fields> --format=csv...`.
pub fn query_apps(
    machine: &Machine,
    fields: &[String],
    format: CsvFormat,
) -> Result<String, String> {
    let processes: Vec<Process> = machine
        .gpus
        .iter()
        .flat_map(|g| g.processes.iter().cloned())
        .collect();
    // A probe process checks the field names when no process runs.
    let probe = Process {
        gpu_index: 0,
        gpu_uuid: String::new(),
        gpu_instance: None,
        pid: None,
        name: String::new(),
        used_memory: 0,
    };
    csv(
        &processes,
        fields,
        format,
        |field, process| process_field(field, process, machine),
        Some(processes.first().unwrap_or(&probe)),
    )
}
