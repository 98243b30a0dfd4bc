//! A throwaway OpenSSH server on a loopback port, with its own host and user keys in a temp
//! dir, as the baseline a remote exec is usually compared with.

use crate::packages::{self, which};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

pub struct Sshd {
    child: Child,
    dir: tempfile::TempDir,
    port: u16,
}

const SSHD: &str = "/usr/sbin/sshd";

impl Sshd {
    /// Starts sshd, installing OpenSSH from the distribution if it is missing and we are root.
    pub fn start() -> Result<Self, String> {
        packages::ensure(&["openssh-server", "openssh-client"], || {
            Path::new(SSHD).exists() && which("ssh").is_some()
        })?;
        let dir = tempfile::tempdir().map_err(|e| e.to_string())?;
        for key in ["host", "user"] {
            let status = Command::new("ssh-keygen")
                .args(["-q", "-t", "ed25519", "-N", "", "-f"])
                .arg(dir.path().join(key))
                .status()
                .map_err(|e| format!("ssh-keygen: {e}"))?;
            if !status.success() {
                return Err("ssh-keygen failed".into());
            }
        }
        std::fs::copy(
            dir.path().join("user.pub"),
            dir.path().join("authorized_keys"),
        )
        .map_err(|e| e.to_string())?;
        let port = free_port()?;
        let config = format!(
            "Port {port}\nListenAddress 127.0.0.1\nHostKey {d}/host\nAuthorizedKeysFile {d}/authorized_keys\n\
             PidFile {d}/sshd.pid\nUsePAM no\nStrictModes no\nPermitRootLogin yes\n\
             PasswordAuthentication no\nKbdInteractiveAuthentication no\nLogLevel ERROR\n",
            d = dir.path().display()
        );
        std::fs::write(dir.path().join("sshd_config"), config).map_err(|e| e.to_string())?;
        // sshd insists on its privilege separation directory.
        let _ = std::fs::create_dir_all("/run/sshd");
        let child = Command::new(SSHD)
            .args(["-D", "-e", "-f"])
            .arg(dir.path().join("sshd_config"))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .map_err(|e| format!("cannot start sshd: {e}"))?;
        let sshd = Self { child, dir, port };
        let deadline = Instant::now() + Duration::from_secs(10);
        while !sshd
            .command("true", false)
            .status()
            .is_ok_and(|s| s.success())
        {
            if Instant::now() > deadline {
                return Err("sshd did not accept a login".into());
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        Ok(sshd)
    }

    /// `ssh localhost <remote>`; with `master`, through a persistent ControlMaster connection.
    pub fn command(&self, remote: &str, master: bool) -> Command {
        let mut command = Command::new("ssh");
        command
            .args(["-F", "/dev/null", "-p", &self.port.to_string(), "-i"])
            .arg(self.dir.path().join("user"))
            .args([
                "-o",
                "StrictHostKeyChecking=no",
                "-o",
                "UserKnownHostsFile=/dev/null",
                "-o",
                "BatchMode=yes",
                "-o",
                "LogLevel=ERROR",
            ]);
        if master {
            command.args([
                "-o",
                "ControlMaster=auto",
                "-o",
                &format!("ControlPath={}", self.control_path().display()),
                "-o",
                "ControlPersist=300",
            ]);
        }
        command
            .args(["127.0.0.1", remote])
            .stdin(Stdio::null())
            .stderr(Stdio::null());
        command
    }

    fn control_path(&self) -> PathBuf {
        self.dir.path().join("cm")
    }
}

impl Drop for Sshd {
    fn drop(&mut self) {
        let _ = Command::new("ssh")
            .args([
                "-o",
                &format!("ControlPath={}", self.control_path().display()),
            ])
            .args(["-O", "exit", "127.0.0.1"])
            .stderr(Stdio::null())
            .status();
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn free_port() -> Result<u16, String> {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").map_err(|e| e.to_string())?;
    Ok(listener.local_addr().map_err(|e| e.to_string())?.port())
}
