//! N ranks as threads of one process, for tests: each collective is one round of a shared
//! mailbox (every rank posts its messages, waits until all have posted, takes its own, and the
//! last to take opens the next round). A rank that panics marks itself gone, so the others fail
//! with [`CollectiveError::PeerGone`] instead of waiting; a rank that never arrives makes them
//! fail after the group's timeout.

use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use crate::error::CollectiveError;
use crate::group::Collective;

#[derive(Debug)]
enum Payload {
    U32(Vec<u32>),
    F32(Vec<f32>),
}

impl Payload {
    // Every rank runs the same collective in the same round, so the kinds always agree.
    fn u32s(self) -> Vec<u32> {
        match self {
            Payload::U32(v) => v,
            Payload::F32(_) => unreachable!("every rank runs the same collective"),
        }
    }

    fn f32s(self) -> Vec<f32> {
        match self {
            Payload::F32(v) => v,
            Payload::U32(_) => unreachable!("every rank runs the same collective"),
        }
    }
}

#[derive(Debug)]
struct Round {
    /// `mail[dst][src]`.
    mail: Vec<Vec<Option<Payload>>>,
    posted: usize,
    /// Every rank has posted: the mail is being taken.
    ready: bool,
    taken: usize,
    gone: Option<usize>,
}

#[derive(Debug)]
struct Shared {
    round: Mutex<Round>,
    changed: Condvar,
    timeout: Duration,
}

/// Makes the ranks of a thread group.
pub struct ThreadGroup;

impl ThreadGroup {
    /// `size` ranks (hand one to each thread) that give up waiting after `timeout`.
    pub fn ranks(size: usize, timeout: Duration) -> Vec<ThreadRank> {
        let shared = Arc::new(Shared {
            round: Mutex::new(Round {
                mail: (0..size)
                    .map(|_| (0..size).map(|_| None).collect())
                    .collect(),
                posted: 0,
                ready: false,
                taken: 0,
                gone: None,
            }),
            changed: Condvar::new(),
            timeout,
        });
        (0..size)
            .map(|rank| ThreadRank {
                rank,
                size,
                shared: Arc::clone(&shared),
            })
            .collect()
    }

    /// Runs `f(rank)` on `size` threads and returns their results by rank.
    pub fn run<T: Send>(
        size: usize,
        timeout: Duration,
        f: impl Fn(ThreadRank) -> T + Sync,
    ) -> Vec<std::thread::Result<T>> {
        let ranks = Self::ranks(size, timeout);
        std::thread::scope(|s| {
            let handles: Vec<_> = ranks
                .into_iter()
                .map(|r| {
                    let f = &f;
                    s.spawn(move || f(r))
                })
                .collect();
            handles.into_iter().map(|h| h.join()).collect()
        })
    }
}

/// One rank of a [`ThreadGroup`].
#[derive(Debug)]
pub struct ThreadRank {
    rank: usize,
    size: usize,
    shared: Arc<Shared>,
}

impl Drop for ThreadRank {
    fn drop(&mut self) {
        if std::thread::panicking() {
            let mut r = self.shared.round.lock().unwrap_or_else(|p| p.into_inner());
            r.gone.get_or_insert(self.rank);
            self.shared.changed.notify_all();
        }
    }
}

impl ThreadRank {
    /// Leaves the group after a failure of this rank: the other ranks' collectives fail at once
    /// with [`CollectiveError::PeerGone`] instead of waiting out the timeout.
    pub fn abandon(&self) {
        let mut r = self.shared.round.lock().unwrap_or_else(|p| p.into_inner());
        r.gone.get_or_insert(self.rank);
        self.shared.changed.notify_all();
    }

