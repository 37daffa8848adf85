//! Range checks of a built configuration; each failure names the key and why.

use widebag_kinds::{Format, LabelMode, ShuffleMode, TextMode};

use crate::band_keys::BandPlacement;
use crate::choices::{Checkpointing, GpuKernels, Layout, Logits, Precision};
use crate::sampling::Score;
use crate::schema::{Config, DataConfig, ModelConfig, OutputKind, PLAN_KNOBS};
use crate::units;

/// `model.tie_output`: one item vector per id on both sides needs the same ids on both sides,
/// one table and one output layer of the bag's width.
fn check_tied(c: &Config) -> Result<(), (&'static str, String)> {
    let (m, key) = (&c.model, "model.tie_output");
    let why = if m.layout != Layout::Sparse {
        "needs layout = \"sparse\" (the table is the output layer's weight)".to_string()
    } else if c.data.n_classes() != c.data.width {
        format!(
            "needs the classes to be the input ids (data.n_classes {} against data.width {})",
            c.data.n_classes(),
            c.data.width
        )
    } else if m.last_hidden() != m.dim {
        format!(
            "needs the output layer's input to be model.dim wide ({}): the last of model.hidden is {}",
            m.dim,
            m.last_hidden()
        )
    } else if m.input_bands.cutoffs.is_split() || m.output_bands.cutoffs.is_split() {
        "takes no head/tail bands (model.input_bands, model.output_bands)".to_string()
    } else if m.input_bands.dtype_of(0) != Precision::F32 {
        "needs an f32 table (model.input_bands.dtype)".to_string()
    } else {
        return Ok(());
    };
    Err((key, why))
}

/// `data.user_vector`: the users' columns widen the input past the items, so the table is no
/// longer the output layer's weight, and they are not among the ids the bands renumber.
fn check_user_vector(m: &ModelConfig) -> Result<(), (&'static str, String)> {
    let key = "data.user_vector";
    check(
        !m.tie_output,
        key,
        "takes no model.tie_output (the users' columns are not items)",
    )?;
    check(
        !m.input_bands.cutoffs.is_split(),
        key,
        "takes no input bands (model.input_bands.cutoffs)",
    )
}

/// The head/tail keys of `[model]`.
fn check_bands(m: &ModelConfig) -> Result<(), (&'static str, String)> {
    let err = |key: &'static str, msg: String| Err((key, msg));
    for (key, cutoffs) in [
        ("model.input_bands.cutoffs", &m.input_bands.cutoffs),
        ("model.output_bands.cutoffs", &m.output_bands.cutoffs),
    ] {
        let ids = cutoffs.ids();
        if ids.first() == Some(&0) {
            return err(
                key,
                "cutoffs must be > 0 (the head holds the ids below the first)".into(),
            );
        }
        if ids.windows(2).any(|w| w[0] >= w[1]) {
            return err(key, format!("cutoffs must ascend strictly, got {ids:?}"));
        }
    }
    for (key, factor) in [
        ("model.input_bands.factor", m.input_bands.factor),
        ("model.output_bands.factor", m.output_bands.factor),
    ] {
        if !(1..=1024).contains(&factor) {
            return err(key, "must be between 1 and 1024".into());
        }
    }
    if m.input_bands.placement.is_empty() {
        return err(
            "model.input_bands.placement",
            "needs at least one placement (\"device\" or \"host\")".into(),
        );
    }
    if m.input_bands.dtype.is_empty() {
        return err(
            "model.input_bands.dtype",
            "needs at least one dtype (\"f32\", \"f16\" or \"bf16\")".into(),
        );
    }
    for (key, b) in [
        ("model.input_bands.budget", &m.input_bands.budget),
        ("model.output_bands.budget", &m.output_bands.budget),
    ] {
        if let Some(b) = b {
            units::parse_bytes(b).map_err(|e| (key, e))?;
        }
    }
    let split_out = m.output_bands.cutoffs.is_split();
    match m.output {
        OutputKind::Adaptive if !split_out => {
            return err(
                "model.output_bands.cutoffs",
                "output = \"adaptive\" needs output_bands.cutoffs (a list or \"auto\")".into(),
            );
        }
        OutputKind::Full if split_out => {
            return err(
                "model.output_bands.cutoffs",
                "applies to output = \"adaptive\" or \"multinomial\"; output is \"full\"".into(),
            );
        }
        _ => {}
    }
    if m.layout == Layout::Dense {
        if m.input_bands.cutoffs.is_split() {
            return err(
                "model.input_bands.cutoffs",
                "bands need layout = \"sparse\" (the dense layout is the unsplit baseline)".into(),
            );
        }
        if m.output != OutputKind::Full {
            return err(
                "model.output",
                "the dense layout has the full softmax only; use layout = \"sparse\"".into(),
            );
        }
        if m.input_bands.placement.contains(&BandPlacement::Host) {
            return err(
                "model.input_bands.placement",
                "host placement needs layout = \"sparse\"".into(),
            );
        }
        if m.input_bands.dtype.iter().any(|&d| d != Precision::F32) {
            return err(
                "model.input_bands.dtype",
                "f16/bf16 tables need layout = \"sparse\" (the dense layout is the f32 baseline)"
                    .into(),
            );
        }
        if m.checkpointing != Checkpointing::None {
            return err(
                "model.checkpointing",
                "needs layout = \"sparse\" (the dense layout is the baseline that saves everything)"
                    .into(),
            );
        }
    }
    Ok(())
}

