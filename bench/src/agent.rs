//! The codex agent row (issue 40): the stock `codex exec` runs one scripted turn of
//! [`COMMANDS`] commands and [`PATCHES`] patches under workspace-write against a scripted model
//! on loopback, with this daemon as its exec-server and with codex's own, interleaved run by run;
//! the figure is the turn's wall time, codex's start to its exit.

use crate::codex::CodexServer;
use crate::harness::{stats, Results};
use crate::report::Row;
use codex_scripted_model::{Model, Step};
use std::process::Stdio;
use std::time::{Duration, Instant};

const COMMANDS: usize = 20;
const PATCHES: usize = 5;

/// The turn: commands that read, write and list the workspace, and patches that add and update
/// files in it, alternating as an agent's turn does.
fn script() -> Vec<Step> {
    let mut steps = Vec::new();
    for n in 0..COMMANDS {
        steps.push(Step::sh(match n % 4 {
            0 => format!("echo step {n} > file{n}.txt && cat file{n}.txt"),
            1 => "ls -la".to_owned(),
            2 => format!("seq 1 {} | tail -n 3", 1000 * (n + 1)),
            _ => "grep -rn step . | head -n 5".to_owned(),
        }));
        if n % (COMMANDS / PATCHES) == 0 {
            let p = n / (COMMANDS / PATCHES);
            steps.push(Step::patch(&format!(
                "*** Add File: patched/p{p}.txt\n+patch {p}\n"
            )));
        }
    }
    steps
}

/// One turn's wall time against the exec-server at `url`.
async fn turn(codex: &std::path::Path, url: &str) -> anyhow::Result<Duration> {
    let dir = tempfile::tempdir_in("/var/tmp")?;
    let (home, work) = (dir.path().join("home"), dir.path().join("work"));
    std::fs::create_dir(&home)?;
    std::fs::create_dir(&work)?;
    let model = Model::start(script()).await;
    std::fs::write(
        home.join("config.toml"),
        format!(
            "model = \"gpt-5.5\"\nmodel_provider = \"fake\"\napproval_policy = \"never\"\n\
             sandbox_mode = \"workspace-write\"\n\n[model_providers.fake]\nname = \"fake\"\n\
             base_url = \"{}\"\nwire_api = \"responses\"\nrequires_openai_auth = false\n\
             supports_websockets = false\nrequest_max_retries = 0\nstream_max_retries = 0\n",
            model.base_url
        ),
    )?;
    let started = Instant::now();
    let output = tokio::process::Command::new(codex)
        .args(["exec", "--json", "--skip-git-repo-check", "-C"])
        .arg(&work)
        .arg("run the plan")
        .env("CODEX_HOME", &home)
        .env("CODEX_API_KEY", "dummy")
        .env("CODEX_EXEC_SERVER_URL", url)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .kill_on_drop(true)
        .output()
        .await?;
    let elapsed = started.elapsed();
    let answered = model.outputs().iter().filter(|told| told.is_some()).count();
    anyhow::ensure!(
        output.status.success() && answered == COMMANDS + PATCHES,
        "codex exec against {url}: {}, {answered} of {} calls answered",
        output.status,
        COMMANDS + PATCHES
    );
    anyhow::ensure!(
        work.join("patched/p4.txt").exists(),
        "the turn's last patch did not land"
    );
    Ok(elapsed)
}

/// Measures `runs` turns on each executor, interleaved.
pub(crate) async fn compare(ours_url: &str, runs: usize, r: &mut Results) {
    let codex = match CodexServer::start() {
        Ok(codex) => codex,
        Err(why) => {
            r.note("codex_agent_turn_ms", why);
            return;
        }
    };
    let (mut ours, mut theirs) = (Vec::new(), Vec::new());
    for _ in 0..runs {
        for (url, samples) in [(ours_url, &mut ours), (codex.url.as_str(), &mut theirs)] {
            match turn(codex.binary(), url).await {
                Ok(elapsed) => samples.push(elapsed.as_secs_f64() * 1e3),
                Err(err) => {
                    r.note("codex_agent_turn_ms", format!("{err:#}"));
                    return;
                }
            }
        }
    }
    r.put("codex_agent_turn_ms", Some(stats(&mut ours).0));
    r.put("codex_agent_turn_codex_ms", Some(stats(&mut theirs).0));
    r.ratio(
        "codex_agent_turn_vs_codex",
        "codex_agent_turn_ms",
        "codex_agent_turn_codex_ms",
    );
}

pub(crate) const ROWS: &[Row] = &[
    Row {
        what: "the codex agent (`codex exec`, scripted model): a workspace-write turn of 20 commands and 5 patches, wall time, ms",
        ours: "codex_agent_turn_ms",
        baselines: &[("on codex's exec-server", "codex_agent_turn_codex_ms"), ("× codex", "codex_agent_turn_vs_codex")],
        target: "≤ 0.9× codex",
        met: |r| Some(r.get("codex_agent_turn_vs_codex")? <= 0.9),
    },
];
