//! Byte sizes with units, as budgets are written: `6GiB`, `512MiB`, `8GB`, `1.5 GiB` or plain bytes.

/// Parses a byte size: a number (decimals allowed) and an optional unit, binary (`KiB`, `MiB`,
/// `GiB`, `TiB`: powers of 1024) or decimal (`KB`, `MB`, `GB`, `TB`: powers of 1000), or `B`.
/// Units are case-insensitive except that `b` alone means bytes; spaces between number and unit
/// are allowed. Returns why it failed.
pub fn parse_bytes(text: &str) -> Result<u64, String> {
    let t = text.trim();
    let split = t
        .find(|c: char| !(c.is_ascii_digit() || c == '.' || c == '_'))
        .unwrap_or(t.len());
    let (number, unit) = t.split_at(split);
    let number: String = number.chars().filter(|&c| c != '_').collect();
    if number.is_empty() {
        return Err(format!(
            "`{text}` is not a byte size (expected e.g. 6GiB, 512MiB, 8GB or 1000000)"
        ));
    }
    let multiplier: u64 = match unit.trim().to_ascii_lowercase().as_str() {
        "" | "b" => 1,
        "kb" | "k" => 1_000,
        "mb" | "m" => 1_000_000,
        "gb" | "g" => 1_000_000_000,
        "tb" | "t" => 1_000_000_000_000,
        "kib" => 1 << 10,
        "mib" => 1 << 20,
        "gib" => 1 << 30,
        "tib" => 1 << 40,
        other => {
            return Err(format!(
                "unknown unit `{other}` in `{text}` (use B, KB, MB, GB, TB, KiB, MiB, GiB or TiB)"
            ));
        }
    };
    let bytes = if number.contains('.') {
        let value: f64 = number
            .parse()
            .map_err(|_| format!("`{number}` in `{text}` is not a number"))?;
        let bytes = (value * multiplier as f64).floor();
        if !bytes.is_finite() || bytes >= u64::MAX as f64 {
            return Err(format!("`{text}` is too large"));
        }
        bytes as u64
    } else {
        let value: u64 = number
            .parse()
            .map_err(|_| format!("`{number}` in `{text}` is not a number"))?;
        value
            .checked_mul(multiplier)
            .ok_or_else(|| format!("`{text}` is too large"))?
    };
    if bytes == 0 {
        return Err(format!("`{text}` is zero bytes"));
    }
    Ok(bytes)
}

/// Bytes as the largest binary unit that keeps the number at least 1, two decimals
/// (`6.00 GiB`, `512.00 MiB`, `1.50 KiB`, `12 B`).
pub fn format_bytes(bytes: u64) -> String {
    const UNITS: [(&str, u64); 4] = [
        ("TiB", 1 << 40),
        ("GiB", 1 << 30),
        ("MiB", 1 << 20),
        ("KiB", 1 << 10),
    ];
    for (name, size) in UNITS {
        if bytes >= size {
            return format!("{:.2} {name}", bytes as f64 / size as f64);
        }
    }
    format!("{bytes} B")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn units() {
        assert_eq!(parse_bytes("6GiB"), Ok(6 << 30));
        assert_eq!(parse_bytes("512MiB"), Ok(512 << 20));
        assert_eq!(parse_bytes("8GB"), Ok(8_000_000_000));
        assert_eq!(parse_bytes("1.5 GiB"), Ok(3 << 29));
        assert_eq!(parse_bytes("123456"), Ok(123_456));
        assert_eq!(parse_bytes("4_000_000"), Ok(4_000_000));
        assert_eq!(parse_bytes(" 2 gib "), Ok(2 << 30));
        assert_eq!(parse_bytes("100B"), Ok(100));
    }

    #[test]
    fn refusals_say_why() {
        assert!(parse_bytes("").unwrap_err().contains("not a byte size"));
        assert!(parse_bytes("GiB").unwrap_err().contains("not a byte size"));
        assert!(parse_bytes("6 gigs").unwrap_err().contains("unknown unit"));
        assert!(
            parse_bytes("1.2.3GiB")
                .unwrap_err()
                .contains("not a number")
        );
        assert!(parse_bytes("0").unwrap_err().contains("zero"));
        assert!(
            parse_bytes("99999999999TiB")
                .unwrap_err()
                .contains("too large")
        );
    }

    #[test]
    fn formatting() {
        assert_eq!(format_bytes(6 << 30), "6.00 GiB");
        assert_eq!(format_bytes(3 << 19), "1.50 MiB");
        assert_eq!(format_bytes(12), "12 B");
    }
}
