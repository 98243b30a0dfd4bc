//! agent-sandbox's gRPC `process.v1.ProcessService` on `--sandboxd-grpc-listen`, driven by a
//! tonic client over h2c: commands run with their output, stdin, signals, a terminal and their
//! exit; and attacks, each a clear gRPC status: malformed protobuf, an oversized message, a
//! missing or wrong token, an unknown method, a client that abandons `Execute` (its command
//! is killed, not left running), idle connections; and `--sandboxd-sandbox` confining what
//! the commands write.

use crate::common::*;
use crate::metrics::free_port;
use crate::sandbox_support::{entry, path, special};
use exec_server::sandboxd_process_v1::*;
use std::os::unix::fs::PermissionsExt as _;
use std::time::Duration;
use tonic::codec::{Codec, DecodeBuf, Decoder, EncodeBuf, Encoder};
use tonic::transport::Channel;
use tonic::{Code, Status};

const TOKEN: &str = "sandboxd-grpc-token-0123456789";

struct Fixture {
    _daemon: Daemon,
    channel: Channel,
    address: String,
    _dir: tempfile::TempDir,
}

impl Fixture {
    async fn start(extra: &[&str]) -> Self {
        let dir = tempfile::tempdir().unwrap();
        let token = dir.path().join("token");
        std::fs::write(&token, TOKEN).unwrap();
        std::fs::set_permissions(&token, std::fs::Permissions::from_mode(0o600)).unwrap();
        let address = format!("127.0.0.1:{}", free_port());
        let mut args = vec![
            "--connection-token-file",
            token.to_str().unwrap(),
            "--sandboxd-grpc-listen",
            &address,
            "--sandboxd-root",
            dir.path().to_str().unwrap(),
        ];
        args.extend_from_slice(extra);
        let daemon = Daemon::start_with(&args, &[]);
        let channel = Channel::from_shared(format!("http://{address}"))
            .unwrap()
            .connect()
            .await
            .unwrap();
        Self {
            _daemon: daemon,
            channel,
            address,
            _dir: dir,
        }
    }

    /// A unary call with `token` (the right one unless told).
    async fn call_as<Req, Resp, C>(
        &self,
        method: &'static str,
        request: Req,
        codec: C,
        token: Option<&str>,
    ) -> Result<Resp, Status>
    where
        C: Codec<Encode = Req, Decode = Resp>,
        Req: Send + Sync + 'static,
        Resp: Send + Sync + 'static,
    {
        let mut grpc = tonic::client::Grpc::new(self.channel.clone());
        grpc.ready().await.unwrap();
        let mut request = tonic::Request::new(request);
        if let Some(token) = token {
            let value = format!("Bearer {token}").parse().unwrap();
            request.metadata_mut().insert("authorization", value);
        }
        let path = format!("/process.v1.ProcessService/{method}")
            .parse()
            .unwrap();
        grpc.unary(request, path, codec)
            .await
            .map(|r| r.into_inner())
    }

