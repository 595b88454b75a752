#!/usr/bin/env python3
"""Start N llama-server replicas and nginx in front of them, all on loopback.

    python deploy/replicas.py -n 2 --listen 8080 -- -m gemma-3-270m -c 4096 -np 2

Replica i listens on 127.0.0.1:(base-port + i) (base port: --listen + 1); nginx on --listen with
deploy/nginx.conf.in (consistent-hash affinity on X-Conversation-Id, passive health checks,
unbuffered streaming). Everything after `--` goes to every llama-server. Ctrl-C (or SIGTERM)
stops nginx and sends SIGTERM to the replicas, which drain (--drain-timeout). Needs an `nginx`
executable (Debian: apt-get install nginx); runs as an ordinary user, files under --prefix.
"""
from __future__ import annotations

import argparse
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)


def nginx_conf(prefix: str, listen: str, ports: list[int], fail_timeout: int = 10) -> str:
    with open(os.path.join(HERE, "nginx.conf.in"), encoding="utf-8") as f:
        text = f.read()
    servers = "\n".join(f"        server 127.0.0.1:{p} max_fails=1 fail_timeout={fail_timeout}s;"
                        for p in ports)
    return (text.replace("@PREFIX@", prefix).replace("@LISTEN@", listen)
            .replace("@SERVERS@", servers))


class Cluster:
    """N replicas + nginx; `stop()` ends them all (nginx first, then the replicas drain)."""

    def __init__(self, n: int, listen_port: int, server_args: list[str], prefix: str | None = None,
                 base_port: int | None = None, nginx: str | None = None, env: dict | None = None):
        self.prefix = prefix or tempfile.mkdtemp(prefix="pyllama-deploy-")
        self.port = listen_port
        self.ports = [(base_port or listen_port + 1) + i for i in range(n)]
        self.url = f"http://127.0.0.1:{listen_port}"
        self.nginx_bin = nginx or shutil.which("nginx") or "/usr/sbin/nginx"
        self.replicas: list[subprocess.Popen] = []
        full_env = {**os.environ, **(env or {}),
                    "PYTHONPATH": REPO + os.pathsep + os.environ.get("PYTHONPATH", "")}
        for i, p in enumerate(self.ports):
            log = open(os.path.join(self.prefix, f"replica{i}.log"), "w")
            self.replicas.append(subprocess.Popen(
                [sys.executable, "-m", "pyllama", "server", "--host", "127.0.0.1", "--port",
                 str(p), *server_args], stdout=log, stderr=subprocess.STDOUT, env=full_env))
        self.conf = os.path.join(self.prefix, "nginx.conf")
        with open(self.conf, "w", encoding="utf-8") as f:
            f.write(nginx_conf(self.prefix, f"127.0.0.1:{listen_port}", self.ports))
        self.nginx = subprocess.Popen(
            [self.nginx_bin, "-p", self.prefix, "-c", self.conf, "-e", os.path.join(
                self.prefix, "error.log"), "-g", "daemon off;"],
            stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT)

    def replica_url(self, i: int) -> str:
        return f"http://127.0.0.1:{self.ports[i]}"

    def wait_ready(self, timeout: float = 300.0) -> "Cluster":
        t0 = time.monotonic()
        for i, proc in enumerate(self.replicas):
            while True:
                if proc.poll() is not None or self.nginx.poll() is not None:
                    raise RuntimeError(f"replica {i} or nginx exited:\n{self.logs()}")
                try:
                    with urllib.request.urlopen(self.replica_url(i) + "/health", timeout=2):
                        break
                except OSError:
                    pass
                if time.monotonic() - t0 > timeout:
                    raise RuntimeError(f"not ready after {timeout} s:\n{self.logs()}")
                time.sleep(0.2)
        return self

    def logs(self) -> str:
        out = []
        for name in sorted(os.listdir(self.prefix)):
            if name.endswith(".log"):
                with open(os.path.join(self.prefix, name), errors="replace") as f:
                    out.append(f"== {name}\n{f.read()[-4000:]}")
        return "\n".join(out)

    def stop(self, timeout: float = 30.0) -> list[int]:
        if self.nginx.poll() is None:
            self.nginx.send_signal(signal.SIGQUIT)      # nginx's graceful shutdown
        for p in self.replicas:
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
        codes = []
        for p in [self.nginx, *self.replicas]:
            try:
                codes.append(p.wait(timeout))
            except subprocess.TimeoutExpired:
                p.kill()
                codes.append(p.wait())
        return codes[1:]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("-n", "--replicas", type=int, default=2)
    ap.add_argument("--listen", type=int, default=8080, help="nginx port on 127.0.0.1")
    ap.add_argument("--base-port", type=int, default=None, help="first replica port")
    ap.add_argument("--prefix", default=None, help="directory for nginx.conf and the logs")
    ap.add_argument("server_args", nargs="*", help="llama-server arguments (after --)")
    a = ap.parse_args(argv)
    c = Cluster(a.replicas, a.listen, a.server_args, a.prefix, a.base_port)
    stop = []
    signal.signal(signal.SIGTERM, lambda *_: stop.append(1))
    try:
        c.wait_ready()
        print(f"nginx on {c.url} -> replicas on ports {c.ports}; logs in {c.prefix}", flush=True)
        while not stop and c.nginx.poll() is None:
            time.sleep(0.5)
    except KeyboardInterrupt:
        pass
    finally:
        codes = c.stop()
    return 0 if all(rc == 0 for rc in codes) else 1


if __name__ == "__main__":
    sys.exit(main())
