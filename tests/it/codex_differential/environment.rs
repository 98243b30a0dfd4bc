//! Issue 42, item 1: what `environment/info` says about the executor serving it, beside codex's.

use super::{handshaken, Both};
use crate::common::codex_peer::CODEX_VERSION;
use crate::common::Daemon;
use serde_json::{json, Value};

async fn info(url: &str) -> Value {
    handshaken(url)
        .await
        .call("environment/info", json!({}))
        .await
}

fn is_provider_id(id: &Value) -> bool {
    id.as_str()
        .and_then(|id| id.strip_prefix("sha256:"))
        .is_some_and(|hex| hex.len() == 64 && hex.bytes().all(|b| b.is_ascii_hexdigit()))
}

/// Both name their build as upstream's server does (`sha256:` and 64 hex digits, the same on
/// every connection and after a restart) and their release; codex lists its helper directory in
/// `prependPathDirs`, this daemon has none and leaves the field out, as codex's own server does
/// when its package has no helper directory.
#[tokio::test]
async fn environment_info_names_the_build_serving_it() {
    let both = Both::start();
    let [ours_url, codex_url] = both.urls();
    let (ours, codex) = (info(ours_url).await, info(codex_url).await);
    for (name, info) in [("ours", &ours), ("codex", &codex)] {
        assert!(is_provider_id(&info["providerId"]), "{name}: {info}");
    }
    assert_eq!(codex["executorVersion"], CODEX_VERSION);
    assert_eq!(ours["executorVersion"], CODEX_VERSION);
    assert_eq!(info(codex_url).await["providerId"], codex["providerId"]);
    assert_eq!(info(ours_url).await["providerId"], ours["providerId"]);
    let restarted = Daemon::start();
    assert_eq!(
        info(&restarted.url).await["providerId"],
        ours["providerId"],
        "the same build after a restart"
    );
    let helper_dirs = codex["prependPathDirs"]
        .as_array()
        .expect("codex has helpers");
    for dir in helper_dirs {
        let path = url::Url::parse(dir.as_str().unwrap())
            .unwrap()
            .to_file_path();
        assert!(path.unwrap().is_dir(), "{dir}");
    }
    assert!(ours.get("prependPathDirs").is_none(), "{ours}");
}
