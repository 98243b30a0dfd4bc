//! codex's own agent as the client (issue 40): the stock `codex exec --json` (npm
//! `@openai/codex` at [`CODEX_VERSION`]) runs a scripted turn against a scripted Responses model
//! on loopback ([`model`]), once with this daemon as its exec-server and once with codex's own
//! `codex exec-server`, and the two runs must agree on what the model was told, on the items
//! codex printed and on what landed on disk.
//!
//! A [`Turn`] is the script plus how codex reaches the executor (the environment variable,
//! `environments.toml` with a `url`, or with a `program` spoken to over stdio), the sandbox mode,
//! whether the daemon has a `TMPDIR`, and the files the work directory starts with. Both runs get
//! fresh, identical directories; paths are replaced by placeholders before comparing, and the
//! figures that differ from run to run (wall time, chunk ids, session numbers) are dropped.
//! A new capability adds a scenario in one of the submodules.

mod commands;
mod config;
mod network;
mod patches;
mod sandboxes;
mod skills;
mod snapshots;
mod transports;
mod watches;

use crate::common::codex_peer::{codex_binary, CodexPeer};
use crate::common::Daemon;
use codex_scripted_model::{Model, Step};
use serde_json::Value;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

/// Methods codex sends on a timer, as often as the turn lasts: compared by name only.
const POLLED: &[&str] = &["fs/getMetadata"];

/// A whole `codex exec` turn may take this long.
const TURN_TIMEOUT: Duration = Duration::from_secs(120);

/// codex's `sandbox_mode`.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Sandbox {
    FullAccess,
    ReadOnly,
    WorkspaceWrite { network: bool },
}

/// How codex reaches the executor.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Reach {
    /// `CODEX_EXEC_SERVER_URL`.
    EnvUrl,
    /// `environments.toml` with `url`.
    TomlUrl,
    /// `environments.toml` with `program` and `--listen stdio`: codex spawns the executor.
    TomlProgram,
}

/// Which executor a run uses.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Executor {
    Ours,
    Codex,
}

pub struct Turn {
    pub steps: Vec<Step>,
    pub sandbox: Sandbox,
    pub reach: Reach,
    /// The executor's `TMPDIR`: none, as under systemd and in most containers, by default.
    pub tmpdir: bool,
    /// Files the work directory starts with (path relative to it, contents).
    pub files: Vec<(&'static str, Vec<u8>)>,
    /// Cut every executor connection this long after the turn starts (a proxy in between).
    pub cut_after: Option<Duration>,
    /// How a command's output splits between the calls that read it depends on timing: the
    /// runs are compared on the whole output of each command (codex's items) instead.
    pub timing_dependent: bool,
    /// Count the methods codex sends the executor whose names start with this (a relay in
    /// between), and compare them too.
    pub record_methods: Option<&'static str>,
    /// Count these params too, in the methods recorded, when set ([`Recorder::start`]).
    ///
    /// [`Recorder::start`]: crate::support::recorder::Recorder::start
    pub record_fields: &'static [&'static str],
    /// The executor's own codex `config.toml` (in its `CODEX_HOME`, which is empty otherwise).
    pub executor_config: Option<&'static str>,
    /// Files the executor's `CODEX_HOME` starts with (path relative to it, contents).
    pub executor_files: Vec<(&'static str, Vec<u8>)>,
    /// The executor's login profile (`~/.bashrc`, under a `HOME` of the run's own).
    pub login_profile: Option<&'static str>,
    /// More of codex's `config.toml` (tables after the harness's own).
    pub config: Option<&'static str>,
}

impl Turn {
    pub fn new(steps: Vec<Step>) -> Self {
        Self {
            steps,
            sandbox: Sandbox::FullAccess,
            reach: Reach::EnvUrl,
            tmpdir: false,
            files: Vec::new(),
            cut_after: None,
            timing_dependent: false,
            record_methods: None,
            record_fields: &[],
            executor_config: None,
            executor_files: Vec::new(),
            login_profile: None,
            config: None,
        }
    }

    /// The executor runs with `HOME` a directory whose `.bashrc` is `profile`.
    pub fn login_profile(mut self, profile: &'static str) -> Self {
        self.login_profile = Some(profile);
        self
    }

