//! Where a model stands among the ranks of a run: [`Ranks`] (this process's rank and how many
//! train together; one process is `Ranks::ONE`) and [`RankBatch`] (this rank's rows of one
//! global batch, with the group it trains with). The step, the output layers and the held-out
//! passes read them; a single process is the one-rank case and skips every exchange.

use widebag_collective::Collective;
use widebag_collective::partition::local_rows;

use crate::error::ModelError;

/// A rank of a multi-process run (`rank` of `size`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Ranks {
    pub rank: usize,
    pub size: usize,
}

impl Ranks {
    /// The single process.
    pub const ONE: Ranks = Ranks { rank: 0, size: 1 };

    /// The group `comm` trains as.
    pub fn of(comm: &dyn Collective) -> Self {
        Ranks {
            rank: comm.rank(),
            size: comm.size(),
        }
    }

    /// The full softmax's classes this rank owns (all of them for one rank).
    pub fn class_block(&self, n_classes: usize) -> std::ops::Range<usize> {
        widebag_collective::partition::class_block(n_classes, self.rank, self.size)
    }

    /// How a band of `n_rows` rows is split over the ranks.
    pub fn sharding(&self, n_rows: usize) -> widebag_collective::route::BlockSharding {
        widebag_collective::route::BlockSharding::new(n_rows, self.size)
    }
}

/// This process's rows of a step's global batch, and the group it trains with.
pub struct RankBatch<'a> {
    pub comm: &'a dyn Collective,
    /// This process's rows of the global batch (`local_rows`).
    pub mine: std::ops::Range<usize>,
    pub global_rows: usize,
    /// The rows of this process's batch.
    pub rows: usize,
}

impl<'a> RankBatch<'a> {
    /// Rank `ranks.rank`'s `rows` rows of a global batch of `global_rows`; an error unless they
    /// are its share (`local_rows`) and `comm` is the model's group.
    pub fn new(
        ranks: Ranks,
        comm: &'a dyn Collective,
        global_rows: usize,
        rows: usize,
    ) -> Result<Self, ModelError> {
        if Ranks::of(comm) != ranks {
            return Err(ModelError::Shape(format!(
                "a model built as rank {} of {} stepped as rank {} of {}",
                ranks.rank,
                ranks.size,
                comm.rank(),
                comm.size()
            )));
        }
        let mine = local_rows(global_rows, ranks.rank, ranks.size);
        if mine.len() != rows {
            return Err(ModelError::Shape(format!(
                "rank {} of {} holds rows {mine:?} of a batch of {global_rows}, not {rows} rows",
                ranks.rank, ranks.size,
            )));
        }
        Ok(Self {
            comm,
            mine,
            global_rows,
            rows,
        })
    }

    /// Whether this is the one-rank case (a single process): every exchange is skipped.
    pub fn alone(&self) -> bool {
        self.comm.size() == 1
    }

    /// The class-split output's `dL/dh` over every row of the global batch, summed over the
    /// ranks, cut to this rank's rows; at one rank, `dh` itself (no copy).
    pub fn own_dh(&self, mut dh: Vec<f32>, hidden: usize) -> Result<Vec<f32>, ModelError> {
        if self.alone() {
            return Ok(dh);
        }
        self.comm.all_reduce_sum(&mut dh)?;
        Ok(dh[self.mine.start * hidden..self.mine.end * hidden].to_vec())
    }
}
