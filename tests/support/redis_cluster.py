"""A private Redis Cluster for tests: three masters on free loopback ports.

Each node is a ``redis-server --cluster-enabled yes`` (no persistence) in its
own directory; ``redis-cli --cluster create`` hands the 16384 slots out among
them, and :meth:`LocalCluster.start` returns once every node reports
``cluster_state:ok``. Used by the ``redis_cluster_url`` fixture (conftest.py);
run by hand to get a cluster to try tmy against::

    python3 -m tests.support.redis_cluster      # prints the store URL; Ctrl-C stops it
"""

from __future__ import annotations

import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from urllib.parse import urlsplit

import pytest
import redis
from redis.backoff import NoBackoff
from redis.cluster import ClusterNode, RedisCluster
from redis.crc import key_slot
from redis.retry import Retry

STORE_BACKENDS_WITH_CLUSTER = [
    "sqlite",
    pytest.param("redis", marks=pytest.mark.redis),
    pytest.param("cluster", marks=[pytest.mark.redis, pytest.mark.slow]),  # 3 redis-servers
]
"""``store_url`` params for a test module whose tests run on the Redis Cluster too.

Such a module overrides conftest's ``store_url``::

    @pytest.fixture(params=STORE_BACKENDS_WITH_CLUSTER)
    def store_url(request: pytest.FixtureRequest) -> str:
        return request.getfixturevalue(f"{request.param}_store_url")
"""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def cluster_tools() -> tuple[str, str] | str:
    """(redis-server, redis-cli) paths, or what is missing."""
    server, cli = shutil.which("redis-server"), shutil.which("redis-cli")
    if server is None or cli is None:
        missing = " and ".join(
            n for n, p in (("redis-server", server), ("redis-cli", cli)) if not p
        )
        return f"{missing} not on PATH: cannot start a Redis Cluster"
    return server, cli


def cluster_client(url: str) -> RedisCluster:
    """A plain synchronous cluster client for ``redis+cluster://h:p[,h:p…]/`` (tests' own use)."""
    netloc = urlsplit(url).netloc.rpartition("@")[2]
    nodes = []
    for item in netloc.split(","):
        node = urlsplit(f"//{item}")
        nodes.append(ClusterNode(node.hostname, node.port or 6379))
    return RedisCluster(startup_nodes=nodes, socket_timeout=5)


