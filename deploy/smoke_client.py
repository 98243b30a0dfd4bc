#!/usr/bin/env python3
"""The smoke test's client: speaks the daemon's JSON-RPC over a WebSocket (standard library
only, so any python3 runs it) and checks a sandboxed process inside the container.

    smoke_client.py ws://127.0.0.1:18765 --token-file F --sandbox enforced|unavailable

enforced: environment/info reports the Linux sandbox; a workspace-write process writes
/workspace but not /tmp (writable in the container, not one of its write roots) and sees no
network interface but lo; a managed-network process runs. unavailable: the sandbox is reported
missing, the same request is refused (fail closed, -32602) and an unsandboxed process runs.
"""
import argparse, base64, json, os, socket, struct, sys
from urllib.parse import urlsplit


class WebSocket:
    def __init__(self, url, token):
        parts = urlsplit(url)
        self.sock = socket.create_connection((parts.hostname, parts.port), timeout=30)
        key = base64.b64encode(os.urandom(16)).decode()
        auth = f"Authorization: Bearer {token}\r\n" if token else ""
        self.sock.sendall(
            f"GET / HTTP/1.1\r\nHost: {parts.netloc}\r\nUpgrade: websocket\r\n"
            f"Connection: Upgrade\r\nSec-WebSocket-Key: {key}\r\n"
            f"Sec-WebSocket-Version: 13\r\n{auth}\r\n".encode())
        head = b""
        while b"\r\n\r\n" not in head:
            data = self.sock.recv(1)
            if not data:
                raise SystemExit("connection closed during the upgrade")
            head += data
        status = head.split(b"\r\n", 1)[0].decode()
        if " 101 " not in status:
            raise SystemExit(f"upgrade refused: {status}")

    def _exact(self, n):
        data = b""
        while len(data) < n:
            chunk = self.sock.recv(n - len(data))
            if not chunk:
                raise SystemExit("connection closed")
            data += chunk
        return data

    def _send_frame(self, opcode, payload):
        mask = os.urandom(4)
        n = len(payload)
        header = bytes([0x80 | opcode])
        if n < 126:
            header += bytes([0x80 | n])
        elif n < 65536:
            header += bytes([0x80 | 126]) + struct.pack(">H", n)
        else:
            header += bytes([0x80 | 127]) + struct.pack(">Q", n)
        masked = bytes(b ^ mask[i % 4] for i, b in enumerate(payload))
        self.sock.sendall(header + mask + masked)

    def send(self, message):
        self._send_frame(0x1, json.dumps(message).encode())

    def recv(self):
        message = b""
        while True:
            b0, b1 = self._exact(2)
            n = b1 & 0x7F
            if n == 126:
                n = struct.unpack(">H", self._exact(2))[0]
            elif n == 127:
                n = struct.unpack(">Q", self._exact(8))[0]
            payload = self._exact(n)
            opcode = b0 & 0x0F
            if opcode == 0x9:
                self._send_frame(0xA, payload)
            elif opcode == 0x8:
                raise SystemExit("the daemon closed the connection")
            elif opcode in (0x0, 0x1, 0x2):
                message += payload
                if b0 & 0x80:
                    return json.loads(message)


class Rpc:
    def __init__(self, url, token):
        self.ws = WebSocket(url, token)
        self.next_id = 0

    def request(self, method, params=None):
        self.next_id += 1
        message = {"id": self.next_id, "method": method}
        if params is not None:
            message["params"] = params
        self.ws.send(message)
        while True:
            reply = self.ws.recv()
            if reply.get("id") == self.next_id:
                return reply

    def call(self, method, params=None):
        reply = self.request(method, params)
        if "error" in reply:
            raise SystemExit(f"{method} failed: {reply['error']}")
        return reply["result"]

    def run(self, params):
        """Starts a process and reads it to the end: (started, output, last read)."""
        started = self.call("process/start", params)
        output, after = b"", 0
        while True:
            read = self.call("process/read", {"processId": params["processId"],
                                              "afterSeq": after, "waitMs": 5000})
            for chunk in read["chunks"]:
                output += base64.b64decode(chunk["chunk"])
            after = read["nextSeq"] - 1
            if read["closed"]:
                return started, output.decode(errors="replace"), read


