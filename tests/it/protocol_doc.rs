//! Executes every example in docs/protocol.md against the real daemon, so the document cannot
//! drift from the behaviour.
//!
//! A fenced block with info string `jsonrpc` is one scenario in a fresh daemon and (unless the
//! block starts with its own `initialize`) a fresh initialized session. `> ` lines are sent;
//! `< ` lines are expected: one with an `id` matches the reply with that id, an array the next
//! batch reply, one with a `method` the next notification of that method. The string "..." matches any value, and an
//! object holding the key "..." may carry extra keys. `$TMP` names a fresh temporary directory,
//! `$HTTP` the base URL of a local test server (tests/it/common/http_server.rs).

use crate::common;

use common::*;
use serde_json::Value;
use std::collections::VecDeque;

struct Example {
    line: usize,
    steps: Vec<Step>,
}

enum Step {
    Send(String),
    Expect(Value),
}

fn examples(doc: &str) -> Vec<Example> {
    let mut examples = Vec::new();
    let mut current: Option<Example> = None;
    for (index, line) in doc.lines().enumerate() {
        let trimmed = line.trim();
        match &mut current {
            None if trimmed == "```jsonrpc" => {
                current = Some(Example {
                    line: index + 1,
                    steps: Vec::new(),
                })
            }
            None => {}
            Some(_) if trimmed == "```" => examples.push(current.take().unwrap()),
            Some(example) => {
                if let Some(sent) = trimmed.strip_prefix("> ") {
                    example.steps.push(Step::Send(sent.to_owned()));
                } else if let Some(expected) = trimmed.strip_prefix("< ") {
                    let value = serde_json::from_str(expected).unwrap_or_else(|e| {
                        panic!("docs/protocol.md:{}: bad JSON: {e}", index + 1)
                    });
                    example.steps.push(Step::Expect(value));
                } else {
                    assert!(
                        trimmed.is_empty(),
                        "docs/protocol.md:{}: a line must start with `> ` or `< `",
                        index + 1
                    );
                }
            }
        }
    }
    assert!(current.is_none(), "docs/protocol.md: unterminated example");
    examples
}

fn matches(expected: &Value, actual: &Value) -> bool {
    match (expected, actual) {
        (Value::String(s), _) if s == "..." => true,
        (Value::Object(e), Value::Object(a)) => {
            let open = e.get("...").is_some_and(|v| v == "...");
            e.iter()
                .filter(|(k, _)| k.as_str() != "...")
                .all(|(k, v)| a.get(k).is_some_and(|av| matches(v, av)))
                && (open || a.keys().all(|k| e.contains_key(k)))
        }
        (Value::Array(e), Value::Array(a)) => {
            e.len() == a.len() && e.iter().zip(a).all(|(e, a)| matches(e, a))
        }
        _ => expected == actual,
    }
}

async fn run(example: &Example, http: &str) {
    eprintln!("docs/protocol.md example at line {}", example.line);
    let daemon = Daemon::start();
    let client = daemon.client().await;
    let tmp = tempfile::tempdir().unwrap();
    let substitute = |text: &str| {
        text.replace("$TMP", tmp.path().to_str().unwrap())
            .replace("$HTTP", http)
    };
    let starts_with_initialize =
        matches!(example.steps.first(), Some(Step::Send(s)) if s.contains("\"initialize\""));
    if !starts_with_initialize {
        client.initialize(None).await.expect("initialize");
    }
    let mut replies: VecDeque<Value> = VecDeque::new();
    let mut notifications: VecDeque<Value> = VecDeque::new();
    for step in &example.steps {
        match step {
            Step::Send(text) => client.send_text(substitute(text)).await,
            Step::Expect(expected) => {
                let expected: Value =
                    serde_json::from_str(&substitute(&expected.to_string())).unwrap();
                let is_reply = expected.get("id").is_some() || expected.is_array();
                let buffer = if is_reply {
                    &mut replies
                } else {
                    &mut notifications
                };
                let wanted = |v: &Value| {
                    if expected.is_array() {
                        v.is_array()
                    } else if is_reply {
                        v.get("id") == expected.get("id")
                    } else {
                        v.get("method") == expected.get("method")
                    }
                };
                let found = loop {
                    if let Some(at) = buffer.iter().position(wanted) {
                        break buffer.remove(at).unwrap();
                    }
                    let next = if is_reply {
                        client.next_unsolicited().await
                    } else {
                        client.next_notification().await
                    };
                    buffer.push_back(next);
                };
                assert!(
                    matches(&expected, &found),
                    "docs/protocol.md example at line {}:\nexpected {expected}\n     got {found}",
                    example.line
                );
            }
        }
    }
}

#[tokio::test]
async fn every_documented_example_holds() {
    let doc =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/docs/protocol.md")).unwrap();
    let examples = examples(&doc);
    assert!(
        examples.len() >= 10,
        "docs/protocol.md should carry examples"
    );
    let server = common::http_server::HttpServer::start().await;
    for example in &examples {
        run(example, &server.base).await;
    }
}

#[test]
fn the_matcher_can_fail() {
    let pattern: Value = serde_json::json!({"a": "...", "b": [1]});
    assert!(matches(
        &pattern,
        &serde_json::json!({"a": {"x": 1}, "b": [1]})
    ));
    assert!(!matches(&pattern, &serde_json::json!({"a": 1, "b": [2]})));
    assert!(!matches(
        &pattern,
        &serde_json::json!({"a": 1, "b": [1], "c": 0})
    ));
    assert!(matches(
        &serde_json::json!({"...": "...", "a": 1}),
        &serde_json::json!({"a": 1, "c": 0})
    ));
}