    pub fn config(mut self, config: &'static str) -> Self {
        self.config = Some(config);
        self
    }

    pub fn executor_config(mut self, config: &'static str) -> Self {
        self.executor_config = Some(config);
        self
    }

    /// A file in the executor's `CODEX_HOME` (a skill under `skills/`, say).
    pub fn executor_file(mut self, path: &'static str, contents: impl Into<Vec<u8>>) -> Self {
        self.executor_files.push((path, contents.into()));
        self
    }

    /// Counts the methods starting with `prefix` ([`Turn::record_methods`]).
    pub fn recording_methods(mut self, prefix: &'static str) -> Self {
        self.record_methods = Some(prefix);
        self
    }

    /// Counts `fields` of the recorded methods too ([`Turn::record_fields`]).
    pub fn recording_fields(mut self, fields: &'static [&'static str]) -> Self {
        self.record_fields = fields;
        self
    }

    pub fn timing_dependent(mut self) -> Self {
        self.timing_dependent = true;
        self
    }

    pub fn sandbox(mut self, sandbox: Sandbox) -> Self {
        self.sandbox = sandbox;
        self
    }

    pub fn reach(mut self, reach: Reach) -> Self {
        self.reach = reach;
        self
    }

    pub fn with_tmpdir(mut self) -> Self {
        self.tmpdir = true;
        self
    }

    pub fn file(mut self, path: &'static str, contents: impl Into<Vec<u8>>) -> Self {
        self.files.push((path, contents.into()));
        self
    }

    pub fn cut_after(mut self, delay: Duration) -> Self {
        self.cut_after = Some(delay);
        self
    }
}

/// What one run produced, with paths and per-run figures replaced.
#[derive(Debug, PartialEq)]
pub struct Outcome {
    /// What codex told the model for each step (None: the step was never answered).
    pub told: Vec<Option<String>>,
    /// The completed items codex printed (`command_execution`, `file_change`, ...), ids dropped.
    pub items: Vec<Value>,
    /// The messages before the task that carry the project's instructions (AGENTS.md).
    pub project_docs: Vec<String>,
    /// The messages before the task that list skills (each with its `SKILL.md`).
    pub skill_docs: Vec<String>,
    /// Every file under the work directory and the outside directory, with its contents.
    pub files: BTreeMap<String, String>,
    /// Whether `codex exec` exited 0.
    pub succeeded: bool,
    /// How often codex sent each method to the executor, when the turn records them
    /// ([`Turn::record_methods`]).
    pub methods: Option<BTreeMap<String, usize>>,
}

/// Runs `turn` on both executors and asserts the outcomes are the same; returns ours.
pub async fn assert_same(turn: &Turn) -> Outcome {
    let ours = run(turn, Executor::Ours).await;
    let codex = run(turn, Executor::Codex).await;
    if !turn.timing_dependent {
        for (step, (ours, codex)) in ours.told.iter().zip(&codex.told).enumerate() {
            assert_eq!(
                ours, codex,
                "step {step} ({:?}): what the model was told on this daemon (left) and on \
                 codex's exec-server (right)",
                turn.steps[step]
            );
        }
    }
    assert_eq!(
        ours.items, codex.items,
        "codex's items: ours (left), codex's (right)"
    );
    assert_eq!(
        ours.files, codex.files,
        "the files: ours (left), codex's (right)"
    );
    assert_eq!(
        ours.project_docs, codex.project_docs,
        "AGENTS.md as the model saw it"
    );
    assert_eq!(
        ours.skill_docs, codex.skill_docs,
        "the skills as the model saw them"
    );
    assert_eq!(ours.succeeded, codex.succeeded, "codex exec's exit");
    // The same methods; their counts within two of each other, except for the polls of paths
    // (`fs/getMetadata`), whose number follows the turn's timer-driven rhythm, which a loaded
    // machine stretches (19 against 13 seen): for them, that both were asked is what compares.
    let names = |methods: &Option<BTreeMap<String, usize>>| {
        methods
            .as_ref()
            .map(|m| m.keys().cloned().collect::<Vec<_>>())
    };
    assert_eq!(
        names(&ours.methods),
        names(&codex.methods),
        "what codex asked: of this daemon ({:?}), of its own exec-server ({:?})",
        ours.methods,
        codex.methods
    );
    for ((method, ours_count), codex_count) in ours
        .methods
        .iter()
        .flatten()
        .zip(codex.methods.iter().flatten().map(|(_, count)| count))
    {
        if POLLED.contains(&method.as_str()) {
            continue;
        }
        assert!(
            ours_count.abs_diff(*codex_count) <= 2,
            "{method}: {ours_count} asked of this daemon, {codex_count} of codex's own"
        );
    }
    ours
}

