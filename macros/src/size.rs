//! Byte sizes written like `"512 MiB"`, parsed at compile time.

/// Parses `"123"`, `"64 KiB"`, `"2 GiB"`, `"1.5 GB"`, ... into bytes.
pub(crate) fn parse_size(text: &str) -> Result<u64, String> {
    let text = text.trim();
    if text.starts_with('-') {
        return Err(format!(
            "`{text}` is negative: a size is a number of bytes, 0 or more"
        ));
    }
    let split = text
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(text.len());
    let (number, unit) = text.split_at(split);
    let value: f64 = number
        .parse()
        .map_err(|_| format!("`{text}` does not start with a number"))?;
    let unit = unit.trim();
    let scale = match unit {
        "" => 1,
        unit => unit_scale(unit).ok_or_else(|| format!("unknown unit `{unit}`"))?,
    };
    let bytes = value * scale as f64;
    if scale == 1 && bytes.fract() != 0.0 {
        return Err(format!("`{text}` is not a whole number of bytes"));
    }
    if !bytes.is_finite() || bytes > u64::MAX as f64 {
        return Err(format!("`{text}` is too large"));
    }
    Ok(bytes.round() as u64)
}

/// The bytes in one `unit` (`B`, `KiB` to `TiB`, `kB` or `KB` to `TB`).
pub(crate) fn unit_scale(unit: &str) -> Option<u64> {
    Some(match unit {
        "B" => 1,
        "KiB" => 1 << 10,
        "MiB" => 1 << 20,
        "GiB" => 1 << 30,
        "TiB" => 1 << 40,
        "KB" | "kB" => 1_000,
        "MB" => 1_000_000,
        "GB" => 1_000_000_000,
        "TB" => 1_000_000_000_000,
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::parse_size;

    #[test]
    fn sizes() {
        assert_eq!(parse_size("512 MiB"), Ok(512 << 20));
        assert_eq!(parse_size("2GiB"), Ok(2 << 30));
        assert_eq!(parse_size("1.5 KB"), Ok(1500));
        assert_eq!(parse_size("7"), Ok(7));
        assert!(parse_size("lots").is_err());
        assert!(parse_size("3 parsecs").is_err());
        assert!(parse_size("").is_err());
    }
}