/// `data.label` and `data.label_chars`.
fn check_label(d: &DataConfig) -> Result<(), (&'static str, String)> {
    let [start, end] = d.label_chars;
    if start >= end && (start, end) != (0, 0) {
        return Err((
            "data.label_chars",
            format!("[{start}, {end}]: start must be below end ([0, 0] takes the whole name)"),
        ));
    }
    if d.label == LabelMode::Bag {
        if d.label_chars != [0, 0] {
            return Err((
                "data.label_chars",
                "applies to label = \"file_name\"".into(),
            ));
        }
        return Ok(());
    }
    let err = |message: &str| Err(("data.label", message.to_string()));
    if d.format != Some(Format::Text) {
        return err(
            "\"file_name\" applies to format = \"text\" (a directory, one document per file)",
        );
    }
    if d.mode.unwrap_or_default() != TextMode::Bow {
        return err("\"file_name\" needs mode = \"bow\" (one row per document)");
    }
    // A path that is not there yet is left to the reader, which names it; a packed dataset
    // (`data pack --label file-name`) is a file that holds the labelled documents' rows.
    let file = |p: &std::path::Path| p.is_file() && !widebag_kinds::is_packed(p);
    if d.format.is_some() && d.resolved_path().is_some_and(|p| file(&p)) {
        return err(
            "\"file_name\" needs data.path to be a directory of documents (one per file), not a file",
        );
    }
    Ok(())
}

/// A range check: `Ok` when `ok`, else the key and why.
fn check(ok: bool, key: &'static str, msg: &str) -> Result<(), (&'static str, String)> {
    if ok {
        Ok(())
    } else {
        Err((key, msg.to_string()))
    }
}

/// Range checks, section by section; returns the first failing key and why.
pub fn validate(c: &Config) -> Result<(), (&'static str, String)> {
    check_data(&c.data)?;
    check_model(c)?;
    check_training(c)?;
    check_eval(c)?;
    check_optim(c)?;
    check_plan(c)
}

