"""The stock k8s-agent-sandbox SDK (SandboxDirectConnectionConfig, the legacy runtime API)
against the fleet through the router.

The SDK's SandboxClient cannot attach by URL: creating or finding a sandbox always goes through
the Kubernetes API (a SandboxClaim, then the Sandbox it binds; a kubeconfig is loaded). So these
tests build the SDK's own `Sandbox` with a stand-in for its Kubernetes helper, whose only call
here is `get_sandbox(name, namespace)`: the Sandbox object's `metadata.annotations` (the pod
name, absent: the sandbox's name is used) and `status.podIPs`/`serviceFQDN` (absent in direct
mode). Everything from `sandbox.commands`/`sandbox.files` down to the HTTP requests is the
SDK's."""

from concurrent.futures import ThreadPoolExecutor

import pytest
from k8s_agent_sandbox.models import SandboxDirectConnectionConfig
from k8s_agent_sandbox.sandbox import Sandbox

from conftest import SANDBOXES, TOKEN


class SandboxObjects:
    """Stands in for the SDK's K8sHelper: what the API server would answer for a Sandbox."""

    def get_sandbox(self, name, namespace):
        return {"metadata": {"name": name, "namespace": namespace}, "status": {}}


def sandbox(router, name, token=TOKEN):
    config = SandboxDirectConnectionConfig(
        api_url=router.url,
        # The router drops Authorization: the token travels in X-Access-Token.
        extra_headers={"X-Access-Token": token, "Authorization": "Bearer not-forwarded"},
    )
    return Sandbox(claim_name=name, sandbox_id=name, namespace="default",
                   connection_config=config, k8s_helper=SandboxObjects())


def test_commands_reach_every_sandbox_at_once(router):
    def run(index):
        result = sandbox(router, f"sandbox-{index}").commands.run("cat id")
        return result.stdout, result.exit_code

    with ThreadPoolExecutor(max_workers=SANDBOXES) as pool:
        answers = list(pool.map(run, range(SANDBOXES)))
    assert answers == [(f"sandbox-{index}", 0) for index in range(SANDBOXES)]


def test_command_semantics_are_the_reference_runtimes(router):
    commands = sandbox(router, "sandbox-1").commands
    result = commands.run("echo 'a b' $HOME ; ls")
    assert (result.stdout, result.exit_code, result.timed_out) == ("a b $HOME ; ls\n", 0, False)
    result = commands.run("sh -c 'echo oops >&2; exit 4'")
    assert (result.stderr, result.exit_code) == ("oops\n", 4)
    missing = commands.run("no-such-program")
    assert missing.exit_code == 1 and missing.stderr.startswith("Failed to execute command:")
    slow = commands.run("sleep 30", command_timeout=1)
    assert slow.timed_out and slow.exit_code != 0


def test_files_round_trip(router, fleet):
    files = sandbox(router, "sandbox-2").files
    files.write("data/input.csv", b"a,b\n1,2\n")
    assert (fleet["sandbox-2"] / "data/input.csv").read_bytes() == b"a,b\n1,2\n"
    assert files.read("data/input.csv") == b"a,b\n1,2\n"
    assert files.exists("data/input.csv")
    assert not files.exists("data/missing.csv")
    assert [entry.name for entry in files.list("data")] == ["input.csv"]
    # Another sandbox does not see it.
    assert not sandbox(router, "sandbox-3").files.exists("data/input.csv")


def test_a_wrong_token_is_refused(router, fleet):
    with pytest.raises(Exception, match="Failed to communicate") as refused:
        sandbox(router, "sandbox-4", token="wrong").commands.run("touch ran")
    assert refused.value.__cause__.response.status_code == 401
    assert not (fleet["sandbox-4"] / "ran").exists()
