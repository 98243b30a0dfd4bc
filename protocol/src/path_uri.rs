//! `PathUri`: a `file:` URI naming a path on the executor host.
//!
//! Paths never travel as host strings. A `PathUri` is the canonical WHATWG serialization of a
//! `file:` URL as the `url` crate produces it; parsing validates it, and converting it to a host
//! path checks that it fits this host's path convention.

use base64::Engine as _;
use schemars::JsonSchema;
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use std::fmt;
use std::path::{Path, PathBuf};
use url::Url;

/// Prefix of the opaque form used for host paths that have no URI form (e.g. a NUL byte).
const FALLBACK_PREFIX: &str = "file:///%00/bad/path/";

#[derive(Clone, PartialEq, Eq, Hash)]
pub struct PathUri(Url);

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PathUriError {
    #[error("invalid URI: {0}")]
    Parse(#[from] url::ParseError),
    #[error("unsupported path URI scheme `{0}`")]
    Scheme(String),
    #[error("credentials are not allowed in path URIs")]
    Credentials,
    #[error("ports are not allowed in path URIs")]
    Port,
    #[error("query parameters are not allowed in path URIs")]
    Query,
    #[error("fragments are not allowed in path URIs")]
    Fragment,
    /// The URI is well formed but names no path on this host (another OS's convention, an
    /// encoded separator or dot segment, a NUL byte).
    #[error("'{uri}' is invalid on '{os}'")]
    NotOnHost { uri: String, os: &'static str },
    #[error("path `{0}` is not absolute")]
    NotAbsolute(String),
}

impl PathUri {
    pub fn parse(text: &str) -> Result<Self, PathUriError> {
        let mut url = Url::parse(text)?;
        if url.scheme() != "file" {
            return Err(PathUriError::Scheme(url.scheme().to_owned()));
        }
        if !url.username().is_empty() || url.password().is_some() {
            return Err(PathUriError::Credentials);
        }
        if url.port().is_some() {
            return Err(PathUriError::Port);
        }
        if url.query().is_some() {
            return Err(PathUriError::Query);
        }
        if url.fragment().is_some() {
            return Err(PathUriError::Fragment);
        }
        if url.host_str() == Some("localhost") {
            url.set_host(None).map_err(PathUriError::Parse)?;
        }
        let uri = Self(url);
        // The wire form must parse back to itself; the url crate does not guarantee that for
        // every odd spelling (found by fuzzing: a host followed by an empty path segment).
        if Url::parse(uri.0.as_str()).ok().as_ref() != Some(&uri.0) {
            return Err(uri.not_on_host());
        }
        if !uri.is_fallback() && uri.decoded_segments().any(|s| s.contains(&0)) {
            return Err(uri.not_on_host());
        }
        Ok(uri)
    }

    /// The URI of an absolute host path. Paths with no URI form get the opaque fallback form.
    pub fn from_path(path: &Path) -> Result<Self, PathUriError> {
        if !path.is_absolute() {
            return Err(PathUriError::NotAbsolute(path.display().to_string()));
        }
        use std::os::unix::ffi::OsStrExt as _;
        let bytes = path.as_os_str().as_bytes();
        if !bytes.contains(&0) {
            if let Ok(url) = Url::from_file_path(path) {
                return Ok(Self(url));
            }
        }
        let payload = base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(bytes);
        Ok(Self(Url::parse(&format!("{FALLBACK_PREFIX}{payload}"))?))
    }

    /// The host path this URI names, if it fits this host's (POSIX) convention.
    pub fn to_path(&self) -> Result<PathBuf, PathUriError> {
        use std::os::unix::ffi::OsStringExt as _;
        if self.is_fallback() {
            let payload = &self.0.as_str()[FALLBACK_PREFIX.len()..];
            let bytes = base64::engine::general_purpose::URL_SAFE_NO_PAD
                .decode(payload)
                .map_err(|_| self.not_on_host())?;
            // A NUL byte can never reach a Unix system call, and only absolute paths are valid.
            if bytes.first() != Some(&b'/') || bytes.contains(&0) {
                return Err(self.not_on_host());
            }
            return Ok(PathBuf::from(std::ffi::OsString::from_vec(bytes)));
        }
        if self.0.host().is_some() || self.looks_like_windows_drive() {
            return Err(self.not_on_host());
        }
        let mut path = Vec::from(&b"/"[..]);
        for (index, segment) in self.decoded_segments().enumerate() {
            // An encoded separator or dot segment would name a different path than the URI
            // shows; refusing it keeps `..%2F..` from walking out of a directory.
            if segment.contains(&b'/') || segment == b"." || segment == b".." {
                return Err(self.not_on_host());
            }
            if index > 0 {
                path.push(b'/');
            }
            path.extend_from_slice(&segment);
        }
        Ok(PathBuf::from(std::ffi::OsString::from_vec(path)))
    }

    pub fn as_str(&self) -> &str {
        self.0.as_str()
    }

    pub fn as_url(&self) -> &Url {
        &self.0
    }

    fn is_fallback(&self) -> bool {
        self.0.as_str().starts_with(FALLBACK_PREFIX)
    }

    fn looks_like_windows_drive(&self) -> bool {
        let first = self
            .0
            .path_segments()
            .and_then(|mut s| s.next())
            .unwrap_or("");
        let bytes = first.as_bytes();
        bytes.len() == 2 && bytes[0].is_ascii_alphabetic() && (bytes[1] == b':' || bytes[1] == b'|')
    }

    fn decoded_segments(&self) -> impl Iterator<Item = Vec<u8>> + '_ {
        self.0
            .path_segments()
            .into_iter()
            .flatten()
            .map(|segment| percent_decode(segment.as_bytes()))
    }

    fn not_on_host(&self) -> PathUriError {
        PathUriError::NotOnHost {
            uri: self.0.as_str().to_owned(),
            os: std::env::consts::OS,
        }
    }
}

fn percent_decode(input: &[u8]) -> Vec<u8> {
    let hex = |b: u8| (b as char).to_digit(16).map(|d| d as u8);
    let mut out = Vec::with_capacity(input.len());
    let mut i = 0;
    while i < input.len() {
        if input[i] == b'%' && i + 2 < input.len() {
            if let (Some(hi), Some(lo)) = (hex(input[i + 1]), hex(input[i + 2])) {
                out.push(hi << 4 | lo);
                i += 3;
                continue;
            }
        }
        out.push(input[i]);
        i += 1;
    }
    out
}

impl fmt::Display for PathUri {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.0.as_str())
    }
}

