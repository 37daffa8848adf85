//! A dictd database read whole: its distinct entry blocks as documents, in dictionary order.

use std::path::Path;

use crate::dictd::entries::for_each_entry;
use crate::dictd::index::{DictdFiles, index_entries, locate};
use crate::error::DataError;

/// The distinct entry blocks of a dictd database as documents, in dictionary order, and the
/// number of index lines skipped as bad.
pub fn dictd_documents(
    path: &Path,
    skip_bad_lines: bool,
) -> Result<(Vec<String>, usize, DictdFiles), DataError> {
    let files = locate(path)?;
    let (entries, mut skipped) = index_entries(&files, skip_bad_lines)?;
    let mut docs = Vec::with_capacity(entries.len());
    for_each_entry(&files, &entries, skip_bad_lines, |doc, _| {
        match doc {
            Some(doc) => docs.push(doc.to_string()),
            None => skipped += 1,
        }
        Ok(())
    })?;
    if docs.is_empty() {
        return Err(DataError::Empty { path: files.index });
    }
    Ok((docs, skipped, files))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entries_dedupe_and_errors_locate() {
        let dir = std::env::temp_dir().join(format!("widebag-dictd-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let text = "cat\n  A small animal.\ndog\n  Not a cat.\n";
        std::fs::write(dir.join("d.dict"), text).unwrap();
        // "cat" block = bytes 0..22 (A, W), "dog" block = 22..39 (W, R); "kitty" shares the cat block.
        std::fs::write(dir.join("d.index"), "cat\tA\tW\ndog\tW\tR\nkitty\tA\tW\n").unwrap();
        let (docs, skipped, files) = dictd_documents(&dir.join("d.index"), false).unwrap();
        assert_eq!(docs.len(), 2);
        assert_eq!(skipped, 0);
        assert!(docs[1].starts_with("dog"));
        assert_eq!(files.dict, dir.join("d.dict"));
        std::fs::write(dir.join("d.index"), "cat\tA\tW\ndog\tW\tBA\n").unwrap();
        let e = dictd_documents(&dir.join("d"), false)
            .unwrap_err()
            .to_string();
        assert!(e.contains("d.index:2:5") && e.contains("runs past"), "{e}");
        std::fs::write(dir.join("d.index"), "cat\tA\tW\ndog\tW!\tR\n").unwrap();
        let e = dictd_documents(&dir.join("d"), false)
            .unwrap_err()
            .to_string();
        assert!(e.contains("d.index:2:5"), "{e}");
        let (docs, skipped, _) = dictd_documents(&dir.join("d"), true).unwrap();
        assert_eq!((docs.len(), skipped), (1, 1));
    }
}