/// The directories of one run: the work directory codex runs in, a directory outside it that
/// sandboxed commands try to write, and codex's home. Under /var/tmp: codex refuses a home under
/// /tmp, and /tmp is writable in some sandbox modes.
struct Dirs {
    root: tempfile::TempDir,
}

impl Dirs {
    fn new(turn: &Turn) -> Self {
        let root = tempfile::tempdir_in("/var/tmp").expect("run directory");
        for dir in [
            "work",
            "outside",
            "home",
            "tmp",
            "executor-home",
            "user-home",
        ] {
            std::fs::create_dir(root.path().join(dir)).unwrap();
        }
        let dirs = Self { root };
        if let Some(profile) = turn.login_profile {
            std::fs::write(dirs.path("user-home").join(".bashrc"), profile).unwrap();
        }
        if let Some(config) = turn.executor_config {
            std::fs::write(dirs.path("executor-home").join("config.toml"), config).unwrap();
        }
        for (path, contents) in &turn.executor_files {
            let path = dirs.path("executor-home").join(path);
            std::fs::create_dir_all(path.parent().unwrap()).unwrap();
            std::fs::write(path, contents).unwrap();
        }
        for (path, contents) in &turn.files {
            let path = dirs.work().join(path);
            std::fs::create_dir_all(path.parent().unwrap()).unwrap();
            std::fs::write(path, contents).unwrap();
        }
        dirs
    }

    fn path(&self, name: &str) -> PathBuf {
        self.root.path().join(name)
    }

    fn work(&self) -> PathBuf {
        self.path("work")
    }

    /// Replaces this run's paths by placeholders.
    fn normalize(&self, text: &str) -> String {
        let root = self.root.path().to_str().unwrap();
        text.replace(root, "{run}")
    }
}

/// `{run}` in a step's command or patch stands for the run's directory (its `work` and `outside`
/// subdirectories, say).
fn script_for(turn: &Turn, dirs: &Dirs) -> Vec<Step> {
    let root = dirs.root.path().to_str().unwrap();
    let fill = |text: &String| text.replace("{run}", root);
    turn.steps
        .iter()
        .map(|step| match step {
            Step::Shell { cmd, yield_ms, tty } => Step::Shell {
                cmd: fill(cmd),
                yield_ms: *yield_ms,
                tty: *tty,
            },
            Step::Patch(patch) => Step::Patch(fill(patch)),
            Step::ViewImage(path) => Step::ViewImage(fill(path)),
            other => other.clone(),
        })
        .collect()
}

/// The executor of one run, kept alive until the run ends.
enum Running {
    Ours(Daemon),
    Codex(CodexPeer),
    /// Spawned by codex itself over stdio.
    Spawned,
}

impl Running {
    fn start(turn: &Turn, executor: Executor, dirs: &Dirs) -> Self {
        if turn.reach == Reach::TomlProgram {
            return Self::Spawned;
        }
        let tmpdir = dirs.path("tmp");
        let executor_home = dirs.path("executor-home");
        let user_home = dirs.path("user-home");
        // Each executor reads its own codex home (environmentConfig/read): this run's.
        let mut env = vec![("CODEX_HOME", executor_home.to_str().unwrap())];
        if turn.tmpdir {
            env.push(("TMPDIR", tmpdir.to_str().unwrap()));
        }
        if turn.login_profile.is_some() {
            env.push(("HOME", user_home.to_str().unwrap()));
        }
        match executor {
            Executor::Ours => {
                let mut command = Daemon::command(env!("CARGO_BIN_EXE_exec-server"), &[], &env);
                // Outside /tmp, which codex's workspace-write profile makes writable: the
                // daemon refuses a grant that would expose its own state.
                command.env(crate::common::STATE_DIR_VAR, dirs.path("state"));
                if !turn.tmpdir {
                    command.env_remove("TMPDIR");
                }
                Self::Ours(Daemon::launch(command))
            }
            Executor::Codex => {
                let removed: &[&str] = if turn.tmpdir { &[] } else { &["TMPDIR"] };
                Self::Codex(CodexPeer::start_without(&[], &env, removed))
            }
        }
    }

