//! Interaction lists in the LightGCN format (`user item item …` per line), as in the Gowalla
//! split. Each user becomes one row: the bag of its training items (value 1), with the same bag
//! as target (autoencoder-style recommenders). The test file loads alongside, aligned by user, so
//! held-out items can be scored against the training bag.

use std::path::Path;

use crate::dataset::{Dataset, RowStore};
use crate::error::DataError;
use crate::lines::{LineError, parse_lines};
use crate::options::ReadOptions;

/// Training rows and the held-out items of each user (same row order).
#[derive(Clone, Debug)]
pub struct Interactions {
    pub train: Dataset,
    pub test: Option<RowStore>,
}

/// A user id and the items of one line.
pub(crate) type UserItems = (u32, Vec<u32>);

/// User ids may run past the lines by this factor, plus [`MAX_USERS_SLACK`] (users without a
/// line are empty rows).
pub(crate) const MAX_USERS_PER_LINE: usize = 16;
pub(crate) const MAX_USERS_SLACK: usize = 1 << 20;

/// The whitespace-separated tokens of a line with their 1-based columns; a line that is not
/// UTF-8 is an error at its first bad byte. A token starts at a non-whitespace character after
/// an ASCII whitespace byte (or the line's start) and ends at the next whitespace character.
fn tokens(line: &[u8]) -> Result<Box<dyn Iterator<Item = (usize, &str)> + '_>, LineError> {
    let text = std::str::from_utf8(line).map_err(|e| {
        (
            e.valid_up_to() + 1,
            "the line is not valid UTF-8".to_string(),
        )
    })?;
    if text.is_ascii() {
        return Ok(Box::new(ascii_tokens(text)));
    }
    Ok(Box::new(char_tokens(text)))
}

/// [`tokens`] of any text, character by character.
fn char_tokens(text: &str) -> impl Iterator<Item = (usize, &str)> {
    text.char_indices()
        .filter(|&(i, c)| {
            !c.is_whitespace() && (i == 0 || text.as_bytes()[i - 1].is_ascii_whitespace())
        })
        .map(|(i, _)| {
            let end = text[i..]
                .find(char::is_whitespace)
                .map_or(text.len(), |e| i + e);
            (i + 1, &text[i..end])
        })
}

/// [`tokens`] of an ASCII line, byte by byte (the same tokens: among ASCII characters, only the
/// vertical tab is whitespace to `char` and not to `u8::is_ascii_whitespace`).
fn ascii_tokens(text: &str) -> impl Iterator<Item = (usize, &str)> {
    let b = text.as_bytes();
    let space = |c: u8| c.is_ascii_whitespace() || c == 0x0b;
    let mut i = 0;
    std::iter::from_fn(move || {
        while i < b.len() && (space(b[i]) || (i > 0 && !b[i - 1].is_ascii_whitespace())) {
            i += 1;
        }
        if i >= b.len() {
            return None;
        }
        let start = i;
        while i < b.len() && !space(b[i]) {
            i += 1;
        }
        Some((start + 1, &text[start..i]))
    })
}

fn user_of((col, user): (usize, &str)) -> Result<u32, LineError> {
    user.parse().map_err(|_| {
        (
            col,
            format!("user id `{user}` is not a non-negative integer"),
        )
    })
}

fn item_of((col, t): (usize, &str)) -> Result<u32, LineError> {
    t.parse::<u32>()
        .map_err(|_| (col, format!("item id `{t}` is not a non-negative integer")))
}

pub(crate) fn parse_line(line: &[u8]) -> Result<Option<UserItems>, LineError> {
    let mut tokens = tokens(line)?;
    let Some(user) = tokens.next() else {
        return Ok(None);
    };
    let user = user_of(user)?;
    let items = tokens.map(item_of).collect::<Result<Vec<u32>, _>>()?;
    Ok(Some((user, items)))
}

/// [`parse_line`]'s user and largest item, with its errors, without holding the items.
pub(crate) fn scan_line(line: &[u8]) -> Result<Option<(u32, Option<u32>)>, LineError> {
    let mut tokens = tokens(line)?;
    let Some(user) = tokens.next() else {
        return Ok(None);
    };
    let user = user_of(user)?;
    let max = tokens.try_fold(None, |m: Option<u32>, t| Ok(m.max(Some(item_of(t)?))))?;
    Ok(Some((user, max)))
}

/// The lines of one interaction file (in file order) and the number skipped as bad.
pub(crate) fn read_file(
    path: &Path,
    options: &ReadOptions,
) -> Result<(Vec<UserItems>, usize), DataError> {
    let (lines, skipped) = parse_lines(path, options.skip_bad_lines, parse_line)?;
    Ok((lines.into_iter().map(|(_, u)| u).collect(), skipped))
}

/// A user's items as its row holds them: ascending, each once.
pub(crate) fn as_bag(items: &mut Vec<u32>) {
    items.sort_unstable();
    items.dedup();
}

fn to_rows(users: &[UserItems], n_users: usize) -> RowStore {
    let mut by_user: Vec<Vec<u32>> = vec![Vec::new(); n_users];
    for (u, items) in users {
        by_user[*u as usize].extend_from_slice(items);
    }
    let mut rows = RowStore::new();
    for mut items in by_user {
        as_bag(&mut items);
        let ones = vec![1.0; items.len()];
        rows.push(&items, &ones, &items, &ones);
    }
    rows
}

