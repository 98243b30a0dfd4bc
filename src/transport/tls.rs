//! `wss://`: TLS (rustls on ring) in front of the WebSocket listener. The certificate chain and
//! key are read again on SIGHUP: new handshakes get the new pair, established connections keep
//! going, and a pair that cannot be loaded leaves the previous one in place.

use anyhow::Context as _;
use rustls::crypto::CryptoProvider;
use rustls::pki_types::pem::PemObject as _;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::server::{ClientHello, ResolvesServerCert};
use rustls::sign::CertifiedKey;
use std::path::{Path, PathBuf};
use std::sync::{Arc, RwLock};

pub(super) struct Tls {
    pub acceptor: tokio_rustls::TlsAcceptor,
}

#[derive(Debug)]
struct Reloadable {
    cert: PathBuf,
    key: PathBuf,
    provider: Arc<CryptoProvider>,
    current: RwLock<Arc<CertifiedKey>>,
}

impl ResolvesServerCert for Reloadable {
    fn resolve(&self, _hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        Some(self.current.read().unwrap().clone())
    }
}

impl Reloadable {
    fn load(cert: &Path, key: &Path, provider: &CryptoProvider) -> anyhow::Result<CertifiedKey> {
        let chain = CertificateDer::pem_file_iter(cert)
            .and_then(|certs| certs.collect::<Result<Vec<_>, _>>())
            .with_context(|| format!("cannot read certificates from {}", cert.display()))?;
        anyhow::ensure!(!chain.is_empty(), "no certificate in {}", cert.display());
        let key_der = PrivateKeyDer::from_pem_file(key)
            .with_context(|| format!("cannot read a private key from {}", key.display()))?;
        CertifiedKey::from_der(chain, key_der, provider).with_context(|| {
            format!(
                "the key {} does not fit the certificate {}",
                key.display(),
                cert.display()
            )
        })
    }

    fn reload(&self) {
        match Self::load(&self.cert, &self.key, &self.provider) {
            Ok(pair) => {
                *self.current.write().unwrap() = Arc::new(pair);
                tracing::info!("reloaded the TLS certificate {}", self.cert.display());
            }
            Err(err) => tracing::error!("kept the previous TLS certificate: {err:#}"),
        }
    }
}

impl Tls {
    /// Loads the pair (failing at startup is better than at the first handshake) and starts
    /// reloading it on SIGHUP.
    pub(super) fn new(cert: &Path, key: &Path) -> anyhow::Result<Self> {
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let pair = Reloadable::load(cert, key, &provider)?;
        let resolver = Arc::new(Reloadable {
            cert: cert.to_owned(),
            key: key.to_owned(),
            provider: provider.clone(),
            current: RwLock::new(Arc::new(pair)),
        });
        let mut config = rustls::ServerConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()?
            .with_no_client_auth()
            .with_cert_resolver(resolver.clone());
        config.alpn_protocols = vec![b"http/1.1".to_vec()];
        let mut hangups = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::hangup())?;
        tokio::spawn(async move {
            while hangups.recv().await.is_some() {
                let resolver = resolver.clone();
                let _ = tokio::task::spawn_blocking(move || resolver.reload()).await;
            }
        });
        Ok(Self {
            acceptor: tokio_rustls::TlsAcceptor::from(Arc::new(config)),
        })
    }
}
