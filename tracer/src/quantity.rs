//! Sizes, durations and percentages as people write them (`64MiB`, `8M`, `30s`, `2m`),
//! for the command line and the agent's configuration alike.

use std::time::Duration;

/// Parses a byte size: a number with an optional `K`, `M`, `G` (powers of
/// 1024), optionally followed by `iB` or `B`: `65536`, `8M`, `64MiB`, `1GiB`.
pub fn parse_size(s: &str) -> Result<u64, String> {
    let t = s.trim();
    let bad = || format!("'{s}' is not a size like 65536, 8M or 64MiB");
    let digits = t.find(|c: char| !c.is_ascii_digit()).map_or(t, |i| &t[..i]);
    let unit = t[digits.len()..].trim();
    let mult: u64 = match unit.to_ascii_lowercase().as_str() {
        "" | "b" => 1,
        "k" | "kb" | "kib" => 1 << 10,
        "m" | "mb" | "mib" => 1 << 20,
        "g" | "gb" | "gib" => 1 << 30,
        _ => return Err(bad()),
    };
    let n: u64 = digits.parse().map_err(|_| bad())?;
    n.checked_mul(mult)
        .ok_or_else(|| format!("size '{s}' is too large"))
}

/// A percentage: `5%` or `5`, above 0 and at most 100.
pub fn parse_percent(s: &str) -> Result<f64, String> {
    let v: f64 = s
        .trim()
        .trim_end_matches('%')
        .trim()
        .parse()
        .map_err(|_| format!("{s:?} is not a percentage (e.g. 5%)"))?;
    if v > 0.0 && v <= 100.0 {
        Ok(v)
    } else {
        Err(format!(
            "{s:?}: the percentage must be above 0 and at most 100"
        ))
    }
}

/// Parses a duration: a number (fractions allowed) with `ms`, `s`, `m`,
/// `min` or `h`; a bare number is seconds: `500ms`, `30s`, `2m`, `1.5h`, `3`.
pub fn parse_duration(s: &str) -> Result<Duration, String> {
    let t = s.trim();
    let bad = || format!("'{s}' is not a duration like 30s, 500ms or 2m");
    let (num, unit) = t
        .find(|c: char| c.is_ascii_alphabetic())
        .map(|i| t.split_at(i))
        .unwrap_or((t, "s"));
    let n: f64 = num.trim().parse().map_err(|_| bad())?;
    let secs = match unit {
        "ms" => n / 1e3,
        "s" => n,
        "m" | "min" => n * 60.0,
        "h" => n * 3600.0,
        _ => return Err(bad()),
    };
    Duration::try_from_secs_f64(secs).map_err(|_| bad())
}

/// Writes `bytes` the way [`parse_size`] reads it back, rounded (`1.5 MiB`).
pub fn format_size(bytes: u64) -> String {
    const UNITS: [&str; 4] = ["B", "KiB", "MiB", "GiB"];
    let mut v = bytes as f64;
    let mut unit = 0;
    while v >= 1024.0 && unit + 1 < UNITS.len() {
        v /= 1024.0;
        unit += 1;
    }
    if unit == 0 {
        format!("{bytes} B")
    } else {
        format!("{v:.1} {}", UNITS[unit])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes() {
        assert_eq!(parse_size("8M"), Ok(8 << 20));
        assert_eq!(parse_size("64MiB"), Ok(64 << 20));
        assert_eq!(parse_size("1 GiB"), Ok(1 << 30));
        assert_eq!(parse_size("512k"), Ok(512 << 10));
        assert_eq!(parse_size("4096"), Ok(4096));
        assert!(parse_size("lots").is_err());
        assert!(parse_size("12X").is_err());
        assert!(parse_size("99999999999999G").is_err());
        assert_eq!(format_size(3 << 19), "1.5 MiB");
        assert_eq!(format_size(100), "100 B");
    }

    #[test]
    fn durations() {
        assert_eq!(parse_duration("500ms"), Ok(Duration::from_millis(500)));
        assert_eq!(parse_duration("2m"), Ok(Duration::from_secs(120)));
        assert_eq!(parse_duration("30min"), Ok(Duration::from_secs(1800)));
        assert_eq!(parse_duration("1.5h"), Ok(Duration::from_secs(5400)));
        assert_eq!(parse_duration("3"), Ok(Duration::from_secs(3)));
        assert!(parse_duration("3 parsecs").is_err());
        assert!(parse_duration("-1s").is_err());
    }
}
