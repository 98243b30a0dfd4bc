"""An /execute round trip, direct and through nginx as agent-sandbox's router (the fleet's
figure in docs/operations.md): `python3 tests/agent_sandbox/roundtrip.py` with the daemon at
$EXEC_SERVER_BIN (default target/release/exec-server)."""
import http.client, json, os, subprocess, tempfile, time, statistics, shutil
B = os.environ.get("EXEC_SERVER_BIN", "target/release/exec-server")
base = tempfile.mkdtemp()
d = subprocess.Popen([B, "--listen", "ws://127.0.0.47:8888", "--connection-token", "t", "--runtime-base-dir", base],
                     stdout=subprocess.PIPE, env=dict(os.environ, EXEC_SERVER_STATE_DIR="none", EXEC_SERVER_LOG="error", EXEC_SERVER_SANDBOX_ID="s"))
d.stdout.readline()
root = tempfile.mkdtemp()
open(f"{root}/nginx.conf", "w").write(f"""daemon off; master_process off; pid {root}/p; error_log {root}/e;
events {{ worker_connections 256; }}
http {{ access_log off; client_body_temp_path {root}/b; proxy_temp_path {root}/x; fastcgi_temp_path {root}/f; uwsgi_temp_path {root}/u; scgi_temp_path {root}/s;
 map $http_x_sandbox_id $sandbox {{ s 127.0.0.47:8888; default 127.0.0.1:9; }}
 server {{ listen 127.0.0.1:18999; location / {{ proxy_pass http://$sandbox; proxy_http_version 1.1; proxy_set_header Authorization ""; proxy_set_header Connection ""; }} }} }}""")
n = subprocess.Popen(["/usr/sbin/nginx", "-p", root, "-e", f"{root}/e", "-c", f"{root}/nginx.conf"])
time.sleep(0.5)
def run(host, port, count=200):
    c = http.client.HTTPConnection(host, port)
    body = json.dumps({"command": "true"})
    times = []
    for _ in range(count):
        t = time.perf_counter()
        c.request("POST", "/execute", body, {"Content-Type": "application/json", "X-Access-Token": "t", "X-Sandbox-ID": "s"})
        r = c.getresponse(); r.read(); assert r.status == 200
        times.append(time.perf_counter() - t)
    return statistics.median(times) * 1000
for i in range(2):
    direct = run("127.0.0.47", 8888); routed = run("127.0.0.1", 18999)
    print(f"median /execute 'true': direct {direct:.2f} ms, through nginx {routed:.2f} ms, ratio (direct/routed) {direct/routed:.2f}")
n.kill(); d.terminate(); d.wait(); shutil.rmtree(root); shutil.rmtree(base)
