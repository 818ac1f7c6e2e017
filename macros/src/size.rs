//! Byte sizes written like `"512 MiB"`, parsed at compile time.

/// Parses `"123"`, `"64 KiB"`, `"2 GiB"`, `"1.5 GB"`, `"1_000_000"`, ... into bytes.
pub(crate) fn parse_size(text: &str) -> Result<u64, String> {
    let text = text.trim();
    if text.starts_with('-') {
        return Err(format!(
            "`{text}` is negative: a size is a number of bytes, 0 or more"
        ));
    }
    let split = text
        .find(|c: char| !(c.is_ascii_digit() || c == '.' || c == '_'))
        .unwrap_or(text.len());
    let (number, unit) = text.split_at(split);
    let unit = unit.trim();
    // `_` separates digits, as in Rust's integer literals.
    if number.starts_with('_') {
        return Err(format!("`{text}` does not start with a number"));
    }
    let written = number;
    let number = number.replace('_', "");
    let number = number.as_str();
    // In whole numbers, not floating point: every size up to `u64::MAX` is exact.
    let (whole, fraction) = number.split_once('.').unwrap_or((number, ""));
    let digits = |d: &str| d.bytes().all(|b| b.is_ascii_digit());
    if whole.is_empty() && fraction.is_empty() {
        return Err(format!("`{text}` does not start with a number"));
    }
    if !digits(fraction) {
        return Err(format!("`{written}` in `{text}` is not a number"));
    }
    let scale = match unit {
        "" => 1,
        unit => unit_scale(unit).ok_or_else(|| unknown_unit(unit))?,
    };
    if scale == 1 && fraction.bytes().any(|b| b != b'0') {
        return Err(format!("`{text}` is not a whole number of bytes"));
    }
    let mut bytes: u128 = 0;
    for d in whole.bytes() {
        bytes = (bytes * 10 + u128::from(d - b'0')).min(u128::from(u64::MAX) + 1);
    }
    bytes *= u128::from(scale);
    // The fraction's first 18 digits (a unit has at most 10^12 bytes): rounded to a byte.
    let fraction = &fraction[..fraction.len().min(18)];
    let denominator = 10u128.pow(fraction.len() as u32);
    let numerator = fraction.parse::<u128>().unwrap_or(0) * u128::from(scale);
    bytes += (numerator + denominator / 2) / denominator;
    u64::try_from(bytes).map_err(|_| format!("`{text}` is too large"))
}

fn unknown_unit(unit: &str) -> String {
    match unit_meant(unit) {
        Some(meant) => format!("unknown unit `{unit}` (units are case-sensitive: `{meant}`)"),
        None => format!("unknown unit `{unit}`"),
    }
}

/// The units and their bytes (`B`, `KiB` to `TiB`, `kB` or `KB` to `TB`).
const UNITS: [(&str, u64); 10] = [
    ("B", 1),
    ("KiB", 1 << 10),
    ("MiB", 1 << 20),
    ("GiB", 1 << 30),
    ("TiB", 1 << 40),
    ("kB", 1_000),
    ("KB", 1_000),
    ("MB", 1_000_000),
    ("GB", 1_000_000_000),
    ("TB", 1_000_000_000_000),
];

/// The unit `unit` names, whatever its case (`mib`: `MiB`).
pub(crate) fn unit_meant(unit: &str) -> Option<&'static str> {
    let mut names = UNITS.iter().map(|u| u.0);
    let exact = names.clone().find(|u| *u == unit);
    exact.or_else(|| names.find(|u| u.eq_ignore_ascii_case(unit)))
}

/// The bytes in one `unit`.
fn unit_scale(unit: &str) -> Option<u64> {
    UNITS.iter().find(|u| u.0 == unit).map(|u| u.1)
}

#[cfg(test)]
mod tests {
    use super::parse_size;

    #[test]
    fn sizes() {
        assert_eq!(parse_size("512 MiB"), Ok(512 << 20));
        assert_eq!(parse_size("2GiB"), Ok(2 << 30));
        assert_eq!(parse_size("1.5 KB"), Ok(1500));
        assert_eq!(
            parse_size("0.3 KiB"),
            Ok(307),
            "rounded to the nearest byte"
        );
        assert_eq!(
            parse_size("0.0005 KB"),
            Ok(1),
            "rounded to the nearest byte"
        );
        assert_eq!(parse_size("7"), Ok(7));
        assert_eq!(parse_size("1_000_000"), Ok(1_000_000));
        assert_eq!(parse_size("1_024 KiB"), Ok(1 << 20));
        assert!(parse_size("_1 KiB").is_err());
        assert!(parse_size("lots").is_err());
        assert_eq!(
            parse_size("3 parsecs"),
            Err("unknown unit `parsecs`".into())
        );
        assert_eq!(
            parse_size("512 mib"),
            Err("unknown unit `mib` (units are case-sensitive: `MiB`)".into())
        );
        assert_eq!(
            parse_size("abc"),
            Err("`abc` does not start with a number".into())
        );
        assert!(parse_size("").is_err());
        assert_eq!(parse_size("0.5 KiB"), Ok(512));
        assert_eq!(parse_size(".25 KB"), Ok(250));
        assert_eq!(parse_size("3.0"), Ok(3));
        assert!(parse_size("1.5").is_err(), "not a whole number of bytes");
        assert_eq!(
            parse_size("1_0.2.3 MiB"),
            Err("`1_0.2.3` in `1_0.2.3 MiB` is not a number".into())
        );
        assert!(parse_size(". MiB").is_err());
    }

    /// Every size up to `u64::MAX` is exact (no floating point), and one past it is refused.
    #[test]
    fn large_sizes_are_exact() {
        assert_eq!(
            parse_size("18446744073709550000"),
            Ok(18_446_744_073_709_550_000)
        );
        assert_eq!(parse_size("18446744073709551615"), Ok(u64::MAX));
        assert!(parse_size("18446744073709551616").is_err(), "2^64");
        assert!(parse_size("16777216 TiB").is_err(), "2^64 bytes");
        assert_eq!(parse_size("16777215 TiB"), Ok(16_777_215 << 40));
        assert!(parse_size("99999999999999999999999999999999999999999").is_err());
    }
}
