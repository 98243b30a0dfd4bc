//! Shell commands as the agent runs them: `exec_command`, `write_stdin` and polling.

use super::{assert_same, Turn};
use codex_scripted_model::Step;

/// Commands with their exit codes, output on both streams, and a file they leave behind.
#[tokio::test]
async fn commands_and_exit_codes() {
    let outcome = assert_same(&Turn::new(vec![
        Step::sh("echo hi > out.txt && cat out.txt"),
        Step::sh("echo to-stderr >&2; exit 3"),
        Step::sh("false"),
        Step::sh("pwd; printf 'no newline'"),
    ]))
    .await;
    let told = outcome.told[0].as_deref().unwrap();
    assert!(told.contains("Process exited with code 0"), "{told}");
    assert!(told.contains("hi"), "{told}");
    assert!(outcome.told[1]
        .as_deref()
        .unwrap()
        .contains("Process exited with code 3"));
    assert_eq!(outcome.files["work/out.txt"], "hi\n");
}

/// Output longer than codex keeps for the model: both executors' output is cut the same way.
/// The 3 MB come in 24 paced pieces: codex's own server keeps 1 MiB of a process's output and
/// its client 1 MiB of events, so on a loaded machine a burst outran its client and it told
/// the model of 1.79 MB instead (seen once in a CI run); this daemon loses none either way.
#[tokio::test]
async fn long_output() {
    let paced = "for i in $(seq 24); do head -c 125000 /dev/zero | tr '\\0' x; sleep 0.05; done; \
                 echo; echo tail-line";
    let outcome = assert_same(&Turn::new(vec![Step::sh("seq 1 200000"), Step::sh(paced)])).await;
    let told = outcome.told[0].as_deref().unwrap();
    assert!(told.contains("200000"), "{told}");
}

/// A command still running when its call yields: the agent polls it with empty `write_stdin`
/// calls until it exits, and a job it put in the background finishes on its own.
#[tokio::test]
async fn background_processes_and_polling() {
    let outcome = assert_same(&Turn::new(vec![
        Step::background("sleep 1.5; echo finished", 300, false),
        Step::stdin(0, "", 5_000),
        Step::sh("(sleep 0.5; echo late > late.txt) > /dev/null 2>&1 &"),
        Step::sh("sleep 1.5; cat late.txt"),
    ]))
    .await;
    let running = outcome.told[0].as_deref().unwrap();
    assert!(
        running.contains("Process running with session ID N"),
        "{running}"
    );
    let polled = outcome.told[1].as_deref().unwrap();
    assert!(polled.contains("finished"), "{polled}");
    assert!(polled.contains("Process exited with code 0"), "{polled}");
    assert_eq!(outcome.files["work/late.txt"], "late\n");
}

/// Without a terminal a command's stdin is at end of file at once.
#[tokio::test]
async fn stdin_is_at_eof() {
    let outcome = assert_same(&Turn::new(vec![
        Step::sh("cat; echo cat-rc=$?"),
        Step::sh("read line; echo read-rc=$? \"[$line]\""),
    ]))
    .await;
    assert!(outcome.told[1].as_deref().unwrap().contains("read-rc=1 []"));
}

/// A command on a terminal reads what the agent writes with `write_stdin`. Echo is off, so that
/// the whole output does not depend on whether the input came before the shell's `read`.
#[tokio::test]
async fn tty_and_write_stdin() {
    let outcome = assert_same(
        &Turn::new(vec![
            Step::background(
                "stty -echo; tty > /dev/null && echo on-a-tty; read line; echo got:$line",
                3_000,
                true,
            ),
            Step::stdin(0, "hello\n", 3_000),
        ])
        .timing_dependent(),
    )
    .await;
    assert_eq!(
        outcome.items[0]["aggregated_output"],
        "on-a-tty\r\ngot:hello\r\n"
    );
    let told = outcome.told[1].as_deref().unwrap();
    assert!(told.contains("got:hello"), "{told}");
}
