"""Shared fixtures: a real Redis, a real Redis Cluster, real SQLite files, and stores on them.

Redis is found in this order: ``TMY_TEST_REDIS_URL`` (default
``redis://127.0.0.1:6379/15``); else a private ``redis-server`` started for the
session. With ``CI`` set an unreachable Redis fails the run instead — CI must
never skip the Redis half of the suite. Tests only touch keys under their own
random prefix and delete them afterwards (never FLUSHDB: a developer's data may
live in that database).

The quick lane, ``pytest -m "not slow"``, leaves out what starts processes or servers:
every daemon scenario (tests/e2e/), every test on a private ``redis-server`` or the Redis
Cluster, and the tests marked ``slow`` by hand (processes, or seconds of real waiting).
A test outside the slow lane that starts a Python or Redis process fails, saying to mark
it (so the quick lane stays quick as tests are added).

The Redis Cluster (``redis_cluster_url``) is ``TMY_TEST_REDIS_CLUSTER_URL`` if
set, else three private cluster-mode ``redis-server`` masters started for the
session (``local_redis_cluster``, tests/support/redis_cluster.py); with ``CI`` set,
failing to find or start one fails the run, never skips it.
"""

from __future__ import annotations

import compileall
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
import redis

from tests.support.checkout import in_checkout  # noqa: F401  (the fixture, for every test)
from tests.support.hostile import bomb, hostile  # noqa: F401  (fixtures, for every test)
from tests.support.redis_cluster import LocalCluster, cluster_client, cluster_tools
from tests.support.upstream import upstream  # noqa: F401  (the fixture, for every test)

if TYPE_CHECKING:
    from tmy.store import Store

# The bot and daemon fixtures (tmy.testing.plugin). Installed, the package registers them
# through its pytest11 entry point too; naming the module here keeps a plain checkout working.
pytest_plugins = ["tmy.testing.plugin"]

DEFAULT_REDIS_URL = "redis://127.0.0.1:6379/15"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _redis_problem(url: str) -> str | None:
    """None when ``url`` answers PING within a second, else what went wrong."""
    try:
        client = redis.Redis.from_url(url, socket_connect_timeout=1, socket_timeout=1)
        try:
            client.ping()
        finally:
            client.close()
    except (redis.RedisError, OSError) as exc:
        return str(exc)
    return None


class RedisServer:
    """A private ``redis-server`` on a free loopback port: start, stop, restart, always reaped."""

    def __init__(self, exe: str, directory: Path, args: tuple[str, ...] = ()) -> None:
        self.exe = exe
        self.dir = directory
        self.args = args
        self.port = _free_port()
        self.proc: subprocess.Popen[bytes] | None = None
        self.dir.mkdir(parents=True, exist_ok=True)

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    @property
    def log(self) -> Path:
        return self.dir / "redis.log"

    def client(self) -> redis.Redis:
        """A plain synchronous client, for inspecting the server from a test."""
        return redis.Redis(host="127.0.0.1", port=self.port, socket_timeout=5)

    def start(self, timeout: float = 10.0) -> None:
        """Start (on the same port and directory as before) and wait until it answers."""
        cmd = [self.exe, "--port", str(self.port), "--bind", "127.0.0.1", "--dir", str(self.dir)]
        cmd += ["--save", "", "--appendonly", "no", *self.args]
        with self.log.open("ab") as log:
            self.proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + timeout
        while (problem := _redis_problem(self.url)) is not None:
            if self.proc.poll() is not None or time.monotonic() > deadline:
                self.stop()
                tail = self.log.read_text(errors="replace")[-2000:]
                raise RuntimeError(f"redis-server did not come up ({problem}):\n{tail}")
            time.sleep(0.05)

    def stop(self, *, kill: bool = False) -> None:
        """Stop the server (SIGKILL with ``kill=True``, like a crash); bounded waits."""
        proc, self.proc = self.proc, None
        if proc is None or proc.poll() is not None:
            return
        proc.send_signal(signal.SIGKILL if kill else signal.SIGTERM)
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=10)

    def restart(self, *, kill: bool = False) -> None:
        self.stop(kill=kill)
        self.start()