    fn wait<'a>(
        &self,
        mut r: MutexGuard<'a, Round>,
        op: &'static str,
        until: impl Fn(&Round) -> bool,
    ) -> Result<MutexGuard<'a, Round>, CollectiveError> {
        let start = Instant::now();
        loop {
            if let Some(rank) = r.gone {
                return Err(CollectiveError::PeerGone {
                    rank,
                    me: self.rank,
                    op,
                });
            }
            if until(&r) {
                return Ok(r);
            }
            let left = self.shared.timeout.saturating_sub(start.elapsed());
            if left.is_zero() {
                return Err(CollectiveError::Timeout {
                    me: self.rank,
                    op,
                    waited_s: self.shared.timeout.as_secs(),
                });
            }
            r = self
                .shared
                .changed
                .wait_timeout(r, left)
                .unwrap_or_else(|p| p.into_inner())
                .0;
        }
    }

    /// One round: posts `send[dst]` to each rank and returns what each rank posted to this one.
    fn exchange(
        &self,
        send: Vec<Payload>,
        op: &'static str,
    ) -> Result<Vec<Payload>, CollectiveError> {
        if send.len() != self.size {
            return Err(CollectiveError::Destinations {
                op,
                got: send.len(),
                size: self.size,
            });
        }
        let r = self.shared.round.lock().unwrap_or_else(|p| p.into_inner());
        // The previous round's mail is still being taken.
        let mut r = self.wait(r, op, |r| !r.ready)?;
        for (dst, p) in send.into_iter().enumerate() {
            r.mail[dst][self.rank] = Some(p);
        }
        r.posted += 1;
        if r.posted == self.size {
            r.posted = 0;
            r.ready = true;
            self.shared.changed.notify_all();
        }
        let mut r = self.wait(r, op, |r| r.ready)?;
        let got: Vec<Payload> = r.mail[self.rank]
            .iter_mut()
            .map(|p| p.take().expect("every rank posted"))
            .collect();
        r.taken += 1;
        if r.taken == self.size {
            r.taken = 0;
            r.ready = false;
            self.shared.changed.notify_all();
        }
        Ok(got)
    }
}

impl Collective for ThreadRank {
    fn rank(&self) -> usize {
        self.rank
    }

    fn size(&self) -> usize {
        self.size
    }

    fn all_to_all_u32(&self, send: Vec<Vec<u32>>) -> Result<Vec<Vec<u32>>, CollectiveError> {
        let send = send.into_iter().map(Payload::U32).collect();
        let got = self.exchange(send, "all_to_all")?;
        Ok(got.into_iter().map(Payload::u32s).collect())
    }

    fn all_to_all_f32(&self, send: Vec<Vec<f32>>) -> Result<Vec<Vec<f32>>, CollectiveError> {
        let send = send.into_iter().map(Payload::F32).collect();
        let got = self.exchange(send, "all_to_all")?;
        Ok(got.into_iter().map(Payload::f32s).collect())
    }

