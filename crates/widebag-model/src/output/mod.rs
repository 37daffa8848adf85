//! The output layer: the full softmax in class chunks (`softmax`), the adaptive softmax (head and
//! tail clusters: `adaptive` on autodiff, `adaptive_host` on flex's host kernel for one process or
//! many, `tail_owners` for which rank holds each cluster), and class scores chunk by chunk for
//! evaluation (`scores`). It uses the table's and the trunk's types and the host kernels
//! (`crate::cpu`); the step and the loop use it.

pub mod adaptive;
pub(crate) mod adaptive_host;
pub mod scores;
pub mod softmax;
pub(crate) mod tail_owners;
