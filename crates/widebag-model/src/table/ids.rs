//! Sorted, distinct row ids: the only ids a table gathers, splits into segments or updates
//! (`scatter_nd` with duplicate indices races on GPUs; a host update walks them in order).

use crate::error::ModelError;

/// Row ids in strictly ascending order, checked once when built.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SortedIds<'a>(&'a [u32]);

impl<'a> SortedIds<'a> {
    /// `ids` if they ascend strictly; an error naming the first offending pair otherwise.
    pub fn new(ids: &'a [u32]) -> Result<Self, ModelError> {
        match ids.windows(2).position(|w| w[0] >= w[1]) {
            None => Ok(Self(ids)),
            Some(i) => Err(ModelError::Ids(format!(
                "id {} at position {i} is followed by {}",
                ids[i],
                ids[i + 1]
            ))),
        }
    }

    pub fn as_slice(&self) -> &'a [u32] {
        self.0
    }

    pub fn len(&self) -> usize {
        self.0.len()
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// The largest id, `None` when empty.
    pub fn last(&self) -> Option<u32> {
        self.0.last().copied()
    }

    /// Ids at positions `range` (still sorted and distinct).
    pub fn range(&self, range: std::ops::Range<usize>) -> SortedIds<'a> {
        SortedIds(&self.0[range])
    }

    /// The ids within `start..end`, shifted down by `start` (a band's local ids), and the
    /// position of the first of them.
    pub fn window(&self, start: u32, end: u32) -> (usize, SortedIdBuf) {
        let lo = self.0.partition_point(|&id| id < start);
        let hi = self.0.partition_point(|&id| id < end);
        (
            lo,
            SortedIdBuf(self.0[lo..hi].iter().map(|&id| id - start).collect()),
        )
    }
}

/// Owned sorted, distinct row ids.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SortedIdBuf(Vec<u32>);

impl SortedIdBuf {
    /// `ids` if they ascend strictly (see [`SortedIds::new`]).
    pub fn new(ids: Vec<u32>) -> Result<Self, ModelError> {
        SortedIds::new(&ids)?;
        Ok(Self(ids))
    }

    /// `ids` sorted, duplicates dropped.
    pub fn from_unsorted(mut ids: Vec<u32>) -> Self {
        ids.sort_unstable();
        ids.dedup();
        Self(ids)
    }

    pub fn ids(&self) -> SortedIds<'_> {
        SortedIds(&self.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unsorted_or_repeated_ids_are_refused() {
        assert!(SortedIds::new(&[0, 2, 9]).is_ok());
        assert!(SortedIds::new(&[]).is_ok());
        for bad in [&[3u32, 1][..], &[1, 1], &[0, 5, 4, 7]] {
            assert!(
                matches!(SortedIds::new(bad), Err(ModelError::Ids(_))),
                "{bad:?}"
            );
            assert!(SortedIdBuf::new(bad.to_vec()).is_err());
        }
        let fixed = SortedIdBuf::from_unsorted(vec![7, 1, 7, 3]);
        assert_eq!(fixed.ids().as_slice(), &[1, 3, 7]);
        let (first, local) = fixed.ids().window(2, 8);
        assert_eq!((first, local.ids().as_slice()), (1, &[1u32, 5][..]));
    }
}
