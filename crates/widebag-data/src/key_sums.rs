//! Per-key sums taken a row at a time (each id's count, each id's summed `|value|`): in a dense
//! array while the keys are of the order of the entries added, in a sorted map beyond, so an id
//! that claims a huge width (item 100,000,000 in a file of a thousand lines, id 4,294,967,295)
//! costs memory in proportion to the data, not to the claim. Each key's additions are made in
//! the order they come, whichever side holds it, so the sums are the dense array's to the bit.

use std::collections::BTreeMap;
use std::ops::AddAssign;

/// Keys below this are always summed in the dense array (8 MiB of `f64`s).
pub const DENSE_FLOOR: usize = 1 << 20;

/// Sums by `u32` key; see the module's documentation.
#[derive(Clone, Debug, Default)]
pub struct KeySums<T> {
    dense: Vec<T>,
    sparse: BTreeMap<u32, T>,
    added: usize,
}

impl<T: Copy + Default + AddAssign + PartialEq> KeySums<T> {
    pub fn new() -> Self {
        Self {
            dense: Vec::new(),
            sparse: BTreeMap::new(),
            added: 0,
        }
    }

    /// The dense array's longest length after the additions so far.
    fn dense_bound(&self) -> usize {
        DENSE_FLOOR.saturating_add(self.added.saturating_mul(4))
    }

    /// Adds `x` to `key`'s sum.
    #[inline]
    pub fn add(&mut self, key: u32, x: T) {
        self.added += 1;
        match self.dense.get_mut(key as usize) {
            Some(sum) => *sum += x,
            None => self.add_beyond(key, x),
        }
    }

    /// [`Self::add`] for a key past the dense array: it grows to the key when the data's size
    /// allows, else the key is summed in the map.
    /// Adds `x` to each of `keys`' sums, in order (as [`Self::add`] one at a time).
    #[inline]
    pub fn add_each(&mut self, keys: &[u32], x: T) {
        for &k in keys {
            self.add(k, x);
        }
    }

    #[cold]
    fn add_beyond(&mut self, key: u32, x: T) {
        let k = key as usize;
        if k < self.dense_bound() {
            self.grow(k + 1);
            self.dense[k] += x;
        } else {
            *self.sparse.entry(key).or_default() += x;
        }
    }

    /// Lengthens the dense array to `len`; the keys it now covers move over with their sums
    /// (each into a zero: exact).
    fn grow(&mut self, len: usize) {
        self.dense.resize(len, T::default());
        let moved = match u32::try_from(len) {
            Ok(end) => {
                let rest = self.sparse.split_off(&end);
                std::mem::replace(&mut self.sparse, rest)
            }
            Err(_) => std::mem::take(&mut self.sparse),
        };
        for (k, sum) in moved {
            self.dense[k as usize] = sum;
        }
    }

    /// Elements held (dense and sparse): what the sums cost, in `T`s.
    pub fn held(&self) -> usize {
        self.dense.len() + self.sparse.len()
    }

    /// The sums of keys `0..len` in key order (zero for a key never added; keys from `len` on
    /// are left out).
    pub fn into_dense(mut self, len: usize) -> Vec<T> {
        let end = len.min(self.dense.len());
        self.dense.truncate(end);
        self.dense.resize(len, T::default());
        for (k, sum) in self.sparse {
            if let Some(d) = self.dense.get_mut(k as usize) {
                *d = sum;
            }
        }
        self.dense
    }

    /// The sums that are not zero, in key order.
    pub fn into_nonzero(self) -> Vec<T> {
        let zero = T::default();
        let mut out: Vec<T> = self.dense.into_iter().filter(|&s| s != zero).collect();
        out.extend(self.sparse.into_values().filter(|&s| s != zero));
        out
    }
}

impl KeySums<f64> {
    /// Adds `|weights[i]|` to `keys[i]`'s sum, in order.
    pub fn add_magnitudes(&mut self, keys: &[u32], weights: &[f32]) {
        for (&k, &w) in keys.iter().zip(weights) {
            self.add(k, w.abs() as f64);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Keys and values from a seeded generator: mostly small keys, some far beyond.
    fn entries(n: usize, seed: u64) -> Vec<(u32, f64)> {
        let mut rng = crate::rng::SplitMix64::new(seed);
        (0..n)
            .map(|i| {
                let key = match rng.below(10) {
                    0 => u32::MAX - rng.below(3) as u32,
                    1 => 100_000_000 + rng.below(5) as u32,
                    2 => DENSE_FLOOR as u32 + rng.below(4 * n as u64 + 8) as u32,
                    _ => rng.below(1000) as u32,
                };
                (key, 0.1 + i as f64 * 1e-3)
            })
            .collect()
    }

    #[test]
    fn sums_are_the_dense_arrays_to_the_bit_with_memory_in_proportion_to_the_data() {
        for seed in 0..20 {
            let e = entries(2000, seed);
            let mut sums = KeySums::new();
            let mut want = BTreeMap::<u32, f64>::new();
            for &(k, x) in &e {
                sums.add(k, x);
                *want.entry(k).or_default() += x;
            }
            assert!(sums.held() <= DENSE_FLOOR + 4 * e.len() + e.len());
            let len = 100_000_010;
            let dense = sums.clone().into_dense(len);
            assert_eq!(dense.len(), len);
            for (&k, &s) in want.range(..len as u32) {
                assert_eq!(dense[k as usize].to_bits(), s.to_bits(), "key {k}");
            }
            let n_below = want.range(..len as u32).count();
            assert_eq!(dense.iter().filter(|&&s| s != 0.0).count(), n_below);
            let nonzero = sums.into_nonzero();
            let want_all: Vec<f64> = want.values().copied().collect();
            assert_eq!(nonzero, want_all);
        }
    }

    #[test]
    fn a_key_first_held_sparse_keeps_its_sum_when_the_dense_array_reaches_it() {
        let mut sums = KeySums::new();
        let far = DENSE_FLOOR as u32 + 10;
        sums.add(far, 1.5f64);
        assert_eq!(sums.held(), 1);
        // Enough additions that the dense array may reach `far`.
        for _ in 0..5 {
            sums.add(0, 1.0);
        }
        sums.add(far, 0.25);
        let dense = sums.into_dense(far as usize + 1);
        assert_eq!((dense[0], dense[far as usize]), (5.0, 1.75));
    }

    #[test]
    fn magnitudes_are_summed() {
        let mut sums = KeySums::new();
        sums.add_magnitudes(&[0, 2, 2], &[1.0, -2.0, 0.5]);
        assert_eq!(sums.into_dense(3), vec![1.0, 0.0, 2.5]);
    }
}
