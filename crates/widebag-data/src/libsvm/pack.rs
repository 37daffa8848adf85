//! A libsvm file packed streamed: one thread reads the next blocks of lines and parses them
//! (rayon, in chunks of flat buffers), checking rows as [`read_libsvm`] checks them, while the
//! rows already parsed are written a packed block at a time, in memory bounded by a few line
//! blocks and the width, whatever the file's size. One pass when the shape is declared
//! (widebag's header line, or the index base, width and classes set); otherwise a pass before it
//! finds what is not (as `read_libsvm` finds it from every id and label).
//!
//! [`read_libsvm`]: crate::libsvm::read::read_libsvm

use std::path::Path;

use rayon::prelude::*;

use crate::error::DataError;
use crate::libsvm::header::read_header;
use crate::libsvm::line::{ParsedLine, parse_line_into};
use crate::libsvm::read::{bad_id, base_note};
use crate::libsvm::shape::find_shape;
use crate::lines::{CHUNK_LINES, LineBlock, LineBlocks, LineError, bad_line};
use crate::options::ReadOptions;
use crate::packed::layout::PackMeta;
use crate::packed::stream::{Extent, RowSink, StreamHeader, pack_rows};
use crate::packed::write::{PackOptions, Row};

/// Parsed line blocks ready ahead of the writer.
const READ_AHEAD: usize = 2;

/// A line's failure: `(column, message)`, and whether `skip_bad_lines` may skip it (a label
/// beyond the classes fails the read whole, as `read_libsvm` fails it).
type Bad = (LineError, bool);

/// The checked rows of consecutive lines, ids rebased, in flat buffers; the lines skipped; the
/// first line that fails (`skip_bad_lines` unset, or not skippable).
#[derive(Default)]
struct Rows {
    id_ends: Vec<usize>,
    label_ends: Vec<usize>,
    ids: Vec<u32>,
    values: Vec<f32>,
    labels: Vec<u32>,
    skipped: u64,
    failed: Option<(usize, LineError)>,
}

/// Packs the libsvm file `path` into `out` streamed (atomically, as `pack_rows`). What its
/// header and `read` do not declare of its shape (the index base, detected from every id; the
/// width and classes, from the largest) is found by a pass over the file first. The packed rows,
/// frequencies and statistics are those of the file read in memory and packed.
/// `options.progress` is told the bytes of each pass.
pub fn pack_libsvm(
    path: &Path,
    read: &ReadOptions,
    variant: &str,
    out: &Path,
    options: PackOptions,
) -> Result<PackMeta, DataError> {
    let header = read_header(path)?;
    let (zero_based, width, n_classes) = find_shape(path, &header, read, &options.progress)?;
    let base_set = read.zero_based.or(header.zero_based).is_some();
    let stream = StreamHeader {
        variant: variant.to_string(),
        width,
        n_classes,
        extent: Extent::Declared,
        notes: vec![base_note(zero_based, base_set)],
        vocabulary: None,
        labels: None,
    };
    let check = Check {
        path,
        base: u32::from(!zero_based),
        width,
        n_classes,
        skip_bad_lines: read.skip_bad_lines,
        blank_lines_are_rows: header.blank_lines_are_rows,
    };
    let (tx, rx) = std::sync::mpsc::sync_channel::<Result<(Vec<Rows>, u64), DataError>>(READ_AHEAD);
    let mut blocks = LineBlocks::open(path)?;
    std::thread::scope(|scope| {
        // Reads and parses (rayon) the next blocks while the rows of this one are written.
        let check = &check;
        scope.spawn(move || {
            while let Some(next) = blocks.next_block().transpose() {
                let failed = next.is_err();
                // A closed channel: the packer stopped (an error), nothing more to read.
                let parsed = next.map(|b| (check.parse_block(&b), b.bytes.len() as u64));
                if tx.send(parsed).is_err() || failed {
                    return;
                }
            }
        });
        let progress = options.progress.clone();
        let packed = pack_rows(stream, out, options, |sink| {
            let mut rows = 0u64;
            for block in rx.iter() {
                let (b, bytes) = block?;
                check.write(b, sink, &mut rows)?;
                progress.advance(bytes);
            }
            if rows == 0 {
                return Err(DataError::Empty {
                    path: path.to_path_buf(),
                });
            }
            Ok(())
        });
        // Unblocks the reader when the packer stopped early.
        drop(rx);
        packed
    })
}