/// The width and the number of users of interaction files (`lines` lines in all) whose largest
/// user and item are these: the width is the largest item plus one unless set, and users are
/// rows by id. A width set below an item, or a user id far past the lines, is an error;
/// `max_user_at` says where the largest user is (file, line), asked only for that error.
pub(crate) fn shape<'p>(
    train: &Path,
    options: &ReadOptions,
    max_user: u32,
    max_item: Option<u32>,
    lines: usize,
    max_user_at: impl FnOnce() -> (&'p Path, usize),
) -> Result<(usize, usize), DataError> {
    let width = options
        .width
        .unwrap_or_else(|| max_item.map_or(0, |m| m as usize + 1));
    if let Some(w) = options.width
        && max_item.is_some_and(|m| m as usize >= w)
    {
        return Err(DataError::InvalidSpec {
            key: "data.width",
            message: format!(
                "item id {} in {} is beyond the set width {w}",
                max_item.unwrap_or(0),
                train.display()
            ),
        });
    }
    // Users are rows by id: an id far past the file's lines would make that many empty rows,
    // memory the file does not hold (the fuzzer found a user id of 2,001,020,010 in a
    // 17-byte file).
    let n_users = max_user as usize + 1;
    if n_users > MAX_USERS_PER_LINE * lines + MAX_USERS_SLACK {
        let (path, line) = max_user_at();
        return Err(DataError::InvalidSpec {
            key: "data.path",
            message: format!(
                "{}: user id {max_user} is far past its {lines} lines (line {line} or after): \
                 LightGCN files number users 0 … n − 1",
                path.display(),
            ),
        });
    }
    Ok((width, n_users))
}

/// Reads `train` (and `test`, if given). Users are rows by id (a user with no line is an empty
/// row); the width is the largest item id in either file plus one, unless set.
pub fn read_lightgcn(
    train: &Path,
    test: Option<&Path>,
    options: &ReadOptions,
) -> Result<Interactions, DataError> {
    let (train_users, mut skipped) = read_file(train, options)?;
    let test_users = match test {
        Some(p) => {
            let (t, s) = read_file(p, options)?;
            skipped += s;
            Some(t)
        }
        None => None,
    };
    if train_users.is_empty() {
        return Err(DataError::Empty {
            path: train.to_path_buf(),
        });
    }
    let all = train_users.iter().chain(test_users.iter().flatten());
    let (max_user, max_item) = all.fold((0u32, None::<u32>), |(mu, mi), (u, items)| {
        (mu.max(*u), mi.max(items.iter().max().copied()))
    });
    let lines = train_users.len() + test_users.as_ref().map_or(0, Vec::len);
    let (width, n_users) = shape(train, options, max_user, max_item, lines, || {
        [
            (train, &train_users),
            (
                test.unwrap_or(train),
                test_users.as_ref().unwrap_or(&train_users),
            ),
        ]
        .into_iter()
        .find_map(|(p, users)| {
            users
                .iter()
                .position(|(u, _)| *u == max_user)
                .map(|i| (p, i + 1))
        })
        .unwrap_or((train, 1))
    })?;
    Ok(Interactions {
        train: Dataset {
            source: train.to_path_buf(),
            width,
            n_classes: width,
            rows: to_rows(&train_users, n_users),
            skipped_lines: skipped,
            notes: vec![format!("{n_users} users")],
        },
        test: test_users.map(|t| to_rows(&t, n_users)),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ascii_lines_split_as_the_character_path_splits_them() {
        let pieces = [
            "1", "23", " ", "\t", "\x0b", "\x0c", "\r", "x", "  ", "\x0b7",
        ];
        let mut x = 7u64;
        for _ in 0..20_000 {
            let mut line = String::new();
            for _ in 0..(x % 9) {
                x = x
                    .wrapping_mul(6364136223846793005)
                    .wrapping_add(1442695040888963407);
                line.push_str(pieces[(x >> 33) as usize % pieces.len()]);
            }
            let fast: Vec<_> = ascii_tokens(&line).collect();
            assert_eq!(fast, char_tokens(&line).collect::<Vec<_>>(), "{line:?}");
        }
    }

    #[test]
    fn parses_users_and_items_with_columns() {
        assert_eq!(parse_line(b"3 10 2 7").unwrap(), Some((3, vec![10, 2, 7])));
        assert_eq!(parse_line(b"   ").unwrap(), None);
        assert_eq!(parse_line(b"5").unwrap(), Some((5, vec![])));
        assert_eq!(parse_line(b"1 2 x3").unwrap_err().0, 5);
        assert_eq!(parse_line(b"1 \xff").unwrap_err().0, 3);
    }

    #[test]
    fn train_and_test_align_by_user() {
        let dir = std::env::temp_dir().join(format!("widebag-lgcn-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let (tr, te) = (dir.join("train.txt"), dir.join("test.txt"));
        std::fs::write(&tr, "0 1 2\n2 5 1 1\n").unwrap();
        std::fs::write(&te, "0 3\n1 6\n2 4\n").unwrap();
        let d = read_lightgcn(&tr, Some(&te), &ReadOptions::default()).unwrap();
        assert_eq!(d.train.n_rows(), 3);
        assert_eq!(d.train.width, 7);
        assert_eq!(d.train.rows.row(1).0, &[] as &[u32]);
        assert_eq!(d.train.rows.row(2).0, &[1, 5]);
        assert_eq!(d.test.as_ref().unwrap().row(1).0, &[6]);
    }
}
