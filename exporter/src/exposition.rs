//! Samples into the Prometheus text format, written chunk by chunk as the body is sent.
//!
//! Written directly, not through the prometheus crate's registry or its encoder: at 8 000 GPUs
//! the registry's hashing of every label set on every scrape took most of a scrape's time, and
//! each sample's label set is the same in all 25 fields, so it is written once.
//!
//! The body is 8 KiB per GPU, 650 MiB for a central exporter of 10 000 KWOK nodes of 8 GPUs:
//! whole, it set the exporter's memory (392 MiB at 5 000 nodes, against the bundle's 512 MiB
//! limit). An [`Exposition`] owns what the lines are written from, a few hundred bytes per GPU,
//! and writes the next chunk only when the last one is on its way.

use std::{fmt::Write as _, ops::Range};

use fakegpu_model::names::{dcgm, metric};

use crate::{
    fields::{FIELDS, Scope},
    render::GpuSample,
};

/// The text format of `samples` at once (see [`Exposition::new`]).
pub fn encode(samples: &[GpuSample<'_>], hostname_label: &str, knative_up: Option<bool>) -> String {
    let mut exposition = Exposition::new(samples, hostname_label, knative_up);
    let mut out = String::new();
    exposition.write_next(&mut out, usize::MAX);
    out
}

/// One scrape's series, owned, and how far they are written.
#[derive(Debug)]
pub struct Exposition {
    /// Every sample's label set, one after another.
    sets: String,
    /// Where each sample's set is in `sets`.
    set_of: Vec<Range<usize>>,
    /// Whether each sample is a whole GPU (a MIG instance carries only [`Scope::Every`]).
    whole: Vec<bool>,
    /// The value of field `f` for sample `s` at `f * samples + s`.
    values: Vec<f64>,
    /// A field's own label (see [`crate::fields::Field::label`]) per sample, of those that
    /// have one: (field, sample, value).
    own_labels: Vec<(usize, usize, String)>,
    knative_up: Option<bool>,
    next: Next,
}

/// What is written next.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Next {
    /// Field `.0`'s HELP and TYPE, if any sample carries it.
    Family(usize),
    /// Field `.0`'s series of sample `.1`, if it carries it.
    Series(usize, usize),
    KnativeUp,
    Done,
}