/// What a row must satisfy, as `read_libsvm` checks it.
struct Check<'a> {
    path: &'a Path,
    base: u32,
    width: usize,
    n_classes: usize,
    skip_bad_lines: bool,
    blank_lines_are_rows: bool,
}

impl Check<'_> {
    /// Parses and checks `line` into `p` (its ids rebased): `Ok(false)` for a blank or comment
    /// line.
    fn parse(&self, line: &[u8], p: &mut ParsedLine) -> Result<bool, Bad> {
        if self.blank_lines_are_rows && line.iter().all(u8::is_ascii_whitespace) {
            parse_line_into(b"", p).map_err(|e| (e, true))?;
            return Ok(true);
        }
        if !parse_line_into(line, p).map_err(|e| (e, true))? {
            return Ok(false);
        }
        let base = self.base;
        let bad = p
            .ids
            .iter()
            .zip(&p.columns)
            .find(|&(&id, _)| id < base || (id - base) as usize >= self.width);
        if let Some((&id, &column)) = bad {
            return Err(((column as usize, bad_id(id, base, self.width)), true));
        }
        if p.labels.iter().any(|&c| c as usize >= self.n_classes) {
            let message = format!("label beyond the number of classes {}", self.n_classes);
            return Err(((1, message), false));
        }
        Ok(true)
    }

    /// Consecutive `(line number, line)`s parsed into one [`Rows`].
    fn parse_chunk(&self, lines: &[(usize, &[u8])]) -> Rows {
        let mut rows = Rows::default();
        let mut p = ParsedLine::default();
        for &(n, line) in lines {
            match self.parse(line, &mut p) {
                Ok(false) => {}
                Ok(true) => {
                    let base = self.base;
                    rows.ids.extend(p.ids.iter().map(|&i| i - base));
                    rows.values.extend_from_slice(&p.values);
                    rows.labels.extend_from_slice(&p.labels);
                    rows.id_ends.push(rows.ids.len());
                    rows.label_ends.push(rows.labels.len());
                }
                Err((_, true)) if self.skip_bad_lines => rows.skipped += 1,
                Err((e, _)) => {
                    rows.failed = Some((n, e));
                    break;
                }
            }
        }
        rows
    }

    /// `block`'s lines, parsed and checked in parallel chunks, in order.
    fn parse_block(&self, block: &LineBlock) -> Vec<Rows> {
        block
            .lines()
            .par_chunks(CHUNK_LINES)
            .map(|lines| self.parse_chunk(lines))
            .collect()
    }

    /// Writes a parsed block's rows in order (`rows` counts them); the first bad line is an
    /// error naming the file, line and column, unless bad lines are skipped (and counted).
    fn write(
        &self,
        chunks: Vec<Rows>,
        sink: &mut RowSink,
        rows: &mut u64,
    ) -> Result<(), DataError> {
        let mut ones = Vec::new();
        for c in chunks {
            if let Some((line, e)) = c.failed {
                return Err(bad_line(self.path, line, e));
            }
            (0..c.skipped).for_each(|_| sink.skip_line());
            let (mut id0, mut label0) = (0, 0);
            for (&id1, &label1) in c.id_ends.iter().zip(&c.label_ends) {
                ones.resize(label1 - label0, 1.0);
                let row = Row {
                    ids: &c.ids[id0..id1],
                    values: &c.values[id0..id1],
                    targets: &c.labels[label0..label1],
                    weights: &ones,
                };
                sink.push(row).map_err(|source| DataError::Io {
                    path: self.path.to_path_buf(),
                    source,
                })?;
                (id0, label0) = (id1, label1);
                *rows += 1;
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::open::load;
    use crate::progress::Progress;
    use crate::source::Source;
    use widebag_kinds::Format;

    fn dir(name: &str) -> std::path::PathBuf {
        let d =
            std::env::temp_dir().join(format!("widebag-libsvm-pack-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        d
    }

    const OPTIONS: PackOptions = PackOptions {
        block_rows: 7,
        stats_samples: 4,
        progress: Progress::NONE,
    };

    /// A 1-based file with widebag's header, more than one line block long: repeated ids,
    /// several labels, comments, `qid:` and blank lines (rows, as the header says).
    fn write_file(path: &Path, rows: usize) {
        let mut text = String::from(
            "# widebag libsvm: zero_based=false width=50 n_classes=7 blank_lines=rows\n",
        );
        for r in 0..rows {
            match r % 11 {
                3 => text.push('\n'),
                5 => text.push_str(&format!("{},{} qid:3 4:1 4:2 50:0.5 # c\n", r % 7, 6)),
                _ => text.push_str(&format!("{} {}:1.5 {}:2\n", r % 7, 1 + r % 50, 1 + r % 13)),
            }
        }
        std::fs::write(path, text).unwrap();
    }

    #[test]
    fn a_streamed_pack_is_the_bytes_of_the_file_read_whole_and_packed() {
        let d = dir("same");
        let file = d.join("rows.svm");
        write_file(&file, 600_000);
        assert!(std::fs::metadata(&file).unwrap().len() > crate::lines::BLOCK_BYTES as u64);
        let source = Source::new(&file, Format::Libsvm);
        let (a, b) = (d.join("streamed.wbp"), d.join("loaded.wbp"));
        let meta = pack_libsvm(&file, &source.read, &source.variant(), &a, OPTIONS).unwrap();
        let loaded = load(&source).unwrap();
        crate::packed::write::pack(&loaded, &source.variant(), &b, OPTIONS).unwrap();
        assert_eq!(meta.n_rows, 600_000);
        assert!(std::fs::read(&a).unwrap() == std::fs::read(&b).unwrap());
        // Both are packs: against the plain reader's rows, decoded by the documented layout.
        crate::packed::by_hand::assert_holds(&a, &loaded);
        let _ = std::fs::remove_dir_all(d);
    }

    #[test]
    fn a_bad_line_is_named_and_leaves_no_output() {
        let d = dir("bad");
        let file = d.join("rows.svm");
        write_file(&file, 30);
        let mut text = std::fs::read_to_string(&file).unwrap();
        text.push_str("2 51:1\n");
        std::fs::write(&file, text).unwrap();
        let out = d.join("out.wbp");
        let read = ReadOptions::default();
        let e = pack_libsvm(&file, &read, "libsvm", &out, OPTIONS).unwrap_err();
        let DataError::Parse { line, column, .. } = &e else {
            panic!("{e}");
        };
        assert_eq!((*line, *column), (32, 3), "{e}");
        assert!(e.to_string().contains("beyond the width 50"), "{e}");
        let left: Vec<_> = std::fs::read_dir(&d).unwrap().flatten().collect();
        assert_eq!(left.len(), 1, "only the source: {left:?}");
        // Skipped when asked, and counted.
        let skip = ReadOptions {
            skip_bad_lines: true,
            ..read
        };
        let meta = pack_libsvm(&file, &skip, "libsvm", &out, OPTIONS).unwrap();
        assert_eq!((meta.n_rows, meta.skipped_lines), (30, 1));
        let _ = std::fs::remove_dir_all(d);
    }

    /// Packs `file` streamed and read whole with `read`: the same bytes, or the same error.
    fn same_as_whole(file: &Path, read: &ReadOptions) -> Result<PackMeta, String> {
        let d = file.parent().unwrap();
        let mut source = Source::new(file, Format::Libsvm);
        source.read = read.clone();
        let (a, b) = (d.join("streamed.wbp"), d.join("loaded.wbp"));
        let _ = (std::fs::remove_file(&a), std::fs::remove_file(&b));
        let streamed = pack_libsvm(file, read, &source.variant(), &a, OPTIONS);
        let whole = load(&source)
            .and_then(|l| crate::packed::write::pack(&l, &source.variant(), &b, OPTIONS));
        match (streamed, whole) {
            (Ok(meta), Ok(other)) => {
                assert_eq!(meta, other);
                assert!(std::fs::read(&a).unwrap() == std::fs::read(&b).unwrap());
                Ok(meta)
            }
            (Err(e), Err(other)) => {
                assert_eq!(e.to_string(), other.to_string());
                assert!(!a.exists());
                Err(e.to_string())
            }
            (s, w) => panic!("streamed {s:?}, whole {w:?}"),
        }
    }

    #[test]
    fn a_huge_declared_width_costs_memory_in_proportion_to_the_data() {
        // Before the frequencies were summed in [`crate::key_sums::KeySums`], this width took a
        // 32 GB array and aborted the process.
        let d = dir("huge");
        let file = d.join("rows.svm");
        std::fs::write(&file, "1 3:1 7:2\n0 3999999999:1\n1 5:1\n").unwrap();
        let read = ReadOptions {
            width: Some(4_000_000_000),
            zero_based: Some(true),
            ..ReadOptions::default()
        };
        let meta = same_as_whole(&file, &read).unwrap();
        assert_eq!((meta.width, meta.stats.ids_used), (4_000_000_000, 4));
        assert!(meta.frequencies.is_none());
        let _ = std::fs::remove_dir_all(d);
    }

    #[test]
    fn a_file_without_a_declared_shape_is_found_by_a_pass_first() {
        let d = dir("undeclared");
        let file = d.join("rows.svm");
        // Base, width and classes found from every id and label: 1-based here, then 0-based.
        let mut text: String = (0..20_000)
            .map(|r| format!("{} {}:1 {}:0.5\n", r % 9, 1 + r % 700, 2 + r % 31))
            .collect();
        std::fs::write(&file, &text).unwrap();
        let meta = same_as_whole(&file, &ReadOptions::default()).unwrap();
        assert_eq!((meta.width, meta.n_classes), (700, 9));
        assert!(
            meta.notes[0].contains("1-based ids (detected)"),
            "{:?}",
            meta.notes
        );
        text.push_str("3 0:2\n");
        std::fs::write(&file, &text).unwrap();
        let meta = same_as_whole(&file, &ReadOptions::default()).unwrap();
        assert_eq!((meta.width, meta.n_classes), (701, 9));
        // Declared 1-based: the line with index 0 fails (named), or is skipped and its label (12)
        // not counted among the classes.
        text.push_str("12 0:1\n");
        std::fs::write(&file, &text).unwrap();
        let one_based = ReadOptions {
            zero_based: Some(false),
            ..ReadOptions::default()
        };
        let e = same_as_whole(&file, &one_based).unwrap_err();
        assert!(e.contains(":20001:3:"), "{e}");
        let skip = ReadOptions {
            skip_bad_lines: true,
            ..one_based
        };
        let meta = same_as_whole(&file, &skip).unwrap();
        assert_eq!(
            (meta.n_rows, meta.skipped_lines, meta.n_classes),
            (20_000, 2, 9)
        );
        // A declared width: lines beyond it skipped, the classes those of the lines kept.
        let narrow = ReadOptions {
            width: Some(600),
            skip_bad_lines: true,
            ..ReadOptions::default()
        };
        let meta = same_as_whole(&file, &narrow).unwrap();
        assert_eq!(meta.width, 600);
        let _ = std::fs::remove_dir_all(d);
    }
}
