//! LightGCN interaction files read whole: each user a row (users without a line are empty rows),
//! the held-out file's rows aligned with the training file's by user.

use std::path::Path;

use crate::dataset::{Dataset, RowStore};
use crate::error::DataError;
use crate::lightgcn::line::{UserItems, parse_line};
use crate::lines::parse_lines;
use crate::options::ReadOptions;

/// Training rows and the held-out items of each user (same row order).
#[derive(Clone, Debug)]
pub struct Interactions {
    pub train: Dataset,
    pub test: Option<RowStore>,
}

/// User ids may run past the lines by this factor, plus [`MAX_USERS_SLACK`] (users without a
/// line are empty rows).
pub(crate) const MAX_USERS_PER_LINE: usize = 16;
pub(crate) const MAX_USERS_SLACK: usize = 1 << 20;

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
