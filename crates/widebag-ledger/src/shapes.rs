//! How the sparse layout cuts its tensors to the device's largest buffer: table shards, class
//! chunks of the output layer and pieces of the bag's entries. The trainer uses these same
//! functions, so the ledger's shapes are the trainer's shapes.

use serde::{Deserialize, Serialize};

/// Bytes of an f32.
pub const F32_BYTES: u64 = 4;
/// Bytes of the i32 index tensors widebag uploads.
pub const I32_BYTES: u64 = 4;

/// The side of a tile of logits that widebag's CubeCL kernels form in registers
/// (`model.logits = "tiled"`): batch rows by classes.
pub const LOGIT_TILE: usize = 64;

/// Bytes of one class block's `[batch, block]` logits in flex's host softmax: about an L2
/// cache, so a block is made, read and turned into its gradients while it stays there.
pub const HOST_BLOCK_BYTES: usize = 1 << 20;

/// Classes per block of flex's host softmax for a batch of `n_rows` (a multiple of 16, 64 to
/// 8,192).
pub fn host_block_cols(n_rows: usize) -> usize {
    (HOST_BLOCK_BYTES / 4 / n_rows.max(1)).clamp(64, 8192) / 16 * 16
}

/// Classes per panel of a screened ranking's bf16 products (two 16-lane registers).
pub const SCREEN_PANEL_COLS: usize = 32;
/// Panels per parallel task of a screened ranking (`[batch, 512]` scores in a thread's scratch).
pub const SCREEN_TASK_PANELS: usize = 16;
/// A screened row's candidate list is pruned once it holds more than `SCREEN_PRUNE_PER_K · K +
/// SCREEN_PRUNE_SLACK` classes.
pub const SCREEN_PRUNE_PER_K: usize = 8;
pub const SCREEN_PRUNE_SLACK: usize = 256;

/// Whether this CPU has a bf16 dot product in hardware (x86's AVX-512 BF16), which a screened
/// ranking needs (`eval.screening`).
pub fn host_bf16_dot() -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        std::is_x86_feature_detected!("avx512bf16") && std::is_x86_feature_detected!("avx512f")
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        false
    }
}

/// Bytes of `values` f32 values: what a tensor, a table or a band layout of that many values
/// costs (run preparation's automatic cutoffs price band layouts with it).
pub fn f32_bytes(values: u64) -> u64 {
    F32_BYTES * values
}

/// Rows per table shard so that one shard stays within `max_buffer_bytes`.
pub fn rows_per_shard(n_rows: usize, dim: usize, max_buffer_bytes: u64) -> usize {
    let row_bytes = (dim as u64 * F32_BYTES).max(1);
    ((max_buffer_bytes / row_bytes) as usize).clamp(1, n_rows.max(1))
}

/// Rows of each shard of an `n_rows`-row table.
pub fn shard_rows(n_rows: usize, dim: usize, max_buffer_bytes: u64) -> Vec<usize> {
    let per = rows_per_shard(n_rows, dim, max_buffer_bytes);
    (0..n_rows)
        .step_by(per)
        .map(|first| per.min(n_rows - first))
        .collect()
}

/// Classes `offset .. offset + n` of the output layer.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ClassChunk {
    pub offset: usize,
    pub n: usize,
}

/// Splits `n_classes` into chunks of at most `chunk` classes.
pub fn class_chunks(n_classes: usize, chunk: usize) -> Vec<ClassChunk> {
    let chunk = chunk.max(1);
    (0..n_classes)
        .step_by(chunk)
        .map(|offset| ClassChunk {
            offset,
            n: chunk.min(n_classes - offset),
        })
        .collect()
}

/// Fewest values in one block of a split reduction ([`split_k_blocks`]).
pub const SPLIT_K_MIN_BLOCK: usize = 1024;
/// Most blocks a reduction is split into ([`split_k_blocks`]).
pub const SPLIT_K_MAX_BLOCKS: usize = 64;

/// How many blocks a device with its own memory (a GPU) cuts the reduction of an `[m, k] ×
/// [k, n]` product into: 1 (none) unless `k` is at least 16 times the larger of `m` and `n`;
/// else the largest divisor of `k` that leaves blocks of at least [`SPLIT_K_MIN_BLOCK`] values,
/// at most [`SPLIT_K_MAX_BLOCKS`] (1 when the only such divisor is 1). The seed model's
/// `dL/dh = g · Wᵀ` (`m` = 128 rows, `n` = 512, `k` = 240,000 classes): 64 blocks of 3,750.
pub fn split_k_blocks(m: usize, n: usize, k: usize) -> usize {
    if k < 16 * m.max(n).max(1) {
        return 1;
    }
    let most = SPLIT_K_MAX_BLOCKS.min(k / SPLIT_K_MIN_BLOCK);
    (2..=most).rev().find(|s| k.is_multiple_of(*s)).unwrap_or(1)
}

/// Largest chunk whose weight slice (`hidden × n`) and logits (`batch × n`) fit the buffer limit.
pub fn max_chunk_classes(hidden: usize, batch_size: usize, max_buffer_bytes: u64) -> usize {
    let per_class = F32_BYTES * hidden.max(batch_size).max(1) as u64;
    ((max_buffer_bytes / per_class) as usize).max(1)
}