class LocalCluster:
    """``masters`` redis-server processes in cluster mode, joined into one cluster."""

    def __init__(self, server: str, cli: str, directory: Path, masters: int = 3) -> None:
        self.server = server
        self.cli = cli
        self.dir = directory
        self.ports = [free_port() for _ in range(masters)]
        self.procs: list[subprocess.Popen[bytes]] = []

    @property
    def url(self) -> str:
        """The store URL (every node named: any one that answers is enough)."""
        return "redis+cluster://" + ",".join(f"127.0.0.1:{p}" for p in self.ports) + "/"

    def node(self, port: int) -> redis.Redis:
        """A plain client of one node (no retries: a node still starting is asked again soon)."""
        return redis.Redis(
            host="127.0.0.1", port=port, socket_timeout=5, retry=Retry(NoBackoff(), 0)
        )

    def _log(self, port: int) -> Path:
        return self.dir / str(port) / "redis.log"

    def _logs(self) -> str:
        tails = []
        for port in self.ports:
            path = self._log(port)
            text = path.read_text(errors="replace")[-1500:] if path.exists() else "(no log)"
            tails.append(f"--- node {port} ---\n{text}")
        return "\n".join(tails)

    def start(self, timeout: float = 60.0) -> None:
        """Start the nodes, create the cluster, wait until every node says it is ok.

        RuntimeError (with the nodes' log tails) when any step fails; the
        nodes started so far are stopped.
        """
        deadline = time.monotonic() + timeout
        try:
            for port in self.ports:
                home = self.dir / str(port)
                home.mkdir(parents=True, exist_ok=True)
                cmd = [
                    self.server, "--port", str(port), "--bind", "127.0.0.1",
                    "--cluster-enabled", "yes", "--cluster-port", str(free_port()),
                    "--cluster-config-file", str(home / "nodes.conf"),
                    "--dir", str(home), "--save", "", "--appendonly", "no",
                ]  # fmt: skip
                with self._log(port).open("ab") as log:
                    self.procs.append(subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT))
            for port, proc in zip(self.ports, self.procs, strict=True):
                self._wait(deadline, f"node {port} to answer", lambda p=port: self._pings(p), proc)
            nodes = [f"127.0.0.1:{p}" for p in self.ports]
            create = [self.cli, "--cluster", "create", *nodes, "--cluster-replicas", "0"]
            done = subprocess.run(
                [*create, "--cluster-yes"],
                capture_output=True,
                timeout=max(deadline - time.monotonic(), 1.0),
            )
            if done.returncode != 0:
                out = (done.stdout + done.stderr).decode(errors="replace")[-2000:]
                raise RuntimeError(f"redis-cli --cluster create failed ({done.returncode}):\n{out}")
            for port in self.ports:
                self._wait(
                    deadline, f"node {port} to report cluster_state:ok", lambda p=port: self._ok(p)
                )
        except BaseException as exc:
            self.stop()
            if isinstance(exc, RuntimeError | subprocess.TimeoutExpired | OSError):
                raise RuntimeError(
                    f"could not start a Redis Cluster: {exc}\n{self._logs()}"
                ) from exc
            raise

    def _wait(
        self,
        deadline: float,
        what: str,
        ready: Callable[[], bool],
        proc: subprocess.Popen[bytes] | None = None,
    ) -> None:
        while not ready():
            if proc is not None and proc.poll() is not None:
                raise RuntimeError(f"redis-server exited ({proc.returncode}) before {what}")
            if time.monotonic() > deadline:
                raise RuntimeError(f"timed out waiting for {what}")
            time.sleep(0.05)

    def _pings(self, port: int) -> bool:
        client = self.node(port)
        try:
            return bool(client.ping())
        except (redis.RedisError, OSError):
            return False
        finally:
            client.close()

    def _ok(self, port: int) -> bool:
        """Every slot assigned, every node known, state ok — as this node sees it."""
        client = self.node(port)
        try:
            info = client.execute_command("CLUSTER", "INFO")
        except (redis.RedisError, OSError):
            return False
        finally:
            client.close()
        text = info.decode() if isinstance(info, bytes) else str(info)
        fields = dict(line.split(":", 1) for line in text.split() if ":" in line)
        return (
            fields.get("cluster_state") == "ok"
            and fields.get("cluster_slots_ok") == "16384"
            and fields.get("cluster_known_nodes") == str(len(self.ports))
        )

    def master_of(self, key: str | bytes) -> tuple[int, subprocess.Popen[bytes]]:
        """(port, process) of the node that serves ``key``'s hash slot."""
        slot = key_slot(key.encode() if isinstance(key, str) else key)
        client = self.node(self.ports[0])
        try:
            ranges = client.execute_command("CLUSTER", "SLOTS")
        finally:
            client.close()
        for start, end, master, *_ in ranges:
            if start <= slot <= end:
                port = int(master[1])
                return port, self.procs[self.ports.index(port)]
        raise LookupError(f"no node serves slot {slot}")

    def stop(self) -> None:
        """Kill every node (SIGKILL: nothing to save) and reap it."""
        procs, self.procs = self.procs, []
        for proc in procs:
            if proc.poll() is None:
                proc.send_signal(signal.SIGCONT)  # a frozen node must die too
                proc.kill()
        for proc in procs:
            proc.wait(timeout=10)


def main() -> None:
    tools = cluster_tools()
    if isinstance(tools, str):
        sys.exit(tools)
    with tempfile.TemporaryDirectory(prefix="tmy-cluster-") as tmp:
        cluster = LocalCluster(*tools, Path(tmp))
        cluster.start()
        print(f"{cluster.url}?prefix=tmy", flush=True)
        try:
            signal.sigwait({signal.SIGINT, signal.SIGTERM})
        finally:
            cluster.stop()


if __name__ == "__main__":
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT, signal.SIGTERM})
    main()
