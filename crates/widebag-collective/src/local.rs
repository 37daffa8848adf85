//! The group of one: a single process is the one-rank case of every multi-process path, and
//! its collectives are no-ops (an exchange hands the buffers back as they are, without a copy;
//! a reduction leaves the buffer alone). The trainer skips its exchanges at one rank, so a
//! single process allocates nothing for them; `Local` is what those paths are handed.

use crate::error::CollectiveError;
use crate::group::Collective;

/// Rank 0 of a group of 1.
#[derive(Clone, Copy, Debug, Default)]
pub struct Local;

impl Collective for Local {
    fn rank(&self) -> usize {
        0
    }

    fn size(&self) -> usize {
        1
    }

    fn all_to_all_u32(&self, send: Vec<Vec<u32>>) -> Result<Vec<Vec<u32>>, CollectiveError> {
        check_destinations("all_to_all_u32", send.len())?;
        Ok(send)
    }

    fn all_to_all_f32(&self, send: Vec<Vec<f32>>) -> Result<Vec<Vec<f32>>, CollectiveError> {
        check_destinations("all_to_all_f32", send.len())?;
        Ok(send)
    }

    fn all_gather_f32(&self, local: &[f32]) -> Result<Vec<Vec<f32>>, CollectiveError> {
        Ok(vec![local.to_vec()])
    }

    fn all_reduce_sum(&self, _buf: &mut [f32]) -> Result<(), CollectiveError> {
        Ok(())
    }

    fn all_reduce_max(&self, _buf: &mut [f32]) -> Result<(), CollectiveError> {
        Ok(())
    }

    fn barrier(&self) -> Result<(), CollectiveError> {
        Ok(())
    }
}

fn check_destinations(op: &'static str, got: usize) -> Result<(), CollectiveError> {
    match got {
        1 => Ok(()),
        _ => Err(CollectiveError::Destinations { op, got, size: 1 }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exchanges_hand_the_buffers_back_without_a_copy() {
        let send = vec![vec![1.0f32, 2.0, 3.0]];
        let at = send[0].as_ptr();
        let got = Local.all_to_all_f32(send).unwrap();
        assert_eq!(got, vec![vec![1.0, 2.0, 3.0]]);
        assert_eq!(got[0].as_ptr(), at, "the same allocation comes back");
        let mut buf = [1.5f32, -2.0];
        Local.all_reduce_sum(&mut buf).unwrap();
        Local.all_reduce_max(&mut buf).unwrap();
        assert_eq!(buf, [1.5, -2.0]);
        assert_eq!(Local.all_gather_f32(&[4.0]).unwrap(), vec![vec![4.0]]);
        assert_eq!((Local.rank(), Local.size()), (0, 1));
    }

    #[test]
    fn an_exchange_with_other_destinations_is_refused() {
        let e = Local.all_to_all_u32(vec![vec![1], vec![2]]).unwrap_err();
        assert_eq!(
            e,
            CollectiveError::Destinations {
                op: "all_to_all_u32",
                got: 2,
                size: 1
            }
        );
    }
}
