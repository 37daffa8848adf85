//! Opening any data file: a packed dataset ([`crate::packed`]) is recognised by its first bytes,
//! whatever `source.format` says; anything else goes to its format's reader ([`read`]).

use widebag_kinds::Format;

use crate::error::DataError;
use crate::loaded::Loaded;
use crate::packed::layout::is_packed;
use crate::packed::read::PackedFile;
use crate::source::Source;
use crate::{dictd, libsvm, lightgcn, npz, text};

/// Reads `source` into memory. A packed dataset's rows are those its source's settings formed;
/// one packed with other settings than `source` asks for (of the same format) is refused.
pub fn load(source: &Source) -> Result<Loaded, DataError> {
    if !is_packed(&source.path) {
        return read(source);
    }
    let file = PackedFile::open(&source.path)?;
    check_variant(&file, source)?;
    file.load()
}

/// Refuses a packed file whose rows were formed otherwise than `source` asks (the same format
/// with other settings: another CBOW window, vocabulary cut or label mode).
pub fn check_variant(file: &PackedFile, source: &Source) -> Result<(), DataError> {
    let (packed, asked) = (&file.meta.variant, source.variant());
    let same_format = packed.split('-').next() == Some(source.format.name());
    if same_format && *packed != asked {
        return Err(DataError::InvalidSpec {
            key: "data.path",
            message: format!(
                "{} was packed with rows formed as `{packed}`, the settings ask for `{asked}`: \
                 pack the source again with these settings",
                source.path.display()
            ),
        });
    }
    Ok(())
}

/// Reads `source` into memory with its format's reader (`crate::load` also recognises a
/// packed dataset).
pub fn read(source: &Source) -> Result<Loaded, DataError> {
    let path = &source.path;
    source.label.check(source.format, source.text.mode, path)?;
    let mut loaded = match source.format {
        Format::Libsvm => Loaded {
            dataset: libsvm::read::read_libsvm(path, &source.read)?,
            vocabulary: None,
            test: None,
            labels: None,
        },
        Format::Npz => Loaded {
            dataset: npz::read::read_npz(path, &source.read)?,
            vocabulary: None,
            test: None,
            labels: None,
        },
        Format::Lightgcn => {
            let i = lightgcn::read::read_lightgcn(path, source.test_path.as_deref(), &source.read)?;
            Loaded {
                dataset: i.train,
                vocabulary: None,
                test: i.test,
                labels: None,
            }
        }
        Format::Text if source.label.is_file_name() => {
            let (dataset, vocab, names) = text::labelled::read_labelled(
                &source.path,
                source.format,
                &source.text,
                &source.label,
                source.read.skip_bad_lines,
            )?;
            Loaded {
                dataset,
                vocabulary: Some(vocab),
                test: None,
                labels: Some(names),
            }
        }
        Format::Text => {
            let (dataset, vocab) = text::read::read_text(path, &source.read, &source.text)?;
            Loaded {
                dataset,
                vocabulary: Some(vocab),
                test: None,
                labels: None,
            }
        }
        Format::Dictd => {
            let (docs, skipped, files) =
                dictd::read::dictd_documents(path, source.read.skip_bad_lines)?;
            let (dataset, vocab) = text::read::build(&files.index, &docs, &source.text, skipped)?;
            Loaded {
                dataset,
                vocabulary: Some(vocab),
                test: None,
                labels: None,
            }
        }
    };
    loaded.dataset.source = path.clone();
    Ok(loaded)
}