/// `[data]`: the synthetic data's shape, the file and its format, the text reader and the
/// shuffle.
fn check_data(d: &DataConfig) -> Result<(), (&'static str, String)> {
    check(
        (1..=u32::MAX as usize).contains(&d.width),
        "data.width",
        "must be between 1 and 4294967295",
    )?;
    if let Some(n) = d.n_classes {
        check(
            (2..=u32::MAX as usize).contains(&n),
            "data.n_classes",
            "must be between 2 and 4294967295",
        )?;
    } else {
        check(
            d.width >= 2,
            "data.n_classes",
            "defaults to data.width, which must then be at least 2",
        )?;
    }
    check(
        d.nnz.is_finite() && d.nnz >= 1.0 && d.nnz <= d.width as f64,
        "data.nnz",
        "must be a number between 1 and data.width",
    )?;
    check(
        d.nnz_spread.is_finite() && d.nnz_spread >= 0.0,
        "data.nnz_spread",
        "must be a finite number >= 0",
    )?;
    check(
        d.zipf_exponent.is_finite() && d.zipf_exponent >= 0.0,
        "data.zipf_exponent",
        "must be a finite number >= 0",
    )?;
    check(
        (0.0..=1.0).contains(&d.signal_share),
        "data.signal_share",
        "must be within [0, 1]",
    )?;
    check_file(d)?;
    check_label(d)?;
    check(d.window >= 1, "data.window", "must be at least 1")?;
    check(
        d.shuffle_rows >= 1,
        "data.shuffle_rows",
        "must be at least 1",
    )?;
    check(d.min_count >= 1, "data.min_count", "must be at least 1")?;
    check(
        d.shuffle_streams >= 1,
        "data.shuffle_streams",
        "must be at least 1",
    )?;
    check(
        d.shuffle_streams == 1 || d.shuffle == ShuffleMode::Blocks,
        "data.shuffle_streams",
        "streams cut the blocks of data.shuffle = \"blocks\"",
    )
}

/// `data.path` with `data.format`, and the keys that apply to some formats only.
fn check_file(d: &DataConfig) -> Result<(), (&'static str, String)> {
    match (&d.path, d.format) {
        // A packed dataset says how its rows were formed.
        (Some(_), None) => check(
            d.resolved_path()
                .is_some_and(|p| widebag_kinds::is_packed(&p)),
            "data.format",
            "must be set with data.path (unless it is a packed dataset, `widebag data pack`): \
             libsvm, npz, lightgcn, text or dictd",
        )?,
        (None, Some(_)) => check(false, "data.path", "must be set with data.format")?,
        _ => {}
    }
    if let Some(f) = d.format {
        check(
            d.mode.is_none() || f.is_text(),
            "data.mode",
            "applies to the text and dictd formats only",
        )?;
        check(
            d.zero_based.is_none() || f == Format::Libsvm,
            "data.zero_based",
            "applies to the libsvm format only",
        )?;
        check(
            d.user_vector == 0.0 || f == Format::Lightgcn,
            "data.user_vector",
            "applies to the lightgcn format only (its rows are users)",
        )?;
    }
    check(
        d.user_vector.is_finite() && d.user_vector >= 0.0,
        "data.user_vector",
        "must be a finite number >= 0 (0: no user vector)",
    )?;
    check(
        d.user_vector == 0.0 || d.path.is_some(),
        "data.user_vector",
        "needs a lightgcn data.path (synthetic rows have no users)",
    )
}

/// `[model]`: the widths, the bands and the tied output.
fn check_model(c: &Config) -> Result<(), (&'static str, String)> {
    let m = &c.model;
    check(m.dim >= 1, "model.dim", "must be at least 1")?;
    check(
        m.hidden.iter().all(|&h| h >= 1),
        "model.hidden",
        "every hidden size must be at least 1",
    )?;
    check_bands(m)?;
    if m.tie_output {
        check_tied(c)?;
    }
    if c.data.user_vector > 0.0 {
        check_user_vector(m)?;
    }
    check_output_precision(m)?;
    check_tiled_logits(c)?;
    check_sampled(c)
}

/// `model.logits = "tiled"` is the sparse layout's full or adaptive softmax with dot scores on
/// widebag's CubeCL kernels, whose tiles are f32 (the device is checked where it opens: not
/// flex; the adaptive softmax in one process, where the output layer is built).
fn check_tiled_logits(c: &Config) -> Result<(), (&'static str, String)> {
    let m = &c.model;
    if m.logits != Logits::Tiled {
        return Ok(());
    }
    let why = if c.train.gpu_kernels != GpuKernels::Cubecl {
        "forms the logits in widebag's CubeCL kernels: set train.gpu_kernels = \"cubecl\""
    } else if m.layout != Layout::Sparse {
        "is the sparse layout's (the dense layout keeps its one chunk's logits)"
    } else if m.output.sampled() {
        "is the full or adaptive softmax's (a sampled output forms a few columns' logits)"
    } else if m.tie_output || m.score != Score::Dot {
        "is the full or adaptive softmax's with dot scores and an output layer of its own"
    } else if !m.output_precision.is_f32() {
        "forms f32 products (set model.output_precision = \"f32\")"
    } else {
        return Ok(());
    };
    Err(("model.logits", format!("\"tiled\" {why}")))
}

