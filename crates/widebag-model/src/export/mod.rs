//! A trained model exported for use elsewhere: the input embedding (head/tail bands projected
//! to the full dim) and the dense layers as safetensors in PyTorch's layouts (`[out, in]`
//! weights), the embedding also as `.npy`, ids and classes in the data's own numbering (the
//! frequency renumbering undone; the adaptive softmax's class order given), and the
//! vocabulary. Written block by block: no table is assembled in one buffer.

pub(crate) mod files;

use std::collections::BTreeMap;
use std::io::Write;
use std::path::{Path, PathBuf};

use burn::tensor::Tensor;
use widebag_prepare::Prepared;

use crate::error::ModelError;
use crate::export::files::{Spec, put_f32, write_npy, write_safetensors};
use crate::layout::Trainable;
use crate::tensors::to_vec;

/// Original ids per embedding block.
const BLOCK_IDS: usize = 8192;

/// What an export wrote.
#[derive(Clone, Debug, serde::Serialize)]
pub struct Exported {
    pub file: PathBuf,
    pub what: String,
}

/// Writes the export of `layout` (trained on `prepared`'s data) into `dir`.
pub fn export(
    layout: &mut dyn Trainable,
    prepared: &Prepared,
    dir: &Path,
) -> Result<Vec<Exported>, ModelError> {
    layout.flush_deferred()?;
    let io = |e: std::io::Error| ModelError::Checkpoint(format!("{}: {e}", dir.display()));
    std::fs::create_dir_all(dir).map_err(io)?;
    let c = &prepared.config;
    let (width, dim) = (c.data.width, c.model.dim);
    let mut done = Vec::new();
    // The embedding, in the data's own id order.
    let new_of = |o: u32| prepared.relabel.ids.as_ref().map_or(o, |r| r.map(o));
    let block = |first: usize, out: &mut dyn Write| -> Result<(), ModelError> {
        let end = (first + BLOCK_IDS).min(width);
        let mut pairs: Vec<(u32, usize)> = (first..end)
            .map(|o| (new_of(o as u32), o - first))
            .collect();
        pairs.sort_unstable();
        let sorted: Vec<u32> = pairs.iter().map(|p| p.0).collect();
        let rows = layout.embedding_rows(&sorted)?;
        let mut ordered = vec![0.0f32; rows.len()];
        for (i, &(_, at)) in pairs.iter().enumerate() {
            ordered[at * dim..(at + 1) * dim].copy_from_slice(&rows[i * dim..(i + 1) * dim]);
        }
        put_f32(out, &ordered)
    };
    let meta: BTreeMap<String, String> = [(
        "widebag".to_string(),
        "input embedding, rows in the data's own id order".to_string(),
    )]
    .into();
    let path = dir.join("embedding.safetensors");
    write_safetensors(
        &path,
        &[Spec::f32("embedding.weight", vec![width, dim])],
        &meta,
        |_, out| {
            (0..width)
                .step_by(BLOCK_IDS)
                .try_for_each(|f| block(f, out))
        },
    )?;
    done.push(Exported {
        file: path,
        what: format!("embedding.weight [{width}, {dim}] (nn.EmbeddingBag.from_pretrained)"),
    });
    let path = dir.join("embedding.npy");
    write_npy(&path, &[width, dim], |out| {
        (0..width)
            .step_by(BLOCK_IDS)
            .try_for_each(|f| block(f, out))
    })?;
    done.push(Exported {
        file: path,
        what: format!("the same embedding as float32 [{width}, {dim}]"),
    });
    done.push(dense_file(layout, prepared, dir)?);
    if let Some(v) = &prepared.vocabulary {
        let path = dir.join("vocab.tsv");
        widebag_data::atomic::write_atomic(&path, v.to_tsv().as_bytes()).map_err(io)?;
        done.push(Exported {
            file: path,
            what: "id → word (the embedding's row order)".into(),
        });
    }
    if let Some(labels) = &prepared.labels {
        let path = dir.join("classes.tsv");
        let text: String = labels.iter().map(|l| format!("{l}\n")).collect();
        widebag_data::atomic::write_atomic(&path, text.as_bytes()).map_err(io)?;
        done.push(Exported {
            file: path,
            what: "class id → label (output.weight's row order)".into(),
        });
    }
    Ok(done)
}

/// Every dense parameter in PyTorch's layout (`[out, in]` weights, 1-D biases), the full
/// softmax's class chunks joined into `output.weight`/`output.bias`; with the adaptive softmax,
/// `output.class_order` gives the original class id of each position.
fn dense_file(
    layout: &mut dyn Trainable,
    prepared: &Prepared,
    dir: &Path,
) -> Result<Exported, ModelError> {
    let params = layout.dense_values();
    let mut specs = Vec::new();
    let mut sources: Vec<Vec<&Tensor<2>>> = Vec::new();
    let mut full_w: Vec<&Tensor<2>> = Vec::new();
    let mut full_b: Vec<&Tensor<2>> = Vec::new();
    for (name, t) in &params {
        let [r, c] = t.shape().dims();
        let chunk = name
            .strip_prefix("output.")
            .and_then(|s| s.split('.').next()?.parse::<usize>().ok());
        match (chunk, name.ends_with(".bias")) {
            (Some(_), false) => full_w.push(t),
            (Some(_), true) => full_b.push(t),
            (None, true) => {
                specs.push(Spec::f32(name.clone(), vec![c]));
                sources.push(vec![t]);
            }
            (None, false) => {
                specs.push(Spec::f32(name.clone(), vec![c, r]));
                sources.push(vec![t]);
            }
        }
    }
    if !full_w.is_empty() {
        let last = full_w[0].shape().dims::<2>()[0];
        let n: usize = full_b.iter().map(|b| b.shape().dims::<2>()[1]).sum();
        specs.push(Spec::f32("output.weight", vec![n, last]));
        sources.push(full_w);
        specs.push(Spec::f32("output.bias", vec![n]));
        sources.push(full_b);
    }
    let order: Option<Vec<i64>> = prepared.relabel.classes.as_ref().map(|r| {
        let old_of_new = widebag_prepare::original_ids(Some(r), r.len());
        old_of_new.into_iter().map(i64::from).collect()
    });
    if let Some(o) = &order {
        specs.push(Spec {
            name: "output.class_order".into(),
            shape: vec![o.len()],
            dtype: "I64",
        });
    }
    let path = dir.join("model.safetensors");
    let meta: BTreeMap<String, String> = [(
        "widebag".to_string(),
        "dense layers, PyTorch layout: weight [out, in]".to_string(),
    )]
    .into();
    write_safetensors(&path, &specs, &meta, |i, out| {
        if i == sources.len() {
            let bytes: Vec<u8> = order
                .iter()
                .flatten()
                .flat_map(|v| v.to_le_bytes())
                .collect();
            return out
                .write_all(&bytes)
                .map_err(|e| ModelError::Checkpoint(e.to_string()));
        }
        for t in &sources[i] {
            let [r, _] = t.shape().dims();
            // Biases are `[1, n]`: already row order; weights go out transposed.
            let v = if r == 1 {
                (*t).clone()
            } else {
                (*t).clone().transpose()
            };
            put_f32(out, &to_vec(v)?)?;
        }
        Ok(())
    })?;
    Ok(Exported {
        file: path,
        what: format!("{} dense tensors (PyTorch layout)", specs.len()),
    })
}
