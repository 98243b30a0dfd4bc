//! Every method the daemon serves, each registered once with its handler. `initialize` is not
//! here: it is the connection's own business ([`super::connection`]).

use super::router::{Ctx, Router};
use crate::{environment, fs, http, process};
use exec_server_protocol::methods as m;
use std::convert::Infallible;
use std::sync::LazyLock;

pub(super) static ROUTER: LazyLock<Router> = LazyLock::new(build);

fn build() -> Router {
    let mut router = Router::default();

    router.request::<m::ProcessStart>(|c: Ctx, p| async move {
        process::methods::start(&c.session, &c.call, p).await
    });
    router.request::<m::ProcessRead>(|c: Ctx, p| async move {
        process::methods::read(&c.session, c.connection.id, p).await
    });
    router.request::<m::ProcessWrite>(
        |c: Ctx, p| async move { process::methods::write(&c.session, p) },
    );
    router.request::<m::ProcessSignal>(|c: Ctx, p| async move {
        process::methods::signal(&c.session, p)
    });
    router.request::<m::ProcessTerminate>(|c: Ctx, p| async move {
        process::methods::terminate(&c.session, p)
    });
    router.request::<m::ProcessResize>(|c: Ctx, p| async move {
        process::methods::resize(&c.session, p)
    });
    router.request::<m::ProcessCloseStdin>(|c: Ctx, p| async move {
        process::methods::close_stdin(&c.session, p)
    });

    router.request::<m::ProcessList>(|c: Ctx, ()| async move {
        Ok::<_, Infallible>(process::methods::list(&c.session))
    });

    fs::one_shots(&mut OneShots(&mut router));
    router.request::<m::FsOpen>(|c: Ctx, p| async move { fs::open(&c.connection.fs, p).await });
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

    router.request::<m::EnvironmentInfo>(|_: Ctx, ()| async {
        Ok::<_, Infallible>(environment::info())
    });
    router.request::<m::EnvironmentStatus>(|_: Ctx, ()| async {
        Ok::<_, Infallible>(environment::status())
    });

    router.request::<m::HttpRequest>(|c: Ctx, p| async move {
        let connection = &c.connection;
        let limit = connection.registry.config.max_http_body_bytes;
        http::request(&c.call, &connection.http, limit, p).await
    });

    router
}

/// Registers the one-shot `fs/*` methods, which share one handler.
struct OneShots<'a>(&'a mut Router);

impl fs::OneShotVisitor for OneShots<'_> {
    fn visit<M: fs::OneShot>(&mut self) {
        self.0.request_raw::<M>(|c: Ctx, p| async move {
            fs::one_shot::<M>(&c.call, &c.connection.registry.config, p).await
        });
    }
}
