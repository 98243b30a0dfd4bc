//! The scripted Responses model: a loopback HTTP server that `codex exec` takes for its model
//! provider. Each `POST /v1/responses` is answered with one SSE response holding the first step
//! of the script whose call the request's `input[]` has no output for yet (so retries and
//! compaction cannot skip a step), then a final assistant message once every step has one. Tool
//! names are chosen from the request's `tools`, as the versions of codex differ in what they
//! offer. Every request is kept: what the model was told is the call outputs of the last one.

use axum::extract::State;
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use axum::{Json, Router};
use serde_json::{json, Value};
use std::sync::{Arc, Mutex};

/// One tool call of the script.
#[derive(Clone, Debug)]
pub enum Step {
    /// `exec_command` (or the older shell tools) running `cmd`, waiting up to `yield_ms`.
    Shell {
        cmd: String,
        yield_ms: u64,
        tty: bool,
    },
    /// `write_stdin` to the process an earlier `Shell` step (by index) left running: `chars`
    /// (empty polls), waiting up to `yield_ms`.
    WriteStdin {
        step: usize,
        chars: String,
        yield_ms: u64,
    },
    /// `apply_patch` with this patch text.
    Patch(String),
    /// `view_image` of a path.
    ViewImage(String),
}

impl Step {
    pub fn sh(cmd: impl Into<String>) -> Self {
        Self::Shell {
            cmd: cmd.into(),
            yield_ms: 10_000,
            tty: false,
        }
    }

    /// A command that may still run when the call returns after `yield_ms`.
    pub fn background(cmd: impl Into<String>, yield_ms: u64, tty: bool) -> Self {
        Self::Shell {
            cmd: cmd.into(),
            yield_ms,
            tty,
        }
    }

    pub fn stdin(step: usize, chars: impl Into<String>, yield_ms: u64) -> Self {
        Self::WriteStdin {
            step,
            chars: chars.into(),
            yield_ms,
        }
    }

    pub fn patch(body: &str) -> Self {
        Self::Patch(format!("*** Begin Patch\n{body}*** End Patch"))
    }
}

/// The id of step `index`'s call.
pub fn call_id(index: usize) -> String {
    format!("call-{index}")
}

struct Script {
    steps: Vec<Step>,
    requests: Mutex<Vec<Value>>,
}

pub struct Model {
    /// `http://127.0.0.1:PORT/v1`, the provider's `base_url`.
    pub base_url: String,
    script: Arc<Script>,
    task: tokio::task::JoinHandle<()>,
}

impl Model {
    pub async fn start(steps: Vec<Step>) -> Self {
        let script = Arc::new(Script {
            steps,
            requests: Mutex::default(),
        });
        let app = Router::new()
            .route("/v1/responses", post(respond))
            .fallback(|| async { StatusCode::NOT_FOUND })
            .with_state(script.clone());
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let base_url = format!("http://{}/v1", listener.local_addr().unwrap());
        let task = tokio::spawn(async move {
            axum::serve(listener, app).await.unwrap();
        });
        Self {
            base_url,
            script,
            task,
        }
    }

    /// The output codex reported for each call, in script order (None: never answered).
    pub fn outputs(&self) -> Vec<Option<String>> {
        let requests = self.script.requests.lock().unwrap();
        let Some(last) = requests.last() else {
            return vec![None; self.script.steps.len()];
        };
        (0..self.script.steps.len())
            .map(|index| call_output(last, &call_id(index)).map(output_text))
            .collect()
    }

    /// The texts of the messages codex put before the task in its first request (its
    /// instructions, the project's AGENTS.md, the environment context).
    pub fn context(&self) -> Vec<String> {
        let requests = self.script.requests.lock().unwrap();
        let Some(first) = requests.first() else {
            return Vec::new();
        };
        first["input"]
            .as_array()
            .into_iter()
            .flatten()
            .filter(|item| item["type"] == "message" && item["role"] != "assistant")
            .flat_map(|item| item["content"].as_array().into_iter().flatten())
            .filter_map(|part| part["text"].as_str().map(str::to_owned))
            .collect()
    }
}

impl Drop for Model {
    fn drop(&mut self) {
        self.task.abort();
    }
}

