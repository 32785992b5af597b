//! The default view, in the layout of the machine's driver: 91 columns from driver 545 on
//! (cells 41/24/22, `|` at columns 0, 42, 67 and 90), 89 columns for 530-544 (cells 41/22/22);
//! then, when a GPU has MIG enabled, the MIG devices table (cells 18/34/11/23, 18/32/11/23
//! before 545), and the processes table, whose PID column is 6 wider from driver 570 on.

use std::fmt::Write;

use super::gpus::{Gpu, Machine, MigInstance};

/// GPU names longer than this are cut to fit the name cell.
const NAME_WIDTH: usize = 27;

/// What differs between driver generations.
struct Layout {
    /// Width of the middle cell (bus id, memory): 24, or 22 before driver 545.
    middle: usize,
    /// The PID column is 6 wider from driver 570.
    wide_pid: bool,
    /// The MIG table's engine headers are spaced out from driver 570 (550 prints 535's,
    /// checked against NVIDIA's 550 binary).
    spaced_engines: bool,
    /// The line under the banner starts with `+` from driver 580 (`|` before).
    plus_under_banner: bool,
    /// Digits the power cap is right-aligned in: 4, or 3 before driver 545 (`40W / 400W`).
    power_cap: usize,
}

impl Layout {
    fn of(driver: &str) -> Self {
        let major: u32 = driver
            .split('.')
            .next()
            .and_then(|m| m.parse().ok())
            .unwrap_or(0);
        Self {
            middle: if major >= 545 { 24 } else { 22 },
            wide_pid: major >= 570,
            spaced_engines: major >= 570,
            plus_under_banner: major >= 580,
            power_cap: if major >= 545 { 4 } else { 3 },
        }
    }

    /// Characters between the outer bars.
    fn inner(&self) -> usize {
        41 + 1 + self.middle + 1 + 22
    }

    /// `+---...---+` across the table.
    fn border(&self) -> String {
        format!("+{}+", "-".repeat(self.inner()))
    }

    /// A border split at the three cells.
    fn cell_border(&self, first: char, fill: &str, last: char) -> String {
        format!(
            "{first}{}+{}+{}{last}",
            fill.repeat(41),
            fill.repeat(self.middle),
            fill.repeat(22)
        )
    }

    /// Width of the MIG table's memory cell: 34, or 32 before driver 545.
    fn mig_memory(&self) -> usize {
        self.middle + 10
    }

    /// A MIG table border split at its four cells; the one under the headers (`=`) keeps the
    /// outer bars.
    fn mig_border(&self, fill: &str) -> String {
        let end = if fill == "=" { '|' } else { '+' };
        format!(
            "{end}{}+{}+{}+{}{end}",
            fill.repeat(18),
            fill.repeat(self.mig_memory()),
            fill.repeat(11),
            fill.repeat(23)
        )
    }

    /// One MIG table row of four cells, each already padded to its width.
    fn mig_row(&self, cells: [&str; 4]) -> String {
        let [first, memory, sm, shared] = cells;
        format!(
            "|{first:<18}|{memory:<width$}|{sm:<11}|{shared:<23}|",
            width = self.mig_memory()
        )
    }

    /// One table row of three cells, the middle one right-aligned.
    fn row(&self, first: &str, middle: &str, last: &str) -> String {
        format!(
            "|{first:<41}|{middle:>width$}|{last:>22}|",
            width = self.middle
        )
    }
}

/// The line between the GPUs (or the MIG devices) and the processes is this many spaces,
/// whatever the table's width, as NVIDIA's 535 and 550 binaries print it.
const BLANK_LINE: usize = 89;

/// `text` cut to `width` characters, keeping its start and ending in `...`.
fn cut_end(text: &str, width: usize) -> String {
    if text.chars().count() <= width {
        text.to_owned()
    } else {
        let kept: String = text.chars().take(width - 3).collect();
        format!("{kept}...")
    }
}

