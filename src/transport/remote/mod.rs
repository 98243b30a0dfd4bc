//! Remote mode (codex's `--remote … --remote-transport direct`): the daemon registers once with
//! an environment registry, dials the WebSocket URL it is given and serves JSON-RPC over that
//! outbound socket exactly as over an accepted one (`ws::run`), the registry's side acting as
//! the client. After a drop it dials the same URL again; sessions detached by the drop are
//! resumed on the new socket as after any disconnection.

mod auth;
mod dial;
mod registry;

#[doc(hidden)]
pub use registry::parse_reply as registry_reply;

use super::ws::Connections;
use crate::audit::Identity;
use crate::config::RemoteConfig;
use crate::server::Daemon;
use dial::DialError;
use std::sync::Arc;
use std::time::Duration;

/// The pause before dialing again after a socket ended or a first dial failed (codex: about
/// 0.56 s).
const REDIAL: Duration = Duration::from_millis(500);

/// The longest pause between failed dials before jitter (codex: 5 to 7.5 s).
const MAX_BACKOFF: Duration = Duration::from_secs(5);

/// Registers, then serves one dialed socket after another until a dial is refused (401 or 403
/// on the upgrade: fatal, as in codex) or the daemon stops (this future is then dropped).
pub(super) async fn serve(
    remote: RemoteConfig,
    daemon: Arc<Daemon>,
    connections: Connections,
) -> anyhow::Result<()> {
    let signer = auth::Signer::new(&remote.auth).await?;
    let registration = registry::register(&remote, &signer).await?;
    let url = registration.url;
    tracing::info!(
        environment_id = %remote.environment_id,
        registration_id = %registration.registration_id,
        name = %remote.name,
        url = %dial::shown(&url),
        "registered with the environment registry"
    );
    super::systemd::notify_serving(false);
    let who = Identity {
        peer: dial::shown(&url).into(),
        principal: format!("environment:{}", remote.environment_id).into(),
    };
    let mut failures = 0;
    loop {
        let dialed = dial::dial(&url, &signer, daemon.config.max_message_bytes).await;
        daemon.metrics.remote_dial(match &dialed {
            Ok(_) => "connected",
            Err(DialError::Failed(_)) => "failed",
            Err(DialError::Refused(_)) => "refused",
        });
        match dialed {
            Ok(socket) => {
                failures = 0;
                tracing::info!("direct exec-server connected");
                connections.serve_dialed(socket, &daemon, who.clone()).await;
                if connections.closing() {
                    // Handing over: the successor registers and dials; this daemon exits.
                    std::future::pending::<()>().await;
                }
                tracing::info!("direct exec-server disconnected; dialing again");
                tokio::time::sleep(jittered(REDIAL, 0.25)).await;
            }
            Err(DialError::Refused(err)) => return Err(err),
            Err(DialError::Failed(err)) => {
                tracing::warn!("direct exec-server connection failed; retrying: {err:#}");
                failures += 1;
                tokio::time::sleep(backoff(failures)).await;
            }
        }
    }
}

/// The pause after `failures` (at least 1) failed dials in a row: doubling from [`REDIAL`] up
/// to [`MAX_BACKOFF`], with up to half again of jitter (so that executors cut off together do
/// not return together).
fn backoff(failures: u32) -> Duration {
    let base = REDIAL
        .saturating_mul(1 << failures.saturating_sub(1).min(8))
        .min(MAX_BACKOFF);
    jittered(base, 0.5)
}

/// `base` lengthened by a random fraction of it, below `spread`.
fn jittered(base: Duration, spread: f64) -> Duration {
    // Uniform in [0, 1): the top 53 bits of a random v4 UUID.
    let random = (uuid::Uuid::new_v4().as_u128() >> 75) as f64 / (1u64 << 53) as f64;
    base.mul_f64(1.0 + spread * random)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_grows_to_five_to_seven_and_a_half_seconds() {
        for (failures, low, high) in [
            (1, 0.5, 0.75),
            (2, 1.0, 1.5),
            (3, 2.0, 3.0),
            (4, 4.0, 6.0),
            (5, 5.0, 7.5),
        ] {
            let pause = backoff(failures).as_secs_f64();
            assert!((low..high).contains(&pause), "{failures}: {pause}");
        }
        assert!(backoff(1000) <= Duration::from_millis(7500));
    }
}
