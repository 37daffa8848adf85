//! The rows a run reads: a dataset in memory, or a packed dataset read in place through its
//! memory map (renumbered as each batch is assembled), less the rows held out for evaluation,
//! which are named, not copied. Rows are addressed by their place in the file (`0..n_all`); a
//! LightGCN file's rows are its users, and may carry each user's own column
//! ([`UserColumns`]).

use widebag_csr::CsrBatch;

use crate::batches::user_columns::UserColumns;
use crate::dataset::Dataset;
use crate::error::DataError;
use crate::order::Relabel;
use crate::packed::read::{PackedFile, Part};

/// Where the rows are.
enum Store {
    Memory(Dataset),
    /// A packed file's rows, and the renumbering applied to each batch read from it.
    Mapped {
        file: Box<PackedFile>,
        relabel: Relabel,
    },
}

/// A dataset's rows as training reads them.
pub struct TrainRows {
    store: Store,
    /// Rows held out for evaluation: sorted, distinct, `< n_all`.
    held: Vec<usize>,
    width: usize,
    n_classes: usize,
    /// Each row's own column (`data.user_vector`), added to every batch.
    users: Option<UserColumns>,
}

impl TrainRows {
    /// Rows in memory (already renumbered).
    pub fn memory(data: Dataset) -> Self {
        Self {
            width: data.width,
            n_classes: data.n_classes,
            store: Store::Memory(data),
            held: Vec::new(),
            users: None,
        }
    }

    /// The rows of a packed file, each batch renumbered by `relabel` as it is read.
    pub fn mapped(file: PackedFile, relabel: Relabel) -> Self {
        Self {
            width: file.meta.width as usize,
            n_classes: file.meta.n_classes as usize,
            store: Store::Mapped {
                file: Box::new(file),
                relabel,
            },
            held: Vec::new(),
            users: None,
        }
    }

    /// Leaves out `held` (rows by their place in the file) from training.
    pub fn hold_out(mut self, mut held: Vec<usize>) -> Self {
        held.sort_unstable();
        held.dedup();
        held.retain(|&r| r < self.n_all());
        self.held = held;
        self
    }

    /// Each row (a LightGCN user) with its own column past the width, of `value`: the width
    /// grows by a column per row. The columns it gives.
    pub fn with_user_columns(mut self, value: f32) -> (Self, UserColumns) {
        let users = UserColumns {
            base: self.width,
            n_users: self.n_all(),
            value,
        };
        self.width = users.width();
        self.users = Some(users);
        (self, users)
    }

    /// Bytes of the rows resident on the heap (a dataset in memory; none for a packed file,
    /// whose pages are the file's) and of the maps beside them (renumbering, block table), with
    /// the list of held-out rows.
    pub fn resident_bytes(&self) -> (u64, u64) {
        let held = self.held.len() as u64 * 8;
        match &self.store {
            Store::Memory(d) => (d.rows.heap_bytes(), held),
            Store::Mapped { file, relabel } => (0, held + file.heap_bytes() + relabel.heap_bytes()),
        }
    }

    /// Every row, held out or not.
    pub fn n_all(&self) -> usize {
        match &self.store {
            Store::Memory(d) => d.n_rows(),
            Store::Mapped { file, .. } => file.meta.n_rows as usize,
        }
    }

    /// Rows trained on.
    pub fn n_rows(&self) -> usize {
        self.n_all() - self.held.len()
    }

    pub fn width(&self) -> usize {
        self.width
    }

    pub fn n_classes(&self) -> usize {
        self.n_classes
    }

    /// The rows held out, sorted.
    pub fn held(&self) -> &[usize] {
        &self.held
    }

    /// Held-out rows in `rows` (a range of places in the file).
    pub fn held_in(&self, rows: std::ops::Range<usize>) -> usize {
        self.held.partition_point(|&h| h < rows.end)
            - self.held.partition_point(|&h| h < rows.start)
    }

