//! Who may upgrade to a WebSocket: a bearer token compared by its SHA-256 digest (ours
//! `--connection-token[-file]`, codex's `--ws-auth capability-token`), or a JWT signed with a
//! shared secret (codex's `--ws-auth signed-bearer-token`). The refusals carry codex's messages
//! and its status (401), so a client written against codex reads the same answer from us.

use axum::http::{header, HeaderMap, HeaderValue};
use subtle::ConstantTimeEq as _;

/// The shortest shared secret accepted for signed tokens (codex's minimum; HS256 keys shorter
/// than the hash are guessable).
const MIN_SHARED_SECRET_BYTES: usize = 32;

/// codex's default leeway on `exp` and `nbf`.
pub(crate) const DEFAULT_MAX_CLOCK_SKEW_SECONDS: u64 = 30;

/// What an upgrade must present; a listener without one takes every upgrade.
#[derive(Clone)]
pub(crate) enum UpgradeAuth {
    /// `Authorization: Bearer T` where SHA-256(T) is this digest: only the digest is kept, so
    /// `--ws-token-sha256` needs no secret on the host at all.
    Token { sha256: [u8; 32] },
    /// `Authorization: Bearer JWT`, an HS256 token signed with the shared secret, checked for
    /// expiry (required), not-before, issuer and audience.
    SignedBearer {
        secret: Vec<u8>,
        issuer: Option<String>,
        audience: Option<String>,
        max_clock_skew_seconds: u64,
    },
}

impl std::fmt::Debug for UpgradeAuth {
    // Never the secret, not even in a debug log of the settings.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Token { .. } => f.write_str("Token"),
            Self::SignedBearer { .. } => f.write_str("SignedBearer"),
        }
    }
}

/// The claims codex reads; anything else in the token is ignored.
#[derive(serde::Deserialize)]
struct Claims {
    exp: i64,
    nbf: Option<i64>,
    iss: Option<String>,
    aud: Option<Audience>,
}

#[derive(serde::Deserialize)]
#[serde(untagged)]
enum Audience {
    One(String),
    Many(Vec<String>),
}

impl UpgradeAuth {
    /// A token given in the clear.
    pub(crate) fn token(token: &str) -> Self {
        Self::Token {
            sha256: sha256(token.as_bytes()),
        }
    }

    /// A token given as the hex of its SHA-256 (`--ws-token-sha256`).
    pub(crate) fn token_sha256(hex: &str, flag: &str) -> anyhow::Result<Self> {
        let hex = hex.trim();
        let bad = || anyhow::anyhow!("{flag} must be a 64-character hex SHA-256 digest");
        if hex.len() != 64 {
            return Err(bad());
        }
        let mut sha256 = [0u8; 32];
        for (byte, pair) in sha256.iter_mut().zip(hex.as_bytes().chunks_exact(2)) {
            let pair = std::str::from_utf8(pair).map_err(|_| bad())?;
            *byte = u8::from_str_radix(pair, 16).map_err(|_| bad())?;
        }
        Ok(Self::Token { sha256 })
    }

    /// Signed tokens with this shared secret, read from `path` (surrounding white space
    /// trimmed, as codex does).
    pub(crate) fn signed_bearer(
        secret: &str,
        path: &std::path::Path,
        issuer: Option<String>,
        audience: Option<String>,
        max_clock_skew_seconds: u64,
    ) -> anyhow::Result<Self> {
        anyhow::ensure!(
            secret.len() >= MIN_SHARED_SECRET_BYTES,
            "signed websocket bearer secret {} must be at least {MIN_SHARED_SECRET_BYTES} bytes",
            path.display()
        );
        // Past i64 the arithmetic on timestamps would wrap; codex refuses it too.
        anyhow::ensure!(
            i64::try_from(max_clock_skew_seconds).is_ok(),
            "websocket auth clock skew must fit in a signed 64-bit integer"
        );
        let nonempty = |value: Option<String>| {
            value
                .map(|value| value.trim().to_owned())
                .filter(|value| !value.is_empty())
        };
        Ok(Self::SignedBearer {
            secret: secret.as_bytes().to_vec(),
            issuer: nonempty(issuer),
            audience: nonempty(audience),
            max_clock_skew_seconds,
        })
    }

    /// Whether a request with `headers` may pass; the refusal's text (sent with 401) if not.
    /// The token travels in `Authorization: Bearer T` or in `X-Access-Token: T` (envd's header,
    /// the one agent-sandbox's router passes on: it drops `Authorization`); each one present
    /// must hold, so a wrong token is refused in either.
    pub(crate) fn check(&self, headers: &HeaderMap) -> Result<(), &'static str> {
        let access_token = headers.get(ACCESS_TOKEN);
        if let Some(value) = access_token {
            let token = value
                .to_str()
                .map(str::trim)
                .ok()
                .filter(|token| !token.is_empty())
                .ok_or("invalid x-access-token header")?;
            self.check_token(token)?;
        }
        let authorization = headers.get(header::AUTHORIZATION);
        if authorization.is_some() || access_token.is_none() {
            self.check_token(bearer(authorization)?)?;
        }
        Ok(())
    }

    fn check_token(&self, token: &str) -> Result<(), &'static str> {
        match self {
            Self::Token { sha256: expected } => {
                if bool::from(sha256(token.as_bytes()).ct_eq(expected)) {
                    Ok(())
                } else {
                    Err("invalid websocket bearer token")
                }
            }
            Self::SignedBearer {
                secret,
                issuer,
                audience,
                max_clock_skew_seconds,
            } => {
                let claims = decode(token, secret)?;
                validate(
                    &claims,
                    issuer.as_deref(),
                    audience.as_deref(),
                    *max_clock_skew_seconds as i64,
                )
            }
        }
    }
}

