//! Training batches: the rows a run reads ([`train_rows`]), walked in seeded shuffled epochs
//! ([`epochs`]) or, for the `blocks` shuffle over several streams, a span per stream
//! ([`streams`]); where each batch comes from, a data file or the synthetic generator, and one
//! rank's part of it ([`batch_source`]); the input dropout training batches undergo
//! ([`input_dropout`]); and each user's own column beside its items ([`user_columns`]).

pub mod batch_source;
pub mod epochs;
pub mod input_dropout;
pub mod streams;
pub mod train_rows;
pub mod user_columns;
