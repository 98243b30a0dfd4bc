//! The credential on the registration and on every WebSocket handshake: AWS SigV4 (codex's only
//! one in direct mode) or, beyond codex, a bearer token.
//!
//! SigV4 credentials come from the AWS SDK's environment provider (`AWS_ACCESS_KEY_ID`,
//! `AWS_SECRET_ACCESS_KEY`, `AWS_SESSION_TOKEN`), else from the static keys of the selected
//! profile (--aws-profile, `AWS_PROFILE`, `default`) of the shared config and credentials files
//! as the SDK parses them; the region from --aws-region, `AWS_REGION`/`AWS_DEFAULT_REGION`, or
//! the profile's `region`. Credential sources that need the SDK's own HTTP client (IMDS, ECS,
//! STS web identity and assume-role, SSO, `credential_process`) are not supported: that client
//! would bring a second TLS stack (aws-lc) into the daemon.

use crate::config::RemoteAuth;
use aws_config::environment::{
    EnvironmentVariableCredentialsProvider, EnvironmentVariableRegionProvider,
};
use aws_config::meta::region::ProvideRegion as _;
use aws_config::profile::ProfileSet;
use aws_credential_types::provider::ProvideCredentials as _;
use aws_credential_types::Credentials;
use aws_sigv4::http_request::{sign, SignableBody, SignableRequest, SigningSettings};
use axum::http::{header, HeaderValue, Request};
use std::time::SystemTime;

pub(super) enum Signer {
    SigV4 {
        profile: Option<String>,
        region: String,
        service: String,
    },
    Bearer(HeaderValue),
}

impl Signer {
    /// The signer of `auth`; for SigV4 the region is resolved now, and credentials are found
    /// now (an error at start rather than at the first dial) and again for every signature, so
    /// that rotated credentials are picked up.
    pub(super) async fn new(auth: &RemoteAuth) -> anyhow::Result<Self> {
        let (profile, region, service) = match auth {
            RemoteAuth::Bearer(token) => {
                let mut value = HeaderValue::from_str(&format!("Bearer {token}"))?;
                value.set_sensitive(true);
                return Ok(Self::Bearer(value));
            }
            RemoteAuth::SigV4 {
                profile,
                region,
                service,
            } => (profile, region, service),
        };
        let region = match region {
            Some(region) => Some(region.clone()),
            None => match EnvironmentVariableRegionProvider::new().region().await {
                Some(region) => Some(region.to_string()),
                None => profiles(profile)
                    .await
                    .ok()
                    .and_then(|set| selected(&set, "region")),
            },
        };
        let region =
            region.ok_or_else(|| anyhow::anyhow!("AWS SDK config did not resolve a region"))?;
        credentials(profile).await?;
        Ok(Self::SigV4 {
            profile: profile.clone(),
            region,
            service: service.clone(),
        })
    }

    /// Adds the credential to `request`, whose body is `body`: for SigV4, `Authorization`,
    /// `x-amz-date` (and `x-amz-security-token`), over the method, the URL, `body`, `host` (from
    /// the URL) and the request's headers named in `signed` (codex signs no others).
    pub(super) async fn sign<B>(
        &self,
        request: &mut Request<B>,
        signed: &[header::HeaderName],
        body: &[u8],
    ) -> anyhow::Result<()> {
        let (profile, region, service) = match self {
            Self::Bearer(value) => {
                request
                    .headers_mut()
                    .insert(header::AUTHORIZATION, value.clone());
                return Ok(());
            }
            Self::SigV4 {
                profile,
                region,
                service,
            } => (profile, region, service),
        };
        let credentials = credentials(profile).await?;
        let identity = aws_smithy_runtime_api::client::identity::Identity::from(credentials);
        let params = aws_sigv4::sign::v4::SigningParams::builder()
            .identity(&identity)
            .region(region)
            .name(service)
            .time(SystemTime::now())
            .settings(SigningSettings::default())
            .build()?
            .into();
        let headers = signed
            .iter()
            .filter_map(|name| Some((name.as_str(), request.headers().get(name)?.to_str())))
            .map(|(name, value)| Ok((name, value?)))
            .collect::<Result<Vec<_>, header::ToStrError>>()?;
        let uri = request.uri().to_string();
        let signable = SignableRequest::new(
            request.method().as_str(),
            &uri,
            headers.into_iter(),
            SignableBody::Bytes(body),
        )?;
        let (instructions, _signature) = sign(signable, &params)?.into_parts();
        instructions.apply_to_request_http1x(request);
        Ok(())
    }
}

/// The environment's credentials, else the selected profile's static keys.
async fn credentials(profile: &Option<String>) -> anyhow::Result<Credentials> {
    if let Ok(credentials) = EnvironmentVariableCredentialsProvider::new()
        .provide_credentials()
        .await
    {
        return Ok(credentials);
    }
    let failed = |why: String| anyhow::anyhow!("failed to load AWS credentials: {why}");
    let set = profiles(profile)
        .await
        .map_err(|err| failed(err.to_string()))?;
    let key = selected(&set, "aws_access_key_id");
    let secret = selected(&set, "aws_secret_access_key");
    match (key, secret) {
        (Some(key), Some(secret)) => Ok(Credentials::new(
            key,
            secret,
            selected(&set, "aws_session_token"),
            None,
            "profile",
        )),
        _ => Err(failed(format!(
            "none in the environment, and profile `{}` has no static keys",
            set.selected_profile()
        ))),
    }
}

/// The shared config and credentials files, `profile` selected if given.
async fn profiles(profile: &Option<String>) -> anyhow::Result<ProfileSet> {
    Ok(aws_config::profile::load(
        &aws_types::os_shim_internal::Fs::real(),
        &aws_types::os_shim_internal::Env::real(),
        &Default::default(),
        profile.clone().map(Into::into),
    )
    .await?)
}

/// The selected profile's `key`.
fn selected(set: &ProfileSet, key: &str) -> Option<String> {
    set.get_profile(set.selected_profile())?
        .get(key)
        .map(str::to_owned)
}
