//! A dictd database packed streamed: its index read, then its dictionary in two streamed passes
//! as the text pipeline's documents ([`crate::text::documents`]), a batch of entries at a time.

use std::path::Path;

use crate::dictd::entries::for_each_entry;
use crate::dictd::index::{DictdFiles, IndexEntry, index_entries, locate};
use crate::error::DataError;
use crate::options::{ReadOptions, TextOptions};
use crate::packed::layout::PackMeta;
use crate::packed::write::PackOptions;
use crate::text::documents::{BATCH_BYTES, Doc, Documents, pack_documents};

/// A dictd database's entries, the dictionary streamed once per pass.
struct DictdEntries {
    files: DictdFiles,
    entries: Vec<IndexEntry>,
    skip_bad_lines: bool,
}

impl Documents for DictdEntries {
    fn pass(
        &self,
        each: &mut dyn FnMut(Vec<Doc>, u64) -> Result<(), DataError>,
    ) -> Result<(), DataError> {
        let (mut batch, mut text_bytes, mut read) = (Vec::new(), 0, 0);
        for_each_entry(
            &self.files,
            &self.entries,
            self.skip_bad_lines,
            |doc, bytes| {
                text_bytes += doc.map_or(0, str::len) as u64;
                read += bytes;
                let text = doc.map(str::to_string);
                batch.push(Doc { text, label: None });
                if text_bytes >= BATCH_BYTES {
                    each(std::mem::take(&mut batch), std::mem::take(&mut read))?;
                    text_bytes = 0;
                }
                Ok(())
            },
        )?;
        each(batch, read)
    }
}

/// Packs the dictd database at `path` (any of its names, as [`locate`] finds it) streamed: its
/// index read (its entries, in dictionary order), then the dictionary in two streamed passes;
/// `options.progress` is told the dictionary file's bytes of each.
pub fn pack_dictd(
    path: &Path,
    read: &ReadOptions,
    text: &TextOptions,
    variant: &str,
    out: &Path,
    options: PackOptions,
) -> Result<PackMeta, DataError> {
    let files = locate(path)?;
    let (entries, skipped) = index_entries(&files, read.skip_bad_lines)?;
    if entries.is_empty() {
        return Err(DataError::Empty { path: files.index });
    }
    let index = files.index.clone();
    let docs = DictdEntries {
        files,
        entries,
        skip_bad_lines: read.skip_bad_lines,
    };
    pack_documents(
        (&index, &docs),
        text,
        None,
        (variant, out),
        options,
        skipped,
    )
}
