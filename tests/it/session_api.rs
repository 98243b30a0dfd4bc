//! What orchestrators ask of a session beyond codex's protocol: retry-safe starts
//! (`idempotent`), `process/list`, and the disconnect policy (`onDisconnect`, `sessionTtlMs`).

use crate::common;
use crate::process_tree::{all_running, assert_all_gone, detaching_script, sleeps, tags};
use crate::support::proxy::Proxy;

use common::*;
use exec_server_client::protocol::process::ProcessState;
use exec_server_client::{ClientOptions, Command};
use serde_json::{json, Value};
use std::time::Duration;

/// A session opened with extra `initialize` params.
async fn open(url: &str, extra: Value) -> Result<(Client, String), Value> {
    let client = Client::connect(url).await;
    let mut params = json!({"clientName": "e2e"});
    params
        .as_object_mut()
        .unwrap()
        .extend(extra.as_object().unwrap().clone());
    let result = client.request("initialize", params).await?;
    client.notify("initialized", json!({})).await;
    let session = result["sessionId"].as_str().unwrap().to_owned();
    Ok((client, session))
}

/// A script that appends a line to `file` each time it runs, then sleeps (`sleep_tag`).
fn appending_script(file: &std::path::Path, sleep_tag: &str) -> String {
    format!("echo ran >> {}; exec sleep {sleep_tag}", file.display())
}

/// An idempotent start of [`appending_script`].
fn appending(id: &str, file: &std::path::Path, sleep_tag: &str) -> Value {
    let script = appending_script(file, sleep_tag);
    let mut params = start_params(id, &["sh", "-c", &script]);
    params["idempotent"] = json!(true);
    params
}

fn runs(file: &std::path::Path) -> usize {
    std::fs::read_to_string(file)
        .unwrap_or_default()
        .lines()
        .count()
}

