//! The output layer cut into class blocks for the host softmax: which columns each block
//! covers, where its `[batch, block]` logits live (a reused scratch buffer, or the block's
//! columns of kept logits), and the single-threaded strided `gemm` that fills and reads them.
#![allow(
    unsafe_code,
    reason = "gemm takes raw pointers; blocks write disjoint columns of one buffer"
)]

/// One class chunk of the output layer, row-major: `w` is `[hidden, n]`, `b` is `[n]`.
#[derive(Clone, Copy)]
pub struct ChunkRef<'a> {
    pub w: &'a [f32],
    pub b: &'a [f32],
}

impl ChunkRef<'_> {
    pub(super) fn n(&self) -> usize {
        self.b.len()
    }
}

/// A run of classes of one chunk: columns `start..start + n` of chunk `chunk`.
#[derive(Clone, Copy, Debug)]
pub(super) struct Block {
    pub chunk: usize,
    pub start: usize,
    pub n: usize,
}

/// Classes per block for a batch of `n_rows` (the ledger's arithmetic).
pub(super) fn block_cols(n_rows: usize) -> usize {
    widebag_ledger::shapes::host_block_cols(n_rows)
}

pub(super) fn blocks(layer: &[ChunkRef], width: usize) -> Vec<Block> {
    let width = width.max(1);
    let mut out = Vec::new();
    for (chunk, c) in layer.iter().enumerate() {
        let mut start = 0;
        while start < c.n() {
            let n = width.min(c.n() - start);
            out.push(Block { chunk, start, n });
            start += n;
        }
    }
    out
}

/// A pointer shared by the blocks, each writing only its own columns.
#[derive(Clone, Copy)]
pub(super) struct SharedMut(pub *mut f32);
// SAFETY: every block writes a disjoint set of columns through it.
unsafe impl Send for SharedMut {}
// SAFETY: as for Send: no two blocks touch the same element.
unsafe impl Sync for SharedMut {}

/// `dst = lhs · rhs` (or `dst += lhs · rhs` with `accumulate`) for `m × k` by `k × n`, each
/// operand given by its pointer and its row and column strides, on the calling thread.
///
/// # Safety
/// The pointers and strides address valid `m × k`, `k × n` and `m × n` matrices, and `dst`
/// overlaps neither operand.
pub(super) unsafe fn gemm(
    (m, n, k): (usize, usize, usize),
    dst: (*mut f32, isize, isize),
    accumulate: bool,
    lhs: (*const f32, isize, isize),
    rhs: (*const f32, isize, isize),
) {
    // SAFETY: as the caller promises.
    unsafe {
        gemm::gemm(
            m,
            n,
            k,
            dst.0,
            dst.2,
            dst.1,
            accumulate,
            lhs.0,
            lhs.2,
            lhs.1,
            rhs.0,
            rhs.2,
            rhs.1,
            if accumulate { 1.0 } else { 0.0 },
            1.0,
            false,
            false,
            false,
            gemm::Parallelism::None,
        )
    }
}

/// A block's `[B, n]` logits: at `ptr`, rows `row_stride` apart.
#[derive(Clone, Copy)]
pub(super) struct BlockZ {
    pub ptr: *mut f32,
    pub row_stride: usize,
    n_rows: usize,
    n: usize,
}

impl BlockZ {
    /// The block's logits in `scratch`, or in its columns of the kept chunk.
    pub(super) fn at(
        b: Block,
        n_rows: usize,
        scratch: &mut Vec<f32>,
        kept: Option<&[SharedMut]>,
        chunk_n: usize,
    ) -> Self {
        match kept {
            Some(k) => Self {
                // SAFETY: the block's columns b.start..b.start + b.n are within the chunk's rows.
                ptr: unsafe { k[b.chunk].0.add(b.start) },
                row_stride: chunk_n,
                n_rows,
                n: b.n,
            },
            None => {
                scratch.resize(n_rows * b.n, 0.0);
                Self {
                    ptr: scratch.as_mut_ptr(),
                    row_stride: b.n,
                    n_rows,
                    n: b.n,
                }
            }
        }
    }

    /// Row `r`.
    ///
    /// # Safety
    /// No other live slice covers the row, and `r < n_rows`.
    pub(super) unsafe fn row<'a>(self, r: usize) -> &'a mut [f32] {
        debug_assert!(r < self.n_rows);
        // SAFETY: as the caller promises; the row lies inside the buffer.
        unsafe { std::slice::from_raw_parts_mut(self.ptr.add(r * self.row_stride), self.n) }
    }

    /// `z = h[B, H] · W[:, block] + b[block]`.
    pub(super) fn fill(self, h: &[f32], hidden: usize, c: ChunkRef, b: Block) {
        // SAFETY: h is [n_rows, hidden], W is [hidden, c.n()] with columns b.start..+b.n in
        // range, and z is [n_rows, b.n] rows row_stride apart, disjoint from both.
        unsafe {
            gemm(
                (self.n_rows, b.n, hidden),
                (self.ptr, self.row_stride as isize, 1),
                false,
                (h.as_ptr(), hidden as isize, 1),
                (c.w.as_ptr().add(b.start), c.n() as isize, 1),
            );
        }
        let bias = &c.b[b.start..b.start + b.n];
        for r in 0..self.n_rows {
            // SAFETY: one row at a time.
            let row = unsafe { self.row(r) };
            for (x, &bj) in row.iter_mut().zip(bias) {
                *x += bj;
            }
        }
    }
}
