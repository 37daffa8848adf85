//! `widebag export RUN_DIR --to DIR`: a trained run's model as safetensors and `.npy` files in
//! the data's own id numbering, with its vocabulary (see `docs/checkpoints.md`).

use anyhow::Context;
use widebag_model::export::Exported;

use crate::failure::{Failure, Outcome};
use crate::preflight::open_compute;
use crate::request::ExportRequest;

pub fn run(req: &ExportRequest) -> Outcome {
    let (step, files) = exported(req)?;
    println!(
        "widebag export: {} at step {step} into {}",
        req.run.dir.display(),
        req.to.display()
    );
    for f in files {
        println!("  {}  {}", f.file.display(), f.what);
    }
    Ok(())
}

/// The run's export written into `req.to`: the checkpoint's step and the files with what each
/// holds.
pub fn exported(req: &ExportRequest) -> Result<(u64, Vec<Exported>), Failure> {
    let saved = &req.run;
    let prepared =
        widebag_prepare::open_data(&saved.config, &widebag_prepare::PrepareOptions::READ_ONLY)
            .map_err(Failure::usage)?;
    let compute = open_compute(saved.config.train.device)?;
    let mut model = widebag_model::checkpoint::saved::load(&prepared, &compute, &saved.checkpoint)
        .context("loading the checkpoint")
        .map_err(Failure::run)?;
    let files = widebag_model::export::export(model.layout.as_mut(), &prepared, &req.to)
        .context("exporting")
        .map_err(Failure::run)?;
    Ok((model.manifest.step, files))
}
