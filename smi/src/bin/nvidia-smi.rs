//! The fake nvidia-smi. The node agent's image carries it; the agent's DaemonSets copy it to
//! the host, and the device plugin and the DRA plugin's CDI spec mount it at `/bin/nvidia-smi`
//! in every container given GPUs. See [`fakegpu_smi`].

use std::process::ExitCode;

use fakegpu_smi::{self as smi, Environment};

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    // nvidia-smi prints local time; the container's zone, UTC when it has none.
    let date = jiff::Zoned::now()
        .strftime("%a %b %e %H:%M:%S %Y")
        .to_string();
    let code = smi::run(
        &args,
        &Environment::from_process(),
        &date,
        &mut std::io::stdout().lock(),
        &mut std::io::stderr().lock(),
    );
    ExitCode::from(u8::try_from(code).unwrap_or(u8::MAX))
}
