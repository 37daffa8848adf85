//! A LightGCN line's syntax: a user id, then its items, whitespace-separated, each a
//! non-negative integer; tokens are split byte by byte on an ASCII line, character by character
//! otherwise.

use crate::lines::LineError;

/// A user id and the items of one line.
pub(crate) type UserItems = (u32, Vec<u32>);

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
}
