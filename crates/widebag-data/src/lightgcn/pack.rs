//! LightGCN interaction lists packed streamed, in memory bounded by a few line blocks and the
//! width, whatever the files' size: a pass over the held-out file finds its users, then each
//! training user's row is written as its line comes (the width growing to the largest item),
//! then the held-out rows. The whole read's checks ([`read_lightgcn`]) are made on the figures
//! both passes saw. Streaming needs each file's users in ascending order, one line each (the
//! LightGCN splits are written so); otherwise the files are read whole first. Either way the
//! packed bytes are those of the files read in memory and packed.
//!
//! [`read_lightgcn`]: crate::lightgcn::read::read_lightgcn

use std::path::Path;

use crate::error::DataError;
use crate::lightgcn::line::{parse_line, scan_line};
use crate::lightgcn::read::{MAX_USERS_PER_LINE, MAX_USERS_SLACK, as_bag, shape};
use crate::lines::for_each_parsed;
use crate::options::ReadOptions;
use crate::packed::layout::PackMeta;
use crate::packed::stream::{Extent, RowSink, StreamHeader, pack_rows};
use crate::packed::write::{PackOptions, Row};
use crate::progress::Progress;

/// What the first pass finds in one file.
#[derive(Clone, Copy, Debug, Default)]
struct Scan {
    /// Lines holding a user (parsed, not skipped).
    lines: usize,
    max_user: Option<(u32, usize)>,
    max_item: Option<u32>,
    /// Every user greater than the one before (one line per user, in order).
    ascending: bool,
}

fn scan(path: &Path, read: &ReadOptions, progress: &Progress) -> Result<Scan, DataError> {
    let mut s = Scan {
        ascending: true,
        ..Scan::default()
    };
    let mut last: Option<u32> = None;
    for_each_parsed(path, read.skip_bad_lines, scan_line, |users, bytes| {
        for (line, (u, max_item)) in users {
            s.lines += 1;
            s.ascending &= last.is_none_or(|l| u > l);
            last = Some(u);
            if s.max_user.is_none_or(|(m, _)| u > m) {
                s.max_user = Some((u, line));
            }
            s.max_item = s.max_item.max(max_item);
        }
        progress.advance(bytes);
        Ok(())
    })?;
    Ok(s)
}

/// Packs `train` (and its held-out `test`) into `out` streamed (atomically, as `pack_rows`), or
/// `Ok(None)` when a file's users are not one line each in ascending order (or a user id runs
/// far past the lines read so far): then the files are read whole first. The held-out file is
/// read twice (its users first, then its rows after the training rows), the training file once.
/// `options.progress` is told the bytes of each pass.
pub fn pack_lightgcn(
    train: &Path,
    test: Option<&Path>,
    read: &ReadOptions,
    variant: &str,
    out: &Path,
    options: PackOptions,
) -> Result<Option<PackMeta>, DataError> {
    let progress = options.progress.clone();
    let held = test.map(|p| scan(p, read, &progress)).transpose()?;
    if held.is_some_and(|s| !s.ascending) {
        return Ok(None);
    }
    let held = held.unwrap_or_default();
    // The width grows to the largest item of either file (at least a set width, which the
    // check at the end holds the items to, as the whole read does).
    let header = StreamHeader {
        variant: variant.to_string(),
        width: read.width.unwrap_or(0),
        n_classes: read.width.unwrap_or(0),
        extent: Extent::Grows,
        notes: Vec::new(),
        vocabulary: None,
        labels: None,
    };
    let mut fallback = false;
    let packed = pack_rows(header, out, options, |sink| {
        let Some(seen) = write_training_rows(train, read, &held, sink, &progress)? else {
            // Not streamable: the pack is abandoned (the error stands for it) and read whole.
            fallback = true;
            return Err(DataError::Empty {
                path: train.to_path_buf(),
            });
        };
        if seen.lines == 0 {
            return Err(DataError::Empty {
                path: train.to_path_buf(),
            });
        }
        // The whole read's checks, on both files' figures (the first file holding the largest
        // user named, as it names it).
        let users = [
            Some((train, seen.max_user)),
            test.map(|p| (p, held.max_user)),
        ];
        let lines = seen.lines + held.lines;
        let max_item = seen.max_item.max(held.max_item);
        let (max_user, at) = (users.iter().flatten())
            .filter_map(|&(p, max)| max.map(|(u, line)| (u, (p, line))))
            .fold(None::<(u32, (&Path, usize))>, |m, (u, at)| match m {
                Some((mu, _)) if mu >= u => m,
                _ => Some((u, at)),
            })
            .unwrap_or((0, (train, 1)));
        let (_, n_users) = shape(train, read, max_user, max_item, lines, || at)?;
        let io = |source| DataError::Io {
            path: out.to_path_buf(),
            source,
        };
        for _ in seen.next_user..n_users {
            push_bag(sink, &[]).map_err(io)?;
        }
        if let Some(test) = test {
            sink.begin_held_out().map_err(io)?;
            write_rows(test, read, n_users, sink, &progress)?;
        }
        sink.note(format!("{n_users} users"));
        Ok(())
    });
    match packed {
        _ if fallback => Ok(None),
        packed => packed.map(Some),
    }
}

