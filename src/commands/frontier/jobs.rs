//! Runs a frontier's runs as child processes, several at once only while they fit side by side:
//! the next run starts when fewer than `--jobs` run and its memory need (the ledger's peak, its
//! host tier and the data) fits beside theirs in the memory the device computes in. A machine
//! that does not report its memory runs one at a time.

use std::process::{Child, ExitStatus};
use std::time::{Duration, Instant};

/// One run to start: its place in the frontier and the bytes it needs.
#[derive(Clone, Copy, Debug)]
pub struct Job {
    pub index: usize,
    pub need_bytes: u64,
}

/// Whether a run needing `need_bytes` may start beside the running ones.
pub fn fits_beside(
    running: &[u64],
    need_bytes: u64,
    memory_bytes: Option<u64>,
    jobs: usize,
) -> bool {
    if running.is_empty() {
        return true;
    }
    let Some(memory) = memory_bytes else {
        return false;
    };
    running.len() < jobs
        && running
            .iter()
            .fold(need_bytes, |sum, b| sum.saturating_add(*b))
            <= memory
}

/// Threads each run may use: the machine's cores shared between the runs that may run at once
/// (`None`, the backend's own choice, for one at a time).
pub fn threads_each(jobs: usize, runs: usize) -> Option<usize> {
    let at_once = jobs.min(runs);
    if at_once <= 1 {
        return None;
    }
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    Some((cores / at_once).max(1))
}

/// Starts each job in order with `start` (given the `threads` each may use: [`threads_each`],
/// as the runs were planned), as `fits_beside` allows, and hands each to `finish` with its exit
/// status and wall seconds as it ends.
pub fn run_side_by_side(
    queue: &[Job],
    (memory_bytes, threads): (Option<u64>, Option<usize>),
    jobs: usize,
    mut start: impl FnMut(&Job, Option<usize>) -> anyhow::Result<Child>,
    mut finish: impl FnMut(&Job, std::io::Result<ExitStatus>, f64),
) -> anyhow::Result<()> {
    let mut running: Vec<(Job, Child, Instant)> = Vec::new();
    let mut next = 0;
    while next < queue.len() || !running.is_empty() {
        while next < queue.len() {
            let needs: Vec<u64> = running.iter().map(|(j, _, _)| j.need_bytes).collect();
            if !fits_beside(&needs, queue[next].need_bytes, memory_bytes, jobs) {
                break;
            }
            let job = queue[next];
            match start(&job, threads) {
                Ok(child) => running.push((job, child, Instant::now())),
                Err(e) => finish(&job, Err(std::io::Error::other(format!("{e:#}"))), 0.0),
            }
            next += 1;
        }
        let mut i = 0;
        while i < running.len() {
            let status = match running[i].1.try_wait() {
                Ok(None) => {
                    i += 1;
                    continue;
                }
                Ok(Some(status)) => Ok(status),
                Err(e) => Err(e),
            };
            let (job, _, started) = running.remove(i);
            finish(&job, status, started.elapsed().as_secs_f64());
        }
        if !running.is_empty() {
            std::thread::sleep(Duration::from_millis(100));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn runs_start_side_by_side_only_when_they_fit() {
        // Nothing running: anything starts, even over the memory (the plan refused what cannot).
        assert!(fits_beside(&[], 10, Some(5), 1));
        // One at a time.
        assert!(!fits_beside(&[1], 1, Some(100), 1));
        // Two fit; a third is over the count; a second over the memory waits.
        assert!(fits_beside(&[40], 60, Some(100), 2));
        assert!(!fits_beside(&[40, 10], 10, Some(100), 2));
        assert!(!fits_beside(&[40], 61, Some(100), 2));
        // Memory not reported: one at a time.
        assert!(!fits_beside(&[1], 1, None, 4));
        assert!(
            !fits_beside(&[u64::MAX], 1, Some(u64::MAX - 1), 2),
            "no overflow"
        );
    }

    #[test]
    fn runs_at_once_share_the_cores() {
        assert_eq!(threads_each(1, 5), None);
        assert_eq!(threads_each(4, 1), None);
        let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
        assert_eq!(threads_each(2, 5), Some((cores / 2).max(1)));
    }
}
