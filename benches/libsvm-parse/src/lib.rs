//! Holds no code: the package exists for its criterion bench (`benches/libsvm_parse.rs`).
