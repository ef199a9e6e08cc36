//! The crate's one error type.

use std::fmt;

use syncular_protocol::ProtocolError;

/// Why an image could not be built.
#[derive(Debug)]
pub enum ImageError {
    /// The snapshot cannot be represented as a §5.3 image without changing
    /// data: a table or column name SQLite cannot hold as given (a name
    /// reserved by SQLite or by §5.3, two column names equal up to ASCII
    /// case), or a NaN float (SQLite stores NaN as NULL). The caller serves
    /// the rows lane (§5.2) instead.
    Unrepresentable(String),
    /// A stored payload does not decode with the table layout (§2.4) or a
    /// row does not fit the layout (arity, types, NULL in a non-nullable
    /// column, `serverVersion` < 1).
    Row(String),
    /// SQLite refused a statement (a duplicate primary key, a full disk).
    Sqlite(rusqlite::Error),
    /// Creating, reading or hashing the file failed.
    Io(std::io::Error),
}

/// Result alias of this crate.
pub type ImageResult<T> = Result<T, ImageError>;

impl fmt::Display for ImageError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ImageError::Unrepresentable(m) => write!(f, "not representable as a sqlite image: {m}"),
            ImageError::Row(m) => write!(f, "row does not fit the table layout: {m}"),
            ImageError::Sqlite(e) => write!(f, "sqlite: {e}"),
            ImageError::Io(e) => write!(f, "image file: {e}"),
        }
    }
}

impl std::error::Error for ImageError {}

impl From<rusqlite::Error> for ImageError {
    fn from(e: rusqlite::Error) -> Self {
        ImageError::Sqlite(e)
    }
}

impl From<std::io::Error> for ImageError {
    fn from(e: std::io::Error) -> Self {
        ImageError::Io(e)
    }
}

impl From<ProtocolError> for ImageError {
    fn from(e: ProtocolError) -> Self {
        ImageError::Row(e.to_string())
    }
}