    fn url(&self) -> Option<&str> {
        match self {
            Self::Ours(daemon) => Some(&daemon.url),
            Self::Codex(peer) => Some(&peer.url),
            Self::Spawned => None,
        }
    }
}

/// One `codex exec --json` turn of `turn` against `executor`.
pub async fn run(turn: &Turn, executor: Executor) -> Outcome {
    let dirs = Dirs::new(turn);
    let model = Model::start(script_for(turn, &dirs)).await;
    let running = Running::start(turn, executor, &dirs);
    let between = Between::start(turn, &running).await;
    let url = between.url().or(running.url());
    write_config(turn, executor, &dirs, &model, url);
    let mut command = tokio::process::Command::new(codex_binary());
    command
        .args(["exec", "--json", "--skip-git-repo-check", "-C"])
        .arg(dirs.work())
        .arg("run the plan")
        .env("CODEX_HOME", dirs.path("home"))
        .env("CODEX_API_KEY", "dummy")
        .env_remove("CODEX_EXEC_SERVER_URL")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true);
    if turn.reach == Reach::EnvUrl {
        command.env("CODEX_EXEC_SERVER_URL", url.expect("a listening executor"));
    }
    let child = command.spawn().expect("start codex exec");
    if let (Between::Proxy(proxy), Some(delay)) = (&between, turn.cut_after) {
        tokio::time::sleep(delay).await;
        proxy.cut();
    }
    let output = tokio::time::timeout(TURN_TIMEOUT, child.wait_with_output())
        .await
        .unwrap_or_else(|_| panic!("codex exec ({executor:?}) did not finish"))
        .expect("codex exec ran");
    let stdout = String::from_utf8_lossy(&output.stdout);
    let items = stdout
        .lines()
        .filter_map(|line| serde_json::from_str::<Value>(line).ok())
        .filter(|event| event["type"] == "item.completed")
        .map(|event| item(&event["item"], &dirs))
        .collect();
    drop(running);
    Outcome {
        told: model
            .outputs()
            .into_iter()
            .map(|told| told.map(|text| normalize_told(&dirs.normalize(&text))))
            .collect(),
        items,
        project_docs: model
            .context()
            .iter()
            .filter(|text| text.contains("AGENTS.md"))
            .map(|text| dirs.normalize(text))
            .collect(),
        skill_docs: model
            .context()
            .iter()
            .filter(|text| text.contains("SKILL.md"))
            .map(|text| dirs.normalize(text))
            .collect(),
        files: files(&dirs),
        succeeded: output.status.success(),
        methods: match &between {
            Between::Recorder(recorder) => Some(recorder.methods()),
            _ => None,
        },
    }
}

/// What sits between codex and a listening executor.
enum Between {
    Nothing,
    /// Cuts the connections ([`Turn::cut_after`]).
    Proxy(crate::support::proxy::Proxy),
    /// Counts the methods ([`Turn::record_methods`]).
    Recorder(crate::support::recorder::Recorder),
}

impl Between {
    async fn start(turn: &Turn, running: &Running) -> Self {
        match (running.url(), turn.cut_after, turn.record_methods) {
            (Some(url), Some(_), _) => Self::Proxy(crate::support::proxy::Proxy::start(url).await),
            (Some(url), None, Some(prefix)) => {
                let recorder =
                    crate::support::recorder::Recorder::start(url, prefix, turn.record_fields);
                Self::Recorder(recorder.await)
            }
            _ => Self::Nothing,
        }
    }

    fn url(&self) -> Option<&str> {
        match self {
            Self::Nothing => None,
            Self::Proxy(proxy) => Some(&proxy.url),
            Self::Recorder(recorder) => Some(&recorder.url),
        }
    }
}