/// The longest process name the table prints whole; a longer one keeps its last 35 characters
/// after `...`. NVIDIA's 535 and 550 binaries both do so (checked with names of 37 to 71
/// characters), whatever their column's width; the 570 layout's narrower column is assumed to
/// cut a character before it ends, as this did before the check.
const PROCESS_NAME_CHARS: usize = 38;

/// `text` cut to `width` characters, keeping its end and starting with `...` (paths).
fn cut_start(text: &str, width: usize) -> String {
    let count = text.chars().count();
    if count <= width {
        text.to_owned()
    } else {
        let kept: String = text.chars().skip(count - (width - 3)).collect();
        format!("...{kept}")
    }
}

fn gpu_rows(layout: &Layout, gpu: &Gpu) -> [String; 3] {
    // A partitioned GPU shows no utilization of its own, and `On` where the ECC count stands.
    let partitioned = !gpu.mig_devices.is_empty();
    let (ecc, utilization) = if partitioned {
        ("On ".to_owned(), "N/A".to_owned())
    } else {
        (
            format!("{} ", gpu.faults.ecc_uncorrectable),
            format!("{}%", gpu.utilization),
        )
    };
    // Whole watts as the real tool prints them: the driver's milliwatts, truncated. The usage
    // ends at a fixed column; a cap wider than its digits overflows the cell, which the real
    // tool then cuts with `...` (a 1200 W cap under 535).
    let power = match (gpu.power_draw_milliwatts(), gpu.power_limit) {
        (Some(draw), Some(limit)) => format!(
            "{:>usage$}W / {limit:>cap$}W",
            draw / 1000,
            usage = 19 - layout.power_cap,
            cap = layout.power_cap
        ),
        // Unknown: `N/A` where the usage and its `W` end, and in four columns for the cap.
        _ => format!(
            "{:>usage$} / {:>4}",
            "N/A",
            "N/A",
            usage = 20 - layout.power_cap
        ),
    };
    // The total is padded to 6 digits in the 91-column layout, 5 before; the used memory ends
    // at a fixed column, and a total too wide for the cell is cut as the real tool cuts it.
    let total_width = layout.middle / 4;
    let used_width = layout.middle - 10 - total_width;
    let memory = format!(
        "{} ",
        cut_end(
            &format!(
                "{:>used_width$}MiB / {:>total_width$}MiB",
                gpu.memory_used, gpu.memory_total
            ),
            layout.middle - 1
        )
    );
    [
        layout.row(
            &format!(
                "{:>4}  {:<31}{:<3} ",
                gpu.index,
                cut_end(&gpu.name, NAME_WIDTH),
                "On"
            ),
            &format!("{} Off ", gpu.bus_id),
            &ecc,
        ),
        layout.row(
            &format!(
                "{} ",
                cut_end(
                    &format!(
                        " {:>3}  {:>4}    {:<2}{power}",
                        "N/A",
                        format!("{}C", gpu.temperature()),
                        "P0"
                    ),
                    40
                )
            ),
            &memory,
            &format!("{utilization:>7}{:>13} ", "Default"),
        ),
        layout.row("", "", &format!("{} ", gpu.mig_mode)),
    ]
}

/// The two rows of one MIG instance, numbered `dev` among its GPU's.
fn mig_rows(layout: &Layout, gpu: &Gpu, dev: usize, mig: &MigInstance) -> [String; 2] {
    let memory = format!("{}MiB / {:>5}MiB", mig.memory_used, mig.memory_total);
    let bar1 = format!("0MiB / {:>5}MiB", mig.bar1_total);
    let bar1_width = layout.mig_memory() - 2;
    let e = &mig.engines;
    [
        layout.mig_row([
            &format!("{:>3}{:>5}{:>4}{dev:>4}", gpu.index, mig.gpu_instance, 0),
            &format!("{memory:>30}"),
            &format!("{:>3}{:>7}", mig.multiprocessors, 0),
            &format!(
                "{:>3}{:>4}{:>5}{:>5}{:>5}",
                e.copy, e.encoder, e.decoder, e.ofa, e.jpeg
            ),
        ]),
        layout.mig_row(["", &format!("{bar1:>bar1_width$}"), "", ""]),
    ]
}

