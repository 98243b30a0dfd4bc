//! `exec-server fs`: recursive copies both ways, resumed copies, and the remote-side file
//! operations, through pipes (where no progress bar is drawn).

use crate::cli::{cli, text};
use crate::common::{self, Daemon};
use std::path::Path;

fn tree(root: &Path) -> Vec<(String, Vec<u8>)> {
    let mut files = Vec::new();
    let mut pending = vec![root.to_path_buf()];
    while let Some(dir) = pending.pop() {
        for entry in std::fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            let name = path.strip_prefix(root).unwrap().display().to_string();
            if path.is_dir() {
                files.push((format!("{name}/"), Vec::new()));
                pending.push(path);
            } else {
                files.push((name, std::fs::read(&path).unwrap()));
            }
        }
    }
    files.sort();
    files
}

fn ok(output: std::process::Output) -> String {
    assert_eq!(output.status.code(), Some(0), "{output:?}");
    assert_eq!(text(&output.stderr), "", "quiet when piped: {output:?}");
    text(&output.stdout)
}

#[test]
fn fs_put_and_get_copy_trees_recursively() {
    let daemon = Daemon::start();
    let dir = common::scratch_dir();
    let source = dir.path().join("project");
    std::fs::create_dir_all(source.join("a/b")).unwrap();
    std::fs::create_dir_all(source.join("empty")).unwrap();
    std::fs::write(source.join("top.txt"), "top\n").unwrap();
    let big: Vec<u8> = (0..3_500_000u32).map(|i| (i * 13 % 251) as u8).collect();
    std::fs::write(source.join("a/b/big.bin"), &big).unwrap();
    let remote = dir.path().join("remote");
    let back = dir.path().join("back");
    std::fs::create_dir_all(&remote).unwrap();
    std::fs::create_dir_all(&back).unwrap();
    let (source_s, remote_s) = (source.to_str().unwrap(), remote.to_str().unwrap());

    // Into an existing directory, under the source's name, as `cp -r`.
    ok(cli(&daemon, &["fs", "put", "-r", source_s, remote_s], b""));
    assert_eq!(tree(&remote.join("project")), tree(&source));
    let copied = remote.join("project");
    ok(cli(
        &daemon,
        &[
            "fs",
            "get",
            "-r",
            copied.to_str().unwrap(),
            back.to_str().unwrap(),
        ],
        b"",
    ));
    assert_eq!(tree(&back.join("project")), tree(&source));
    let without_r = cli(
        &daemon,
        &[
            "fs",
            "get",
            copied.to_str().unwrap(),
            back.to_str().unwrap(),
        ],
        b"",
    );
    assert_eq!(without_r.status.code(), Some(255));
    assert!(text(&without_r.stderr).contains("is a directory (use -r"));
}

/// `--resume` sends only what the target lacks: shown by a target whose head differs from
/// the source's, which a resumed copy keeps.
#[test]
fn fs_resume_finishes_a_partial_copy_both_ways() {
    let daemon = Daemon::start();
    let dir = common::scratch_dir();
    let data: Vec<u8> = (0..2_500_000u32).map(|i| (i * 7 % 253) as u8).collect();
    let source = dir.path().join("source.bin");
    std::fs::write(&source, &data).unwrap();
    let mut partial = vec![b'#'; 1_000_000];
    let expected: Vec<u8> = partial.iter().chain(&data[1_000_000..]).copied().collect();

    let remote = dir.path().join("remote.bin");
    std::fs::write(&remote, &partial).unwrap();
    let (source_s, remote_s) = (source.to_str().unwrap(), remote.to_str().unwrap());
    ok(cli(
        &daemon,
        &["fs", "put", "--resume", source_s, remote_s],
        b"",
    ));
    assert!(std::fs::read(&remote).unwrap() == expected);

    let local = dir.path().join("local.bin");
    partial.truncate(500_000);
    std::fs::write(&local, &partial).unwrap();
    let expected: Vec<u8> = partial.iter().chain(&data[500_000..]).copied().collect();
    ok(cli(
        &daemon,
        &["fs", "get", "--resume", source_s, local.to_str().unwrap()],
        b"",
    ));
    assert!(std::fs::read(&local).unwrap() == expected);
    // Complete already: nothing to do. Without --resume: copied anew.
    ok(cli(
        &daemon,
        &["fs", "get", "--resume", source_s, local.to_str().unwrap()],
        b"",
    ));
    assert!(std::fs::read(&local).unwrap() == expected);
    ok(cli(
        &daemon,
        &["fs", "get", source_s, local.to_str().unwrap()],
        b"",
    ));
    assert!(std::fs::read(&local).unwrap() == data);
}

#[test]
fn fs_stat_cp_mv_rm_and_watch() {
    let daemon = Daemon::start();
    let dir = common::scratch_dir();
    let root = dir.path();
    std::fs::create_dir_all(root.join("d/sub")).unwrap();
    std::fs::write(root.join("d/sub/f"), "12345").unwrap();
    let p = |name: &str| root.join(name).to_str().unwrap().to_owned();

    let stat = ok(cli(&daemon, &["fs", "stat", &p("d/sub/f")], b""));
    assert!(
        stat.starts_with("type: file\nsize: 5\nmodified: "),
        "{stat}"
    );
    let stat = ok(cli(&daemon, &["fs", "stat", &p("d")], b""));
    assert!(stat.starts_with("type: directory\n"), "{stat}");
    std::os::unix::fs::symlink("d/sub/f", root.join("link")).unwrap();
    let stat = ok(cli(&daemon, &["fs", "stat", &p("link")], b""));
    assert!(stat.starts_with("type: symlink\nsize: 5\n"), "{stat}");
    std::fs::remove_file(root.join("link")).unwrap();

    ok(cli(&daemon, &["fs", "cp", "-r", &p("d"), &p("copy")], b""));
    assert_eq!(
        std::fs::read_to_string(root.join("copy/sub/f")).unwrap(),
        "12345"
    );
    ok(cli(&daemon, &["fs", "mv", &p("copy"), &p("moved")], b""));
    assert!(!root.join("copy").exists() && root.join("moved/sub/f").exists());
    let refused = cli(&daemon, &["fs", "rm", &p("moved")], b"");
    assert_eq!(refused.status.code(), Some(255), "a directory needs -r");
    ok(cli(&daemon, &["fs", "rm", "-r", &p("moved")], b""));
    assert!(!root.join("moved").exists());
    assert_eq!(
        cli(&daemon, &["fs", "rm", &p("moved")], b"").status.code(),
        Some(255)
    );
    ok(cli(&daemon, &["fs", "rm", "-f", &p("moved")], b""));

    // watch prints changes as they happen, until it is ended.
    let mut watch = std::process::Command::new(env!("CARGO_BIN_EXE_exec-server"))
        .args(["fs", "watch", "-r", "--url", &daemon.url, &p("d")])
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let stdout = watch.stdout.take().unwrap();
    let lines = std::thread::spawn(move || {
        use std::io::BufRead as _;
        std::io::BufReader::new(stdout)
            .lines()
            .map_while(Result::ok)
            .find(|line| line.ends_with("/d/sub/new"))
    });
    // Until the watch is in place, a file created is missed: create files until one is seen.
    for i in 0.. {
        if lines.is_finished() || i == 200 {
            break;
        }
        std::fs::write(root.join("d/sub/new"), format!("{i}")).unwrap();
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    watch.kill().unwrap();
    watch.wait().unwrap();
    let line = lines.join().unwrap().expect("a change of d/sub/new");
    assert!(
        line.starts_with("create ") || line.starts_with("modify "),
        "{line}"
    );
}
