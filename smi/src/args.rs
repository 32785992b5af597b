//! nvidia-smi's command line, the part scripts and people use.

/// What to print.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Command {
    /// The default table.
    Table {
        ids: Option<Vec<String>>,
    },
    /// `-L`.
    List {
        ids: Option<Vec<String>>,
    },
    /// `--query-gpu=<fields> --format=csv[,noheader][,nounits]`.
    QueryGpu {
        fields: Vec<String>,
        format: CsvFormat,
        ids: Option<Vec<String>>,
    },
    /// `--query-compute-apps=<fields> --format=csv...`.
    QueryApps {
        fields: Vec<String>,
        format: CsvFormat,
        ids: Option<Vec<String>>,
    },
    Version,
    Help,
}

impl Command {
    /// The GPUs `-i` / `--id` picked (indices or UUIDs), if any.
    pub fn selection(&self) -> Option<&[String]> {
        match self {
            Self::Table { ids }
            | Self::List { ids }
            | Self::QueryGpu { ids, .. }
            | Self::QueryApps { ids, .. } => ids.as_deref(),
            Self::Version | Self::Help => None,
        }
    }
}

/// `--format=csv[,noheader][,nounits]`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CsvFormat {
    pub header: bool,
    pub units: bool,
}

pub const HELP: &str = "\
NVIDIA System Management Interface -- fakegpu's simulation of nvidia-smi

Usage: nvidia-smi [OPTION1 [ARG1]] [OPTION2 [ARG2]] ...

    -h,   --help                Print usage information and exit.
    -L,   --list-gpus           Display a list of GPUs connected to the system.
    -i,   --id=                 Target a specific GPU (index or UUID; comma-separated list).
          --version             Show the driver and CUDA versions.
          --query-gpu=          Information about GPU, e.g. --query-gpu=index,name,memory.used
          --query-compute-apps= List of active compute processes, e.g. pid,process_name,used_memory
          --format=             csv, with optional noheader and nounits: --format=csv,noheader,nounits

The GPUs shown are those of NVIDIA_VISIBLE_DEVICES on node NODE_NAME, as fakegpu's exporter at
FAKEGPU_EXPORTER_URL reports them.
";

/// Splits `--name=value` / `--name value` / `-x value`; `None` value when the option has none.
fn option_value(
    arg: &str,
    rest: &mut impl Iterator<Item = String>,
    names: &[&str],
) -> Option<Result<String, String>> {
    for name in names {
        if arg == *name {
            return Some(
                rest.next()
                    .ok_or(format!("Option \"{name}\" needs a value.")),
            );
        }
        if let Some(value) = arg.strip_prefix(name).and_then(|v| v.strip_prefix('=')) {
            return Some(Ok(value.to_owned()));
        }
    }
    None
}

fn list_of(value: &str) -> Vec<String> {
    value
        .split(',')
        .map(str::trim)
        .filter(|v| !v.is_empty())
        .map(str::to_owned)
        .collect()
}

fn csv_format(value: &str) -> Result<CsvFormat, String> {
    let mut format = CsvFormat {
        header: true,
        units: true,
    };
    let mut csv = false;
    for part in list_of(value) {
        match part.as_str() {
            "csv" => csv = true,
            "noheader" => format.header = false,
            "nounits" => format.units = false,
            other => return Err(format!("\"{other}\" is not a valid format option.")),
        }
    }
    if csv {
        Ok(format)
    } else {
        Err("Only the csv format is supported: --format=csv[,noheader][,nounits].".to_owned())
    }
}

/// Parses the arguments (without the program name).
pub fn parse(args: &[String]) -> Result<Command, String> {
    let mut list = false;
    let mut version = false;
    let mut ids = None;
    let mut query_gpu = None;
    let mut query_apps = None;
    let mut format = None;
    let mut rest = args.iter().cloned();
    while let Some(arg) = rest.next() {
        match arg.as_str() {
            "-h" | "--help" => return Ok(Command::Help),
            "-L" | "--list-gpus" => list = true,
            "--version" => version = true,
            "-q" | "--query" => {
                return Err(
                    "-q is not simulated; ask for fields with --query-gpu=<fields> --format=csv."
                        .to_owned(),
                );
            }
            _ => {
                if let Some(value) = option_value(&arg, &mut rest, &["-i", "--id"]) {
                    ids = Some(list_of(&value?));
                } else if let Some(value) = option_value(&arg, &mut rest, &["--query-gpu"]) {
                    query_gpu = Some(list_of(&value?));
                } else if let Some(value) = option_value(&arg, &mut rest, &["--query-compute-apps"])
                {
                    query_apps = Some(list_of(&value?));
                } else if let Some(value) = option_value(&arg, &mut rest, &["--format"]) {
                    format = Some(csv_format(&value?)?);
                } else {
                    return Err(format!("Invalid combination of input arguments: {arg:?}."));
                }
            }
        }
    }
    let needs_format = |option: &str| {
        format.ok_or(format!(
            "Option \"--format\" is required with \"{option}\", e.g. --format=csv."
        ))
    };
    match (query_gpu, query_apps) {
        (Some(_), Some(_)) => Err("Give only one of --query-gpu and --query-compute-apps.".into()),
        (Some(fields), None) => Ok(Command::QueryGpu {
            fields,
            format: needs_format("--query-gpu")?,
            ids,
        }),
        (None, Some(fields)) => Ok(Command::QueryApps {
            fields,
            format: needs_format("--query-compute-apps")?,
            ids,
        }),
        (None, None) if version => Ok(Command::Version),
        (None, None) if list => Ok(Command::List { ids }),
        (None, None) => Ok(Command::Table { ids }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(line: &str) -> Vec<String> {
        line.split_whitespace().map(str::to_owned).collect()
    }

    #[test]
    fn the_usual_invocations_parse() {
        assert_eq!(parse(&[]), Ok(Command::Table { ids: None }));
        assert_eq!(
            parse(&args("-L -i 1")),
            Ok(Command::List {
                ids: Some(vec!["1".into()])
            })
        );
        assert_eq!(
            parse(&args(
                "--query-gpu=index,memory.used --format=csv,noheader,nounits --id=0"
            )),
            Ok(Command::QueryGpu {
                fields: vec!["index".into(), "memory.used".into()],
                format: CsvFormat {
                    header: false,
                    units: false
                },
                ids: Some(vec!["0".into()]),
            })
        );
        assert_eq!(
            parse(&args("--query-compute-apps pid,used_memory --format csv")),
            Ok(Command::QueryApps {
                fields: vec!["pid".into(), "used_memory".into()],
                format: CsvFormat {
                    header: true,
                    units: true
                },
                ids: None,
            })
        );
    }

    #[test]
    fn mistakes_are_named() {
        assert!(parse(&args("--bogus")).unwrap_err().contains("--bogus"));
        assert!(
            parse(&args("--query-gpu=name"))
                .unwrap_err()
                .contains("--format")
        );
        assert!(
            parse(&args("--query-gpu=name --format=xml"))
                .unwrap_err()
                .contains("xml")
        );
        assert!(parse(&args("-i")).unwrap_err().contains("needs a value"));
    }
}