impl fmt::Debug for PathUri {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "PathUri({})", self.0.as_str())
    }
}

impl std::str::FromStr for PathUri {
    type Err = PathUriError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Self::parse(s)
    }
}

impl Serialize for PathUri {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(self.0.as_str())
    }
}

impl<'de> Deserialize<'de> for PathUri {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let text = <std::borrow::Cow<'de, str>>::deserialize(deserializer)?;
        Self::parse(&text).map_err(serde::de::Error::custom)
    }
}

impl JsonSchema for PathUri {
    fn schema_name() -> std::borrow::Cow<'static, str> {
        "PathUri".into()
    }

    fn json_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
        schemars::json_schema!({
            "type": "string",
            "format": "uri",
            "pattern": "^file:",
            "description": "A file: URI naming a path on the executor host"
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn err(text: &str) -> String {
        PathUri::parse(text).unwrap_err().to_string()
    }

    #[test]
    fn rejects_what_the_reference_rejects() {
        assert_eq!(err("/tmp/x"), "invalid URI: relative URL without a base");
        assert_eq!(err("http://host/x"), "unsupported path URI scheme `http`");
        // The url crate itself refuses credentials and ports in file: URLs.
        assert!(PathUri::parse("file://user@host/x").is_err());
        assert!(PathUri::parse("file://host:22/x").is_err());
        assert_eq!(
            err("file:///x?q=1"),
            "query parameters are not allowed in path URIs"
        );
        assert_eq!(err("file:///x#f"), "fragments are not allowed in path URIs");
        assert!(err("file:///a%00b").contains("is invalid on"));
    }

    #[test]
    fn normalises_like_the_url_crate() {
        assert_eq!(PathUri::parse("file:/x").unwrap().as_str(), "file:///x");
        assert_eq!(
            PathUri::parse("file://localhost/x").unwrap().as_str(),
            "file:///x"
        );
        assert_eq!(
            PathUri::parse("file:///a/b/../c")
                .unwrap()
                .to_path()
                .unwrap(),
            Path::new("/a/c")
        );
        let spaced = PathUri::from_path(Path::new("/workspace/space #project")).unwrap();
        assert_eq!(spaced.as_str(), "file:///workspace/space%20%23project");
        assert_eq!(
            spaced.to_path().unwrap(),
            Path::new("/workspace/space #project")
        );
    }

    #[test]
    fn refuses_foreign_and_hostile_paths_on_this_host() {
        for text in [
            "file:///C:/Users/x",
            "file://server/share/x",
            "file:///a/..%2F..%2Fetc",
            "file:///a/%2e%2e%2Fb",
        ] {
            let uri = PathUri::parse(text).unwrap();
            assert!(uri.to_path().is_err(), "{text} must not convert");
        }
    }

    #[test]
    fn only_self_reparsing_spellings_are_accepted() {
        let odd = "\0\0file://l=ffylh//e://l=f/:x";
        if let Ok(uri) = PathUri::parse(odd) {
            assert_eq!(PathUri::parse(uri.as_str()).unwrap(), uri);
        }
    }

    #[test]
    fn non_utf8_and_nul_paths_round_trip() {
        use std::os::unix::ffi::OsStrExt as _;
        let raw = Path::new(std::ffi::OsStr::from_bytes(b"/tmp/\xff\xfe"));
        let uri = PathUri::from_path(raw).unwrap();
        assert_eq!(uri.to_path().unwrap(), raw);
        let nul = Path::new(std::ffi::OsStr::from_bytes(b"/tmp/a\0b"));
        let uri = PathUri::from_path(nul).unwrap();
        assert!(uri.as_str().starts_with(FALLBACK_PREFIX));
        assert_eq!(PathUri::parse(uri.as_str()).unwrap(), uri);
        assert!(uri.to_path().is_err());
    }
}
