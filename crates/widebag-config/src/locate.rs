//! Finds where a dotted key sits in a TOML text, so errors can name its line.

/// 1-based line and column of byte `offset`.
pub fn line_col(text: &str, offset: usize) -> (usize, usize) {
    let before = &text[..offset.min(text.len())];
    let line = before.matches('\n').count() + 1;
    let column = before.len() - before.rfind('\n').map(|i| i + 1).unwrap_or(0) + 1;
    (line, column)
}

fn clean(part: &str) -> String {
    part.trim().trim_matches('"').trim_matches('\'').to_string()
}

/// 1-based line of the first assignment of `key` (e.g. `model.dim`), following `[table]` headers
/// and dotted keys. `None` when it cannot be found (e.g. an inline table).
pub fn key_line(text: &str, key: &str) -> Option<usize> {
    let mut table: Vec<String> = Vec::new();
    for (i, raw) in text.lines().enumerate() {
        let line = raw.trim();
        if line.starts_with('#') || line.is_empty() {
            continue;
        }
        if line.starts_with('[') {
            let inner = line.trim_start_matches('[').split(']').next().unwrap_or("");
            table = inner.split('.').map(clean).collect();
            continue;
        }
        if let Some((lhs, _)) = line.split_once('=') {
            let mut path = table.clone();
            path.extend(lhs.split('.').map(clean));
            if path.join(".") == key {
                return Some(i + 1);
            }
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_keys_under_headers_and_dotted() {
        let t = "# c\n[model]\ndim = 3\n\n[train]\nsteps=1\noptim.lr = 2\n";
        assert_eq!(key_line(t, "model.dim"), Some(3));
        assert_eq!(key_line(t, "train.steps"), Some(6));
        assert_eq!(key_line(t, "train.optim.lr"), Some(7));
        assert_eq!(key_line(t, "model.hidden"), None);
        assert_eq!(line_col("ab\ncd", 4), (2, 2));
    }
}
