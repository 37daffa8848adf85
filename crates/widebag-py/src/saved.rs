//! A trained run read back (`Run.evaluate`, `Run.predict`, `Run.weights`): the run directory's
//! config and last good checkpoint chosen as `widebag eval` chooses them, its data prepared as
//! training prepared it (the same renumbering), and rows from Python in place of its held-out
//! rows. Export is `widebag export`'s.

use std::path::PathBuf;

use numpy::{IntoPyArray, PyArray2, PyArrayMethods, PyReadonlyArray1};
use pyo3::prelude::*;
use widebag::commands::predict::{Ranking, ranked};
use widebag::request::EvalRequest;
use widebag_data::{Dataset, HeldOut, RowStore};
use widebag_prepare::Prepared;

use crate::csr::{Csr, CsrArrays, check_labels, label_slice, optional};
use crate::errors;
use crate::reports::command;

/// `argv`'s `widebag eval RUN_DIR` request, its data prepared with no held-out rows of its own.
fn open_run(argv: Vec<String>) -> PyResult<(EvalRequest, Prepared)> {
    let widebag::args::Command::Eval(args) = command(argv)? else {
        return Err(errors::usage("not an eval command"));
    };
    let mut req = widebag::request::eval(&args).map_err(errors::failure)?;
    req.config.data.test_path = None;
    req.config.train.eval_rows = 0;
    let prepared =
        widebag_prepare::open_data(&req.config, &widebag_prepare::PrepareOptions::READ_ONLY)
            .map_err(|e| errors::usage(e.to_string()))?;
    Ok((req, prepared))
}

/// Rows from Python as held-out rows of `prepared`'s run: `x`'s ids, with `labels` or `bags` as
/// targets (none: rows only scored), and with `exclude_seen` each row's own ids that are classes
/// as the classes it is not credited for.
fn held_out(
    prepared: &mut Prepared,
    x: &Csr,
    labels: Option<&[i64]>,
    bags: Option<&Csr>,
    exclude_seen: bool,
) -> PyResult<()> {
    let (width, n_classes) = (prepared.config.data.width, prepared.config.data.n_classes());
    if x.width > width {
        return Err(errors::data(format!(
            "data: {} columns, the run's width is {width}",
            x.width
        )));
    }
    if let Some(l) = labels {
        check_labels(l, x.n_rows, n_classes)?;
    }
    if let Some(b) = bags
        && (b.n_rows != x.n_rows || b.width > n_classes)
    {
        return Err(errors::data(format!(
            "targets: {} rows of {} columns for data's {} rows and the run's {n_classes} classes",
            b.n_rows, b.width, x.n_rows
        )));
    }
    let mut rows = RowStore::with_capacity(x.n_rows, x.ids.len(), x.n_rows);
    let mut seen = RowStore::new();
    let (mut ids, mut classes) = (Vec::new(), Vec::new());
    for r in 0..x.n_rows {
        x.ids_of(r, &mut ids);
        let label;
        let (t, w): (&[u32], &[f32]) = match (labels, bags) {
            (Some(l), _) => {
                label = [l[r] as u32];
                (&label, &[1.0])
            }
            (None, Some(b)) => {
                b.ids_of(r, &mut classes);
                (&classes, b.values_of(r))
            }
            (None, None) => (&[], &[]),
        };
        rows.push(&ids, x.values_of(r), t, w);
        let own: Vec<u32> = ids
            .iter()
            .copied()
            .filter(|&i| (i as usize) < n_classes)
            .collect();
        let ones = vec![1.0; own.len()];
        seen.push(&own, &ones, &[], &[]);
    }
    let held = HeldOut {
        dataset: Dataset {
            source: PathBuf::from("<rows from Python>"),
            width,
            n_classes,
            rows,
            skipped_lines: 0,
            notes: Vec::new(),
        },
        seen: exclude_seen.then_some(seen),
        users: None,
        dropped_ids: 0,
        dropped_targets: 0,
        dropped_rows: 0,
        notes: Vec::new(),
    };
    widebag_prepare::hold_out(prepared, held).map_err(|e| errors::data(e.to_string()))
}

