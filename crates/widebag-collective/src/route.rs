//! Row-wise sharding of a table across ranks (TorchRec's row-wise plan): the block owner of each
//! id (`owner = id / ceil(rows / ranks)`), and the two exchanges of a step built on it. Forward:
//! each rank sends its batch's unique ids to their owners (all-to-all), the owners gather those
//! rows and send them back, and the rank puts them in its batch's order. Backward: the rows'
//! gradients go back along the same route, and each owner sums what every rank sent for each of
//! its ids, in rank order, into one gradient per id of the union: the rows its optimizer updates.

use crate::error::CollectiveError;
use crate::group::Collective;
/// Named here too, where the routes built on it are.
pub use crate::partition::BlockSharding;

/// One rank's route for a step: its unique ids split by owner, and what each rank asked of this
/// one (the ids this rank gathers and, in backward, receives gradients for).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Route {
    pub sharding: BlockSharding,
    /// Per owner, the ids this rank asks it for (ascending: a sorted slice of `unique_ids`).
    pub asked: Vec<Vec<u32>>,
    /// Per requesting rank, the ids of this rank's block it asked for (ascending).
    pub requested: Vec<Vec<u32>>,
}

impl Route {
    /// Sends this rank's sorted, deduplicated `unique_ids` to their owners.
    pub fn exchange_ids(
        c: &(impl Collective + ?Sized),
        sharding: BlockSharding,
        unique_ids: &[u32],
    ) -> Result<Self, CollectiveError> {
        let mut asked = vec![Vec::new(); c.size()];
        for &id in unique_ids {
            asked[sharding.owner(id)].push(id);
        }
        let requested = c.all_to_all_u32(asked.clone())?;
        Ok(Self {
            sharding,
            asked,
            requested,
        })
    }

    /// The ids of this rank's block that any rank asked for: the union, ascending.
    pub fn owned_union(&self) -> Vec<u32> {
        let mut all: Vec<u32> = self.requested.iter().flatten().copied().collect();
        all.sort_unstable();
        all.dedup();
        all
    }

    /// Forward: `gather(ids)` returns this rank's rows (`dim` wide, row-major) for ids of its
    /// block; every rank's requests are answered and this rank's own rows come back, in the order
    /// of its `unique_ids`, `[unique, dim]`. A failed gather returns before the exchange (the
    /// other ranks then wait for this one until their collective gives up).
    pub fn fetch_rows<E: From<CollectiveError>>(
        &self,
        c: &(impl Collective + ?Sized),
        dim: usize,
        mut gather: impl FnMut(&[u32]) -> Result<Vec<f32>, E>,
    ) -> Result<Vec<f32>, E> {
        let answers = self
            .requested
            .iter()
            .map(|ids| gather(ids))
            .collect::<Result<Vec<Vec<f32>>, E>>()?;
        for (ids, rows) in self.requested.iter().zip(&answers) {
            check_len("fetch_rows", ids.len() * dim, rows.len(), c.rank())?;
        }
        let got = c.all_to_all_f32(answers)?;
        // Owners are blocks of ascending ids, so asking owner by owner kept the ids' order.
        let mut rows = Vec::with_capacity(got.iter().map(Vec::len).sum());
        for (owner, part) in got.into_iter().enumerate() {
            check_len(
                "fetch_rows",
                self.asked[owner].len() * dim,
                part.len(),
                owner,
            )?;
            rows.extend(part);
        }
        Ok(rows)
    }

    /// Backward: this rank's gradients of its `unique_ids`' rows (`[unique, dim]`, in their
    /// order) go to the owners; returns this rank's owned union ([`Self::owned_union`]) with each
    /// id's gradient summed over the ranks that sent one, in rank order.
    pub fn return_grads(
        &self,
        c: &(impl Collective + ?Sized),
        dim: usize,
        grads: &[f32],
    ) -> Result<(Vec<u32>, Vec<f32>), CollectiveError> {
        let total: usize = self.asked.iter().map(Vec::len).sum();
        check_len("return_grads", total * dim, grads.len(), c.rank())?;
        let mut send = Vec::with_capacity(self.asked.len());
        let mut at = 0;
        for ids in &self.asked {
            send.push(grads[at * dim..(at + ids.len()) * dim].to_vec());
            at += ids.len();
        }
        let got = c.all_to_all_f32(send)?;
        let union = self.owned_union();
        let mut sum = vec![0.0f32; union.len() * dim];
        for (rank, (ids, part)) in self.requested.iter().zip(&got).enumerate() {
            check_len("return_grads", ids.len() * dim, part.len(), rank)?;
            for (k, id) in ids.iter().enumerate() {
                let u = union
                    .binary_search(id)
                    .expect("every requested id is in the union");
                let (dst, src) = (
                    &mut sum[u * dim..(u + 1) * dim],
                    &part[k * dim..(k + 1) * dim],
                );
                dst.iter_mut().zip(src).for_each(|(d, s)| *d += s);
            }
        }
        Ok((union, sum))
    }
}

fn check_len(
    op: &'static str,
    want: usize,
    got: usize,
    rank: usize,
) -> Result<(), CollectiveError> {
    match got == want {
        true => Ok(()),
        false => Err(CollectiveError::Mismatch {
            op,
            rank,
            got,
            want,
        }),
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::check::check_ids;
    use crate::threads::ThreadGroup;

    #[test]
    fn blocks_cover_the_rows_once() {
        for (rows, ranks) in [(10, 3), (9, 3), (2, 3), (240_000, 8), (1, 1)] {
            let s = BlockSharding::new(rows, ranks);
            let mut next = 0;
            for r in 0..ranks {
                let range = s.rows_of(r);
                assert_eq!(range.start, next.min(rows));
                next = range.end;
                for id in range {
                    assert_eq!(s.owner(id as u32), r);
                }
            }
            assert_eq!(next, rows);
        }
    }

    #[test]
    fn rows_come_back_in_order_and_gradients_sum_at_their_owner() {
        for size in [1, 2, 3, 4] {
            let out = ThreadGroup::run(size, Duration::from_secs(30), |c| {
                crate::check::self_check(&c).map_err(|e| e.to_string())
            });
            for r in out {
                r.unwrap().unwrap();
            }
        }
    }

    #[test]
    fn a_wrong_number_of_rows_is_an_error_not_a_panic() {
        let sharding = BlockSharding::new(50, 2);
        let out = ThreadGroup::run(2, Duration::from_secs(30), |c| {
            let route = Route::exchange_ids(&c, sharding, &check_ids(c.rank())).unwrap();
            let short = route.return_grads(&c, 3, &[0.0; 2]);
            matches!(short, Err(CollectiveError::Mismatch { .. }))
        });
        assert!(out.into_iter().all(|r| r.unwrap()));
    }
}
