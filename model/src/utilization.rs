//! The utilization range syntax shared by `spec.utilization.default` and the pod annotation
//! `run.ai/simulated-gpu-utilization`: `"N"` (constant) or `"MIN-MAX"`, percent, inclusive.

use std::{fmt, str::FromStr};

/// An inclusive utilization range in percent, `min <= max <= 100`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct UtilizationRange {
    pub min: u8,
    pub max: u8,
}

/// Why a utilization string was refused; the message is meant for an Event or a condition.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum UtilizationRangeError {
    #[error("{0:?} is not a percentage or a MIN-MAX range of percentages")]
    Syntax(String),
    #[error("{0} is above 100 percent")]
    AboveHundred(u32),
    #[error("range {min}-{max} has its minimum above its maximum")]
    Inverted { min: u8, max: u8 },
}

/// Regular expression the CRD schema uses for the same syntax, so the API server refuses what
/// [`UtilizationRange::from_str`] would.
pub const PATTERN: &str = r"^[0-9]{1,3}(-[0-9]{1,3})?$";

impl FromStr for UtilizationRange {
    type Err = UtilizationRangeError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let percent = |part: &str| -> Result<u8, UtilizationRangeError> {
            let syntax = || UtilizationRangeError::Syntax(s.to_owned());
            if part.is_empty() || part.len() > 3 || !part.bytes().all(|b| b.is_ascii_digit()) {
                return Err(syntax());
            }
            let value: u32 = part.parse().map_err(|_| syntax())?;
            u8::try_from(value)
                .ok()
                .filter(|v| *v <= 100)
                .ok_or(UtilizationRangeError::AboveHundred(value))
        };
        let (min, max) = match s.trim().split_once('-') {
            Some((min, max)) => (percent(min)?, percent(max)?),
            None => {
                let value = percent(s.trim())?;
                (value, value)
            }
        };
        if min > max {
            return Err(UtilizationRangeError::Inverted { min, max });
        }
        Ok(Self { min, max })
    }
}

impl fmt::Display for UtilizationRange {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.min == self.max {
            write!(f, "{}", self.min)
        } else {
            write!(f, "{}-{}", self.min, self.max)
        }
    }
}

/// What a pod runs, as the reference tells it from the pod's `workloadKind` label or its
/// PodGroup's `priorityClassName`; a pod without a utilization annotation runs at its type's
/// range.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WorkloadType {
    Train,
    Build,
    Interactive,
    /// Utilization follows the Knative revision's request rate.
    Inference,
}

impl WorkloadType {
    /// From a `workloadKind` label: Run:ai's kinds and the reference's short names.
    pub fn from_workload_kind(kind: &str) -> Option<Self> {
        Some(match kind {
            "Training" | "TrainingWorkload" | "Train" => Self::Train,
            "Interactive" | "InteractiveWorkload" => Self::Interactive,
            "Inference" | "InferenceWorkload" | "Distributed" | "DistributedWorkload" => {
                Self::Inference
            }
            _ => return None,
        })
    }

    /// From a PodGroup's `spec.priorityClassName` (Run:ai's priority classes).
    pub fn from_priority_class(name: &str) -> Option<Self> {
        Some(match name {
            "train" => Self::Train,
            "build" => Self::Build,
            "interactive" | "interactive-preemptible" | "distributed" => Self::Interactive,
            "inference" | "distributed-inference" => Self::Inference,
            _ => return None,
        })
    }

    /// The reference's range for the type: training busy, the rest idle (inference until its
    /// request rate is known).
    pub fn range(self) -> UtilizationRange {
        match self {
            Self::Train => UtilizationRange { min: 80, max: 100 },
            Self::Build | Self::Interactive | Self::Inference => {
                UtilizationRange { min: 0, max: 0 }
            }
        }
    }

    pub fn uses_knative(self) -> bool {
        self == Self::Inference
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn workload_types_from_kinds_and_priority_classes() {
        assert_eq!(
            WorkloadType::from_workload_kind("InferenceWorkload"),
            Some(WorkloadType::Inference)
        );
        assert_eq!(
            WorkloadType::from_workload_kind("Training").map(WorkloadType::range),
            Some(UtilizationRange { min: 80, max: 100 })
        );
        assert_eq!(WorkloadType::from_workload_kind("Job"), None);
        assert!(
            WorkloadType::from_priority_class("inference").is_some_and(WorkloadType::uses_knative)
        );
        assert_eq!(
            WorkloadType::from_priority_class("build").map(WorkloadType::range),
            Some(UtilizationRange { min: 0, max: 0 })
        );
        assert_eq!(
            WorkloadType::from_priority_class("system-node-critical"),
            None
        );
    }

    #[test]
    fn parses_constants_and_ranges() {
        let cases = [
            ("40", (40, 40)),
            ("10-30", (10, 30)),
            ("0-100", (0, 100)),
            ("100", (100, 100)),
            (" 5-5 ", (5, 5)),
        ];
        for (input, (min, max)) in cases {
            assert_eq!(input.parse(), Ok(UtilizationRange { min, max }), "{input}");
        }
    }

    #[test]
    fn refuses_malformed_values() {
        let cases = [
            (
                "30-10",
                UtilizationRangeError::Inverted { min: 30, max: 10 },
            ),
            ("abc", UtilizationRangeError::Syntax("abc".into())),
            ("-5", UtilizationRangeError::Syntax("-5".into())),
            ("10-200", UtilizationRangeError::AboveHundred(200)),
            ("", UtilizationRangeError::Syntax(String::new())),
            ("1-2-3", UtilizationRangeError::Syntax("1-2-3".into())),
            ("1000", UtilizationRangeError::Syntax("1000".into())),
        ];
        for (input, error) in cases {
            assert_eq!(input.parse::<UtilizationRange>(), Err(error), "{input}");
        }
    }

    #[test]
    fn displays_in_the_annotation_syntax() {
        for input in ["40", "10-30"] {
            let parsed: UtilizationRange = input.parse().expect("valid");
            assert_eq!(parsed.to_string(), input);
        }
    }
}