def start_params(process_id, script, sandbox=None):
    params = {"processId": process_id, "argv": ["sh", "-c", script],
              "cwd": "file:///workspace", "env": {"PATH": "/usr/local/bin:/usr/bin:/bin"},
              "tty": False}
    if sandbox is not None:
        params["sandbox"] = sandbox
    return params


# Read everything, write the workspace, no network: the common profile of coding agents.
WORKSPACE_WRITE = {
    "permissions": {"type": "managed", "network": "restricted", "file_system": {
        "type": "restricted", "entries": [
            {"path": {"type": "special", "value": {"kind": "root"}}, "access": "read"},
            {"path": {"type": "special", "value": {"kind": "project_roots"}}, "access": "write"},
        ]}},
    "cwd": "file:///workspace", "workspaceRoots": ["file:///workspace"],
}

# The interfaces of the process's own network namespace (/proc/net is per namespace).
INTERFACES = "echo interfaces: $(sed -n 's/^ *\\([^:]*\\):.*/\\1/p' /proc/net/dev)"
# The denied write comes last, so that its failure is the exit status the daemon classifies.
PROBE = (INTERFACES + "; echo written > /workspace/smoke-ok && cat /workspace/smoke-ok; "
         "echo escaped > /tmp/smoke-escape && echo 'WROTE /tmp'")


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("url")
    parser.add_argument("--token-file")
    parser.add_argument("--sandbox", choices=["enforced", "unavailable"], required=True)
    args = parser.parse_args()
    token = open(args.token_file).read().strip() if args.token_file else None
    rpc = Rpc(args.url, token)
    session = rpc.call("initialize", {"clientName": "smoke"})["sessionId"]
    rpc.ws.send({"method": "initialized", "params": {}})
    info = rpc.call("environment/info")
    linux_sandbox = info["capabilities"]["linuxSandbox"]
    print(f"session {session[:8]}…: linuxSandbox={linux_sandbox}, cwd={info['cwd']}")
    failures = []
    if args.sandbox == "enforced":
        if not linux_sandbox:
            failures.append("the daemon reports no Linux sandbox")
        started, output, last = rpc.run(start_params("sandboxed", PROBE, WORKSPACE_WRITE))
        print(f"sandboxed process: sandboxType={started['sandboxType']} exitCode={last['exitCode']}"
              f" sandboxDenied={last['sandboxDenied']}")
        for line in output.splitlines():
            print(f"  | {line}")
        if started["sandboxType"] != "linuxSeccomp":
            failures.append("the process was not sandboxed")
        if "written" not in output:
            failures.append("the workspace was not writable")
        if "WROTE /tmp" in output:
            failures.append("the sandbox let the process write /tmp")
        if "interfaces: lo\n" not in output:
            failures.append("the process saw network interfaces besides lo")
        if not last["sandboxDenied"]:
            failures.append("the denied write was not reported as a sandbox denial")
        # A managed network (the client's proxy ports only) needs CAP_NET_ADMIN: its helper
        # brings up lo in the process's own network namespace.
        managed = start_params("managed", INTERFACES)
        managed.update(enforceManagedNetwork=True,
                       managedNetwork={"loopbackPorts": [9000], "allowLocalBinding": False})
        started, output, last = rpc.run(managed)
        print(f"managed-network process: sandboxType={started['sandboxType']} "
              f"exitCode={last['exitCode']} output={output.strip()!r}")
        if started["sandboxType"] != "linuxSeccomp" or output.strip() != "interfaces: lo":
            failures.append("the managed network was not enforced")
    else:
        if linux_sandbox:
            failures.append("the daemon reports a Linux sandbox")
        refused = rpc.request("process/start", start_params("sandboxed", PROBE, WORKSPACE_WRITE))
        error = refused.get("error", {})
        print(f"sandboxed request: error {error.get('code')}: {error.get('message')}")
        if error.get("code") != -32602:
            failures.append("a sandboxed request was not refused")
        started, output, last = rpc.run(start_params("plain", "echo unsandboxed $(id -u)"))
        print(f"unsandboxed process: sandboxType={started['sandboxType']} "
              f"exitCode={last['exitCode']} output={output.strip()!r}")
        if last["exitCode"] != 0 or "unsandboxed" not in output:
            failures.append("an unsandboxed process did not run")
    for failure in failures:
        print(f"FAIL: {failure}")
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