impl Exposition {
    /// The series of `samples`, every field of [`FIELDS`] that has any; `hostname_label`
    /// names the hostname label (`Hostname` or `hostname`); `knative_up`, once Prometheus was
    /// asked, whether it answered.
    pub fn new(samples: &[GpuSample<'_>], hostname_label: &str, knative_up: Option<bool>) -> Self {
        let mut labels = dcgm::LABELS;
        labels[dcgm::HOSTNAME_LABEL] = hostname_label;
        let mut sets = String::with_capacity(samples.len() * 320);
        let set_of = samples
            .iter()
            .map(|sample| {
                let start = sets.len();
                write_label_set(&mut sets, sample, &labels);
                start..sets.len()
            })
            .collect();
        let mut own_labels = Vec::new();
        for (f, field) in FIELDS.iter().enumerate() {
            if let Some((_, label)) = field.label {
                own_labels.extend(
                    (samples.iter().enumerate())
                        .filter_map(|(s, sample)| Some((f, s, label(sample)?))),
                );
            }
        }
        Self {
            sets,
            set_of,
            whole: samples.iter().map(|s| s.mig.is_none()).collect(),
            values: FIELDS
                .iter()
                .flat_map(|field| samples.iter().map(|s| (field.value)(s)))
                .collect(),
            own_labels,
            knative_up,
            next: Next::Family(0),
        }
    }

    /// Appends the next lines to `out` until it holds `chunk` bytes or more, or every line is
    /// written; false when there was nothing left to write.
    pub fn write_next(&mut self, out: &mut String, chunk: usize) -> bool {
        let (before, samples) = (out.len(), self.whole.len());
        while out.len() < chunk {
            self.next = match self.next {
                Next::Family(f) if f == FIELDS.len() => Next::KnativeUp,
                Next::Family(f) if !(0..samples).any(|s| self.carries(f, s)) => Next::Family(f + 1),
                Next::Family(f) => {
                    let field = &FIELDS[f];
                    let _ = writeln!(out, "# HELP {} {}", field.name, field.help);
                    let _ = writeln!(out, "# TYPE {} {}", field.name, field.kind.as_str());
                    Next::Series(f, 0)
                }
                Next::Series(f, s) if s == samples => Next::Family(f + 1),
                Next::Series(f, s) => {
                    if self.carries(f, s) {
                        self.write_series(out, f, s);
                    }
                    Next::Series(f, s + 1)
                }
                Next::KnativeUp => {
                    if let Some(up) = self.knative_up {
                        write_knative_up(out, up);
                    }
                    Next::Done
                }
                Next::Done => break,
            };
        }
        out.len() > before
    }

    fn carries(&self, field: usize, sample: usize) -> bool {
        FIELDS[field].scope == Scope::Every || self.whole[sample]
    }

    fn write_series(&self, out: &mut String, field: usize, sample: usize) {
        let set = &self.sets[self.set_of[sample].clone()];
        out.push_str(FIELDS[field].name);
        let own = FIELDS[field].label.and_then(|(name, _)| {
            let at = self
                .own_labels
                .binary_search_by(|(f, s, _)| (*f, *s).cmp(&(field, sample)))
                .ok()?;
            Some((name, &self.own_labels[at].2))
        });
        match own {
            // The field's own label closes the sample's set.
            Some((name, value)) => {
                out.push_str(&set[..set.len() - 1]);
                out.push(',');
                out.push_str(name);
                out.push_str("=\"");
                escape_label(out, value);
                out.push_str("\"}");
            }
            None => out.push_str(set),
        }
        out.push(' ');
        write_value(out, self.values[field * self.whole.len() + sample]);
        out.push('\n');
    }
}

fn write_knative_up(out: &mut String, up: bool) {
    let name = metric::EXPORTER_KNATIVE_UP;
    let _ = writeln!(
        out,
        "# HELP {name} 1 when Prometheus answered the last request-rate query for inference pods."
    );
    let _ = writeln!(out, "# TYPE {name} gauge");
    let _ = writeln!(out, "{name} {}", u8::from(up));
}

/// Writes `value` escaped as a label value of the text format.
fn escape_label(out: &mut String, value: &str) {
    // Copied in runs between the characters escaped, not char by char: few values have any.
    let mut rest = value;
    while let Some(at) = rest.find(['\\', '"', '\n']) {
        out.push_str(&rest[..at]);
        out.push_str(match rest.as_bytes()[at] {
            b'\\' => "\\\\",
            b'"' => "\\\"",
            _ => "\\n",
        });
        rest = &rest[at + 1..];
    }
    out.push_str(rest);
}

/// Appends a sample's label set, `{...}`, in dcgm-exporter's order (a MIG instance's labels
/// after `modelName`), to `out`: written once and shared by every field.
fn write_label_set(out: &mut String, sample: &GpuSample<'_>, labels: &[&str; 10]) {
    let named = labels.iter().zip(&sample.labels);
    let mig = sample
        .mig
        .iter()
        .flat_map(|mig| dcgm::MIG_LABELS.iter().zip(mig));
    let pairs = named
        .clone()
        .take(dcgm::HOSTNAME_LABEL)
        .chain(mig)
        .chain(named.skip(dcgm::HOSTNAME_LABEL));
    out.push('{');
    for (index, (name, value)) in pairs.enumerate() {
        if index > 0 {
            out.push(',');
        }
        out.push_str(name);
        out.push_str("=\"");
        escape_label(out, value);
        out.push('"');
    }
    out.push('}');
}

/// A value as the text format writes it.
fn write_value(out: &mut String, value: f64) {
    if value.is_nan() {
        out.push_str("NaN");
    } else if value.is_infinite() {
        out.push_str(if value > 0.0 { "+Inf" } else { "-Inf" });
    } else if value.fract() == 0.0 && value.abs() < MAX_EXACT_INTEGER && !is_negative_zero(value) {
        // Most values are whole (percentages, MiB, MHz, counts): itoa writes the same text as
        // `{value}` in a fraction of the time float formatting takes, which was a tenth of a
        // scrape's CPU.
        out.push_str(itoa::Buffer::new().format(value as i64));
    } else {
        let _ = write!(out, "{value}");
    }
}

/// Below 2^53 every whole `f64` converts to an `i64` exactly.
const MAX_EXACT_INTEGER: f64 = 9_007_199_254_740_992.0;

/// `-0.0`, which the text format writes `-0`.
fn is_negative_zero(value: f64) -> bool {
    value == 0.0 && value.is_sign_negative()
}

#[cfg(test)]
pub(crate) mod testing {
    use std::borrow::Cow;

