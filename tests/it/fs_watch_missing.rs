//! `fs/watchMissing` against this daemon's watch budget: many connections at once, watches
//! replaced in a loop, watches that fired or whose connection left. What codex's own server
//! does with the same requests is in `codex_differential::fs_watch_missing`.

use crate::common::*;
use futures::future::join_all;
use serde_json::json;
use std::path::Path;
use std::time::Duration;

fn watch(id: u64, missing: &Path) -> serde_json::Value {
    json!({"watchId": id, "missing": [file_uri(missing)]})
}

async fn watching(client: &Client, id: u64, missing: &Path) -> bool {
    let result = client.call("fs/watchMissing", watch(id, missing)).await;
    result["watching"].as_bool().unwrap()
}

/// Sixteen connections at once each ask to watch a path in a directory of their own, under a
/// daemon allowed four watched directories: four watch, the rest are told to look for
/// themselves, and the daemon holds no inotify instance beyond the four. Replacing a watch in a
/// loop, a watch firing and a connection leaving each give their share back.
#[tokio::test]
async fn missing_path_watches_stay_within_the_daemons_watch_budget() {
    let daemon = Daemon::start_with(&["--max-watched-directories", "4"], &[]);
    let idle = inotify_instances(daemon.pid());
    let root = scratch_dir();
    let dirs: Vec<_> = (0..16).map(|i| root.path().join(format!("d{i}"))).collect();
    for dir in &dirs {
        std::fs::create_dir(dir).unwrap();
    }
    let clients = join_all((0..16).map(|_| daemon.client())).await;
    let first = join_all((clients.iter().zip(&dirs)).map(|(client, dir)| async move {
        client.initialize(None).await.unwrap();
        watching(client, 1, &dir.join("x")).await
    }))
    .await;
    assert_eq!(first.iter().filter(|&&w| w).count(), 4, "{first:?}");
    assert_eq!(inotify_instances(daemon.pid()), idle + 4);

    let holders: Vec<usize> = (0..16).filter(|&i| first[i]).collect();
    join_all(holders.iter().map(|&i| {
        let (client, missing) = (&clients[i], dirs[i].join("x"));
        async move {
            for id in 2..=100 {
                assert!(watching(client, id, &missing).await);
            }
        }
    }))
    .await;
    assert_eq!(
        inotify_instances(daemon.pid()),
        idle + 4,
        "replaced, not added"
    );

    // The first holder's watch fires and ends; its share goes to a connection that had none.
    let fired = &clients[holders[0]];
    std::fs::write(dirs[holders[0]].join("x"), "").unwrap();
    let notification = fired.next_notification().await;
    assert_eq!(notification["params"]["watchId"], 100, "{notification}");
    let waiting = (0..16).find(|i| !first[*i]).unwrap();
    eventually("the fired watch's share is back", || {
        inotify_instances(daemon.pid()) == idle + 3
    })
    .await;
    assert!(watching(&clients[waiting], 2, &dirs[waiting].join("x")).await);

    for client in clients {
        client.close().await;
    }
    eventually("every share is back", || {
        inotify_instances(daemon.pid()) == idle
    })
    .await;
    let late = daemon.client().await;
    late.initialize(None).await.unwrap();
    assert!(watching(&late, 1, &dirs[0].join("y")).await);
    assert!(
        late.try_next_notification(Duration::from_millis(100))
            .await
            .is_none(),
        "nothing changed"
    );
}
