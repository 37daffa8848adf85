//! libsvm / svmlight files, `label[,label…] [qid:N] idx:val … [# comment]`: their reader, writer
//! and streamed pack.
//!
//! Blocks of lines are parsed in parallel with rayon. Labels are class ids (non-negative
//! integers; several, comma-separated, for multi-label rows). `qid:` is ignored and `#` comments
//! are stripped. Ids are 0- or 1-based: set, or detected as sklearn's `load_svmlight_file` does
//! (1-based unless some id is 0). The width is set or taken from the largest id. Blank lines are
//! skipped, as sklearn does.
//!
//! Files widebag writes start with a comment other tools ignore,
//! `# widebag libsvm: zero_based=true width=N n_classes=K blank_lines=rows`, so widebag reads
//! them back exactly: the index base, width and classes, and blank lines as empty rows.

pub mod header;
pub mod line;
pub mod pack;
pub mod read;
pub mod shape;
pub mod write;

pub use header::MAX_WIDTH;
pub use pack::pack_libsvm;
pub use read::{read_libsvm, zero_based_of};
pub use shape::passes;
pub use write::write_libsvm;
