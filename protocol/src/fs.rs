//! `fs/*` methods and the `fs/changed` notification.
//!
//! Every method that names a path takes an optional `sandbox`; omitted and null mean the same.
//! Members marked "extension" are not in the codex reference; clients learn of them through
//! capability bits and older clients never send them.

use crate::base64_bytes::Base64Bytes;
use crate::sandbox::FileSystemSandboxContext;
use crate::PathUri;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// Largest `fs/readBlock` length and `fs/writeBlock` chunk (1 MiB).
pub const FILE_CHUNK_SIZE: usize = 1024 * 1024;
/// Largest file `fs/readFile` returns (512 MiB).
pub const MAX_READ_FILE_BYTES: u64 = 512 * 1024 * 1024;
/// Most entries `fs/readDirectory` returns.
pub const MAX_DIRECTORY_ENTRIES: usize = 50_000;
/// Longest client-chosen handle or watch id, in bytes.
pub const MAX_HANDLE_ID_BYTES: usize = 32;

/// The result of methods that return nothing.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct EmptyResult {}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ReadFileParams {
    pub path: PathUri,
    /// Default true; false refuses a symlink as the final path component.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub follow_symlinks: Option<bool>,
    /// A lower limit than the built-in 512 MiB.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_bytes: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sandbox: Option<FileSystemSandboxContext>,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ReadFileResult {
    pub data_base64: Base64Bytes,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct WriteFileParams {
    pub path: PathUri,
    /// Standard base64. Decoded by the method, so bad base64 is -32600 as in the reference.
    pub data_base64: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub follow_symlinks: Option<bool>,
    /// Extension: write a temporary file beside the target and rename it into place, so
    /// readers see the old or the new content, never a mix.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub atomic: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sandbox: Option<FileSystemSandboxContext>,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct CreateDirectoryParams {
    pub path: PathUri,
    /// Default true: create missing parents and accept an existing directory.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub recursive: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub follow_symlinks: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sandbox: Option<FileSystemSandboxContext>,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct GetMetadataParams {
    pub path: PathUri,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub follow_symlinks: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sandbox: Option<FileSystemSandboxContext>,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Metadata {
    pub is_directory: bool,
    pub is_file: bool,
    pub is_symlink: bool,
    pub size: u64,
    /// Unix milliseconds; 0 when the file system does not record it.
    pub created_at_ms: i64,
    pub modified_at_ms: i64,
}

/// Params of methods that take only a path: `fs/canonicalize`, `fs/readDirectory`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PathParams {
    pub path: PathUri,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sandbox: Option<FileSystemSandboxContext>,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct CanonicalizeResult {
    pub path: PathUri,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ReadDirectoryResult {
    pub entries: Vec<DirectoryEntry>,
    /// Extension: entries whose metadata could not be read (e.g. dangling symlinks), which
    /// `entries` leaves out as the reference does. Omitted when empty.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub errors: Vec<DirectoryEntryError>,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct DirectoryEntry {
    /// Lossy UTF-8.
    pub file_name: String,
    pub is_directory: bool,
    pub is_file: bool,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct DirectoryEntryError {
    pub file_name: String,
    pub message: String,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct RemoveParams {
    pub path: PathUri,
    /// Default true.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub recursive: Option<bool>,
    /// Default true: a missing path is not an error.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub force: Option<bool>,
    /// The path itself is never followed; `false` also refuses a symlink among its parents.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub follow_symlinks: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sandbox: Option<FileSystemSandboxContext>,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct CopyParams {
    pub source_path: PathUri,
    pub destination_path: PathUri,
    pub recursive: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sandbox: Option<FileSystemSandboxContext>,
}

/// Extension: `fs/rename`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct RenameParams {
    pub source_path: PathUri,
    pub destination_path: PathUri,
    /// Default false: an existing destination is an error instead of being replaced.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub overwrite: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sandbox: Option<FileSystemSandboxContext>,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct WalkParams {
    pub path: PathUri,
    pub options: WalkOptions,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sandbox: Option<FileSystemSandboxContext>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct WalkOptions {
    /// 0..=64, as upstream: the root's own entries are depth 0, and a directory found at depth
    /// d is entered only when d < maxDepth (0 lists just the root's children).
    pub max_depth: usize,
    /// 1..=10000: directories read, the root included.
    pub max_directories: usize,
    /// 1..=50000.
    pub max_entries: usize,
    pub follow_directory_symlinks: bool,
    /// Report hidden directories (names starting with `.`) but do not descend into them.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub prune_hidden_directories: bool,
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct WalkResult {
    pub entries: Vec<WalkEntry>,
    pub errors: Vec<WalkError>,
    pub truncated: bool,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct WalkEntry {
    pub path: PathUri,
    pub kind: WalkEntryKind,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub enum WalkEntryKind {
    Directory,
    File,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct WalkError {
    pub path: PathUri,
    pub message: String,
}

/// What an `fs/open` handle is for. Upstream has `read` and `replace`; the others are extensions.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub enum OpenMode {
    /// Positional reads with `fs/readBlock`.
    #[default]
    Read,
    /// Create or truncate in place, then `fs/writeBlock`.
    Write,
    /// Create if missing; every block goes to the end of the file.
    Append,
    /// As upstream: create or truncate in place when the handle opens, then positional writes
    /// with `fs/writeBlock` (the same as `write`).
    Replace,
    /// Extension: stage blocks in a temporary file beside the target; `fs/close` renames it
    /// into place atomically, and a handle that is discarded or dropped leaves the target
    /// untouched.
    ReplaceOnClose,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct OpenParams {
    /// Chosen by the client, at most 32 bytes. Extension: when omitted the server picks one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub handle_id: Option<String>,
    pub path: PathUri,
    /// Extension; default `read`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mode: Option<OpenMode>,
    /// Extension; default true.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub follow_symlinks: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sandbox: Option<FileSystemSandboxContext>,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct HandleResult {
    pub handle_id: String,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ReadBlockParams {
    pub handle_id: String,
    pub offset: u64,
    /// 1..=1048576.
    pub len: usize,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ReadBlockResult {
    pub chunk: Base64Bytes,
    /// Fewer than `len` bytes were read.
    pub eof: bool,
}

/// Extension: `fs/writeBlock`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct WriteBlockParams {
    pub handle_id: String,
    /// Where to write; default: where the previous block of this handle ended. Not allowed
    /// in `append` mode.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub offset: Option<u64>,
    /// At most 1048576 bytes.
    pub chunk: Base64Bytes,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct WriteBlockResult {
    /// The file offset just past the bytes written.
    pub next_offset: u64,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct CloseParams {
    pub handle_id: String,
    /// Extension: for a `replace` handle, drop the staged file instead of committing it.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub discard: bool,
}

/// Extension: `fs/watch`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct WatchParams {
    /// Chosen by the client, at most 32 bytes; when omitted the server picks one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub watch_id: Option<String>,
    pub path: PathUri,
    /// Default false: only the path itself and, for a directory, its direct children.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub recursive: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sandbox: Option<FileSystemSandboxContext>,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct WatchResult {
    pub watch_id: String,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct UnwatchParams {
    pub watch_id: String,
}

/// `fs/watchMissing`: one watch, per connection, for paths that do not exist yet. A newer
/// `watchId` replaces the connection's watch; an older or equal one is ignored.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct WatchMissingParams {
    pub watch_id: u64,
    /// Paths that must not exist now; any of them, or a directory on the way to one, appearing
    /// ends the watch with `fs/missingChanged`.
    pub missing: Vec<PathUri>,
    /// A path that must exist now; its removal or replacement ends the watch too.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub present: Option<PathUri>,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct WatchMissingResult {
    /// False: nothing is watched (the paths were not as described, too many, or the id is
    /// stale), and the client should look for itself.
    pub watching: bool,
}

/// `fs/missingChanged`: something a missing-path watch covers changed; the watch is over.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct MissingChangedNotification {
    pub watch_id: u64,
}

/// `fs/changed`: changes seen under a watch, coalesced over a short window.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ChangedNotification {
    pub watch_id: String,
    /// In order of arrival, each (kind, path) once per notification.
    pub changes: Vec<Change>,
    /// Some changes were lost (queue limits or a kernel overflow): rescan what you cache.
    pub events_dropped: bool,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Change {
    pub kind: ChangeKind,
    pub path: PathUri,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub enum ChangeKind {
    Create,
    Modify,
    Remove,
    /// The path was renamed away or into place; both names are reported.
    Rename,
    Other,
}