/// Half-precision output products are the full softmax's (one chunked softmax over every
/// class, dot scores): the adaptive, sampled, tied and cosine output layers compute in f32.
fn check_output_precision(m: &ModelConfig) -> Result<(), (&'static str, String)> {
    if m.output_precision.is_f32() {
        return Ok(());
    }
    let p = m.output_precision.name();
    let other = if m.output_bands.cutoffs.is_split() {
        Some("the adaptive softmax (model.output_bands)")
    } else if m.output.sampled() {
        Some("a sampled output (model.output)")
    } else if m.tie_output {
        Some("a tied output layer (model.tie_output)")
    } else if m.score != Score::Dot {
        Some("cosine scores (model.score)")
    } else {
        None
    };
    match other {
        Some(what) => Err((
            "model.output_precision",
            format!("{p} products are the full softmax's with dot scores; {what} computes in f32"),
        )),
        None => Ok(()),
    }
}

/// The sampled output losses' keys, and what they cannot be combined with.
fn check_sampled(c: &Config) -> Result<(), (&'static str, String)> {
    let m = &c.model;
    let sampled = m.output.sampled();
    let contrastive = m.output == OutputKind::CosineContrastive;
    crate::sampling::check(&m.sampling, m.score, m.temperature, (sampled, contrastive))?;
    if !sampled {
        return Ok(());
    }
    let name = m.output.name();
    if m.output_bands.cutoffs.is_split() {
        return Err((
            "model.output_bands.cutoffs",
            format!("output = \"{name}\" draws from every class: leave the output unsplit"),
        ));
    }
    if m.tie_output {
        return Err((
            "model.tie_output",
            format!("output = \"{name}\" has its own item vectors; the tie is the full softmax's"),
        ));
    }
    let known = match c.data.path {
        None => Some(c.data.n_classes()),
        Some(_) => c.data.n_classes,
    };
    if let Some(n) = known {
        crate::sampling::check_negatives(m.sampling.negatives, n)?;
    }
    Ok(())
}

/// `[train]`, the held-out rows and the input dropout: what a training run reads.
fn check_training(c: &Config) -> Result<(), (&'static str, String)> {
    let (d, t) = (&c.data, &c.train);
    check(t.batch_size >= 1, "train.batch_size", "must be at least 1")?;
    check(t.steps >= 1, "train.steps", "must be at least 1")?;
    if let Some(e) = t.epochs {
        check(e >= 1, "train.epochs", "must be at least 1")?;
        check(
            d.path.is_some(),
            "train.epochs",
            "needs a data file (data.path); synthetic data has no epochs: use train.steps",
        )?;
    }
    check(
        d.test_path.is_none() || t.eval_rows == 0,
        "train.eval_rows",
        "held-out rows come from data.test_path already: leave train.eval_rows at 0",
    )?;
    check(
        d.test_path.is_none() || d.path.is_some(),
        "data.test_path",
        "needs data.path (the training file it is read against)",
    )?;
    check(
        t.stop_at_metric.is_some() == t.stop_at_value.is_some(),
        "train.stop_at_value",
        "train.stop_at_metric and train.stop_at_value go together",
    )?;
    if let Some(v) = t.stop_at_value {
        check(
            v.is_finite(),
            "train.stop_at_value",
            "must be a finite number",
        )?;
    }
    if let Some(m) = &t.stop_at_metric {
        let known = ["accuracy", "perplexity", "nll", "bits_per_token"].contains(&m.as_str())
            || ["recall@", "ndcg@", "precision@", "hit@"].iter().any(|p| {
                m.strip_prefix(p)
                    .is_some_and(|k| k.parse::<usize>().is_ok_and(|k| k > 0))
            });
        check(
            known,
            "train.stop_at_metric",
            "one of accuracy, perplexity, nll, bits_per_token, recall@K, ndcg@K, precision@K, hit@K",
        )?;
    }
    let dropout = c.model.input_dropout;
    check(
        dropout.is_finite() && (0.0..1.0).contains(&dropout),
        "model.input_dropout",
        "must be within [0, 1)",
    )
}