async fn respond(State(script): State<Arc<Script>>, Json(request): Json<Value>) -> Response {
    let item = next_item(&script.steps, &request);
    script.requests.lock().unwrap().push(request);
    let usage = json!({"input_tokens": 0, "input_tokens_details": null, "output_tokens": 0,
        "output_tokens_details": null, "total_tokens": 0});
    let events = [
        json!({"type": "response.created", "response": {"id": "resp"}}),
        json!({"type": "response.output_item.done", "item": item}),
        json!({"type": "response.completed", "response": {"id": "resp", "usage": usage}}),
    ];
    let body: String = events
        .iter()
        .map(|event| {
            format!(
                "event: {}\ndata: {event}\n\n",
                event["type"].as_str().unwrap()
            )
        })
        .collect();
    ([(header::CONTENT_TYPE, "text/event-stream")], body).into_response()
}

fn next_item(steps: &[Step], request: &Value) -> Value {
    let tools = Tools::of(request);
    for (index, step) in steps.iter().enumerate() {
        let id = call_id(index);
        if call_output(request, &id).is_none() {
            return tools.call(step, &id, request);
        }
    }
    json!({"type": "message", "role": "assistant", "id": "msg-final",
        "content": [{"type": "output_text", "text": "done"}]})
}

/// The output item answering `id` in the request's input.
fn call_output<'a>(request: &'a Value, id: &str) -> Option<&'a Value> {
    request["input"].as_array()?.iter().find(|item| {
        item["call_id"] == id
            && item["type"]
                .as_str()
                .is_some_and(|kind| kind.ends_with("_output"))
    })
}

/// An output item's text: a string, or the text parts of a content list (images as a marker).
fn output_text(item: &Value) -> String {
    match &item["output"] {
        Value::String(text) => text.clone(),
        Value::Array(parts) => parts
            .iter()
            .map(|part| match part["type"].as_str() {
                Some("input_image") => "<image>".to_owned(),
                _ => part["text"].as_str().unwrap_or_default().to_owned(),
            })
            .collect::<Vec<_>>()
            .join("\n"),
        other => other.to_string(),
    }
}

/// Which tools the request offers, by name and kind.
struct Tools {
    names: Vec<(String, String)>,
}

impl Tools {
    fn of(request: &Value) -> Self {
        let names = request["tools"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|tool| {
                let name = tool["name"].as_str()?;
                Some((name.to_owned(), tool["type"].as_str()?.to_owned()))
            })
            .collect();
        Self { names }
    }

    fn kind(&self, name: &str) -> Option<&str> {
        self.names
            .iter()
            .find(|(tool, _)| tool == name)
            .map(|(_, kind)| kind.as_str())
    }

    fn call(&self, step: &Step, id: &str, request: &Value) -> Value {
        match step {
            Step::Shell { cmd, yield_ms, tty } => self.shell(cmd, *yield_ms, *tty, id),
            Step::WriteStdin {
                step,
                chars,
                yield_ms,
            } => {
                let told = call_output(request, &call_id(*step)).map(output_text);
                let session = told
                    .as_deref()
                    .and_then(session_id)
                    .unwrap_or_else(|| panic!("step {step} left no running session: {told:?}"));
                function(
                    id,
                    "write_stdin",
                    json!({"session_id": session, "chars": chars, "yield_time_ms": yield_ms}),
                )
            }
            Step::Patch(patch) => match self.kind("apply_patch") {
                Some("custom") => json!({"type": "custom_tool_call", "call_id": id,
                    "name": "apply_patch", "input": patch}),
                Some(_) => function(id, "apply_patch", json!({"input": patch})),
                None => self.shell(
                    &format!("apply_patch <<'EOF'\n{patch}\nEOF"),
                    10_000,
                    false,
                    id,
                ),
            },
            Step::ViewImage(path) => function(id, "view_image", json!({"path": path})),
        }
    }

    fn shell(&self, cmd: &str, yield_ms: u64, tty: bool, id: &str) -> Value {
        if self.kind("exec_command").is_some() {
            function(
                id,
                "exec_command",
                json!({"cmd": cmd, "yield_time_ms": yield_ms, "tty": tty}),
            )
        } else if self.kind("shell_command").is_some() {
            function(id, "shell_command", json!({"command": cmd}))
        } else {
            function(id, "shell", json!({"command": ["bash", "-lc", cmd]}))
        }
    }
}

fn function(id: &str, name: &str, arguments: Value) -> Value {
    json!({"type": "function_call", "call_id": id, "name": name,
        "arguments": arguments.to_string()})
}

/// The session a still-running `exec_command` reported ("Process running with session ID N").
fn session_id(told: &str) -> Option<u64> {
    let rest = told.split("session ID ").nth(1)?;
    rest.split(|c: char| !c.is_ascii_digit())
        .next()?
        .parse()
        .ok()
}
