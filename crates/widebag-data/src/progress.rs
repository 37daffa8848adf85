//! How far a long pass over data has come, told to whoever shows it (the CLI's progress bar)
//! through a callback, so the library draws nothing.

use std::sync::Arc;

/// A count to advance (source bytes read, rows written: the caller knows which it asked for);
/// [`Progress::NONE`] tells no one.
#[derive(Clone, Default)]
pub struct Progress(Option<Arc<dyn Fn(u64) + Send + Sync>>);

impl Progress {
    /// Tells no one.
    pub const NONE: Progress = Progress(None);

    /// Calls `f` with each advance.
    pub fn new(f: impl Fn(u64) + Send + Sync + 'static) -> Self {
        Self(Some(Arc::new(f)))
    }

    pub fn advance(&self, n: u64) {
        if let Some(f) = &self.0 {
            f(n);
        }
    }
}

impl std::fmt::Debug for Progress {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(if self.0.is_some() {
            "Progress(..)"
        } else {
            "Progress::NONE"
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicU64, Ordering};

    #[test]
    fn advances_add_up_and_none_tells_no_one() {
        let seen = Arc::new(AtomicU64::new(0));
        let s = Arc::clone(&seen);
        let p = Progress::new(move |n| {
            s.fetch_add(n, Ordering::Relaxed);
        });
        p.advance(3);
        p.clone().advance(4);
        Progress::NONE.advance(100);
        assert_eq!(seen.load(Ordering::Relaxed), 7);
    }
}