/// `config.toml` (the scripted model, the sandbox mode) and, for the `environments.toml` ways
/// of reaching the executor, that file.
fn write_config(turn: &Turn, executor: Executor, dirs: &Dirs, model: &Model, url: Option<&str>) {
    let (mode, network) = match turn.sandbox {
        Sandbox::FullAccess => ("danger-full-access", false),
        Sandbox::ReadOnly => ("read-only", false),
        Sandbox::WorkspaceWrite { network } => ("workspace-write", network),
    };
    let config = format!(
        "model = \"gpt-5.5\"\nmodel_provider = \"fake\"\napproval_policy = \"never\"\n\
         sandbox_mode = \"{mode}\"\n\n[sandbox_workspace_write]\nnetwork_access = {network}\n\n\
         [model_providers.fake]\nname = \"fake\"\nbase_url = \"{}\"\nwire_api = \"responses\"\n\
         requires_openai_auth = false\nsupports_websockets = false\nrequest_max_retries = 0\n\
         stream_max_retries = 0\n",
        model.base_url
    );
    let config = match turn.config {
        Some(more) => format!("{config}\n{more}"),
        None => config,
    };
    let home = dirs.path("home");
    std::fs::write(home.join("config.toml"), config).unwrap();
    let entry = match turn.reach {
        Reach::EnvUrl => return,
        Reach::TomlUrl => format!("url = \"{}\"", url.expect("a listening executor")),
        Reach::TomlProgram => {
            let (program, args) = match executor {
                Executor::Ours => (
                    PathBuf::from(env!("CARGO_BIN_EXE_exec-server")),
                    "\"--listen\", \"stdio\", \"--state-dir\", \"none\"",
                ),
                Executor::Codex => (codex_binary(), "\"exec-server\", \"--listen\", \"stdio\""),
            };
            format!("program = \"{}\"\nargs = [{args}]", program.display())
        }
    };
    let environments = format!(
        "default = \"dev\"\ninclude_local = false\n\n[[environments]]\nid = \"dev\"\n{entry}\n"
    );
    std::fs::write(home.join("environments.toml"), environments).unwrap();
}

/// A completed item with its id dropped and its paths replaced.
fn item(item: &Value, dirs: &Dirs) -> Value {
    let mut item = item.clone();
    if let Some(object) = item.as_object_mut() {
        object.remove("id");
    }
    let text = dirs.normalize(&item.to_string());
    serde_json::from_str(&text).unwrap()
}

/// Drops the lines whose figures differ from run to run and numbers codex's sessions.
fn normalize_told(text: &str) -> String {
    text.lines()
        .filter(|line| !line.starts_with("Chunk ID: ") && !line.starts_with("Wall time: "))
        .map(|line| match line.split_once("session ID ") {
            Some((head, _)) => format!("{head}session ID N"),
            None => line.to_owned(),
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// Every regular file under `work` and `outside`, by path relative to the run directory; a
/// large or binary file by its length and a digest of its bytes.
fn files(dirs: &Dirs) -> BTreeMap<String, String> {
    let mut files = BTreeMap::new();
    for top in ["work", "outside"] {
        collect(&dirs.path(top), top, &mut files);
    }
    files
}

fn collect(dir: &Path, prefix: &str, files: &mut BTreeMap<String, String>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        let name = format!("{prefix}/{}", entry.file_name().to_string_lossy());
        let path = entry.path();
        if path.is_dir() && !path.is_symlink() {
            files.insert(format!("{name}/"), String::new());
            collect(&path, &name, files);
        } else if let Ok(bytes) = std::fs::read(&path) {
            let contents = match String::from_utf8(bytes.clone()) {
                Ok(text) if text.len() <= 4096 => text,
                _ => format!("{} bytes, fnv {:016x}", bytes.len(), fnv(&bytes)),
            };
            files.insert(name, contents);
        }
    }
}

/// FNV-1a: enough to tell two files' contents apart in a test.
fn fnv(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |hash, byte| {
        (hash ^ u64::from(*byte)).wrapping_mul(0x0100_0000_01b3)
    })
}