/// What the pass over the training file saw, and the next user's row.
#[derive(Clone, Copy, Debug, Default)]
struct Seen {
    lines: usize,
    max_user: Option<(u32, usize)>,
    max_item: Option<u32>,
    next_user: usize,
}

/// A user's row: its items as input and as target, weight 1.
fn push_bag(sink: &mut RowSink, items: &[u32]) -> std::io::Result<()> {
    let ones = vec![1.0; items.len()];
    sink.push(Row {
        ids: items,
        values: &ones,
        targets: items,
        weights: &ones,
    })
}

/// The training file's rows, one per user up to its largest (a user without a line is an
/// empty row), as its lines come; `None` when its users are not one line each in ascending
/// order, or a user id runs far past the lines so far (the whole read decides then).
fn write_training_rows(
    path: &Path,
    read: &ReadOptions,
    held: &Scan,
    sink: &mut RowSink,
    progress: &Progress,
) -> Result<Option<Seen>, DataError> {
    let io = |source| DataError::Io {
        path: path.to_path_buf(),
        source,
    };
    let mut seen = Seen::default();
    let mut streams = true;
    let skipped = for_each_parsed(path, read.skip_bad_lines, parse_line, |users, bytes| {
        for (line, (u, mut items)) in users {
            let u_rows = u as usize + 1;
            let bound = MAX_USERS_PER_LINE * (seen.lines + 1 + held.lines) + MAX_USERS_SLACK;
            if u_rows <= seen.next_user || u_rows > bound {
                streams = false;
                return Err(DataError::Empty {
                    path: path.to_path_buf(),
                });
            }
            seen.lines += 1;
            seen.max_user = Some((u, line));
            seen.max_item = seen.max_item.max(items.iter().max().copied());
            for _ in seen.next_user..u as usize {
                push_bag(sink, &[]).map_err(io)?;
            }
            as_bag(&mut items);
            push_bag(sink, &items).map_err(io)?;
            seen.next_user = u_rows;
        }
        progress.advance(bytes);
        Ok(())
    });
    match skipped {
        _ if !streams => Ok(None),
        Ok(skipped) => {
            for _ in 0..skipped {
                sink.skip_line();
            }
            Ok(Some(seen))
        }
        Err(e) => Err(e),
    }
}

