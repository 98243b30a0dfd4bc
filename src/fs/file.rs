//! Whole-file reads and writes: `fs/readFile`, `fs/writeFile`.

use super::host::{open, open_regular, with_path};
use super::staged::StagedFile;
use super::FsError;
use base64::write::EncoderStringWriter;
use std::fs::OpenOptions;
use std::io::{self, Read as _, Write as _};
use std::path::Path;

/// Bytes read per system call while encoding.
const READ_BUFFER: usize = 256 * 1024;

/// How a refusal of `fs/readFile` for its size begins, also when a sandbox helper reports it.
pub(crate) const TOO_LARGE: &str = "file is too large to read";

fn too_large(limit: u64) -> FsError {
    FsError::refused(format!(
        "{TOO_LARGE}: limit is {limit} bytes; read it in blocks with fs/open and fs/readBlock"
    ))
}

/// The file's content as standard base64, read in chunks straight into the encoder so the
/// daemon never holds the raw bytes and their encoding at the same time. The size from
/// metadata sizes the string and fails fast; reading still goes on to the real end, because
/// files like those under /proc report size 0.
pub(super) fn read_base64(path: &Path, follow: bool, limit: u64) -> Result<String, FsError> {
    let (mut file, meta) = open_regular(path, follow)?;
    if meta.len() > limit {
        return Err(too_large(limit));
    }
    let capacity = usize::try_from(meta.len())
        .ok()
        .and_then(|len| base64::encoded_len(len, true))
        .unwrap_or(0);
    let mut encoder = EncoderStringWriter::from_consumer(
        String::with_capacity(capacity),
        &base64::engine::general_purpose::STANDARD,
    );
    let mut buffer = vec![0; READ_BUFFER];
    let mut total: u64 = 0;
    loop {
        let read = match file.read(&mut buffer) {
            Ok(0) => break,
            Ok(read) => read,
            Err(err) if err.kind() == io::ErrorKind::Interrupted => continue,
            Err(err) => return Err(FsError::io(err, path)),
        };
        total += read as u64;
        if total > limit {
            return Err(too_large(limit));
        }
        // Writing into a String cannot fail.
        let _ = encoder.write_all(&buffer[..read]);
    }
    Ok(encoder.into_inner())
}

/// Creates or truncates `path` in place (an existing hard link is written through), or with
/// `atomic` stages the bytes beside it and renames them into place.
pub(super) fn write(path: &Path, data: &[u8], follow: bool, atomic: bool) -> Result<(), FsError> {
    if atomic {
        let staged = StagedFile::create(path, follow)?;
        with_path(staged.file().write_all(data), path)?;
        return staged.commit();
    }
    let mut file = open(
        path,
        OpenOptions::new().write(true).create(true).truncate(true),
        follow,
    )?;
    // O_NONBLOCK let a FIFO with a reader open at once; writing to it could still stall.
    if !with_path(file.metadata(), path)?.is_file() {
        return Err(FsError::NotAFile(path.to_owned()));
    }
    with_path(file.write_all(data), path)
}