def _redis_server_exe() -> str:
    exe = shutil.which("redis-server")
    if exe is None:
        message = "redis-server is not on PATH: cannot start a private Redis for this test"
        if os.environ.get("CI"):
            pytest.fail(f"CI must run every Redis test: {message}", pytrace=False)
        pytest.skip(f"!!! REDIS TEST SKIPPED !!! {message}")
    return exe


# The whole suite (``pytest`` with no paths: the README's command, CI) runs on this many
# pytest-xdist workers: most of its time is waiting on processes, servers and sockets, not
# CPU. A run of chosen files stays in one process; ``-n N`` / ``-n 0`` / ``-p no:xdist`` win.
SUITE_WORKERS = 4


@pytest.hookimpl(tryfirst=True)
def pytest_cmdline_main(config: pytest.Config) -> None:
    """Spread the whole suite over :data:`SUITE_WORKERS` workers unless told otherwise.

    ``-n N`` without ``--dist`` is ``loadgroup`` too, not xdist's ``load``: ``load`` hands
    each worker its first quarter-share as one consecutive chunk, and with the slow tests
    sorted first (below) one worker got nearly all of them (``-n 2``: ~430 slow tests, over
    500 s on one worker while the other finished the rest in ~210 s). ``loadgroup`` hands
    out one test at a time (a marked group whole), and keeps the groups' promise.
    """
    if not config.pluginmanager.hasplugin("xdist") or hasattr(config, "workerinput"):
        return
    chosen = config.option.numprocesses is not None or config.option.dist != "no"
    debugging = config.option.collectonly or config.option.usepdb
    if config.args_source == pytest.Config.ArgsSource.TESTPATHS and not chosen and not debugging:
        config.option.numprocesses = SUITE_WORKERS
        config.option.dist = "loadgroup"  # tests marked xdist_group share a worker
    elif config.option.numprocesses and config.option.dist == "no" and not config.option.distload:
        config.option.dist = "loadgroup"


def pytest_sessionstart(session: pytest.Session) -> None:
    """Compile tmy's sources to ``__pycache__`` once, before any test starts a tmy process.

    Where ``PYTHONDONTWRITEBYTECODE`` is set (the Dockerfile sets it; so may a developer's
    shell) nothing ever writes tmy's bytecode, and every ``python run.py …`` the suite
    starts would compile ~200 modules again: ~0.17 s of CPU each, hundreds of times.
    Reading bytecode changes nothing else: a file edited since is compiled as before.
    """
    if hasattr(session.config, "workerinput"):  # the xdist controller did it already
        return
    root = Path(__file__).resolve().parents[1]
    for folder in ("tmy", "plugins"):
        compileall.compile_dir(root / folder, quiet=2)