/// The run's model on `data` with `labels` or `bags` as targets: the task's metrics (Recall@K
/// and NDCG@K for bags, accuracy for labels, the loss), as `widebag eval --json`'s report.
#[pyfunction]
#[pyo3(signature = (argv, data, labels=None, bags=None, exclude_seen=true))]
pub fn evaluate(
    py: Python<'_>,
    argv: Vec<String>,
    data: CsrArrays<'_>,
    labels: Option<PyReadonlyArray1<'_, i64>>,
    bags: Option<CsrArrays<'_>>,
    exclude_seen: bool,
) -> PyResult<String> {
    let x = Csr::of(&data)?;
    let labels = label_slice(&labels)?;
    let bags = optional(&bags)?;
    if labels.is_none() && bags.is_none() {
        return Err(errors::usage(
            "evaluate needs targets: labels or a CSR matrix of bags",
        ));
    }
    let (req, mut prepared) = open_run(argv)?;
    held_out(&mut prepared, &x, labels, bags.as_ref(), exclude_seen)?;
    let report = py.detach(|| -> Result<_, widebag::failure::Failure> {
        use widebag::failure::Failure;
        let compute = widebag::preflight::open_compute(req.config.train.device)?;
        let mut model =
            widebag_model::checkpoint::saved::load(&prepared, &compute, &req.run.checkpoint)
                .map_err(Failure::run)?;
        let report =
            widebag_model::eval::held_out::evaluate_held_out(&mut model, &prepared, &compute)
                .map_err(Failure::run)?;
        Ok((report, model.manifest.step))
    });
    let (report, step) = report.map_err(errors::failure)?;
    let out = serde_json::json!({"step": step, "report": report});
    Ok(out.to_string())
}

/// The run's best `top_k` classes of each row of `data` (its own ids left out with
/// `exclude_seen`): `[rows, top_k]` class ids (the data's numbering; -1 past a row's last) and
/// their log-probabilities (NaN there).
#[pyfunction]
#[pyo3(signature = (argv, data, top_k, exclude_seen))]
#[allow(
    clippy::type_complexity,
    reason = "two arrays, as NumPy callers take them"
)]
pub fn predict<'py>(
    py: Python<'py>,
    argv: Vec<String>,
    data: CsrArrays<'py>,
    top_k: usize,
    exclude_seen: bool,
) -> PyResult<(Bound<'py, PyArray2<i64>>, Bound<'py, PyArray2<f32>>)> {
    if top_k == 0 {
        return Err(errors::usage("top_k must be at least 1"));
    }
    let x = Csr::of(&data)?;
    let (req, mut prepared) = open_run(argv)?;
    held_out(&mut prepared, &x, None, None, false)?;
    let ranking = Ranking {
        top_k,
        exclude_seen,
    };
    let rows = py.detach(|| -> Result<_, widebag::failure::Failure> {
        use widebag::failure::Failure;
        let compute = widebag::preflight::open_compute(req.config.train.device)?;
        let mut model =
            widebag_model::checkpoint::saved::load(&prepared, &compute, &req.run.checkpoint)
                .map_err(Failure::run)?;
        ranked(&prepared, &mut model, ranking, &compute).map_err(Failure::run)
    });
    let rows = rows.map_err(errors::failure)?;
    let mut ids = vec![-1i64; x.n_rows * top_k];
    let mut scores = vec![f32::NAN; x.n_rows * top_k];
    for r in &rows {
        for (k, &(c, lp)) in r.top.iter().enumerate().take(top_k) {
            ids[r.row * top_k + k] = i64::from(c);
            scores[r.row * top_k + k] = lp;
        }
    }
    let shape = [x.n_rows, top_k];
    let ids = ids.into_pyarray(py).reshape(shape)?;
    let scores = scores.into_pyarray(py).reshape(shape)?;
    Ok((ids, scores))
}

/// `argv`'s `widebag export RUN_DIR --to DIR`: the checkpoint's step and `(file, what)` of each
/// file written.
#[pyfunction]
pub fn export(py: Python<'_>, argv: Vec<String>) -> PyResult<(u64, Vec<(String, String)>)> {
    let widebag::args::Command::Export(args) = command(argv)? else {
        return Err(errors::usage("not an export command"));
    };
    let req = widebag::request::export(&args).map_err(errors::failure)?;
    let (step, files) = py
        .detach(|| widebag::commands::export::exported(&req))
        .map_err(errors::failure)?;
    let files = files
        .into_iter()
        .map(|f| (f.file.display().to_string(), f.what))
        .collect();
    Ok((step, files))
}