fn listed(list: &Value) -> Vec<&str> {
    list["processes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["processId"].as_str().unwrap())
        .collect()
}

#[tokio::test]
async fn a_repeated_idempotent_start_returns_the_first_result_and_runs_nothing() {
    let daemon = Daemon::start();
    let (client, _) = daemon.session().await;
    let dir = scratch_dir();
    let file = dir.path().join("runs");
    let tag = tags(101)[0].clone();
    let params = appending("once", &file, &tag);
    let first = client.call("process/start", params.clone()).await;
    assert_eq!(first, json!({"processId": "once", "sandboxType": "none"}));
    let mut again = params.clone();
    // Another span is the same start.
    again["trace"] =
        json!({"traceparent": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"});
    let repeat = client.call("process/start", again).await;
    assert_eq!(
        repeat,
        json!({"processId": "once", "sandboxType": "none", "existing": true})
    );
    eventually("the command to run", || runs(&file) == 1).await;
    eventually("the sleep to run", || sleeps(&tag).len() == 1).await;
    // A repeat arriving while the first start is in progress waits for it.
    let params = appending("racing", &file, &tags(101)[1]);
    let (a, b) = tokio::join!(
        client.request("process/start", params.clone()),
        client.request("process/start", params)
    );
    let mut existing = [
        a.unwrap()["existing"].clone(),
        b.unwrap()["existing"].clone(),
    ];
    existing.sort_by_key(|v| v.is_null());
    assert_eq!(existing, [json!(true), Value::Null]);
    eventually("the second command to run", || runs(&file) == 2).await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(runs(&file), 2, "each process ran once");
    for id in ["once", "racing"] {
        client
            .call("process/terminate", json!({"processId": id}))
            .await;
    }
}

/// A retry may come long after the process ended and its id was freed: it still runs nothing.
#[tokio::test]
async fn an_idempotent_repeat_after_the_retention_runs_nothing() {
    let daemon = Daemon::start_with(&["--exited-retention", "100ms"], &[]);
    let (client, _) = daemon.session().await;
    let dir = scratch_dir();
    let file = dir.path().join("runs");
    let mut params = start_params(
        "done",
        &["sh", "-c", &format!("echo ran >> {}", file.display())],
    );
    params["idempotent"] = json!(true);
    client.call("process/start", params.clone()).await;
    client.events_until_closed("done").await;
    let read = json!({"processId": "done", "afterSeq": 0});
    let mut forgotten = false;
    for _ in 0..200 {
        if client.request("process/read", read.clone()).await.is_err() {
            forgotten = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(forgotten, "the process was never removed");
    let repeat = client.call("process/start", params.clone()).await;
    assert_eq!(
        repeat,
        json!({"processId": "done", "sandboxType": "none", "existing": true})
    );
    let mut other = params.clone();
    other["argv"] = json!(["true"]);
    let error = client.request("process/start", other).await.unwrap_err();
    assert_eq!(error["code"], -32011, "{error}");
    assert_eq!(error["data"], json!({"fields": []}));
    assert!(
        error["message"]
            .as_str()
            .unwrap()
            .contains("removed after its retention"),
        "{error}"
    );
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert_eq!(runs(&file), 1, "the command ran once");
    // Without the flag the freed id is reused, as in codex.
    params.as_object_mut().unwrap().remove("idempotent");
    client.call("process/start", params).await;
    client.events_until_closed("done").await;
    assert_eq!(runs(&file), 2);
}

#[tokio::test]
async fn same_id_with_other_params_is_a_start_conflict_and_without_the_flag_a_duplicate() {
    let daemon = Daemon::start();
    let (client, _) = daemon.session().await;
    let tag = tags(102)[0].clone();
    let mut params = start_params("p", &["sleep", &tag]);
    params["idempotent"] = json!(true);
    client.call("process/start", params.clone()).await;
    let mut other = params.clone();
    other["argv"] = json!(["sleep", "1"]);
    other["env"]["EXTRA"] = json!("1");
    let error = client.request("process/start", other).await.unwrap_err();
    assert_eq!(error["code"], -32011, "{error}");
    assert_eq!(error["data"], json!({"fields": ["argv", "env"]}));
    assert!(
        error["message"]
            .as_str()
            .unwrap()
            .contains("already started with other params (argv, env)"),
        "{error}"
    );
    // Without the flag, codex's duplicate error, even with identical params.
    let mut plain = params.clone();
    plain.as_object_mut().unwrap().remove("idempotent");
    let error = client.request("process/start", plain).await.unwrap_err();
    assert_eq!(
        error,
        json!({"code": -32600, "message": "process p already exists"})
    );
    let list = client.call("process/list", json!({})).await;
    assert_eq!(listed(&list), ["p"]);
    client
        .call("process/terminate", json!({"processId": "p"}))
        .await;
}

/// Waits until the paused proxy holds the reply to a start, then cuts the connection.
async fn lose_the_start_reply(proxy: &Proxy) {
    eventually("the start's reply to be held", || {
        proxy.held_contains(b"sandboxType")
    })
    .await;
    proxy.cut();
}

/// The command of [`appending`] ran, and a while later still only once.
async fn assert_ran_once(file: &std::path::Path, sleep_tag: &str) {
    eventually("the command to run", || sleeps(sleep_tag).len() == 1).await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(runs(file), 1);
    assert_eq!(sleeps(sleep_tag).len(), 1);
}

/// The reply of a start is lost with its connection (held by the proxy, then cut): the same
/// start on a new connection of the session returns the process, which ran once.
#[tokio::test]
async fn a_start_retried_after_its_connection_dropped_runs_the_command_once() {
    let daemon = Daemon::start();
    let proxy = Proxy::start(&daemon.url).await;
    let client = Client::connect(&proxy.url).await;
    let session = client.initialize(None).await.unwrap();
    let dir = scratch_dir();
    let file = dir.path().join("runs");
    let tag = tags(103)[0].clone();
    let params = appending("lost", &file, &tag);
    proxy.pause();
    client
        .send_text(json!({"id": 7, "method": "process/start", "params": params}).to_string())
        .await;
    lose_the_start_reply(&proxy).await;
    let resumed = daemon.resume(&session).await;
    let repeat = resumed.call("process/start", params).await;
    assert_eq!(repeat["existing"], true, "{repeat}");
    assert_ran_once(&file, &tag).await;
    resumed
        .call("process/terminate", json!({"processId": "lost"}))
        .await;
}

/// The client crate sends every start idempotent and repeats it after a reconnect.
#[tokio::test]
async fn the_clients_start_whose_reply_was_lost_yields_one_process() {
    let daemon = Daemon::start();
    let proxy = Proxy::start(&daemon.url).await;
    let client = exec_server_client::Client::connect(ClientOptions::new(&proxy.url))
        .await
        .unwrap();
    let dir = scratch_dir();
    let file = dir.path().join("runs");
    let tag = tags(104)[0].clone();
    let command = Command::new(["sh", "-c", &appending_script(&file, &tag)])
        .cwd("/tmp")
        .unwrap()
        .env("PATH", "/usr/bin:/bin")
        .process_id("retried");
    proxy.pause();
    let starting = {
        let client = client.clone();
        tokio::spawn(async move { client.start(command).await })
    };
    lose_the_start_reply(&proxy).await;
    let process = starting.await.unwrap().expect("the retried start succeeds");
    assert_eq!(process.id(), "retried");
    assert_ran_once(&file, &tag).await;
    let list = client
        .send::<exec_server_client::protocol::methods::ProcessList>(&())
        .await
        .unwrap();
    assert_eq!(list.processes.len(), 1);
    assert_eq!(list.processes[0].state, ProcessState::Running);
    process.terminate().await.unwrap();
}

#[tokio::test]
async fn list_shows_only_the_sessions_own_processes() {
    let daemon = Daemon::start();
    let (alice, _) = daemon.session().await;
    let (bob, _) = daemon.session().await;
    for id in ["a1", "a2"] {
        alice
            .call("process/start", start_params(id, &["true"]))
            .await;
    }
    bob.call("process/start", start_params("b1", &["true"]))
        .await;
    assert_eq!(
        listed(&alice.call("process/list", json!({})).await),
        ["a1", "a2"]
    );
    assert_eq!(listed(&bob.call("process/list", json!(null)).await), ["b1"]);
    let (carol, _) = daemon.session().await;
    assert_eq!(
        carol.call("process/list", json!({})).await,
        json!({"processes": []})
    );
}

fn rfc3339(value: &Value) -> std::time::SystemTime {
    humantime::parse_rfc3339(value.as_str().unwrap()).unwrap_or_else(|e| panic!("{value}: {e}"))
}

#[tokio::test]
async fn list_reports_running_exited_and_closed_processes() {
    let daemon = Daemon::start();
    let (client, _) = daemon.session().await;
    let before = std::time::SystemTime::now() - Duration::from_secs(1);
    let [running_tag, background_tag, _] = tags(105);
    client
        .call(
            "process/start",
            start_params("running", &["sleep", &running_tag]),
        )
        .await;
    // Exits, but the background sleep holds its output open.
    let script = format!("sleep {background_tag} & exit 3");
    client
        .call(
            "process/start",
            start_params("exited", &["sh", "-c", &script]),
        )
        .await;
    let mut tty = start_params("closed", &["echo", "hi"]);
    tty["tty"] = json!(true);
    client.call("process/start", tty).await;
    read_all(&client, "closed").await;
    eventually("the background sleep", || {
        sleeps(&background_tag).len() == 1
    })
    .await;
    let list = loop {
        let list = client.call("process/list", json!({})).await;
        if list["processes"][1]["state"] == "exited" {
            break list;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    assert_eq!(listed(&list), ["closed", "exited", "running"]);
    let [closed, exited, running] = [0, 1, 2].map(|n| list["processes"][n].clone());

    assert_eq!(running["argv"], json!(["sleep", running_tag]));
    assert_eq!(running["cwd"], cwd_uri());
    assert_eq!(running["tty"], false);
    assert_eq!(running["sandboxType"], "none");
    assert_eq!(running["state"], "running");
    assert_eq!(running["exitCode"], Value::Null);
    assert_eq!(running["exitedAt"], Value::Null);
    assert_eq!(running["liveDescendants"], 0);
    assert_eq!(running["nextSeq"], 1);
    assert_eq!(running["firstRetainedSeq"], 1);
    assert_eq!(
        sleeps(&running_tag),
        [running["pid"].as_i64().unwrap() as i32]
    );
    let started = rfc3339(&running["startedAt"]);
    assert!(started >= before && started <= std::time::SystemTime::now());
    assert!(running["startedAt"].as_str().unwrap().ends_with('Z'));

    assert_eq!(exited["state"], "exited");
    assert_eq!(exited["exitCode"], 3);
    assert_eq!(exited["liveDescendants"], 1);
    assert!(rfc3339(&exited["exitedAt"]) >= rfc3339(&exited["startedAt"]));

    assert_eq!(closed["state"], "closed");
    assert_eq!(closed["tty"], true);
    assert_eq!(closed["exitCode"], 0);
    assert!(closed["exitedAt"].is_string());
    // As process/read says it.
    let read = client
        .call("process/read", json!({"processId": "closed"}))
        .await;
    assert_eq!(closed["nextSeq"], read["nextSeq"]);
    assert_eq!(closed["firstRetainedSeq"], read["firstRetainedSeq"]);
    for id in ["running", "exited"] {
        client
            .call("process/terminate", json!({"processId": id}))
            .await;
    }
}

#[tokio::test]
async fn kill_on_disconnect_leaves_nothing_and_ends_the_session() {
    let daemon = Daemon::start();
    let (client, session) = open(&daemon.url, json!({"onDisconnect": "kill"}))
        .await
        .unwrap();
    let tags = tags(106);
    client
        .call(
            "process/start",
            start_params("tree", &["sh", "-c", &detaching_script(&tags)]),
        )
        .await;
    let mut pids = all_running(&tags).await;
    let leader = client.call("process/list", json!({})).await["processes"][0]["pid"]
        .as_i64()
        .unwrap() as i32;
    pids.push(leader);
    client.abort();
    assert_all_gone(&pids, "every process of the tree, reaped").await;
    let resumed = daemon.client().await;
    let error = resumed.initialize(Some(&session)).await.unwrap_err();
    assert_eq!(
        error,
        json!({"code": -32600, "message": format!("unknown session id {session}")})
    );
}

#[tokio::test]
async fn keep_on_disconnect_keeps_the_processes_and_a_resume_keeps_the_policy() {
    let daemon = Daemon::start();
    let (client, session) = open(&daemon.url, json!({"onDisconnect": "keep"}))
        .await
        .unwrap();
    let tag = tags(107)[0].clone();
    client
        .call("process/start", start_params("kept", &["sleep", &tag]))
        .await;
    eventually("the sleep", || sleeps(&tag).len() == 1).await;
    client.abort();
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(sleeps(&tag).len(), 1, "keep: the process runs on");
    // A resume may not change the policy; it may repeat it.
    let changed = loop {
        let attempt = open(
            &daemon.url,
            json!({"resumeSessionId": session, "onDisconnect": "kill"}),
        )
        .await;
        match attempt {
            Err(error) if error["code"] == -32010 => {
                tokio::time::sleep(Duration::from_millis(50)).await
            }
            other => break other.map(|_| ()).unwrap_err(),
        }
    };
    assert_eq!(changed["code"], -32602, "{changed}");
    let (resumed, _) = open(
        &daemon.url,
        json!({"resumeSessionId": session, "onDisconnect": "keep"}),
    )
    .await
    .unwrap();
    let list = resumed.call("process/list", json!({})).await;
    assert_eq!(list["processes"][0]["state"], "running");
    resumed
        .call("process/terminate", json!({"processId": "kept"}))
        .await;
}

#[tokio::test]
async fn session_ttl_is_honoured_and_bounded_by_the_daemon_maximum() {
    let daemon = Daemon::start_with(&["--session-ttl", "60s", "--max-session-ttl", "5s"], &[]);
    for bad in [json!(0), json!(-1), json!(5001)] {
        let error = open(&daemon.url, json!({"sessionTtlMs": bad}))
            .await
            .map(|_| ())
            .unwrap_err();
        assert_eq!(
            error,
            json!({"code": -32602, "message": format!("sessionTtlMs must be between 1 and 5000 (the daemon's --max-session-ttl), not {bad}")})
        );
    }
    let (client, session) = open(&daemon.url, json!({"sessionTtlMs": 300}))
        .await
        .unwrap();
    let tag = tags(108)[0].clone();
    client
        .call("process/start", start_params("short", &["sleep", &tag]))
        .await;
    eventually("the sleep", || sleeps(&tag).len() == 1).await;
    let pid = sleeps(&tag)[0];
    client.abort();
    // Well within the test's patience (20 s), unlike the daemon's default TTL (60 s).
    assert_all_gone(&[pid], "the short-lived session's process").await;
    let error = daemon
        .client()
        .await
        .initialize(Some(&session))
        .await
        .unwrap_err();
    assert_eq!(error["code"], -32600);
}
