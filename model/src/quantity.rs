//! Just enough of Kubernetes' quantity syntax to split a node's CPU and memory across NUMA
//! zones: parse to milli-units, print in the canonical forms the API server uses.

/// A quantity in thousandths of its unit (`"1.5"` -> 1500, `"250m"` -> 250, `"1Ki"` ->
/// 1 024 000). `None` for what is not a quantity or does not fit.
pub fn parse_milli(text: &str) -> Option<i128> {
    let text = text.trim();
    let split = text
        .find(|c: char| !(c.is_ascii_digit() || c == '.' || c == '+' || c == '-'))
        .unwrap_or(text.len());
    let (number, suffix) = text.split_at(split);
    let (multiplier, divisor): (i128, i128) = match suffix {
        "" => (1000, 1),
        "m" => (1, 1),
        "k" => (1000 * 1000, 1),
        "M" => (1000 * 1000_i128.pow(2), 1),
        "G" => (1000 * 1000_i128.pow(3), 1),
        "T" => (1000 * 1000_i128.pow(4), 1),
        "P" => (1000 * 1000_i128.pow(5), 1),
        "E" => (1000 * 1000_i128.pow(6), 1),
        "Ki" => (1000 * 1024, 1),
        "Mi" => (1000 * 1024_i128.pow(2), 1),
        "Gi" => (1000 * 1024_i128.pow(3), 1),
        "Ti" => (1000 * 1024_i128.pow(4), 1),
        "Pi" => (1000 * 1024_i128.pow(5), 1),
        "Ei" => (1000 * 1024_i128.pow(6), 1),
        _ => return None,
    };
    let (whole, fraction) = number.split_once('.').unwrap_or((number, ""));
    if whole.is_empty() && fraction.is_empty() || fraction.len() > 9 {
        return None;
    }
    let whole: i128 = if whole.is_empty() {
        0
    } else {
        whole.parse().ok()?
    };
    let scale = 10_i128.pow(u32::try_from(fraction.len()).ok()?);
    let fraction: i128 = if fraction.is_empty() {
        0
    } else {
        fraction.parse().ok()?
    };
    let sign = if whole < 0 || number.starts_with('-') {
        -1
    } else {
        1
    };
    let scaled = whole.checked_mul(scale)?.checked_add(sign * fraction)?;
    Some(scaled.checked_mul(multiplier)? / (scale * divisor))
}

/// CPU in milli-cores as the API server prints it: whole cores plain, else with `m`.
pub fn format_cpu(milli: i128) -> String {
    if milli % 1000 == 0 {
        (milli / 1000).to_string()
    } else {
        format!("{milli}m")
    }
}

/// Bytes with the largest binary suffix that divides them exactly (`Gi`, `Mi`, `Ki`).
pub fn format_bytes(bytes: i128) -> String {
    const SUFFIXES: [(&str, u32); 5] = [("Pi", 5), ("Ti", 4), ("Gi", 3), ("Mi", 2), ("Ki", 1)];
    for (suffix, power) in SUFFIXES {
        let unit = 1024_i128.pow(power);
        if bytes != 0 && bytes % unit == 0 {
            return format!("{}{suffix}", bytes / unit);
        }
    }
    bytes.to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_the_forms_nodes_and_users_write() {
        assert_eq!(parse_milli("32"), Some(32_000));
        assert_eq!(parse_milli("1k"), Some(1_000_000));
        assert_eq!(parse_milli("250m"), Some(250));
        assert_eq!(parse_milli("1.5"), Some(1500));
        assert_eq!(parse_milli("1Ti"), Some(1000 * 1024_i128.pow(4)));
        assert_eq!(parse_milli("512Mi"), Some(1000 * 512 * 1024 * 1024));
        assert_eq!(parse_milli("1M"), Some(1000 * 1_000_000));
        assert_eq!(parse_milli("abc"), None);
        assert_eq!(parse_milli("1Xi"), None);
        assert_eq!(parse_milli(""), None);
    }

    #[test]
    fn prints_canonical_forms() {
        assert_eq!(format_cpu(500_000), "500");
        assert_eq!(format_cpu(1500), "1500m");
        assert_eq!(format_bytes(512 * 1024_i128.pow(3)), "512Gi");
        assert_eq!(format_bytes(1536 * 1024), "1536Ki");
        assert_eq!(format_bytes(1000), "1000");
    }
}