    async fn call<Req, Resp>(&self, method: &'static str, request: Req) -> Result<Resp, Status>
    where
        Req: prost::Message + Send + Sync + 'static,
        Resp: prost::Message + Default + Send + Sync + 'static,
    {
        let codec = tonic_prost::ProstCodec::default();
        self.call_as(method, request, codec, Some(TOKEN)).await
    }

    /// `Start`: its events, as they come.
    async fn run(&self, command: &[&str], pty: Option<Pty>) -> tonic::Streaming<StartResponse> {
        let mut grpc = tonic::client::Grpc::new(self.channel.clone());
        grpc.ready().await.unwrap();
        let mut request = tonic::Request::new(StartRequest {
            config: Some(config(command)),
            pty,
        });
        let value = format!("Bearer {TOKEN}").parse().unwrap();
        request.metadata_mut().insert("authorization", value);
        let path = "/process.v1.ProcessService/Start".parse().unwrap();
        let codec = tonic_prost::ProstCodec::default();
        grpc.server_streaming(request, path, codec)
            .await
            .unwrap()
            .into_inner()
    }
}

fn config(command: &[&str]) -> ProcessConfig {
    ProcessConfig {
        command: command.iter().map(|s| s.to_string()).collect(),
        ..Default::default()
    }
}

async fn next(events: &mut tonic::Streaming<StartResponse>) -> Event {
    let message = tokio::time::timeout(TIMEOUT, events.message())
        .await
        .expect("an event in time")
        .unwrap()
        .expect("the stream goes on");
    message.event.unwrap()
}

/// Output events until the exit: (output, exit code).
async fn until_exit(events: &mut tonic::Streaming<StartResponse>) -> (Vec<u8>, i32) {
    let mut output = Vec::new();
    loop {
        match next(events).await {
            Event::Stdout(data) | Event::Stderr(data) => output.extend_from_slice(&data),
            Event::Exit(exit) => return (output, exit.exit_code),
            Event::Init(_) => panic!("a second init"),
        }
    }
}

async fn pid_of(events: &mut tonic::Streaming<StartResponse>) -> i32 {
    match next(events).await {
        Event::Init(init) => init.process_id,
        other => panic!("not an init: {other:?}"),
    }
}

#[tokio::test]
async fn execute_and_start_run_commands_with_stdin_signals_a_terminal_and_exit_codes() {
    let fx = Fixture::start(&[]).await;
    let script = "echo out; echo err >&2; pwd; exit 3";
    let request = ExecuteRequest {
        config: Some(config(&["sh", "-c", script])),
    };
    let done: ExecuteResponse = fx.call("Execute", request).await.unwrap();
    assert_eq!(done.exit_code, 3);
    let root = fx._dir.path().canonicalize().unwrap();
    assert_eq!(done.stdout, format!("out\n{}\n", root.display()).as_bytes());
    assert_eq!(done.stderr, b"err\n");
    // The request's variables over the core of the daemon's environment, nothing more.
    let mut env = config(&[
        "sh",
        "-c",
        "echo \"$FOO|${PATH:+path}|${EXEC_SERVER_STATE_DIR:-}\"",
    ]);
    env.env_vars.insert("FOO".into(), "bar".into());
    let request = ExecuteRequest { config: Some(env) };
    let done: ExecuteResponse = fx.call("Execute", request).await.unwrap();
    assert_eq!(done.stdout, b"bar|path|\n");

    // stdin in pieces, then EOF.
    let mut cat = fx.run(&["cat"], None).await;
    let pid = pid_of(&mut cat).await;
    let input = |payload| WriteStdinRequest {
        process_id: pid,
        payload: Some(payload),
    };
    let _: Empty = fx
        .call("WriteStdin", input(Payload::Input("hello".into())))
        .await
        .unwrap();
    assert_eq!(next(&mut cat).await, Event::Stdout("hello".into()));
    let _: Empty = fx
        .call("WriteStdin", input(Payload::Eof(())))
        .await
        .unwrap();
    assert_eq!(until_exit(&mut cat).await, (Vec::new(), 0));

    // A signal to a running command.
    let mut sleeper = fx.run(&["sleep", "30"], None).await;
    let pid = pid_of(&mut sleeper).await;
    let signal = SendSignalRequest {
        process_id: pid,
        signal: Signal::Sigterm as i32,
    };
    let _: Empty = fx.call("SendSignal", signal).await.unwrap();
    assert_eq!(until_exit(&mut sleeper).await.1, 128 + 15);

    // Addressed to no running process: NOT_FOUND.
    let gone = fx.call::<_, Empty>("SendSignal", signal).await.unwrap_err();
    assert_eq!(gone.code(), Code::NotFound, "{gone:?}");
}

#[tokio::test]
async fn start_gives_a_terminal_of_the_size_asked_for_and_resizes_it() {
    let fx = Fixture::start(&[]).await;
    let pty = Pty { cols: 91, rows: 33 };
    let mut shell = fx
        .run(&["sh", "-c", "stty size; read x; stty size"], Some(pty))
        .await;
    let pid = pid_of(&mut shell).await;
    let mut seen = Vec::new();
    while !String::from_utf8_lossy(&seen).contains("33 91") {
        match next(&mut shell).await {
            Event::Stdout(data) => seen.extend_from_slice(&data),
            other => panic!("{other:?}"),
        }
    }
    let resize = ResizeTtyRequest {
        process_id: pid,
        cols: 120,
        rows: 40,
    };
    let _: Empty = fx.call("ResizeTTY", resize).await.unwrap();
    let _: Empty = fx.call("WriteStdin", input_to(pid, "\n")).await.unwrap();
    let (output, code) = until_exit(&mut shell).await;
    assert!(
        String::from_utf8_lossy(&output).contains("40 120"),
        "{output:?}"
    );
    assert_eq!(code, 0);
}

fn input_to(pid: i32, text: &'static str) -> WriteStdinRequest {
    WriteStdinRequest {
        process_id: pid,
        payload: Some(Payload::Input(text.into())),
    }
}

/// Sends raw bytes as a message, so a test can send what no generated client would.
#[derive(Clone, Copy, Default)]
struct RawCodec;

impl Codec for RawCodec {
    type Encode = Vec<u8>;
    type Decode = Vec<u8>;
    type Encoder = RawCodec;
    type Decoder = RawCodec;
    fn encoder(&mut self) -> RawCodec {
        RawCodec
    }
    fn decoder(&mut self) -> RawCodec {
        RawCodec
    }
}

impl Encoder for RawCodec {
    type Item = Vec<u8>;
    type Error = Status;
    fn encode(&mut self, item: Vec<u8>, dst: &mut EncodeBuf<'_>) -> Result<(), Status> {
        bytes::BufMut::put_slice(dst, &item);
        Ok(())
    }
}

impl Decoder for RawCodec {
    type Item = Vec<u8>;
    type Error = Status;
    fn decode(&mut self, src: &mut DecodeBuf<'_>) -> Result<Option<Vec<u8>>, Status> {
        use bytes::Buf as _;
        Ok(Some(src.copy_to_bytes(src.remaining()).to_vec()))
    }
}

#[tokio::test]
async fn malformed_protobuf_oversized_messages_bad_tokens_and_unknown_methods_are_refused() {
    let fx = Fixture::start(&[]).await;
    let raw = |method, bytes: Vec<u8>, token| fx.call_as(method, bytes, RawCodec, token);
    for (method, garbage) in [
        // A length-delimited field running past the end.
        ("Execute", vec![0x0a, 0xff, 0x01, 0x01]),
        // A varint that never ends.
        (
            "WriteStdin",
            vec![
                0x08, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff,
            ],
        ),
        // The wrong wire type for a message field (a varint for `config`).
        ("Start", vec![0x08, 0x01, 0x0a, 0x05]),
        // Field number 0.
        ("SendSignal", vec![0x00, 0x01]),
    ] {
        let refused = raw(method, garbage, Some(TOKEN)).await.unwrap_err();
        assert_eq!(refused.code(), Code::Internal, "{method}: {refused:?}");
        assert!(
            refused.message().contains("decode"),
            "{method}: {refused:?}"
        );
    }
    let huge = raw("WriteStdin", vec![0; 5 << 20], Some(TOKEN))
        .await
        .unwrap_err();
    assert_eq!(huge.code(), Code::OutOfRange, "{huge:?}");
    assert!(huge.message().contains("too large"), "{huge:?}");
    let execute = ExecuteRequest {
        config: Some(config(&["true"])),
    };
    let encoded = prost::Message::encode_to_vec(&execute);
    for token in [None, Some("wrong")] {
        let refused = raw("Execute", encoded.clone(), token).await.unwrap_err();
        assert_eq!(
            refused.code(),
            Code::Unauthenticated,
            "{token:?}: {refused:?}"
        );
    }
    let unknown = raw("Connect", encoded.clone(), Some(TOKEN))
        .await
        .unwrap_err();
    assert_eq!(unknown.code(), Code::Unimplemented, "{unknown:?}");
    // Well-formed but wrong: each an INVALID_ARGUMENT, nothing started.
    for (method, request) in [
        ("Execute", ExecuteRequest { config: None }),
        (
            "Execute",
            ExecuteRequest {
                config: Some(ProcessConfig {
                    cwd: Some("nowhere".into()),
                    ..config(&["true"])
                }),
            },
        ),
    ] {
        let refused = fx
            .call::<_, ExecuteResponse>(method, request)
            .await
            .unwrap_err();
        assert_eq!(refused.code(), Code::InvalidArgument, "{refused:?}");
    }
    let bad_signal = SendSignalRequest {
        process_id: 1,
        signal: 5,
    };
    let refused = fx
        .call::<_, Empty>("SendSignal", bad_signal)
        .await
        .unwrap_err();
    assert_eq!(refused.code(), Code::InvalidArgument, "{refused:?}");
    // The daemon still serves.
    let done: ExecuteResponse = fx.call("Execute", execute).await.unwrap();
    assert_eq!(done.exit_code, 0);
}

#[tokio::test]
async fn an_abandoned_execute_kills_its_command() {
    let fx = Fixture::start(&[]).await;
    // A duration no other process has, to find this one.
    let marker = "61.4321";
    let request = ExecuteRequest {
        config: Some(config(&["sleep", marker])),
    };
    let running =
        || (procfs_cmdlines().into_iter()).any(|cmdline| cmdline == format!("sleep\0{marker}\0"));
    let mut call = Box::pin(fx.call::<_, ExecuteResponse>("Execute", request));
    // Abandoned once the command runs.
    let started = std::time::Instant::now();
    while !running() {
        assert!(started.elapsed() < TIMEOUT, "the command never ran");
        tokio::select! {
            outcome = &mut call => panic!("Execute ended: {outcome:?}"),
            () = tokio::time::sleep(Duration::from_millis(20)) => {}
        }
    }
    drop(call);
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    while running() {
        assert!(
            std::time::Instant::now() < deadline,
            "the abandoned command still runs"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

fn procfs_cmdlines() -> Vec<String> {
    (std::fs::read_dir("/proc").unwrap().flatten())
        .filter_map(|entry| std::fs::read(entry.path().join("cmdline")).ok())
        .map(|bytes| String::from_utf8_lossy(&bytes).into_owned())
        .collect()
}

#[tokio::test]
async fn the_sandboxd_profile_confines_every_command() {
    let outside = tempfile::tempdir().unwrap();
    let granted = tempfile::tempdir().unwrap();
    let profile = serde_json::json!({"type": "managed", "network": "restricted", "file_system": {
    "type": "restricted", "entries": [
        entry(special("root"), "read"),
        entry(path(granted.path()), "write"),
    ]}});
    let profile_file = outside.path().join("profile.json");
    std::fs::write(&profile_file, profile.to_string()).unwrap();
    let fx = Fixture::start(&["--sandboxd-sandbox", profile_file.to_str().unwrap()]).await;
    let write = |dir: &std::path::Path| {
        let target = dir.join("written");
        let script = format!("echo x > {}", target.display());
        ExecuteRequest {
            config: Some(config(&["sh", "-c", &script])),
        }
    };
    let refused: ExecuteResponse = fx.call("Execute", write(outside.path())).await.unwrap();
    assert_ne!(refused.exit_code, 0, "{refused:?}");
    assert!(!outside.path().join("written").exists());
    let allowed: ExecuteResponse = fx.call("Execute", write(granted.path())).await.unwrap();
    assert_eq!(allowed.exit_code, 0, "{allowed:?}");
    assert!(granted.path().join("written").exists());
}

#[tokio::test]
async fn idle_connections_are_closed_at_the_deadline_and_never_keep_a_client_out() {
    let fx = Fixture::start(&["--upgrade-timeout", "2s"]).await;
    let address = fx.address.clone();
    // Many connections at once that never send a byte (more than a peer's places).
    let mut idle = Vec::new();
    for _ in 0..400 {
        idle.push(tokio::net::TcpStream::connect(&address).await.unwrap());
    }
    // A client still gets in, past them.
    let fresh = Channel::from_shared(format!("http://{address}"))
        .unwrap()
        .connect()
        .await
        .unwrap();
    let fx = Fixture {
        channel: fresh,
        ..fx
    };
    let request = ExecuteRequest {
        config: Some(config(&["true"])),
    };
    let done: ExecuteResponse = fx.call("Execute", request).await.unwrap();
    assert_eq!(done.exit_code, 0);
    // Every idle one is closed by the daemon, within the deadline and a margin.
    for mut stream in idle {
        use tokio::io::AsyncReadExt as _;
        let mut byte = [0u8; 1];
        let read = tokio::time::timeout(Duration::from_secs(5), stream.read(&mut byte)).await;
        assert!(
            matches!(read, Ok(Ok(0)) | Ok(Err(_))),
            "an idle connection stayed open"
        );
    }
}