/// The MIG devices table, present when a GPU shown has MIG mode enabled.
fn mig_devices(layout: &Layout, machine: &Machine, out: &mut String) {
    let inner = layout.inner();
    let _ = writeln!(out, "{}", layout.border());
    let _ = writeln!(out, "|{:<inner$}|", " MIG devices:");
    let _ = writeln!(out, "{}", layout.mig_border("-"));
    let width = layout.mig_memory() - 1;
    let (shared, engines) = if layout.spaced_engines {
        ("        Shared", " CE ENC  DEC  OFA  JPG")
    } else {
        ("      Shared", " CE ENC DEC OFA JPG")
    };
    for row in [
        [
            " GPU  GI  CI  MIG",
            &format!("{:>width$}", "Memory-Usage"),
            "        Vol",
            shared,
        ],
        [
            "      ID  ID  Dev",
            &format!("{:>width$}", "BAR1-Usage"),
            " SM     Unc",
            engines,
        ],
        ["", "", "        ECC", ""],
    ] {
        let _ = writeln!(out, "{}", layout.mig_row(row));
    }
    let _ = writeln!(out, "{}", layout.mig_border("="));
    let mut any = false;
    for gpu in &machine.gpus {
        let mut instances: Vec<_> = gpu.mig_devices.iter().collect();
        instances.sort_by_key(|m| m.gpu_instance);
        for (dev, mig) in instances.into_iter().enumerate() {
            any = true;
            for row in mig_rows(layout, gpu, dev, mig) {
                let _ = writeln!(out, "{row}");
            }
            let _ = writeln!(out, "{}", layout.mig_border("-"));
        }
    }
    if !any {
        let _ = writeln!(out, "|  {:<w$}|", "No MIG devices found", w = inner - 2);
        let _ = writeln!(out, "{}", layout.border());
    }
    // The driver ends the section with the line of blanks it puts before the processes.
    let _ = writeln!(out, "{:BLANK_LINE$}", "");
}

fn processes(layout: &Layout, machine: &Machine, out: &mut String) {
    let inner = layout.inner();
    let (pid_width, name_width) = if layout.wide_pid { (16, 36) } else { (10, 42) };
    let name_width = name_width - (91 - 2 - inner);
    let pid_pad = " ".repeat(pid_width - 10);
    let _ = writeln!(out, "{}", layout.border());
    let _ = writeln!(out, "|{:<inner$}|", " Processes:");
    let _ = writeln!(
        out,
        "{:<w$}GPU Memory |",
        format!("|  GPU   GI   CI        {pid_pad}PID   Type   Process name"),
        w = inner - 10
    );
    let _ = writeln!(
        out,
        "{:<w$}Usage      |",
        "|        ID   ID",
        w = inner - 10
    );
    let _ = writeln!(out, "|{}|", "=".repeat(inner));
    let all: Vec<_> = machine.gpus.iter().flat_map(|g| &g.processes).collect();
    if all.is_empty() {
        let _ = writeln!(
            out,
            "|  {:<w$}|",
            "No running processes found",
            w = inner - 2
        );
    }
    for process in all {
        let pid = process.pid.map_or("N/A".to_owned(), |p| p.to_string());
        // On a MIG instance its GI and CI IDs, right-aligned, where a whole GPU shows N/A.
        let ids = match process.gpu_instance {
            Some(gi) => format!("{gi:>5}{:>5} ", 0),
            None => format!("   {:<3}  {:<3}", "N/A", "N/A"),
        };
        let _ = writeln!(
            out,
            "|{:>5}{ids}{pid:>pid_width$}{:>7}   {:<name_width$}{:>10} |",
            process.gpu_index,
            "C",
            cut_start(&process.name, (name_width - 1).min(PROCESS_NAME_CHARS)),
            format!("{}MiB", process.used_memory),
        );
    }
    let _ = writeln!(out, "{}", layout.border());
}