    use fakegpu_model::telemetry::Load;

    use crate::render::GpuSample;

    /// `count` samples: every third a MIG instance, every fifth with an XID in its window.
    pub fn samples(count: usize) -> Vec<GpuSample<'static>> {
        (0..count)
            .map(|i| GpuSample {
                labels: [
                    Cow::Owned(i.to_string()),
                    Cow::Owned(format!("GPU-{i:08}")),
                    "00000000:01:00.0".into(),
                    "nvidia0".into(),
                    "NVIDIA H100 80GB HBM3".into(),
                    Cow::Owned(format!("node-{}", i / 8)),
                    "550.163.01".into(),
                    "".into(),
                    "".into(),
                    "".into(),
                ],
                mig: (i % 3 == 1).then(|| ["1g.10gb".into(), "11".into()]),
                gpu: "GPU-shared",
                utilization: (i % 101) as f64,
                fb_used: 30000.0,
                fb_free: 51559.0,
                device: Load {
                    utilization: 40,
                    power_limit: Some(700),
                    thermal_throttling: i % 7 == 0,
                },
                last_xid: if i % 5 == 0 { 79 } else { 0 },
                xid_window: u64::from(i % 5 == 0),
                xid_period: None,
                ecc_correctable: 0,
                ecc_uncorrectable: 0,
                energy_mj: 1234.5 * i as f64,
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::{testing::samples, *};

    #[test]
    fn written_in_chunks_or_at_once_the_text_is_the_same() {
        let samples = samples(30);
        let whole = encode(&samples, "Hostname", Some(false));
        assert!(whole.contains(r#"xid="79""#) && whole.contains(r#"GPU_I_ID="11""#));
        assert!(whole.ends_with("fakegpu_exporter_knative_up 0\n"));
        for chunk in [1, 7, 100, 4096, 1 << 20] {
            let mut exposition = Exposition::new(&samples, "Hostname", Some(false));
            let mut pieces = Vec::new();
            loop {
                let mut out = String::new();
                if !exposition.write_next(&mut out, chunk) {
                    assert!(out.is_empty());
                    break;
                }
                pieces.push(out);
            }
            assert_eq!(pieces.concat(), whole, "chunks of {chunk}");
            let longest = whole.lines().map(str::len).max().unwrap_or(0);
            for piece in &pieces[..pieces.len() - 1] {
                assert!(piece.len() >= chunk && piece.len() <= chunk + 2 * longest + 2);
            }
            assert!(
                !exposition.write_next(&mut String::new(), chunk),
                "done stays done"
            );
        }
    }

    #[test]
    fn own_labels_go_to_their_samples_only() {
        let samples = samples(11);
        let text = encode(&samples, "Hostname", None);
        let labelled: Vec<&str> = text
            .lines()
            .filter(|l| l.starts_with(dcgm::EXP_XID_ERRORS_COUNT) && l.contains("xid="))
            .collect();
        // Samples 0, 5 and 10 have an XID in their window.
        assert_eq!(labelled.len(), 3, "{text}");
        for (line, gpu) in labelled
            .iter()
            .zip(["GPU-00000000", "GPU-00000005", "GPU-00000010"])
        {
            assert!(
                line.contains(gpu) && line.contains(r#",xid="79"} 1"#),
                "{line}"
            );
        }
    }

    #[test]
    fn no_samples_nothing_written() {
        assert_eq!(encode(&[], "Hostname", None), "");
        let mut exposition = Exposition::new(&[], "Hostname", None);
        assert!(!exposition.write_next(&mut String::new(), 10));
    }

    #[test]
    fn values_are_written_as_rust_formats_them() {
        for value in [
            0.0,
            -0.0,
            1.0,
            40.0,
            81559.0,
            -3.0,
            0.5,
            312.456,
            1e15,
            1e16,
            9_007_199_254_740_991.0,
            9_007_199_254_740_993.0,
            -1e17,
            f64::MIN_POSITIVE,
            f64::MAX,
        ] {
            let mut out = String::new();
            write_value(&mut out, value);
            assert_eq!(out, format!("{value}"), "{value:?}");
        }
        for (value, text) in [
            (f64::NAN, "NaN"),
            (f64::INFINITY, "+Inf"),
            (f64::NEG_INFINITY, "-Inf"),
        ] {
            let mut out = String::new();
            write_value(&mut out, value);
            assert_eq!(out, text);
        }
    }
}
