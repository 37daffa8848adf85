//! What every implementation of [`Collective`] must deliver, as one check each rank runs: the
//! thread group's tests run it in-process, and `examples/mpi_check.rs` runs it under `mpirun`
//! (CI: `-np 2` and `-np 3`), so both transports are held to the same bits.

use crate::error::CollectiveError;
use crate::group::Collective;
use crate::partition::BlockSharding;
use crate::route::Route;

/// A failed check: what differed, on which rank.
#[derive(Debug, thiserror::Error)]
pub enum CheckError {
    #[error("{0}")]
    Collective(#[from] CollectiveError),
    #[error("rank {rank}: {what}")]
    Differs { rank: usize, what: String },
}

/// Runs every check on this rank; all ranks must call it.
pub fn self_check(c: &impl Collective) -> Result<(), CheckError> {
    let (me, size) = (c.rank(), c.size());
    let differs = |what: String| CheckError::Differs { rank: me, what };
    // all-to-all with variable counts: d + 1 copies of 10·me + d to rank d.
    let send = (0..size)
        .map(|d| vec![(10 * me + d) as u32; d + 1])
        .collect();
    for (src, v) in c.all_to_all_u32(send)?.iter().enumerate() {
        if v != &vec![(10 * src + me) as u32; me + 1] {
            return Err(differs(format!("all_to_all_u32 from {src}: {v:?}")));
        }
    }
    // all-gather of different lengths.
    let g = c.all_gather_f32(&vec![me as f32; me])?;
    if !g.iter().enumerate().all(|(r, v)| v == &vec![r as f32; r]) {
        return Err(differs(format!("all_gather_f32: {g:?}")));
    }
    // Reductions in rank order: the same bits as a single process adding them up.
    let contribution = |r: usize| [0.1 * (r as f32 + 1.0), 1e8 * (r as f32 - 1.0)];
    let mut x = contribution(me).to_vec();
    c.all_reduce_sum(&mut x)?;
    let want: Vec<f32> = (0..2)
        .map(|i| (1..size).fold(contribution(0)[i], |acc, r| acc + contribution(r)[i]))
        .collect();
    if x != want {
        return Err(differs(format!("all_reduce_sum {x:?}, want {want:?}")));
    }
    let mut m = vec![me as f32];
    c.all_reduce_max(&mut m)?;
    if m != vec![(size - 1) as f32] {
        return Err(differs(format!("all_reduce_max {m:?}")));
    }
    check_route(c)?;
    for _ in 0..100 {
        c.barrier()?;
    }
    Ok(())
}

/// Row `id` of the check's table: values naming the id and the column.
fn row(id: u32, dim: usize) -> impl Iterator<Item = f32> {
    (0..dim).map(move |j| id as f32 + j as f32 / 100.0)
}

/// Rank `rank`'s sorted unique ids of a 50-row table: overlapping between ranks, not every rank
/// asking every owner.
pub fn check_ids(rank: usize) -> Vec<u32> {
    let mut v: Vec<u32> = (0..40u32)
        .map(|k| (k * 7 + rank as u32 * 13) % 50)
        .filter(|id| !(id + rank as u32).is_multiple_of(3))
        .collect();
    v.sort_unstable();
    v.dedup();
    v
}

/// The row-wise exchange: rows come back in the batch's order, and each owner receives every
/// rank's gradient of each of its ids, summed in rank order (rank `r` sends `(r + 1) · row`).
fn check_route(c: &impl Collective) -> Result<(), CheckError> {
    let (me, size, dim) = (c.rank(), c.size(), 3);
    let differs = |what: String| CheckError::Differs { rank: me, what };
    let sharding = BlockSharding::new(50, size);
    let ids = check_ids(me);
    let route = Route::exchange_ids(c, sharding, &ids)?;
    let own = sharding.rows_of(me);
    let mut foreign = false;
    let rows = route.fetch_rows(c, dim, |ask| {
        foreign |= ask.iter().any(|&id| !own.contains(&(id as usize)));
        Ok::<_, CheckError>(ask.iter().flat_map(|&id| row(id, dim)).collect())
    })?;
    if foreign {
        return Err(differs("asked for rows of another block".into()));
    }
    if !rows
        .iter()
        .copied()
        .eq(ids.iter().flat_map(|&id| row(id, dim)))
    {
        return Err(differs("fetched rows out of order".into()));
    }
    let scale = (me + 1) as f32;
    let grads: Vec<f32> = rows.iter().map(|x| scale * x).collect();
    let (union, sum) = route.return_grads(c, dim, &grads)?;
    let mut want_union: Vec<u32> = (0..size)
        .flat_map(check_ids)
        .filter(|&id| own.contains(&(id as usize)))
        .collect();
    want_union.sort_unstable();
    want_union.dedup();
    if union != want_union {
        return Err(differs(format!("owned union {union:?}")));
    }
    for (k, &id) in union.iter().enumerate() {
        let senders: Vec<usize> = (0..size).filter(|&r| check_ids(r).contains(&id)).collect();
        let want = row(id, dim).map(|x| senders.iter().fold(0.0, |a, &r| a + (r + 1) as f32 * x));
        if !sum[k * dim..(k + 1) * dim].iter().copied().eq(want) {
            return Err(differs(format!("gradient of id {id}")));
        }
    }
    Ok(())
}