/// `[eval]`: the cut-offs.
fn check_eval(c: &Config) -> Result<(), (&'static str, String)> {
    let e = &c.eval;
    check(
        !e.k.is_empty() && e.k.iter().all(|&k| (1..=100_000).contains(&k)),
        "eval.k",
        "must list at least one cut-off, each between 1 and 100000",
    )
}

/// `[optim]`: the rates, the moments and the state's precision.
fn check_optim(c: &Config) -> Result<(), (&'static str, String)> {
    let o = &c.optim;
    check(
        o.lr.is_finite() && o.lr > 0.0,
        "optim.lr",
        "must be a finite number > 0",
    )?;
    if let Some(lr) = o.table_lr {
        check(
            lr.is_finite() && lr > 0.0,
            "optim.table_lr",
            "must be a finite number > 0",
        )?;
    }
    check(
        (0.0..1.0).contains(&o.beta1),
        "optim.beta1",
        "must be within [0, 1)",
    )?;
    check(
        (0.0..1.0).contains(&o.beta2),
        "optim.beta2",
        "must be within [0, 1)",
    )?;
    check(
        o.eps.is_finite() && o.eps > 0.0,
        "optim.eps",
        "must be a finite number > 0",
    )?;
    check(
        (0.0..1.0).contains(&o.momentum),
        "optim.momentum",
        "must be within [0, 1)",
    )?;
    check(
        o.weight_decay.is_finite() && o.weight_decay >= 0.0,
        "optim.weight_decay",
        "must be a finite number >= 0",
    )?;
    check(
        o.state_dtype == Precision::F32 || c.model.layout == Layout::Sparse,
        "optim.state_dtype",
        "f16/bf16 state needs layout = \"sparse\" (the dense layout is the f32 baseline)",
    )
}

/// `[plan]`: the budget, the batch range and the pins.
fn check_plan(c: &Config) -> Result<(), (&'static str, String)> {
    let p = &c.plan;
    if let Some(b) = &p.budget {
        units::parse_bytes(b).map_err(|e| ("plan.budget", e))?;
    }
    check(p.min_batch >= 1, "plan.min_batch", "must be at least 1")?;
    check(
        p.max_batch >= p.min_batch,
        "plan.max_batch",
        "must be at least plan.min_batch",
    )?;
    for key in &p.pin {
        if !PLAN_KNOBS.contains(&key.as_str()) {
            return Err((
                "plan.pin",
                format!("`{key}` is not a knob (use {})", PLAN_KNOBS.join(", ")),
            ));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `model.logits = "tiled"` runs where widebag's CubeCL kernels form the full or adaptive
    /// softmax's tiles, and every other combination is refused naming the key.
    #[test]
    fn tiled_logits_need_the_cubecl_kernels_and_the_sparse_full_softmax() {
        let mut ok = Config::default();
        ok.model.logits = Logits::Tiled;
        ok.train.gpu_kernels = GpuKernels::Cubecl;
        assert_eq!(check_tiled_logits(&ok), Ok(()));
        type Change = fn(&mut Config);
        let mut adaptive = ok.clone();
        adaptive.model.output = OutputKind::Adaptive;
        adaptive.model.output_bands.cutoffs = crate::Cutoffs::Ids(vec![100, 500]);
        assert_eq!(check_tiled_logits(&adaptive), Ok(()));
        let refused: [(&str, Change); 5] = [
            ("gpu_kernels", |c| c.train.gpu_kernels = GpuKernels::Tensor),
            ("sparse layout", |c| c.model.layout = Layout::Dense),
            ("sampled", |c| c.model.output = OutputKind::SampledSoftmax),
            ("dot scores", |c| c.model.tie_output = true),
            ("f32 products", |c| {
                c.model.output_precision = Precision::F16
            }),
        ];
        for (what, change) in refused {
            let mut c = ok.clone();
            change(&mut c);
            let (key, why) = check_tiled_logits(&c).unwrap_err();
            assert_eq!(key, "model.logits", "{what}: {why}");
        }
    }
}
