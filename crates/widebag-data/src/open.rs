//! Opening any data file: a packed dataset ([`crate::packed`]) is recognised by its first bytes,
//! whatever `source.format` says; anything else goes to its format's reader ([`source::read`]).

use crate::error::DataError;
use crate::packed;
use crate::packed::PackedFile;
use crate::source::{self, Loaded, Source};

/// Reads `source` into memory. A packed dataset's rows are those its source's settings formed;
/// one packed with other settings than `source` asks for (of the same format) is refused.
pub fn load(source: &Source) -> Result<Loaded, DataError> {
    if !packed::is_packed(&source.path) {
        return source::read(source);
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