/// One row per user `0..n_users` from `path`'s lines (a user without a line is an empty row).
fn write_rows(
    path: &Path,
    read: &ReadOptions,
    n_users: usize,
    sink: &mut RowSink,
    progress: &Progress,
) -> Result<(), DataError> {
    let io = |source| DataError::Io {
        path: path.to_path_buf(),
        source,
    };
    let mut next = 0usize;
    let skipped = for_each_parsed(path, read.skip_bad_lines, parse_line, |users, bytes| {
        for (_, (u, mut items)) in users {
            while next < u as usize {
                push_bag(sink, &[]).map_err(io)?;
                next += 1;
            }
            as_bag(&mut items);
            push_bag(sink, &items).map_err(io)?;
            next += 1;
        }
        progress.advance(bytes);
        Ok(())
    })?;
    while next < n_users {
        push_bag(sink, &[]).map_err(io)?;
        next += 1;
    }
    for _ in 0..skipped {
        sink.skip_line();
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::packed::write::pack;
    use crate::source::Source;
    use widebag_kinds::Format;

    fn dir(name: &str) -> std::path::PathBuf {
        let d =
            std::env::temp_dir().join(format!("widebag-lgcn-pack-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        d
    }

    fn options(block_rows: u32) -> PackOptions {
        PackOptions {
            block_rows,
            ..PackOptions::default()
        }
    }

    /// The streamed pack against the pack of the files read whole, byte for byte.
    fn same_bytes(train: &Path, test: Option<&Path>, read: &ReadOptions, block_rows: u32) {
        let d = train.parent().unwrap();
        let (a, b) = (d.join("streamed.wbp"), d.join("whole.wbp"));
        let mut source = Source::new(train, Format::Lightgcn);
        source.test_path = test.map(Path::to_path_buf);
        source.read = read.clone();
        let meta = pack_lightgcn(
            train,
            test,
            read,
            &source.variant(),
            &a,
            options(block_rows),
        )
        .unwrap()
        .expect("ascending users stream");
        let loaded = crate::open::load(&source).unwrap();
        let whole = pack(&loaded, &source.variant(), &b, options(block_rows)).unwrap();
        assert_eq!(meta, whole);
        assert_eq!(std::fs::read(&a).unwrap(), std::fs::read(&b).unwrap());
        // Both are packs: against the plain reader's rows, decoded by the documented layout.
        crate::packed::by_hand::assert_holds(&a, &loaded);
    }

    #[test]
    fn streamed_pack_is_the_whole_reads_pack_byte_for_byte() {
        let d = dir("same");
        let (tr, te) = (d.join("train.txt"), d.join("test.txt"));
        // Users 0..3000 with gaps (no line: an empty row), repeated and unsorted items, a user
        // with no items, and a test file with fewer users and a larger item.
        let mut train = String::new();
        let mut test = String::new();
        for u in 0..3000u32 {
            if u % 7 == 3 {
                continue;
            }
            let items: Vec<String> = (0..u % 11)
                .map(|k| ((u * 31 + k * 17) % 997).to_string())
                .collect();
            train.push_str(&format!("{u} {} {}\n", items.join(" "), (u * 13) % 997));
            if u % 2 == 0 {
                test.push_str(&format!("{u} {}\n", (u * 5) % 1200));
            }
        }
        std::fs::write(&tr, &train).unwrap();
        std::fs::write(&te, &test).unwrap();
        for block_rows in [1, 64, 4096] {
            same_bytes(&tr, Some(&te), &ReadOptions::default(), block_rows);
        }
        same_bytes(&tr, None, &ReadOptions::default(), 100);
        let wide = ReadOptions {
            width: Some(5000),
            ..ReadOptions::default()
        };
        same_bytes(&tr, Some(&te), &wide, 100);
        // Bad lines skipped and counted the same way.
        std::fs::write(&tr, format!("{train}3001 1 x\n3002 4\n")).unwrap();
        let skip = ReadOptions {
            skip_bad_lines: true,
            ..ReadOptions::default()
        };
        same_bytes(&tr, Some(&te), &skip, 100);
    }

    #[test]
    fn a_far_item_costs_memory_in_proportion_to_the_data_and_the_bytes_are_the_same() {
        let d = dir("far");
        let tr = d.join("train.txt");
        // User 0 names an item past the dense floor before the rows that bring the width within
        // reach of the data (the frequency section is written: its sums start sparse), then a
        // far item no data reaches (no frequency section).
        let far = crate::key_sums::DENSE_FLOOR + 10;
        for (first, last) in [(far, 5), (far, 100_000_000)] {
            let mut train = format!("0 3 {first} 7\n");
            for u in 1..11_000 {
                let items: Vec<String> = (0..23).map(|k| ((u * 7 + k) % 900).to_string()).collect();
                train.push_str(&format!("{u} {} {first}\n", items.join(" ")));
            }
            train.push_str(&format!("11000 {last}\n"));
            std::fs::write(&tr, &train).unwrap();
            same_bytes(&tr, None, &ReadOptions::default(), 256);
            let meta = crate::packed::read::PackedFile::open(&d.join("streamed.wbp"))
                .unwrap()
                .meta
                .clone();
            assert_eq!(meta.frequencies.is_some(), last == 5, "{last}");
            assert_eq!(meta.width as usize, far.max(last) + 1);
        }
    }

    #[test]
    fn unordered_users_are_read_whole_and_bad_input_leaves_nothing() {
        let d = dir("bad");
        let (tr, out) = (d.join("train.txt"), d.join("out.wbp"));
        std::fs::write(&tr, "1 2 3\n0 4\n").unwrap();
        let none = pack_lightgcn(&tr, None, &ReadOptions::default(), "l", &out, options(8));
        assert!(none.unwrap().is_none());
        assert!(!out.exists());
        // A bad line: the file, line and column, and no output.
        std::fs::write(&tr, "0 1 2\n1 3 y\n").unwrap();
        let e = pack_lightgcn(&tr, None, &ReadOptions::default(), "l", &out, options(8));
        let e = e.unwrap_err();
        assert!(
            matches!(
                e,
                DataError::Parse {
                    line: 2,
                    column: 5,
                    ..
                }
            ),
            "{e}"
        );
        assert!(!out.exists());
        // A width set below an item.
        std::fs::write(&tr, "0 1 2\n1 30\n").unwrap();
        let narrow = ReadOptions {
            width: Some(10),
            ..ReadOptions::default()
        };
        let e = pack_lightgcn(&tr, None, &narrow, "l", &out, options(8)).unwrap_err();
        assert!(e.to_string().contains("beyond the set width 10"), "{e}");
        // No user at all.
        std::fs::write(&tr, "\n\n").unwrap();
        let e = pack_lightgcn(&tr, None, &ReadOptions::default(), "l", &out, options(8));
        assert!(matches!(e, Err(DataError::Empty { .. })));
        assert!(std::fs::read_dir(&d).unwrap().all(|f| {
            let name = f.unwrap().file_name();
            name == "train.txt"
        }));
    }
}
