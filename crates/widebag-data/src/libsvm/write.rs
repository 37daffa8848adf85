//! A dataset written as a libsvm file, after widebag's header line, so that it reads back
//! exactly (the index base, width and classes, and empty rows).

use std::io::Write;
use std::path::Path;

use widebag_csr::SparseRow;

use crate::dataset::Dataset;
use crate::error::DataError;
use crate::libsvm::header::HEADER;

/// Writes a dataset as libsvm with 0-based ids (`zero_based = false` writes 1-based), after a
/// widebag header comment. Labels are the target classes (a row whose target is its own bag
/// gets its ids as labels; target weights other than 1 are not representable and are refused).
pub fn write_libsvm(dataset: &Dataset, path: &Path, zero_based: bool) -> Result<(), DataError> {
    let io = |source| DataError::Io {
        path: path.to_path_buf(),
        source,
    };
    if let Some(i) = dataset.rows.target_weights.iter().position(|&w| w != 1.0) {
        let row = dataset.rows.target_ptr.partition_point(|&p| p <= i) - 1;
        let (targets, weights) = dataset.rows.row_targets(row);
        // Self-targets (the row's own bag with its values) are written as labels of weight 1.
        if (targets, weights) != dataset.rows.row(row) {
            return Err(DataError::InvalidSpec {
                key: "--to libsvm",
                message: format!(
                    "row {row} has target weights other than 1, which libsvm labels cannot hold \
                     (convert to npz instead)"
                ),
            });
        }
    }
    let file = std::fs::File::create(path).map_err(io)?;
    let mut w = std::io::BufWriter::new(file);
    writeln!(
        w,
        "{HEADER} zero_based={zero_based} width={} n_classes={} blank_lines=rows",
        dataset.width, dataset.n_classes
    )
    .map_err(io)?;
    let base = u32::from(!zero_based);
    for r in 0..dataset.n_rows() {
        let (ids, values) = dataset.rows.row(r);
        let targets = dataset.rows.row_targets(r);
        // svmlight readers (sklearn's among them) want sorted, unique indices per line.
        let row = SparseRow {
            ids: ids.to_vec(),
            values: values.to_vec(),
        }
        .canonical();
        let labels = if targets == (ids, values) {
            &row.ids[..]
        } else {
            targets.0
        };
        let labels: Vec<String> = labels.iter().map(|l| l.to_string()).collect();
        let mut line = labels.join(",");
        for (id, v) in row.ids.iter().zip(&row.values) {
            line.push_str(&format!(" {}:{}", id + base, v));
        }
        line.push('\n');
        w.write_all(line.as_bytes()).map_err(io)?;
    }
    w.flush().map_err(io)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dataset::RowStore;
    use crate::libsvm::read::read_libsvm;
    use crate::options::ReadOptions;

    #[test]
    fn written_files_read_back_exactly() {
        let mut rows = RowStore::new();
        rows.push(&[3], &[0.25], &[1], &[1.0]);
        rows.push(&[], &[], &[], &[]);
        rows.push(&[1, 4], &[1.0, 2.0], &[0, 2], &[1.0, 1.0]);
        let d = Dataset {
            source: "mem".into(),
            width: 9,
            n_classes: 5,
            rows,
            skipped_lines: 0,
            notes: vec![],
        };
        let p = std::env::temp_dir().join(format!("widebag-svm-{}.svm", std::process::id()));
        for zero_based in [true, false] {
            write_libsvm(&d, &p, zero_based).unwrap();
            let back = read_libsvm(&p, &ReadOptions::default()).unwrap();
            assert_eq!(back.rows, d.rows);
            assert_eq!((back.width, back.n_classes), (9, 5));
        }
    }
}
