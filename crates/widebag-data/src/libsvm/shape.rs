//! The shape of a libsvm file whose header does not declare it (the index base, width and
//! classes), found by a pass over the file before a streamed pack, as `read_libsvm` finds it
//! from every id and label: lines parsed in parallel chunks into a reused buffer.

use std::path::Path;

use rayon::prelude::*;

use crate::error::DataError;
use crate::libsvm::header::{Header, MAX_WIDTH, read_header};
use crate::libsvm::line::{ParsedLine, parse_line_into};
use crate::lines::{CHUNK_LINES, LineBlocks, bad_line};
use crate::options::ReadOptions;
use crate::progress::Progress;

/// What a pass over a libsvm file whose shape is not declared finds: the smallest and largest
/// id (and where the largest first is), the largest label.
#[derive(Clone, Copy, Debug, Default)]
struct Scan {
    min_id: Option<u32>,
    max_id: Option<(u32, usize, usize)>,
    max_label: Option<u32>,
}

impl Scan {
    fn add(&mut self, line: usize, p: &ParsedLine) {
        if let Some(&m) = p.ids.iter().min() {
            self.min_id = Some(self.min_id.map_or(m, |s| s.min(m)));
        }
        // The first place of the largest id (the whole read names it in an error).
        if let Some(i) = (0..p.ids.len()).max_by_key(|&i| (p.ids[i], std::cmp::Reverse(i)))
            && self.max_id.is_none_or(|(m, _, _)| p.ids[i] > m)
        {
            self.max_id = Some((p.ids[i], line, p.columns[i] as usize));
        }
        self.max_label = self.max_label.max(p.labels.iter().max().copied());
    }

    /// `later`'s lines after this one's.
    fn merge(&mut self, later: Scan) {
        if let Some(m) = later.min_id {
            self.min_id = Some(self.min_id.map_or(m, |s| s.min(m)));
        }
        if let Some(l) = later.max_id
            && self.max_id.is_none_or(|(m, _, _)| l.0 > m)
        {
            self.max_id = Some(l);
        }
        self.max_label = self.max_label.max(later.max_label);
    }
}

/// One pass over `path`'s lines (parsed as `read_libsvm` parses them, in parallel chunks into a
/// reused buffer), counting only the lines whose ids `keep` accepts; a bad line is an error
/// naming the file, line and column, or skipped.
fn scan(
    path: &Path,
    header: &Header,
    read: &ReadOptions,
    keep: impl Fn(&[u32]) -> bool + Sync,
    progress: &Progress,
) -> Result<Scan, DataError> {
    let blank_rows = header.blank_lines_are_rows;
    let chunk = |lines: &[(usize, &[u8])]| {
        let mut part = Scan::default();
        let mut p = ParsedLine::default();
        for &(n, line) in lines {
            // A blank line that is a row has no ids and no labels: nothing to count.
            if blank_rows && line.iter().all(u8::is_ascii_whitespace) {
                continue;
            }
            match parse_line_into(line, &mut p) {
                Ok(true) if keep(&p.ids) => part.add(n, &p),
                Ok(_) => {}
                Err(_) if read.skip_bad_lines => {}
                Err(e) => return (part, Some((n, e))),
            }
        }
        (part, None)
    };
    let mut blocks = LineBlocks::open(path)?;
    let mut s = Scan::default();
    while let Some(block) = blocks.next_block()? {
        let parts: Vec<_> = block.lines().par_chunks(CHUNK_LINES).map(chunk).collect();
        for (part, failed) in parts {
            if let Some((line, e)) = failed {
                return Err(bad_line(path, line, e));
            }
            s.merge(part);
        }
        progress.advance(block.bytes.len() as u64);
    }
    Ok(s)
}

/// The shape of a libsvm file as `read_libsvm` finds it (index base, width, classes), passing
/// over the file for what is not declared: once for the ids' base and width, and, when some
/// line's ids fall outside them and are skipped, once more for the classes of the rows kept.
pub(crate) fn find_shape(
    path: &Path,
    header: &Header,
    read: &ReadOptions,
    progress: &Progress,
) -> Result<(bool, usize, usize), DataError> {
    let declared = (
        read.zero_based.or(header.zero_based),
        read.width.or(header.width),
        read.n_classes.or(header.n_classes),
    );
    if let (Some(zero_based), Some(width), Some(n_classes)) = declared {
        return Ok((zero_based, width, n_classes));
    }
    let all = scan(path, header, read, |_| true, progress)?;
    let zero_based = declared.0.unwrap_or(all.min_id == Some(0));
    let base = u32::from(!zero_based);
    let max_id = all.max_id.map(|(m, _, _)| m);
    let width = declared
        .1
        .unwrap_or_else(|| max_id.map_or(0, |m| m as usize + 1 - base as usize));
    if width > MAX_WIDTH {
        let (id, line, column) = all.max_id.unwrap_or((0, 1, 1));
        return Err(DataError::Parse {
            path: path.to_path_buf(),
            line,
            column,
            message: format!(
                "index {id} makes the width {width}, more than 32-bit ids address \
                 (at most {MAX_WIDTH} columns)"
            ),
        });
    }
    let inside = |ids: &[u32]| {
        ids.iter()
            .all(|&i| i >= base && ((i - base) as usize) < width)
    };
    let n_classes = match declared.2 {
        Some(n) => n,
        None => {
            let every_line_kept = all.min_id.is_none_or(|m| m >= base)
                && max_id.is_none_or(|m| ((m - base) as usize) < width);
            // A bad line not skipped fails the write pass; its labels do not matter.
            let labels = if every_line_kept || !read.skip_bad_lines {
                all.max_label
            } else {
                scan(path, header, read, inside, progress)?.max_label
            };
            labels.map_or(0, |m| m as usize + 1)
        }
    };
    Ok((zero_based, width, n_classes))
}

/// The passes [`pack_libsvm`](super::pack::pack_libsvm) makes over `path` (for a progress bar's
/// length): one when its shape is declared, else two (three when lines outside the found shape are
/// skipped).
pub fn passes(path: &Path, read: &ReadOptions) -> u64 {
    let header = read_header(path).unwrap_or_default();
    let declared = read.zero_based.or(header.zero_based).is_some()
        && read.width.or(header.width).is_some()
        && read.n_classes.or(header.n_classes).is_some();
    if declared { 1 } else { 2 }
}
