//! A user vector beside the bag (`data.user_vector`): each LightGCN user's own id column, past
//! the items, in its input row, so the input table holds one learned row per user that is added
//! to the pooled items, as SimpleX mixes a user's own vector with the mean of its items' vectors.

use widebag_csr::CsrBatch;

use crate::error::DataError;

/// Where the users' columns are: user `u` (`u < n_users`) is column `base + u` with value `value`;
/// the input is then `base + n_users` wide.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct UserColumns {
    /// The items' width: the first user column.
    pub base: usize,
    /// Users with a column (the training file's rows).
    pub n_users: usize,
    /// Each user column's value in the bag (before `data.normalize`).
    pub value: f32,
}

impl UserColumns {
    /// The input width with the users' columns.
    pub fn width(&self) -> usize {
        self.base + self.n_users
    }

    /// User `user`'s column; none for a user past the training file's.
    pub fn column(&self, user: usize) -> Option<u32> {
        (user < self.n_users).then(|| (self.base + user) as u32)
    }

    /// `batch` (its rows those of `users`, in order) with each user's column beside its items.
    pub fn add(
        &self,
        batch: &CsrBatch,
        users: impl Iterator<Item = usize>,
    ) -> Result<CsrBatch, DataError> {
        let columns: Vec<Option<u32>> = users.map(|u| self.column(u)).collect();
        Ok(batch.with_row_columns(&columns, self.value, self.width())?)
    }
}

#[cfg(test)]
mod tests {
    use widebag_csr::{RowTarget, SparseRow};

    use super::*;

    #[test]
    fn each_user_gets_its_own_column_past_the_items() {
        let rows = vec![SparseRow::bag(vec![0, 2]), SparseRow::bag(vec![1])];
        let targets: Vec<RowTarget> = rows.iter().cloned().map(RowTarget::Bag).collect();
        let batch = CsrBatch::from_rows(&rows, &targets, 3, 3).unwrap();
        let u = UserColumns {
            base: 3,
            n_users: 4,
            value: 0.5,
        };
        let with = u.add(&batch, [3usize, 9].into_iter()).unwrap();
        assert_eq!((with.width(), with.row_ptr()), (7, &[0usize, 3, 4][..]));
        assert_eq!(
            with.ids(),
            &[0, 2, 6, 1],
            "user 9 is past the file's users: no column"
        );
        assert_eq!(with.values(), &[1.0, 1.0, 0.5, 1.0]);
    }
}