@pytest.hookimpl(wrapper=True)
def pytest_collection(session: pytest.Session) -> Iterator[None]:
    """Let pytest keep the test modules it rewrote (for its assert messages) in ``__pycache__``.

    pytest caches each rewritten test module as a pyc only where bytecode may be written;
    under ``PYTHONDONTWRITEBYTECODE`` every worker of every run rewrote all ~770 test and
    support modules again: about half the CPU of a collection, paid by each of the
    :data:`SUITE_WORKERS` workers. The cache is pytest's own (checked against each source's
    mtime and size, written atomically for concurrent workers); the setting is restored
    once collected, so the processes tests start still write no bytecode.
    """
    saved, sys.dont_write_bytecode = sys.dont_write_bytecode, False
    try:
        return (yield)
    finally:
        sys.dont_write_bytecode = saved


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Mark the daemon scenarios and the tests on private ``redis-server`` processes (one of
    their own, or the session's local Redis Cluster) ``slow``, and run the slow ones first.

    Slow first: the xdist workers take tests one by one as they finish, so the long
    process-starting tests start early and the many short ones fill in around them,
    instead of one long test starting last and holding the whole run up.
    """
    servers = {"redis_server", "redis_cluster_url", "cluster_store_url", "local_redis_cluster"}
    for item in items:
        fixtures = set(getattr(item, "fixturenames", ()))
        if item.path.parent.name == "e2e" or fixtures & servers:
            item.add_marker(pytest.mark.slow)
    items.sort(key=lambda item: item.get_closest_marker("slow") is None)  # stable


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item: pytest.Item) -> Iterator[None]:
    """Fail a test outside the slow lane that starts a Python or Redis process (through
    ``subprocess`` or asyncio's subprocesses: both go through ``subprocess.Popen``)."""
    if item.get_closest_marker("slow") is not None:
        return (yield)
    started: list[Any] = []
    popen_init = subprocess.Popen.__init__

    def recording(self: subprocess.Popen[Any], args: Any, *rest: Any, **kw: Any) -> None:
        program = Path(str(args[0] if isinstance(args, list | tuple) else args).split()[0])
        if program.name.startswith(("python", "redis-")):  # not a library's `uname -p`
            started.append(args)
        popen_init(self, args, *rest, **kw)

    subprocess.Popen.__init__ = recording  # type: ignore[method-assign]
    try:
        result = yield
    finally:
        subprocess.Popen.__init__ = popen_init  # type: ignore[method-assign]
    if started:
        shown = " ".join(map(str, started[0]))[:120] if isinstance(started[0], list) else started[0]
        pytest.fail(
            f"this test starts a process ({shown!s}): mark it @pytest.mark.slow "
            "(the quick lane, -m 'not slow', runs no processes)",
            pytrace=False,
        )
    return result


@pytest.fixture(scope="session")
def redis_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """The Redis the suite tests against (see the module docstring for the search order)."""
    url = os.environ.get("TMY_TEST_REDIS_URL") or DEFAULT_REDIS_URL
    problem = _redis_problem(url)
    if problem is None:
        yield url
        return
    if os.environ.get("CI"):
        pytest.fail(
            f"!!! Redis at {url} is unreachable ({problem}) and CI is set: CI never skips "
            "the Redis tests. Start Redis or point TMY_TEST_REDIS_URL at one.",
            pytrace=False,
        )
    exe = shutil.which("redis-server")
    if exe is None:
        pytest.skip(
            f"!!! REDIS TESTS SKIPPED !!! Redis at {url} is unreachable ({problem}) and "
            "redis-server is not on PATH; set TMY_TEST_REDIS_URL to a Redis to run them"
        )
    server = RedisServer(exe, tmp_path_factory.mktemp("redis-session"))
    server.start()
    try:
        yield server.url
    finally:
        server.stop()


@pytest.fixture
def redis_namespace(redis_url: str) -> Iterator[str]:
    """A key prefix unique to this test; every key under it is deleted afterwards."""
    namespace = f"tmytest-{uuid.uuid4().hex[:8]}"
    yield namespace
    client = redis.Redis.from_url(redis_url, socket_timeout=5)
    try:
        batch = list(client.scan_iter(match=f"{namespace}:*", count=1000))
        for i in range(0, len(batch), 500):
            client.delete(*batch[i : i + 500])
    finally:
        client.close()


@pytest.fixture
def redis_server(tmp_path: Path) -> Iterator[Callable[..., RedisServer]]:
    """Factory: ``redis_server("--appendonly", "yes")`` starts a private server.

    Extra arguments come after the defaults (``--save "" --appendonly no``), so
    they win. Every server started is stopped at teardown.
    """
    exe = _redis_server_exe()
    servers: list[RedisServer] = []

    def start(*args: str) -> RedisServer:
        server = RedisServer(exe, tmp_path / f"redis-{len(servers)}", args)
        servers.append(server)
        server.start()
        return server

    yield start
    for server in servers:
        server.stop(kill=True)


@pytest.fixture(scope="session")
def local_redis_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    """Three private cluster-mode ``redis-server`` masters joined into a cluster for the
    session, killed after it (tests/support/redis_cluster.py). Locally, a missing redis-server or
    redis-cli skips its tests (loudly); with ``CI`` set it fails them, as does a cluster
    that does not come up (anywhere: with the binaries there, that is a real fault)."""
    tools = cluster_tools()
    if isinstance(tools, str):
        if os.environ.get("CI"):
            pytest.fail(f"!!! CI must run every Redis Cluster test: {tools}", pytrace=False)
        pytest.skip(
            f"!!! REDIS CLUSTER TESTS SKIPPED !!! {tools}; install Redis or set "
            "TMY_TEST_REDIS_CLUSTER_URL to a cluster to run them"
        )
    for _ in range(3):  # a free port picked may be taken by someone else before its node binds it
        cluster = LocalCluster(*tools, tmp_path_factory.mktemp("redis-cluster"))
        try:
            cluster.start()
            break
        except RuntimeError as exc:
            problem = exc
    else:
        pytest.fail(f"!!! could not start the test Redis Cluster !!! {problem}", pytrace=False)
    try:
        yield cluster
    finally:
        cluster.stop()


@pytest.fixture(scope="session")
def redis_cluster_url(request: pytest.FixtureRequest) -> str:
    """The Redis Cluster the suite tests against, as a store URL without a prefix:
    ``TMY_TEST_REDIS_CLUSTER_URL`` (``redis+cluster://host:port,…/``) if set, else the
    session's private cluster (``local_redis_cluster``)."""
    url = os.environ.get("TMY_TEST_REDIS_CLUSTER_URL")
    if url:
        return url
    cluster: LocalCluster = request.getfixturevalue("local_redis_cluster")
    return cluster.url


@pytest.fixture
def redis_cluster_namespace(redis_cluster_url: str) -> Iterator[str]:
    """A key prefix unique to this test; every key under it, on every master, is deleted after."""
    namespace = f"tmytest-{uuid.uuid4().hex[:8]}"
    yield namespace
    client = cluster_client(redis_cluster_url)
    try:
        for key in list(client.scan_iter(match=f"{namespace}:*", count=1000)):
            client.delete(key)
    finally:
        client.close()


@pytest.fixture
def sqlite_store_url(tmp_path: Path) -> str:
    """A fresh SQLite file."""
    return f"sqlite:///{tmp_path / 'store.db'}"  # tmp_path is absolute: four slashes


@pytest.fixture
def redis_store_url(redis_url: str, redis_namespace: str) -> str:
    """The test Redis under this test's own prefix."""
    return f"{redis_url}{'&' if '?' in redis_url else '?'}prefix={redis_namespace}"


@pytest.fixture
def cluster_store_url(redis_cluster_url: str, redis_cluster_namespace: str) -> str:
    """The test Redis Cluster under this test's own prefix."""
    sep = "&" if "?" in redis_cluster_url else "?"
    return f"{redis_cluster_url}{sep}prefix={redis_cluster_namespace}"


@pytest.fixture(params=["sqlite", pytest.param("redis", marks=pytest.mark.redis)])
def store_url(request: pytest.FixtureRequest) -> str:
    """A store URL on each backend: a fresh SQLite file, or Redis under a unique prefix.

    (The store's own test modules override it to add the Redis Cluster:
    tests/support/redis_cluster.py ``STORE_BACKENDS_WITH_CLUSTER``.)
    """
    return str(request.getfixturevalue(f"{request.param}_store_url"))


@pytest.fixture
async def store(store_url: str) -> AsyncIterator[Store]:
    """An opened store on each backend (parametrised through ``store_url``), closed afterwards."""
    from tmy.store import open_store  # here, so a broken tmy fails only the tests that use it

    opened = open_store(store_url)
    await opened.open()
    try:
        yield opened
    finally:
        await opened.close()


@pytest.fixture(autouse=True)
def _own_secrets() -> Iterator[None]:
    """Each test starts with the redaction secrets the session had: a config loaded in
    one test (an API key "secret") must not mask that word in another test's log."""
    from tmy import redact

    saved = (set(redact._secrets), redact._text, redact.LINE_SECRETS)
    yield
    redact._secrets.clear()
    redact._secrets.update(saved[0])
    redact._text, redact.LINE_SECRETS = saved[1], saved[2]


@pytest.fixture(autouse=True)
def _quiet_logs() -> Iterator[None]:
    """JSON logs at warning level to stderr, as one-shot CLI commands do (tests that
    inspect logs configure their own file). Per test: a command run in an earlier
    test may have pointed the log at a captured stream pytest has closed since."""
    from tmy import logs

    logs.configure("warning")
    yield


@pytest.fixture
async def provider() -> AsyncIterator[Any]:
    """A fake chat-completions server on loopback (tests/support/llm_fake_provider.py)."""
    from tests.support.llm_fake_provider import FakeProvider

    async with FakeProvider() as fake:
        yield fake


@pytest.fixture
def log_file(tmp_path: Path) -> Iterator[Path]:
    """The daemon's log at ``info`` into a file for this test (read with log_helpers.read_log)."""
    from tmy import logs

    path = tmp_path / "tmy.log"
    logs.configure("info", path)
    try:
        yield path
    finally:
        logs.configure("warning")
