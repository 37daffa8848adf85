//! The input bands' tables and a batch's unique ids split over them: an [`InputBand`] (ids
//! `band.start..band.end`, its row-sharded table and the table's optimizer state) and, once per
//! step, [`BandIds`] (the batch's unique ids by band, as band-local ids, and each band's
//! [`BandSegment`]s: runs of them within one shard), read by the gather and by the row updates.

use widebag_config::bands::Band;

use crate::error::ModelError;
use crate::table::ids::{SortedIdBuf, SortedIds};
use crate::table::optim::TableState;
use crate::table::{Segment, ShardedTable};

/// An input band: ids `band.start..band.end`, `band.dim`-wide rows, and their optimizer state.
pub struct InputBand {
    pub band: Band,
    pub table: ShardedTable,
    pub state: TableState,
}

/// A run of the batch's unique ids within one shard of one band: `seg` indexes the band's
/// local ids, which start at position `offset` of the batch's `unique_ids`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BandSegment {
    pub band: usize,
    pub seg: Segment,
    pub offset: usize,
}

impl BandSegment {
    /// Positions in the batch's `unique_ids`.
    pub fn global(&self) -> std::ops::Range<usize> {
        self.offset + self.seg.start..self.offset + self.seg.end
    }
}

/// The batch's unique ids split by band (as band-local ids) and each band's segments: computed
/// once per step, read by the gather and by the row updates.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BandIds {
    /// Per band, its ids among the batch's unique ids, minus the band's first id.
    pub local: Vec<SortedIdBuf>,
    /// Every band's segments, band by band.
    pub segments: Vec<BandSegment>,
}

impl BandIds {
    /// The batch's sorted `unique` ids by band, each band's cut by the shards of its table.
    pub fn by_shard(unique: &[u32], bands: &[InputBand]) -> Result<Self, ModelError> {
        let uniq = SortedIds::new(unique)?;
        let mut local = Vec::with_capacity(bands.len());
        let mut segments = Vec::new();
        for (k, b) in bands.iter().enumerate() {
            let (offset, ids) = uniq.window(b.band.start as u32, b.band.end as u32);
            segments.extend(
                b.table
                    .segments(ids.ids())
                    .into_iter()
                    .map(|seg| BandSegment {
                        band: k,
                        seg,
                        offset,
                    }),
            );
            local.push(ids);
        }
        Ok(BandIds { local, segments })
    }

    /// The batch's ids by band as [`Self::by_shard`], each band's in one segment (a rank of a
    /// multi-process run gathers them from their owners, not from shards of its own).
    pub fn whole(unique: &[u32], bands: &[InputBand]) -> Result<Self, ModelError> {
        let uniq = SortedIds::new(unique)?;
        let mut local = Vec::with_capacity(bands.len());
        let mut segments = Vec::new();
        for (k, b) in bands.iter().enumerate() {
            let (offset, ids) = uniq.window(b.band.start as u32, b.band.end as u32);
            if !ids.ids().is_empty() {
                let seg = Segment {
                    shard: 0,
                    start: 0,
                    end: ids.ids().len(),
                };
                segments.push(BandSegment {
                    band: k,
                    seg,
                    offset,
                });
            }
            local.push(ids);
        }
        Ok(BandIds { local, segments })
    }

    /// The band-local ids of segment `s`.
    pub fn of(&self, s: &BandSegment) -> SortedIds<'_> {
        self.local[s.band].ids().range(s.seg.start..s.seg.end)
    }
}