/// Why a request to a route behind `auth` is refused, if it is: a browser page's (403; it must
/// never drive this daemon: cross-site WebSocket hijacking), or one without the token (401).
pub(crate) fn refusal(
    auth: Option<&UpgradeAuth>,
    headers: &HeaderMap,
) -> Option<(axum::http::StatusCode, &'static str)> {
    use axum::http::StatusCode;
    if headers.contains_key(header::ORIGIN) {
        return Some((StatusCode::FORBIDDEN, "browser origins may not connect"));
    }
    let why = auth?.check(headers).err()?;
    Some((StatusCode::UNAUTHORIZED, why))
}

/// The header agent-sandbox's router forwards a token in (and envd reads).
const ACCESS_TOKEN: &str = "x-access-token";

/// The header naming the sandbox (pod) a request was routed for.
const SANDBOX_ID: &str = "x-sandbox-id";

/// Why a request routed for another sandbox than `this_sandbox` (its `X-Sandbox-ID`) is refused,
/// if it is: a stale route must not reach another tenant's pod. A request naming no sandbox
/// came straight to this pod and passes.
pub(crate) fn misrouted(this_sandbox: &str, headers: &HeaderMap) -> Option<String> {
    let named = headers.get(SANDBOX_ID)?;
    if named.as_bytes() == this_sandbox.as_bytes() {
        return None;
    }
    Some(format!(
        "this is sandbox {this_sandbox:?}; the request was routed for {:?}",
        String::from_utf8_lossy(named.as_bytes())
    ))
}

/// The token of a `Bearer` credential (the scheme's name is case-insensitive, RFC 7235).
fn bearer(authorization: Option<&HeaderValue>) -> Result<&str, &'static str> {
    const INVALID: &str = "invalid authorization header";
    let header = authorization.ok_or("missing websocket bearer token")?;
    let header = header.to_str().map_err(|_| INVALID)?;
    let (scheme, token) = header.split_once(' ').ok_or(INVALID)?;
    let token = token.trim();
    if !scheme.eq_ignore_ascii_case("bearer") || token.is_empty() {
        return Err(INVALID);
    }
    Ok(token)
}

/// The claims of an HS256 token signed with `secret`; time, issuer and audience are checked
/// apart, with codex's leeway and messages.
fn decode(token: &str, secret: &[u8]) -> Result<Claims, &'static str> {
    use jsonwebtoken::{Algorithm, DecodingKey, Validation};
    check_header(token)?;
    let mut validation = Validation::new(Algorithm::HS256);
    validation.required_spec_claims.clear();
    validation.validate_exp = false;
    validation.validate_nbf = false;
    validation.validate_aud = false;
    jsonwebtoken::decode::<Claims>(token, &DecodingKey::from_secret(secret), &validation)
        .map(|data| data.claims)
        .map_err(|_| "invalid websocket jwt")
}

/// Refuses a token whose JOSE header names critical extensions (`crit`): we understand none,
/// and RFC 7515 §4.1.11 requires refusing a token whose critical extensions are not all
/// understood. jsonwebtoken ignores the member (as codex does, accepting such tokens).
/// Public for the fuzz target (fuzz/): the header is the first thing read of a peer's token.
#[doc(hidden)]
pub fn check_header(token: &str) -> Result<(), &'static str> {
    use base64::Engine as _;
    const INVALID: &str = "invalid websocket jwt";
    let encoded = token.split('.').next().unwrap_or_default();
    let json = base64::engine::general_purpose::URL_SAFE_NO_PAD
        .decode(encoded)
        .map_err(|_| INVALID)?;
    let header: serde_json::Map<String, serde_json::Value> =
        serde_json::from_slice(&json).map_err(|_| INVALID)?;
    if header.contains_key("crit") {
        return Err(INVALID);
    }
    Ok(())
}

fn validate(
    claims: &Claims,
    issuer: Option<&str>,
    audience: Option<&str>,
    skew: i64,
) -> Result<(), &'static str> {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |since| since.as_secs() as i64);
    if now > claims.exp.saturating_add(skew) {
        return Err("expired websocket jwt");
    }
    if claims.nbf.is_some_and(|nbf| now < nbf.saturating_sub(skew)) {
        return Err("websocket jwt is not valid yet");
    }
    if issuer.is_some_and(|issuer| claims.iss.as_deref() != Some(issuer)) {
        return Err("websocket jwt issuer mismatch");
    }
    let audience_matches = |expected: &str| match &claims.aud {
        Some(Audience::One(actual)) => actual == expected,
        Some(Audience::Many(actual)) => actual.iter().any(|actual| actual == expected),
        None => false,
    };
    if audience.is_some_and(|expected| !audience_matches(expected)) {
        return Err("websocket jwt audience mismatch");
    }
    Ok(())
}

fn sha256(bytes: &[u8]) -> [u8; 32] {
    let digest = ring::digest::digest(&ring::digest::SHA256, bytes);
    let mut out = [0u8; 32];
    out.copy_from_slice(digest.as_ref());
    out
}
