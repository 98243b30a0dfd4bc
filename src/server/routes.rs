//! Every method the daemon serves, each registered once with its handler. `initialize` is not
//! here: it is the connection's own business ([`super::connection`]).

use super::process_methods;
use super::router::{Ctx, Router};
use crate::rpc::RpcError;
use crate::{audit, capability, environment, environment_config, fs, http, process};
use exec_server_protocol::fs::OpenMode;
use exec_server_protocol::methods::{self as m, Method};
use serde_json::json;
use std::convert::Infallible;
use std::sync::LazyLock;

pub(super) static ROUTER: LazyLock<Router> = LazyLock::new(build);

fn build() -> Router {
    let mut router = Router::default();

    router.request::<m::ProcessStart>(
        |c: Ctx, p: <m::ProcessStart as Method>::Params| async move {
            let arrived = std::time::Instant::now();
            c.audit(m::ProcessStart::NAME, || audit::process_start(&p))
                .await?;
            let started =
                process_methods::start(&c.connection.daemon, &c.session, &c.call, p).await?;
            if !started.existing {
                c.connection
                    .daemon
                    .metrics
                    .launched(started.sandbox_backend, arrived.elapsed());
                audit_exit(&c, &started.process_id);
            }
            Ok::<_, RpcError>(started)
        },
    );
    router.request::<m::ProcessRead>(|c: Ctx, p| async move {
        process_methods::read(&c.session, c.connection.id, p).await
    });
    router.request::<m::ProcessWrite>(
        |c: Ctx, p| async move { process_methods::write(&c.session, p) },
    );
    router.request::<m::ProcessSignal>(
        |c: Ctx, p: <m::ProcessSignal as Method>::Params| async move {
            let details = || json!({ "processId": p.process_id, "signal": p.signal });
            c.audit(m::ProcessSignal::NAME, details).await?;
            Ok::<_, RpcError>(process_methods::signal(&c.session, p)?)
        },
    );
    router.request::<m::ProcessTerminate>(
        |c: Ctx, p: <m::ProcessTerminate as Method>::Params| async move {
            let details = || json!({ "processId": p.process_id });
            c.audit(m::ProcessTerminate::NAME, details).await?;
            Ok::<_, RpcError>(process_methods::terminate(&c.session, p)?)
        },
    );
    router.request::<m::ProcessResize>(|c: Ctx, p| async move {
        process_methods::resize(&c.session, p)
    });
    router.request::<m::ProcessCloseStdin>(|c: Ctx, p| async move {
        process_methods::close_stdin(&c.session, p)
    });

    router.request::<m::ProcessList>(|c: Ctx, ()| async move {
        Ok::<_, Infallible>(process_methods::list(&c.session))
    });

    fs_methods(&mut router);
    environment_and_http_methods(&mut router);
    router
}

/// The `fs/*` methods, on the connection's handles and watches or one-shot.
fn fs_methods(router: &mut Router) {
    fs::one_shots(&mut OneShots(router));
    router.request::<m::FsOpen>(|c: Ctx, p: <m::FsOpen as Method>::Params| async move {
        // A handle opened to write is the write.
        if p.mode.unwrap_or_default() != OpenMode::Read {
            let details = || json!({ "paths": [p.path], "mode": p.mode });
            c.audit(m::FsOpen::NAME, details).await?;
        }
        Ok::<_, RpcError>(fs::open(&c.connection.fs, p).await?)
    });
    router.request_raw::<m::FsReadBlock>(|c: Ctx, p| async move {
        fs::read_block(&c.connection.fs, p).await
    });
    router.request::<m::FsWriteBlock>(|c: Ctx, p| async move {
        fs::write_block(&c.connection.fs, p).await
    });
    router.request::<m::FsClose>(|c: Ctx, p| async move { fs::close(&c.connection.fs, p).await });
    router.request::<m::FsWatch>(|c: Ctx, p| async move {
        let connection = &c.connection;
        fs::watch(
            &connection.fs,
            connection.watch_budget(),
            &connection.outbound,
            p,
        )
        .await
    });
    router
        .request::<m::FsUnwatch>(|c: Ctx, p| async move { fs::unwatch(&c.connection.fs, p).await });
    router.request::<m::FsWatchMissing>(|c: Ctx, p| async move {
        let connection = &c.connection;
        let budget = connection.watch_budget();
        fs::watch_missing(&connection.fs, budget, &connection.outbound, p).await
    });
}

/// `environment/*` and `http/request`.
fn environment_and_http_methods(router: &mut Router) {
    router.request::<m::EnvironmentInfo>(|c: Ctx, ()| async move {
        Ok::<_, Infallible>(environment::info(&c.connection.daemon.config))
    });
    router.request::<m::EnvironmentStatus>(|_: Ctx, ()| async {
        Ok::<_, Infallible>(environment::status())
    });
    router.request::<m::EnvironmentConfigRead>(|_: Ctx, p| environment_config::read(p));

    router.request::<m::HttpRequest>(|c: Ctx, p: <m::HttpRequest as Method>::Params| async move {
        let connection = &c.connection;
        let limit = connection.daemon.config.max_http_body_bytes;
        c.audit(m::HttpRequest::NAME, || audit::http_request(&p))
            .await?;
        Ok::<_, RpcError>(http::request(&c.call, &connection.http, limit, p).await?)
    });
    router.request::<m::CapabilityRootsDiscover>(|_: Ctx, p| capability::discover(p));
    router.request::<m::CapabilitiesDiscoverV2>(|_: Ctx, p| capability::discover_v2(p));
}

/// With an audit log, records the exit of the process `id` just started, once it exits.
fn audit_exit(c: &Ctx, id: &str) {
    let audit = &c.connection.daemon.audit;
    if !audit.is_on() {
        return;
    }
    let process::Lookup::Ready(process) = c.session.processes.lookup(id) else {
        return;
    };
    let audit = audit.clone();
    let (who, session) = (c.connection.who.clone(), c.session.id.clone());
    tokio::spawn(async move {
        let mut changes = process.subscribe();
        while !process.is_exited() {
            // The process holds the sender: this ends with the exit.
            let _ = changes.changed().await;
        }
        let exit = process.read(u64::MAX, Some(0));
        let details = || {
            json!({
                "processId": process.id,
                "exitCode": exit.exit_code,
                "reason": exit.details.reason,
                "signal": exit.details.signal,
            })
        };
        audit.event(&who, &session, "process/exit", details);
    });
}

/// Registers the one-shot `fs/*` methods, which share one handler.
struct OneShots<'a>(&'a mut Router);

impl fs::OneShotVisitor for OneShots<'_> {
    fn visit<M: fs::OneShot>(&mut self) {
        self.0.request_raw::<M>(|c: Ctx, p| async move {
            // Only changes are recorded: a read is not an action.
            let touches = if c.connection.daemon.audit.is_on() {
                M::touches(&p)
            } else {
                Vec::new()
            };
            if touches.iter().any(|&(_, changes)| changes) {
                let paths: Vec<_> = touches.iter().map(|(path, _)| path).collect();
                let details = json!({ "paths": paths });
                c.audit(M::NAME, || details).await?;
            }
            Ok::<_, RpcError>(fs::one_shot::<M>(&c.call, &c.connection.daemon.config, p).await?)
        });
    }
}
