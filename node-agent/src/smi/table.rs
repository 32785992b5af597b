//! The default view, in the layout of the machine's driver: 91 columns from driver 545 on
//! (cells 41/24/22, `|` at columns 0, 42, 67 and 90), 89 columns for 530-544 (cells 41/22/22);
//! then the processes table, whose PID column is 6 wider from driver 570 on.

use std::fmt::Write;

use super::gpus::{Gpu, Machine};

/// GPU names longer than this are cut to fit the name cell.
const NAME_WIDTH: usize = 27;

/// What differs between driver generations.
struct Layout {
    /// Width of the middle cell (bus id, memory): 24, or 22 before driver 545.
    middle: usize,
    /// The PID column is 6 wider from driver 570.
    wide_pid: bool,
    /// The line under the banner starts with `+` from driver 580 (`|` before).
    plus_under_banner: bool,
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
            plus_under_banner: major >= 580,
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

    /// One table row of three cells, the middle one right-aligned.
    fn row(&self, first: &str, middle: &str, last: &str) -> String {
        format!(
            "|{first:<41}|{middle:>width$}|{last:>22}|",
            width = self.middle
        )
    }
}

/// `text` cut to `width` characters, keeping its start and ending in `...`.
fn cut_end(text: &str, width: usize) -> String {
    if text.chars().count() <= width {
        text.to_owned()
    } else {
        let kept: String = text.chars().take(width - 3).collect();
        format!("{kept}...")
    }
}

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
    let power = match (gpu.power_draw(), gpu.power_limit) {
        (Some(draw), Some(limit)) => format!("{:>3.0}W / {limit:>4}W", draw.round()),
        _ => "N/A /  N/A".to_owned(),
    };
    // The total is padded to 6 digits in the 91-column layout, 5 before.
    let total_width = layout.middle / 4;
    let memory = format!(
        "{}MiB / {:>total_width$}MiB ",
        gpu.memory_used, gpu.memory_total
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
            "0 ",
        ),
        layout.row(
            &format!(
                " {:>3}  {:>4}    {:<2}{power:>24} ",
                "N/A",
                format!("{}C", gpu.temperature()),
                "P0"
            ),
            &memory,
            &format!("{:>7}{:>13} ", format!("{}%", gpu.utilization), "Default"),
        ),
        layout.row("", "", &format!("{} ", gpu.mig_mode)),
    ]
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
        let _ = writeln!(
            out,
            "|{:>5}   {:<3}  {:<3}{pid:>pid_width$}{:>7}   {:<name_width$}{:>10} |",
            process.gpu_index,
            "N/A",
            "N/A",
            "C",
            cut_start(&process.name, name_width - 1),
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
    let _ = writeln!(out);
    processes(&layout, machine, &mut out);
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::smi::gpus::Process;

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
                    gpu_uuid: "GPU-x".into(),
                    pid: Some(3170),
                    name: "/usr/lib/a/very/long/path/to/some/python/interpreter/python3".into(),
                    used_memory: 1234,
                }],
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
            for line in text.lines().skip(1).filter(|l| !l.is_empty()) {
                assert_eq!(line.chars().count(), 91, "{driver}: {line:?}");
            }
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
    fn drivers_before_545_print_the_89_column_table() {
        let text = table(&machine("535.183.01", "Tesla T4"), "date");
        for line in text.lines().skip(1).filter(|l| !l.is_empty()) {
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
    }
}