    /// The training rows of `rows`, in order.
    pub fn train_rows_in(&self, rows: std::ops::Range<usize>) -> impl Iterator<Item = usize> + '_ {
        let mut h = self.held.partition_point(|&h| h < rows.start);
        rows.filter(move |&r| {
            while h < self.held.len() && self.held[h] < r {
                h += 1;
            }
            self.held.get(h) != Some(&r)
        })
    }

    /// Rows `rows` (places in the file, any order) as a validated batch.
    pub fn batch(&self, rows: &[usize]) -> Result<CsrBatch, DataError> {
        let batch = match &self.store {
            Store::Memory(d) => d.batch(rows)?,
            Store::Mapped { file, relabel } => {
                let mut store = file.gather(Part::Rows, rows)?;
                relabel.store(&mut store);
                let all: Vec<usize> = (0..rows.len()).collect();
                let width = self.users.map_or(self.width, |u| u.base);
                store.batch(&all, width, self.n_classes)?
            }
        };
        match &self.users {
            Some(u) => u.add(&batch, rows.iter().copied()),
            None => Ok(batch),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dataset::RowStore;
    use crate::loaded::Loaded;
    use crate::order::Renumbering;

    fn data(n: u32) -> Dataset {
        let mut rows = RowStore::new();
        for r in 0..n {
            rows.push(&[r % 7, (r * 3) % 7], &[1.0, 2.0], &[r % 5], &[1.0]);
        }
        Dataset {
            source: "mem".into(),
            width: 7,
            n_classes: 5,
            rows,
            skipped_lines: 0,
            notes: vec![],
        }
    }

    /// `d` packed into `dir/name` in blocks of 4 rows.
    fn packed(d: &Dataset, dir: &std::path::Path, name: &str) -> std::path::PathBuf {
        std::fs::create_dir_all(dir).unwrap();
        let path = dir.join(name);
        let loaded = Loaded {
            dataset: d.clone(),
            vocabulary: None,
            test: None,
            labels: None,
        };
        let options = crate::packed::write::PackOptions {
            block_rows: 4,
            stats_samples: 1,
            ..Default::default()
        };
        crate::packed::write::pack(&loaded, "libsvm", &path, options).unwrap();
        path
    }

    #[test]
    fn held_rows_are_left_out_of_training_and_counted_per_range() {
        let t = TrainRows::memory(data(10)).hold_out(vec![7, 2, 2, 40]);
        assert_eq!((t.n_all(), t.n_rows(), t.held()), (10, 8, &[2usize, 7][..]));
        assert_eq!(
            t.train_rows_in(0..10).collect::<Vec<_>>(),
            vec![0, 1, 3, 4, 5, 6, 8, 9]
        );
        assert_eq!(t.train_rows_in(3..8).collect::<Vec<_>>(), vec![3, 4, 5, 6]);
        assert_eq!(
            (t.held_in(0..3), t.held_in(3..7), t.held_in(0..10)),
            (1, 0, 2)
        );
    }

    #[test]
    fn a_packed_file_gives_the_batches_of_the_rows_it_was_packed_from() {
        let d = data(23);
        let dir = std::env::temp_dir().join(format!("widebag-train-rows-{}", std::process::id()));
        let path = packed(&d, &dir, "d.wbp");
        let relabel = Relabel {
            ids: Some(Renumbering::by_frequency(&[0., 1., 2., 3., 4., 5., 6.])),
            classes: Some(Renumbering::by_frequency(&[5., 1., 3., 2., 4.])),
        };
        let mapped = TrainRows::mapped(PackedFile::open(&path).unwrap(), relabel.clone());
        let mut renumbered = d.clone();
        relabel.dataset(&mut renumbered);
        let memory = TrainRows::memory(renumbered);
        let rows = [22, 0, 5, 5, 13, 4, 3];
        let (a, b) = (mapped.batch(&rows).unwrap(), memory.batch(&rows).unwrap());
        assert_eq!(
            (a.row_ptr(), a.ids(), a.values()),
            (b.row_ptr(), b.ids(), b.values())
        );
        assert_eq!(a.targets(), b.targets());
        let beyond = mapped.batch(&[23]).unwrap_err().to_string();
        assert!(
            beyond.contains("row 23") && beyond.contains("d.wbp"),
            "{beyond}"
        );
        std::fs::remove_dir_all(&dir).ok();
    }

    #[test]
    fn each_row_carries_its_own_user_column_in_memory_and_packed() {
        let d = data(9);
        let dir = std::env::temp_dir().join(format!("widebag-user-cols-{}", std::process::id()));
        let path = packed(&d, &dir, "u.wbp");
        let mapped = TrainRows::mapped(PackedFile::open(&path).unwrap(), Relabel::default());
        let (memory, users) = TrainRows::memory(d).with_user_columns(0.5);
        let (mapped, _) = mapped.with_user_columns(0.5);
        assert_eq!((users.base, users.n_users, memory.width()), (7, 9, 16));
        let rows = [8, 0, 3];
        let (a, b) = (memory.batch(&rows).unwrap(), mapped.batch(&rows).unwrap());
        assert_eq!((a.ids(), a.values()), (b.ids(), b.values()));
        assert_eq!(a.width(), 16);
        for (r, &row) in rows.iter().enumerate() {
            let last = a.row_ptr()[r + 1] - 1;
            assert_eq!((a.ids()[last], a.values()[last]), (7 + row as u32, 0.5));
        }
        std::fs::remove_dir_all(&dir).ok();
    }
}