    fn all_gather_f32(&self, local: &[f32]) -> Result<Vec<Vec<f32>>, CollectiveError> {
        let send = (0..self.size)
            .map(|_| Payload::F32(local.to_vec()))
            .collect();
        let got = self.exchange(send, "all_gather")?;
        Ok(got.into_iter().map(Payload::f32s).collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const WAIT: Duration = Duration::from_secs(20);

    fn ok<T>(results: Vec<std::thread::Result<T>>) -> Vec<T> {
        results
            .into_iter()
            .map(|r| r.expect("no rank panicked"))
            .collect()
    }

    #[test]
    fn all_reduce_sums_in_rank_order_with_the_same_bits_everywhere() {
        for size in [1, 2, 3, 5] {
            let out = ok(ThreadGroup::run(size, WAIT, |c| {
                let r = c.rank() as f32;
                let mut buf = vec![0.1 * (r + 1.0), 1e8 * (r - 1.0), -r];
                c.all_reduce_sum(&mut buf).unwrap();
                let mut top = vec![r, -r];
                c.all_reduce_max(&mut top).unwrap();
                (buf, top)
            }));
            let want: Vec<f32> = (0..3)
                .map(|i| {
                    (0..size)
                        .map(|r| {
                            let r = r as f32;
                            [0.1 * (r + 1.0), 1e8 * (r - 1.0), -r][i]
                        })
                        .fold(None, |acc: Option<f32>, x| Some(acc.map_or(x, |a| a + x)))
                        .unwrap()
                })
                .collect();
            for (buf, top) in &out {
                assert_eq!(buf, &want, "size {size}");
                assert_eq!(top, &vec![(size - 1) as f32, 0.0]);
            }
        }
    }

    #[test]
    fn all_to_all_delivers_each_message_to_its_rank_by_source() {
        let out = ok(ThreadGroup::run(3, WAIT, |c| {
            let me = c.rank() as u32;
            // To rank d: d + 1 copies of 10·me + d (lengths differ by destination).
            let send = (0..3u32)
                .map(|d| vec![10 * me + d; d as usize + 1])
                .collect();
            c.all_to_all_u32(send).unwrap()
        }));
        for (d, got) in out.iter().enumerate() {
            for (src, v) in got.iter().enumerate() {
                assert_eq!(v, &vec![10 * src as u32 + d as u32; d + 1]);
            }
        }
    }

    #[test]
    fn many_rounds_in_a_row_neither_mix_nor_stall() {
        let out = ok(ThreadGroup::run(4, WAIT, |c| {
            let mut total = 0.0f64;
            for i in 0..2_000 {
                let mut x = [(c.rank() * i) as f32];
                c.all_reduce_sum(&mut x).unwrap();
                let g = c.all_gather_f32(&[i as f32, c.rank() as f32]).unwrap();
                assert!(
                    g.iter()
                        .enumerate()
                        .all(|(r, v)| v == &[i as f32, r as f32])
                );
                total += x[0] as f64;
            }
            c.barrier().unwrap();
            total
        }));
        let want: f64 = (0..2_000).map(|i| (6 * i) as f64).sum();
        assert!(out.iter().all(|&t| t == want), "{out:?}");
    }

    #[test]
    fn a_rank_that_abandons_fails_the_others_at_once() {
        let start = Instant::now();
        let out = ok(ThreadGroup::run(3, Duration::from_secs(60), |c| {
            if c.rank() == 2 {
                c.abandon();
                return true;
            }
            let mut x = [1.0];
            matches!(
                c.all_reduce_sum(&mut x),
                Err(CollectiveError::PeerGone { rank: 2, .. })
            )
        }));
        assert!(out.into_iter().all(|failed| failed));
        assert!(start.elapsed() < Duration::from_secs(10));
    }

    #[test]
    fn a_rank_that_panics_fails_the_others_instead_of_hanging() {
        let start = Instant::now();
        let out = ThreadGroup::run(3, Duration::from_secs(60), |c| {
            if c.rank() == 1 {
                panic!("rank 1 fails");
            }
            let mut x = [1.0];
            c.all_reduce_sum(&mut x)
        });
        assert!(out[1].is_err());
        for r in [0, 2] {
            let e = out[r].as_ref().unwrap().as_ref().unwrap_err();
            assert!(
                matches!(e, CollectiveError::PeerGone { rank: 1, .. }),
                "{e}"
            );
        }
        assert!(start.elapsed() < Duration::from_secs(30));
    }

    #[test]
    fn a_rank_that_never_arrives_times_the_others_out() {
        let out = ok(ThreadGroup::run(2, Duration::from_millis(200), |c| {
            if c.rank() == 0 {
                return Ok(());
            }
            c.barrier()
        }));
        assert!(matches!(
            out[1],
            Err(CollectiveError::Timeout { me: 1, .. })
        ));
    }

    #[test]
    fn contributions_of_different_lengths_are_an_error_not_garbage() {
        let out = ok(ThreadGroup::run(2, WAIT, |c| {
            let mut buf = vec![1.0; 2 + c.rank()];
            c.all_reduce_sum(&mut buf)
        }));
        assert!(
            out.iter()
                .all(|r| matches!(r, Err(CollectiveError::Mismatch { .. })))
        );
    }
}
