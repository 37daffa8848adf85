//! The output layer: the full softmax in class chunks (`softmax`), the adaptive softmax (head and
//! tail clusters: `adaptive` on autodiff, `adaptive_host` on flex's host kernel, `adaptive_split`
//! with the clusters owned across ranks), and class scores chunk by chunk for evaluation (`scores`). It uses the table's
//! and the trunk's types and the host kernels (`crate::cpu`); the step and the loop use it.

pub mod adaptive;
pub(crate) mod adaptive_host;
pub(crate) mod adaptive_split;
pub mod scores;
pub mod softmax;
