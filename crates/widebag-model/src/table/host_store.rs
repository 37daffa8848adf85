//! Rows of a row-major host table: gathered by sorted unique ids, added to in place, or lent
//! as disjoint mutable slices (the ids are distinct, so the rows are too and the work runs in
//! parallel). The host tier and flex's resident tables use them; the host tier counts the bytes
//! it moves ([`Traffic`]).

use std::sync::atomic::{AtomicU64, Ordering};

use rayon::prelude::*;

use crate::table::ids::SortedIds;

/// Bytes a host-placed table sent to the device and received back.
#[derive(Debug, Default)]
pub struct Traffic {
    pub to_device_bytes: AtomicU64,
    pub to_host_bytes: AtomicU64,
}

impl Traffic {
    /// `(to_device_bytes, to_host_bytes)` so far.
    pub fn totals(&self) -> (u64, u64) {
        (
            self.to_device_bytes.load(Ordering::Relaxed),
            self.to_host_bytes.load(Ordering::Relaxed),
        )
    }
}

/// Rows `ids` (in range) of `host`, `[ids.len(), dim]` row-major.
pub fn gather(host: &[f32], dim: usize, ids: &[u32]) -> Vec<f32> {
    let mut out = vec![0.0f32; ids.len() * dim];
    out.par_chunks_mut(dim.max(1))
        .zip(ids.par_iter())
        .for_each(|(row, &id)| {
            let at = id as usize * dim;
            row.copy_from_slice(&host[at..at + dim]);
        });
    out
}

/// `host[uniq[i]] += delta[i]` (ids in range).
pub fn add(host: &mut [f32], dim: usize, uniq: SortedIds, delta: &[f32]) {
    split(host, dim, uniq)
        .into_par_iter()
        .zip(delta.par_chunks(dim.max(1)))
        .for_each(|(row, d)| {
            for (w, x) in row.iter_mut().zip(d) {
                *w += x;
            }
        });
}

/// Rows `uniq` (sorted, distinct, in range) of `host`, as disjoint mutable slices in order.
pub fn split<'a, T>(host: &'a mut [T], dim: usize, uniq: SortedIds) -> Vec<&'a mut [T]> {
    let mut rows: Vec<&mut [T]> = Vec::with_capacity(uniq.len());
    let mut rest: &mut [T] = host;
    let mut consumed = 0usize;
    for &id in uniq.as_slice() {
        let at = id as usize * dim - consumed;
        let (_, tail) = std::mem::take(&mut rest).split_at_mut(at);
        let (row, tail) = tail.split_at_mut(dim);
        rows.push(row);
        rest = tail;
        consumed = (id as usize + 1) * dim;
    }
    rows
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rows_are_gathered_added_and_split_by_id() {
        let mut host: Vec<f32> = (0..12).map(|x| x as f32).collect();
        let ids = SortedIds::new(&[0, 2]).unwrap();
        assert_eq!(gather(&host, 3, ids.as_slice()), [0., 1., 2., 6., 7., 8.]);
        add(&mut host, 3, ids, &[1., 1., 1., 2., 2., 2.]);
        assert_eq!(&host[..9], [1., 2., 3., 3., 4., 5., 8., 9., 10.]);
        let rows = split(&mut host, 3, SortedIds::new(&[1, 3]).unwrap());
        assert_eq!(rows.len(), 2);
        assert_eq!(rows[1], [9., 10., 11.]);
    }
}