/// The chunk size the trainer uses: `configured` (0 = as large as the limit allows), capped by
/// the limit and by the number of classes.
pub fn class_chunk(
    configured: usize,
    n_classes: usize,
    last_hidden: usize,
    batch_size: usize,
    max_buffer_bytes: u64,
) -> usize {
    let limit = max_chunk_classes(last_hidden, batch_size, max_buffer_bytes);
    match configured {
        0 => limit,
        c => c.min(limit),
    }
    .min(n_classes)
    .max(1)
}

/// Bag entries per piece: an `[n, dim]` f32 piece stays within the buffer limit.
pub fn max_bag_entries(dim: usize, max_buffer_bytes: u64) -> usize {
    ((max_buffer_bytes / (F32_BYTES * dim.max(1) as u64)) as usize).max(1)
}

/// Rows per piece of an `[rows, n_cols]` f32 matrix so that one piece stays within the buffer
/// limit (the adaptive softmax's cluster pieces). At least one row.
pub fn rows_per_piece(n_cols: usize, max_buffer_bytes: u64) -> usize {
    ((max_buffer_bytes / (F32_BYTES * n_cols.max(1) as u64)) as usize).max(1)
}

/// Rows a tail cluster of the adaptive softmax on the CubeCL kernels is computed on when `rows`
/// of a batch of `batch_rows` have targets in it: the next power of two, at least 8 and at most
/// the batch (the padding rows have no target and weigh nothing), so that a run's tails take a
/// few shapes and the kernels they launch are compiled in the first steps, not at every new
/// row count.
pub fn tail_rows_bucket(rows: usize, batch_rows: usize) -> usize {
    rows.max(8).next_power_of_two().min(batch_rows.max(rows))
}

/// The length a count that changes from step to step (a sampled step's candidates, its target
/// entries) is padded to on wgpu: `n` rounded up to a multiple of a sixteenth of the power of
/// two at or below it (at least 8), so at most 6.25 % more (or 7) and a run's steps take a few
/// lengths; no more than `cap` (every class) unless `n` is. A JIT backend compiles its
/// kernels again for a new length's vector width and fusion, so one varying count kept every
/// sampled step compiling on wgpu.
pub fn step_length_bucket(n: usize, cap: usize) -> usize {
    if n == 0 {
        return 0;
    }
    let below = 1usize << (usize::BITS - 1 - n.leading_zeros());
    let grain = (below / 16).max(8);
    n.div_ceil(grain).saturating_mul(grain).min(cap.max(n))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn step_lengths_round_up_by_a_sixteenth_within_the_cap() {
        assert_eq!(step_length_bucket(0, 100), 0);
        assert_eq!(step_length_bucket(1, 1000), 8);
        assert_eq!(step_length_bucket(65, 1000), 72);
        assert_eq!(step_length_bucket(200, 1000), 200);
        assert_eq!(step_length_bucket(201, 1000), 208);
        assert_eq!(step_length_bucket(17_000, 1 << 20), 17_408);
        assert_eq!(step_length_bucket(17_000, 17_100), 17_100);
        assert_eq!(step_length_bucket(500, 300), 500);
        for n in 1..5000 {
            let b = step_length_bucket(n, usize::MAX);
            assert!(b >= n && b - n < 8.max(n / 16 + 1), "{n} -> {b}");
            assert!(step_length_bucket(n + 1, usize::MAX) >= b);
        }
    }

    #[test]
    fn tail_rows_take_power_of_two_buckets_within_the_batch() {
        assert_eq!(tail_rows_bucket(1, 128), 8);
        assert_eq!(tail_rows_bucket(9, 128), 16);
        assert_eq!(tail_rows_bucket(64, 128), 64);
        assert_eq!(tail_rows_bucket(65, 100), 100);
        assert_eq!(tail_rows_bucket(3, 5), 5);
    }

    #[test]
    fn chunks_and_shards_cover_everything() {
        let c = class_chunks(10, 4);
        assert_eq!(
            c,
            vec![
                ClassChunk { offset: 0, n: 4 },
                ClassChunk { offset: 4, n: 4 },
                ClassChunk { offset: 8, n: 2 }
            ]
        );
        assert_eq!(max_chunk_classes(8, 16, 1024), 16);
        assert_eq!(shard_rows(10, 4, 48), vec![3, 3, 3, 1]);
        assert_eq!(class_chunk(0, 100, 8, 16, 1024), 16);
        assert_eq!(class_chunk(5, 100, 8, 16, 1024), 5);
        assert_eq!(rows_per_piece(8, 1024), 32);
        assert_eq!(rows_per_piece(1 << 20, 1024), 1);
        assert_eq!(f32_bytes(10), 40);
    }

    #[test]
    fn long_reductions_split_into_divisor_blocks() {
        // The seed model's dL/dh: 240,000 classes in 64 blocks of 3,750.
        assert_eq!(split_k_blocks(128, 512, 240_000), 64);
        // Short reductions (the trunk's products, the weight gradient's batch) stay whole.
        assert_eq!(split_k_blocks(128, 512, 1024), 1);
        assert_eq!(split_k_blocks(512, 240_000, 128), 1);
        // A prime reduction has no divisor: whole.
        assert_eq!(split_k_blocks(4, 4, 65_521), 1);
        for (m, n, k) in [
            (128, 512, 8192),
            (500, 600, 40_981),
            (64, 24, 24_000),
            (1, 1, 3000),
        ] {
            let s = split_k_blocks(m, n, k);
            assert_eq!(k % s, 0, "{k} in {s} blocks");
            assert!(s == 1 || (k / s >= SPLIT_K_MIN_BLOCK && s <= SPLIT_K_MAX_BLOCKS));
        }
    }
}
