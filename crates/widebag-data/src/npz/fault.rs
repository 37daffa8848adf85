//! A fault inside an `.npz` archive, named by its member and byte offset, before the file's path
//! is attached.

use std::path::Path;

use crate::error::DataError;

/// An error inside an archive, before the file path is attached.
#[derive(Debug)]
pub(super) struct Fault {
    pub(super) member: String,
    pub(super) offset: u64,
    pub(super) message: String,
}

pub(super) fn fault(member: &str, offset: u64, message: impl Into<String>) -> Fault {
    Fault {
        member: member.to_string(),
        offset,
        message: message.into(),
    }
}

impl Fault {
    pub(super) fn at(self, path: &Path) -> DataError {
        DataError::Archive {
            path: path.to_path_buf(),
            member: self.member,
            offset: self.offset,
            message: self.message,
        }
    }
}