/// The default view of `machine`, dated `date` (ANSI C layout, `Thu Mar 26 17:37:17 2026`).
pub fn table(machine: &Machine, date: &str) -> String {
    let layout = Layout::of(&machine.driver_version);
    let mut out = String::new();
    let _ = writeln!(out, "{date}       ");
    let _ = writeln!(out, "{}", layout.border());
    let _ = writeln!(
        out,
        "| NVIDIA-SMI {:<23}Driver Version: {:<w$}CUDA Version: {:<9}|",
        machine.driver_version,
        machine.driver_version,
        machine.cuda_version,
        w = layout.middle - 9
    );
    let first = if layout.plus_under_banner { '+' } else { '|' };
    let _ = writeln!(out, "{}", layout.cell_border(first, "-", '+'));
    let bus = format!("{:<w$}Disp.A ", " Bus-Id", w = layout.middle - 7);
    let memory = format!("{:>w$} ", "Memory-Usage", w = layout.middle - 1);
    let _ = writeln!(
        out,
        "{}",
        layout.row(
            " GPU  Name                 Persistence-M ",
            &bus,
            " Volatile Uncorr. ECC "
        )
    );
    let _ = writeln!(
        out,
        "{}",
        layout.row(
            " Fan  Temp   Perf          Pwr:Usage/Cap ",
            &memory,
            " GPU-Util  Compute M. "
        )
    );
    let _ = writeln!(out, "{}", layout.row("", "", "MIG M. "));
    let _ = writeln!(out, "{}", layout.cell_border('|', "=", '|'));
    for gpu in &machine.gpus {
        for row in gpu_rows(&layout, gpu) {
            let _ = writeln!(out, "{row}");
        }
        let _ = writeln!(out, "{}", layout.cell_border('+', "-", '+'));
    }
    // Before the processes the real tool prints a line of blanks; before a MIG section, an
    // empty line (535 and 550 alike).
    if machine.gpus.iter().any(|g| g.mig_mode == "Enabled") {
        let _ = writeln!(out);
        mig_devices(&layout, machine, &mut out);
    } else {
        let _ = writeln!(out, "{:BLANK_LINE$}", "");
    }
    processes(&layout, machine, &mut out);
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::gpus::Process;

    fn machine(driver: &str, name: &str) -> Machine {
        Machine {
            driver_version: driver.into(),
            cuda_version: "12.4".into(),
            gpus: vec![Gpu {
                index: 0,
                name: name.into(),
                uuid: "GPU-x".into(),
                bus_id: "00000000:01:00.0".into(),
                memory_total: 183359,
                memory_used: 1234,
                utilization: 100,
                power_limit: Some(1000),
                mig_mode: "Disabled",
                compute_capability: "10.0".into(),
                mig_devices: Vec::new(),
                processes: vec![Process {
                    gpu_index: 0,
                    gpu_instance: None,
                    gpu_uuid: "GPU-x".into(),
                    pid: Some(3170),
                    name: "/usr/lib/a/very/long/path/to/some/python/interpreter/python3".into(),
                    used_memory: 1234,
                }],
                faults: Default::default(),
            }],
        }
    }

    #[test]
    fn every_table_line_is_91_columns_with_the_cell_bars_in_place() {
        for driver in ["550.163.01", "570.133.20", "580.65.06"] {
            assert_eq!(Layout::of(driver).inner(), 89);
            let text = table(
                &machine(driver, "NVIDIA RTX 6000 Ada Generation"),
                "Thu Mar 26 17:37:17 2026",
            );
            for line in text.lines().skip(1).filter(|l| !l.trim().is_empty()) {
                assert_eq!(line.chars().count(), 91, "{driver}: {line:?}");
            }
            // Between the GPUs and the processes, 89 spaces even in the wider table (as
            // NVIDIA's 550 binary prints it).
            assert!(text.contains(&format!("\n{}\n+", " ".repeat(89))), "{text}");
            let row = text.lines().find(|l| l.starts_with("|   0")).unwrap();
            assert_eq!(
                row,
                "|   0  NVIDIA RTX 6000 Ada Gene...    On  |   00000000:01:00.0 Off |                    0 |"
            );
            for line in text.lines().filter(|l| l.contains("MiB /")) {
                assert_eq!(
                    line,
                    "| N/A   75C    P0           1000W / 1000W |    1234MiB / 183359MiB |    100%      Default |"
                );
            }
        }
    }

    #[test]
    fn injected_faults_show_in_the_ecc_column_and_the_temperature() {
        let mut machine = machine("550.163.01", "NVIDIA H100 80GB HBM3");
        machine.gpus[0].faults = fakegpu_model::faults::GpuFaults {
            ecc_uncorrectable: 2,
            thermal_throttling: true,
            ..Default::default()
        };
        let text = table(&machine, "date");
        let row = text.lines().find(|l| l.starts_with("|   0")).unwrap();
        assert!(row.ends_with("|                    2 |"), "{row}");
        let sensors = text.lines().find(|l| l.contains("MiB /")).unwrap();
        assert!(sensors.starts_with("| N/A   90C    P0"), "{sensors}");
        for line in text.lines().skip(1).filter(|l| !l.trim().is_empty()) {
            assert_eq!(line.chars().count(), 91, "{line:?}");
        }
    }

    #[test]
    fn process_columns_follow_the_driver() {
        let text = table(&machine("570.133.20", "NVIDIA B200"), "date");
        let row = text
            .lines()
            .find(|l| l.contains("3170"))
            .expect("process row");
        // From 570 the PID ends at column 32 and the name starts at column 43.
        assert_eq!(row.find("3170"), Some(29));
        assert_eq!(row.find("...").map(|c| c >= 43), Some(true));
        assert!(row.ends_with("1234MiB |"));
        let old = table(&machine("550.163.01", "NVIDIA B200"), "date");
        let row = old.lines().find(|l| l.contains("3170")).unwrap();
        assert_eq!(row.find("3170"), Some(23));
    }

    #[test]
    fn process_names_are_cut_where_nvidia_s_binaries_cut_them() {
        for driver in ["535.261.03", "550.163.01"] {
            let name_in_row = |name: &str| {
                let mut machine = machine(driver, "NVIDIA H100 80GB HBM3");
                machine.gpus[0].processes[0].name = name.to_owned();
                let text = table(&machine, "date");
                let row = text
                    .lines()
                    .find(|l| l.contains("1234MiB |"))
                    .map(str::to_owned);
                row.unwrap_or_default()
            };
            let whole = format!("/{}", "a".repeat(37));
            assert!(
                name_in_row(&whole).contains(&format!(" {whole} ")),
                "{driver}"
            );
            let long = format!("/{}", "b".repeat(38));
            let cut = format!(" ...{} ", "b".repeat(35));
            assert!(
                name_in_row(&long).contains(&cut),
                "{driver}: {}",
                name_in_row(&long)
            );
        }
    }

    /// An A100 40GB with a 3g.20gb instance at slice 0 (GI 1) holding a pod's process.
    fn mig_machine(driver: &str) -> Machine {
        let mut machine = machine(driver, "NVIDIA A100-SXM4-40GB");
        let gpu = &mut machine.gpus[0];
        gpu.mig_mode = "Enabled";
        gpu.memory_total = 40960;
        gpu.mig_devices = vec![MigInstance {
            profile: "3g.20gb".into(),
            uuid: "MIG-x".into(),
            gpu_instance: 1,
            memory_total: 40192,
            memory_used: 107,
            bar1_total: 65535,
            multiprocessors: 42,
            engines: fakegpu_model::profiles::MigEngines {
                copy: 3,
                decoder: 2,
                ..Default::default()
            },
        }];
        gpu.processes[0].gpu_instance = Some(1);
        machine
    }

    #[test]
    fn mig_devices_are_laid_out_as_the_570_driver_prints_them() {
        let text = table(&mig_machine("570.133.20"), "date");
        for line in text.lines().skip(1).filter(|l| !l.trim().is_empty()) {
            assert_eq!(line.chars().count(), 91, "{line:?}");
        }
        for expected in [
            "| MIG devices:                                                                            |",
            "+------------------+----------------------------------+-----------+-----------------------+",
            "| GPU  GI  CI  MIG |                     Memory-Usage |        Vol|        Shared         |",
            "|      ID  ID  Dev |                       BAR1-Usage | SM     Unc| CE ENC  DEC  OFA  JPG |",
            "|                  |                                  |        ECC|                       |",
            "|==================+==================================+===========+=======================|",
            "|  0    1   0   0  |             107MiB / 40192MiB    | 42      0 |  3   0    2    0    0 |",
            "|                  |                 0MiB / 65535MiB  |           |                       |",
        ] {
            assert!(text.lines().any(|l| l == expected), "{expected}\n{text}");
        }
        // The GPU's own row shows no utilization and ECC `On`, as a partitioned GPU does.
        assert!(
            text.contains("|     N/A      Default |") && text.contains("|                   On |"),
            "{text}"
        );
        let process = text.lines().find(|l| l.contains("3170")).unwrap();
        assert!(process.starts_with("|    0    1    0 "), "{process:?}");
    }

    #[test]
    fn mig_devices_before_545_have_the_narrower_memory_cell() {
        let mut machine = mig_machine("535.183.01");
        let mig = &mut machine.gpus[0].mig_devices[0];
        (mig.gpu_instance, mig.memory_total, mig.memory_used) = (7, 4864, 5);
        (mig.multiprocessors, mig.bar1_total) = (14, 8191);
        mig.engines = fakegpu_model::profiles::MigEngines {
            copy: 1,
            ..Default::default()
        };
        let text = table(&machine, "date");
        for line in text.lines().skip(1).filter(|l| !l.trim().is_empty()) {
            assert_eq!(line.chars().count(), 89, "{line:?}");
        }
        assert!(
            text.lines().any(|l| l
                == "|  0    7   0   0  |               5MiB /  4864MiB  | 14      0 |  1   0    0    0    0 |"),
            "{text}"
        );
        assert!(text.contains("| CE ENC DEC OFA JPG    |"), "{text}");
    }

    #[test]
    fn an_enabled_gpu_without_instances_says_so() {
        let mut machine = mig_machine("550.163.01");
        machine.gpus[0].mig_devices.clear();
        machine.gpus[0].processes.clear();
        let text = table(&machine, "date");
        assert!(text.contains("|  No MIG devices found"), "{text}");
        assert!(!table(&self::machine("550.163.01", "x"), "d").contains("MIG devices:"));
    }

    #[test]
    fn drivers_before_545_print_the_89_column_table() {
        let text = table(&machine("535.183.01", "Tesla T4"), "date");
        // Every line but the date, the one between the GPUs and the processes included.
        for line in text.lines().skip(1) {
            assert_eq!(line.chars().count(), 89, "{line:?}");
        }
        assert!(text.contains("| Bus-Id        Disp.A |"), "{text}");
        assert!(
            text.contains("Driver Version: 535.183.01   CUDA Version: 12.4     |"),
            "{text}"
        );
        assert!(
            text.contains("|   0  Tesla T4                       On  | 00000000:01:00.0 Off |"),
            "{text}"
        );
        // The cap in three digits, as NVIDIA's 535 binary prints it.
        let mut idle = machine("535.183.01", "Tesla T4");
        idle.gpus[0].power_limit = Some(70);
        idle.gpus[0].utilization = 0;
        let text = table(&idle, "date");
        assert!(
            text.contains("| N/A   30C    P0               7W /  70W |"),
            "{text}"
        );
    }
}
