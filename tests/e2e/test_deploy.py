"""The deployment files (docs/deploy.md): Dockerfile, compose.yaml, deploy/.

Always, with no container engine:

- the Dockerfile's ENTRYPOINT + CMD is the command the README's quick start (its first
  shell block) runs the bot with; it has a HEALTHCHECK on /healthz, a non-root USER, and
  VOLUMEs where the shipped config puts the config, the rules and the SQLite store;
- the Dockerfile replayed without Docker (its COPYs into a fresh directory, its ENV, its
  CMD from its WORKDIR) serves, passes its own HEALTHCHECK command, reloads on SIGHUP and
  stops with exit 0 on SIGTERM;
- compose.yaml's structure (tmy + redis, the store on the redis service, healthchecks,
  volumes, a second replica on its own port) and the commented NapCat wiring; its two
  replicas, run as compose runs them on one Redis, lose no update and run each
  scheduled occurrence once;
- the systemd unit (LimitNOFILE, ExecReload, a user, the README's command), and
  deploy/logrotate.conf run by the real logrotate against tmy's log file.

Where a container engine runs (``docker info`` succeeds): the image is built and run and
answers /healthz. ``docker compose config`` validates compose.yaml where Compose exists.
Otherwise those tests skip, saying exactly what is missing.
"""

from __future__ import annotations

import asyncio
import contextlib
import grp
import json
import os
import pwd
import re
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import textwrap
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any
from urllib.parse import urlsplit

import httpx
import pytest
import yaml

from tests.e2e.readme_commands import FENCE, SHELL, commands
from tmy import logs
from tmy.adapters.origin import HostPolicy
from tmy.config import Settings, load_settings, parse_store_url
from tmy.store import open_store

pytestmark = pytest.mark.slow  # processes (tests/e2e is the slow lane anyway)

REPO = Path(__file__).resolve().parents[2]
README = REPO / "README.md"
DOCKERFILE = REPO / "Dockerfile"
COMPOSE = REPO / "compose.yaml"
UNIT = REPO / "deploy" / "tmy.service"
LOGROTATE = REPO / "deploy" / "logrotate.conf"
NAPCAT = REPO / "deploy" / "napcat" / "onebot11.json"


# -- reading the files ------------------------------------------------------------------------


@dataclass(frozen=True)
class Instruction:
    """One Dockerfile instruction: its name (upper case), its arguments, its first line."""

    name: str
    args: str
    line: int


def instructions(text: str) -> list[Instruction]:
    """The Dockerfile's instructions, ``\\``-continued lines joined (comment lines inside
    a continuation skipped, as Docker does)."""
    out: list[Instruction] = []
    pending: tuple[int, str] | None = None
    for number, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        start, body = (pending[0], f"{pending[1]} {line}") if pending else (number, line)
        if body.endswith("\\"):
            pending = (start, body[:-1].rstrip())
            continue
        pending = None
        name, _, args = body.partition(" ")
        out.append(Instruction(name.upper(), args.strip(), start))
    return out


def exec_form(args: str) -> list[str]:
    """An exec-form ``["a", "b"]`` as argv; the shell form as ``/bin/sh -c``."""
    if args.startswith("["):
        return list(json.loads(args))
    return ["/bin/sh", "-c", args]


class Dockerfile:
    """The parts of the Dockerfile the tests look at."""

    def __init__(self, text: str) -> None:
        self.all = instructions(text)

    def each(self, name: str) -> list[Instruction]:
        return [i for i in self.all if i.name == name]

    def last(self, name: str) -> Instruction:
        found = self.each(name)
        assert found, f"the Dockerfile has no {name}"
        return found[-1]

    @property
    def workdir(self) -> PurePosixPath:
        return PurePosixPath(self.last("WORKDIR").args)

    @property
    def command(self) -> list[str]:
        """ENTRYPOINT + CMD, as the container runs them."""
        entry = exec_form(self.last("ENTRYPOINT").args) if self.each("ENTRYPOINT") else []
        cmd = exec_form(self.last("CMD").args) if self.each("CMD") else []
        return entry + cmd

    @property
    def env(self) -> dict[str, str]:
        env: dict[str, str] = {}
        for instr in self.each("ENV"):
            words = shlex.split(instr.args)
            if words and "=" not in words[0]:  # the old form: ENV KEY value with spaces
                env[words[0]] = " ".join(words[1:])
                continue
            env.update(w.split("=", 1) for w in words)
        return env

    @property
    def volumes(self) -> set[str]:
        found: set[str] = set()
        for instr in self.each("VOLUME"):
            found.update(
                json.loads(instr.args) if instr.args.startswith("[") else instr.args.split()
            )
        return found

    @property
    def healthcheck(self) -> list[str]:
        args = self.last("HEALTHCHECK").args
        _options, _, command = args.partition("CMD ")
        assert command, f"HEALTHCHECK without CMD: {args!r}"
        return exec_form(command.strip())

    def copies(self) -> list[tuple[str, PurePosixPath]]:
        """Each COPY source (in the build context) and where it lands in the image: a file
        at the destination, or in it when the destination ends in ``/`` or there are
        several sources; a directory's contents at the destination (Docker's rules)."""
        out = []
        workdir = PurePosixPath("/")
        for instr in self.all:
            if instr.name == "WORKDIR":
                workdir = workdir / instr.args
            elif instr.name == "COPY":
                words = [w for w in shlex.split(instr.args) if not w.startswith("--")]
                *sources, dest = words
                into = dest.endswith("/") or len(sources) > 1
                for src in sources:
                    file = not (REPO / src).is_dir()
                    out.append((src, workdir / dest / Path(src).name if into and file
                                else workdir / dest))  # fmt: skip
        return out


DOCKER = Dockerfile(DOCKERFILE.read_text(encoding="utf-8"))


def segments(command: str) -> list[list[str]]:
    """A shell line cut at ``&&``, ``||``, ``;``, ``|`` and ``&``: each part's argv."""
    lexer = shlex.shlex(command, posix=True, punctuation_chars=True)
    lexer.whitespace_split = True
    parts: list[list[str]] = [[]]
    for token in lexer:
        if token in ("&&", "||", ";", "|", "&"):
            parts.append([])
        else:
            parts[-1].append(token)
    return [p for p in parts if p]


def runs_the_bot(argv: list[str]) -> bool:
    """``python… [path/]run.py`` (or ``… run.py serve``): the daemon, not a one-shot command."""
    names = [Path(a).name for a in argv]
    if "run.py" not in names:
        return False
    at = names.index("run.py")
    return at >= 1 and names[0].startswith("python") and argv[at + 1 :] in ([], ["serve"])


def readme_run_command() -> list[str]:
    """The command of the README's quick start (its first shell block) that runs the bot."""
    text = README.read_text(encoding="utf-8")
    block = next(b for b in FENCE.finditer(text) if b["lang"] in SHELL)
    found = [
        argv
        for command in commands(block.group(0))
        for argv in segments(command.text)
        if runs_the_bot(argv)
    ]
    assert len(found) == 1, f"the README's first shell block should run the bot once: {found}"
    return found[0]


def same_command(ours: list[str], readme: list[str]) -> bool:
    """The same program and arguments; the interpreter compared by name (the README's is the
    activated virtual environment's ``python3``, the image's or the unit's their own)."""
    return Path(ours[0]).name == Path(readme[0]).name and ours[1:] == readme[1:]


def shipped_paths() -> dict[str, str]:
    """Where the shipped config/tmy.yaml puts things, relative to the checkout's root."""
    config = REPO / "config" / "tmy.yaml"
    settings = load_settings(config, env={})
    store = parse_store_url(settings.store)
    assert store.scheme == "sqlite", "the shipped config's store is the embedded SQLite"
    return {
        "config": str(config.parent.relative_to(REPO)),
        "rules": str(Path(settings.rules).resolve().relative_to(REPO)),
        "data": str(Path(store.path).resolve().parent.relative_to(REPO)),
    }


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def replay_image(root: Path) -> Path:
    """The Dockerfile's COPYs into ``root`` (the image's file system); returns its WORKDIR."""
    skip = shutil.ignore_patterns("__pycache__", "*.pyc", "*.egg-info")
    for src, dest in DOCKER.copies():
        target = root / str(dest).lstrip("/")
        if (REPO / src).is_dir():
            shutil.copytree(REPO / src, target, ignore=skip, dirs_exist_ok=True)
        else:
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(REPO / src, target)
    return root / str(DOCKER.workdir).lstrip("/")


def start_image(workdir: Path, env: dict[str, str], stderr: Any) -> subprocess.Popen[str]:
    """The image's ENTRYPOINT + CMD in ``workdir``, by the suite's interpreter."""
    return subprocess.Popen(
        [sys.executable, *DOCKER.command[1:]],
        cwd=workdir,
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=stderr,
        text=True,
    )


# -- the Dockerfile, always ---------------------------------------------------------------------


def test_the_image_runs_the_command_the_readme_runs_the_bot_with() -> None:
    readme = readme_run_command()
    assert same_command(DOCKER.command, readme), (
        f"Dockerfile ENTRYPOINT/CMD {DOCKER.command} is not the README's {readme}"
    )
    # …from the checkout's root, as the README does: run.py, config/ and rules/ are there
    copied = {dest for _, dest in DOCKER.copies()}
    for name in ("run.py", "tmy", "config", "rules", "plugins"):
        assert DOCKER.workdir / name in copied, f"{name} is not copied to {DOCKER.workdir}"


def test_the_image_is_slim_python_installed_by_pip_and_checked_on_healthz() -> None:
    base = DOCKER.each("FROM")[0].args
    match = re.fullmatch(r"python:3\.(\d+)-slim(?:-\w+)?", base)
    assert match and int(match[1]) >= 11, f"FROM {base}: a slim official Python 3.11+"
    assert any(re.search(r"pip install (?:\S+ )*\.(\s|$)", i.args) for i in DOCKER.each("RUN"))
    check = DOCKER.healthcheck
    assert Path(check[0]).name.startswith("python") and "urllib" in " ".join(check)
    assert "/healthz" in " ".join(check) and "curl" not in " ".join(check)
    port = DOCKER.env["TMY_HTTP"].rsplit(":", 1)[1]
    assert DOCKER.last("EXPOSE").args.split("/")[0] == port
    assert DOCKER.env["TMY_HTTP"].startswith("0.0.0.0:"), "reachable from outside the container"


def test_the_image_runs_as_a_user_of_its_own_that_owns_the_data_volume() -> None:
    user = DOCKER.last("USER")
    cmd = DOCKER.last("CMD")
    assert user.line < cmd.line
    name = user.args.split(":")[0]
    assert name not in ("root", "0"), "the container must not run as root"
    runs = " ".join(i.args for i in DOCKER.each("RUN"))
    assert re.search(rf"useradd .*\b{name}\b", runs), f"no RUN creates the user {name}"
    data = DOCKER.workdir / shipped_paths()["data"]
    assert re.search(rf"chown \S*{name}\S* {re.escape(str(data))}", runs), f"{data} not {name}'s"


def test_the_volumes_are_where_the_shipped_config_puts_config_rules_and_store() -> None:
    paths = shipped_paths()
    assert paths == {"config": "config", "rules": "rules", "data": "data"}
    expected = {str(DOCKER.workdir / p) for p in paths.values()}
    assert expected <= DOCKER.volumes, f"VOLUME {sorted(DOCKER.volumes)} lacks {expected}"


def test_dockerignore_keeps_local_state_out_and_every_copy_in() -> None:
    patterns = [
        line.strip()
        for line in (REPO / ".dockerignore").read_text().splitlines()
        if line.strip() and not line.startswith("#")
    ]
    for local in ("data", ".git", ".venv", "**/__pycache__", "tests"):
        assert local in patterns, f".dockerignore should leave out {local}"
    for src, _ in DOCKER.copies():
        assert src not in patterns, f"COPY {src} names a path .dockerignore leaves out"
        assert (REPO / src).exists(), f"COPY {src}: no such path in the checkout"


def test_the_replayed_image_serves_passes_its_healthcheck_reloads_and_stops(
    tmp_path: Path,
) -> None:
    """The Dockerfile without Docker: its COPYs into a fresh root, its ENV and its CMD from its
    WORKDIR, with the suite's interpreter (which has the dependencies ``pip install .`` puts
    in the image). Proves the image holds all the bot needs, that its health check command
    works against the real daemon, and that the store lands in the data volume."""
    workdir = replay_image(tmp_path / "root")
    port = free_port()
    env = {"PATH": os.environ["PATH"], "HOME": str(tmp_path), **DOCKER.env}
    env["TMY_HTTP"] = f"127.0.0.1:{port}"  # the image's 0.0.0.0, kept to loopback here
    check = [sys.executable, *DOCKER.healthcheck[1:]]
    proc = start_image(workdir, env, subprocess.PIPE)
    try:
        deadline = time.monotonic() + 30
        while True:
            health = subprocess.run(check, env=env, capture_output=True, text=True, timeout=10)
            if health.returncode == 0 or time.monotonic() > deadline or proc.poll() is not None:
                break
            time.sleep(0.2)
        assert health.returncode == 0, f"HEALTHCHECK failed: {health.stderr[-1500:]}"
        body = httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=5).json()
        assert body["status"] == "ok" and body["store"]["state"] == "ok"
        store = workdir / shipped_paths()["data"] / "tmy.db"
        assert store.exists(), "the SQLite store is not in the data volume"
        proc.send_signal(signal.SIGHUP)  # docker kill -s HUP
        time.sleep(1.0)
        proc.send_signal(signal.SIGTERM)  # docker stop
        assert proc.wait(timeout=30) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    err = proc.stderr.read() if proc.stderr else ""
    events = [json.loads(line) for line in err.splitlines() if line.startswith("{")]
    assert any(e["event"] == "reload.done" and e.get("reason") == "SIGHUP" for e in events), err
    assert events[-1]["event"] == "daemon.stopped"


# -- the Dockerfile, with a container engine ----------------------------------------------------


def engine_problem() -> str | None:
    """None when a container engine answers ``docker info``, else exactly what is missing."""
    docker = shutil.which("docker")
    if docker is None:
        return (
            "NO CONTAINER RUNTIME: `docker` is not on PATH, so the image was NOT built and "
            "its container NOT run (the Dockerfile was only checked statically and replayed)"
        )
    version = subprocess.run([docker, "--version"], capture_output=True, text=True, timeout=30)
    info = subprocess.run(
        [docker, "info", "--format", "{{.ServerVersion}}"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    if info.returncode != 0 or not info.stdout.strip():
        why = (info.stderr.strip().splitlines() or ["no answer"])[-1]
        return (
            f"NO CONTAINER ENGINE: `docker --version` works ({version.stdout.strip()}) but "
            f"`docker info` fails ({why}), so the image was NOT built and its container NOT "
            "run; start the Docker daemon to run this test"
        )
    return None


def docker(*args: str, timeout: float = 120, check: bool = True) -> str:
    done = subprocess.run(["docker", *args], capture_output=True, text=True, timeout=timeout)
    if check:
        assert done.returncode == 0, f"docker {' '.join(args)}: {done.stderr[-3000:]}"
    return done.stdout.strip()


@pytest.mark.timeout(1800)
def test_the_image_builds_and_its_container_answers_healthz() -> None:
    problem = engine_problem()
    if problem:
        pytest.skip(problem)
    tag = f"tmy-test:{uuid.uuid4().hex[:12]}"
    name = f"tmy-test-{uuid.uuid4().hex[:12]}"
    docker("build", "-t", tag, str(REPO), timeout=1500)
    try:
        docker("run", "-d", "--name", name, "-p", "127.0.0.1::8080",
               "--health-interval=1s", "--health-start-period=30s", tag)  # fmt: skip
        host_port = docker("port", name, "8080/tcp").splitlines()[0].rsplit(":", 1)[1]
        deadline = time.monotonic() + 90
        status = None
        while time.monotonic() < deadline:
            with contextlib.suppress(httpx.HTTPError):
                status = httpx.get(f"http://127.0.0.1:{host_port}/healthz", timeout=3).status_code
            health = docker("inspect", "-f", "{{.State.Health.Status}}", name)
            if status == 200 and health == "healthy":
                break
            time.sleep(1)
        assert status == 200, docker("logs", name, check=False)
        assert health == "healthy", docker("inspect", "-f", "{{json .State.Health}}", name)
        assert docker("exec", name, "id", "-u") != "0"
        config = json.loads(docker("inspect", "-f", "{{json .Config}}", name))
        assert (config.get("Entrypoint") or []) + config["Cmd"] == DOCKER.command
        docker("stop", "-t", "40", name, timeout=60)
        assert docker("inspect", "-f", "{{.State.ExitCode}}", name) == "0"
    finally:
        docker("rm", "-f", name, check=False)
        docker("rmi", "-f", tag, check=False)


# -- compose.yaml ------------------------------------------------------------------------------


def compose_command() -> tuple[list[str] | None, str]:
    """The Compose CLI (``docker compose``, else ``docker-compose``), or why there is none."""
    docker_bin = shutil.which("docker")
    if docker_bin:
        plugin = subprocess.run(
            [docker_bin, "compose", "version"], capture_output=True, text=True, timeout=30
        )
        if plugin.returncode == 0:
            return [docker_bin, "compose"], ""
        why = (plugin.stderr.strip().splitlines() or ["no output"])[0]
    else:
        why = "`docker` is not on PATH"
    standalone = shutil.which("docker-compose")
    if standalone:
        return [standalone], ""
    return None, (
        f"NO DOCKER COMPOSE: `docker compose version` fails ({why}) and there is no "
        "docker-compose, so `docker compose config` did NOT validate compose.yaml (only "
        "the structural checks of this module ran)"
    )


def test_docker_compose_config_validates_the_file() -> None:
    command, why = compose_command()
    if command is None:
        pytest.skip(why)
    done = subprocess.run(
        [*command, "-f", str(COMPOSE), "config", "--quiet"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr


@pytest.fixture(scope="module")
def compose() -> dict[str, Any]:
    return yaml.safe_load(COMPOSE.read_text(encoding="utf-8"))


def test_compose_runs_tmy_on_the_redis_service(compose: dict[str, Any]) -> None:
    services = compose["services"]
    assert {"tmy", "redis"} <= set(services)
    tmy, redis = services["tmy"], services["redis"]
    assert tmy["depends_on"]["redis"]["condition"] == "service_healthy"
    store = tmy["environment"]["TMY_STORE"]
    assert parse_store_url(store).scheme == "redis"
    assert urlsplit(store).hostname == "redis", "the store must be the redis service"
    assert tmy["build"] == "." and "container_name" not in tmy
    for service in (tmy, redis):
        assert service["restart"] in ("unless-stopped", "always")
    assert "--appendonly" in redis["command"]


def test_compose_healthchecks(compose: dict[str, Any]) -> None:
    tmy, redis = compose["services"]["tmy"], compose["services"]["redis"]
    assert "/healthz" in " ".join(tmy["healthcheck"]["test"])
    assert tmy["healthcheck"]["test"][0] == "CMD"
    assert redis["healthcheck"]["test"] == ["CMD", "redis-cli", "ping"]


def test_compose_volumes_are_the_image_s(compose: dict[str, Any]) -> None:
    tmy, redis = compose["services"]["tmy"], compose["services"]["redis"]
    targets = {v.split(":")[1] for v in tmy["volumes"]}
    assert targets == DOCKER.volumes, "compose mounts exactly the image's VOLUMEs"
    named = {
        v.split(":")[0] for v in [*tmy["volumes"], *redis["volumes"]] if "/" not in v.split(":")[0]
    }
    assert named and named <= set(compose["volumes"]), "named volumes are declared"
    assert any(v.endswith(":/data") for v in redis["volumes"])


def test_compose_publishes_loopback_ports_and_a_second_replica(compose: dict[str, Any]) -> None:
    """``--profile replicas`` adds tmy-2: the same service but for its own host port."""
    services = compose["services"]
    tmy, second = services["tmy"], services["tmy-2"]
    assert second["profiles"] == ["replicas"] and "profiles" not in tmy
    assert {k: v for k, v in second.items() if k not in ("ports", "profiles")} == {
        k: v for k, v in tmy.items() if k != "ports"
    }
    container = DOCKER.env["TMY_HTTP"].rsplit(":", 1)[1]
    hosts = []
    for service in (tmy, second):
        (mapping,) = service["ports"]
        host_ip, host_port, inside = mapping.split(":")
        assert host_ip == "127.0.0.1", "without api_keys the listener trusts its callers"
        assert inside == container
        hosts.append(host_port)
    assert len(set(hosts)) == 2, "each replica its own host port"
    assert tmy["environment"]["TMY_HTTP"] == DOCKER.env["TMY_HTTP"]


REPLICA_RULES = """
variables:
  hits: {scope: global, default: 0}
  fired: {scope: global, default: []}
rules:
  - id: hit
    triggers: ["hit"]
    steps:
      - {plugin: ADJUST, input: "?= hits + 1", save: hits}
  - id: tick
    schedule: {every: 1s, misfire_grace: 30}
    steps:
      - {plugin: ADJUST, input: "?= fired + [FIRE_TIME]", save: fired}
"""


def service_env(service: dict[str, Any], store: str, port: int, home: Path) -> dict[str, str]:
    """A compose service's environment as the container gets it, with the test's Redis for
    the ``redis`` service and a loopback port for the published one."""
    env = {"PATH": os.environ["PATH"], "HOME": str(home), **DOCKER.env}
    for key, value in service["environment"].items():
        env[key] = re.sub(r"\$\{\w+:-([^}]*)\}", r"\1", str(value))  # ${TZ:-UTC} → UTC
    assert urlsplit(env["TMY_STORE"]).hostname == "redis"
    env["TMY_STORE"] = store
    env["TMY_HTTP"] = f"127.0.0.1:{port}"
    return env


@pytest.mark.redis
async def test_the_two_compose_replicas_share_one_redis(
    tmp_path: Path, compose: dict[str, Any], redis_store_url: str
) -> None:
    """tmy and tmy-2 as compose runs them (the replayed image, each service's environment,
    one Redis): 60 increments sent to both at once give each value 1…60 exactly once, and
    a schedule every second runs each occurrence once across the two."""
    workdir = replay_image(tmp_path / "root")
    (workdir / "rules" / "replicas.yaml").write_text(REPLICA_RULES)  # the rules volume
    ports = [free_port(), free_port()]
    procs = []
    with contextlib.ExitStack() as files:
        for name, port in zip(("tmy", "tmy-2"), ports, strict=True):
            env = service_env(compose["services"][name], redis_store_url, port, tmp_path)
            err = files.enter_context((tmp_path / f"{name}.log").open("w"))
            procs.append(start_image(workdir, env, err))
    try:
        async with httpx.AsyncClient(timeout=30) as client:
            for port in ports:
                deadline = time.monotonic() + 30
                while True:
                    with contextlib.suppress(httpx.HTTPError):
                        if (await client.get(f"http://127.0.0.1:{port}/healthz")).is_success:
                            break
                    assert time.monotonic() < deadline, (tmp_path / "tmy.log").read_text()
                    await asyncio.sleep(0.2)

            async def hit(i: int) -> int:
                url = f"http://127.0.0.1:{ports[i % 2]}/v1/messages"
                reply = (await client.post(url, json={"text": "hit", "user": f"u{i}"})).json()
                assert reply["rule"] == "hit" and reply["error"] is None, reply
                return int(reply["answer"])

            answers = await asyncio.gather(*(hit(i) for i in range(60)))
        assert sorted(answers) == list(range(1, 61))
        store = open_store(redis_store_url)
        await store.open()
        try:
            deadline = time.monotonic() + 20
            while len(fired := await store.get("var/global/fired") or []) < 3:
                assert time.monotonic() < deadline, "the schedule did not fire"
                await asyncio.sleep(0.25)
        finally:
            await store.close()
        assert len(set(fired)) == len(fired), f"an occurrence ran twice: {fired}"
    finally:
        for proc in procs:
            proc.send_signal(signal.SIGTERM)
        for proc in procs:
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
    assert [p.returncode for p in procs] == [0, 0]


def test_the_commented_napcat_service_connects_where_tmy_serves_onebot() -> None:
    text = COMPOSE.read_text(encoding="utf-8")
    commented = "\n".join(
        line.split("#", 1)[1][1:] for line in text.splitlines() if line.lstrip().startswith("# ")
    )
    block = commented[commented.index("napcat:") :]
    service = yaml.safe_load(block.split("\n\n")[0])["napcat"]
    assert service["image"].startswith("mlikiowa/napcat-docker")
    assert service["depends_on"] == ["tmy"]
    napcat = json.loads(NAPCAT.read_text(encoding="utf-8"))
    (client,) = napcat["network"]["websocketClients"]
    url = urlsplit(client["url"])
    defaults = Settings()
    assert url.scheme == "ws" and url.hostname == "tmy"  # the compose service's name
    assert str(url.port) == DOCKER.env["TMY_HTTP"].rsplit(":", 1)[1]
    assert url.path == defaults.adapters.onebot.path and defaults.adapters.onebot.mode == "reverse"
    assert client["messagePostFormat"] == "array" and client["enable"] is True


def test_the_docs_napcat_settings_let_napcat_in(tmp_path: Path) -> None:
    """docs/deploy.md's config for NapCat: the adapter on, and the listener (0.0.0.0 in the
    image) answering a request that names the service (``Host: tmy:8080``), which it
    refuses without the setting."""
    docs = (REPO / "docs" / "deploy.md").read_text(encoding="utf-8")
    blocks = re.findall(r"```yaml\n(.*?)```", docs, re.S)
    (example,) = [textwrap.dedent(b) for b in blocks if "allowed_hosts" in b]
    config = tmp_path / "tmy.yaml"
    config.write_text(example)
    settings = load_settings(config, env={"TMY_HTTP": DOCKER.env["TMY_HTTP"]})
    assert settings.adapters.onebot.enabled and settings.adapters.onebot.mode == "reverse"
    listen = settings.adapters.http.listen.rsplit(":", 1)[0]
    assert HostPolicy(listen, settings.adapters.http.allowed_hosts).host_problem("tmy:8080") is None
    assert HostPolicy(listen, ()).host_problem("tmy:8080") is not None


# -- the systemd unit and logrotate ------------------------------------------------------------


def unit_sections(text: str) -> dict[str, dict[str, list[str]]]:
    """A systemd unit's ``[Section]`` → key → values (a key may repeat)."""
    sections: dict[str, dict[str, list[str]]] = {}
    current: dict[str, list[str]] = {}
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line.startswith(("#", ";")):
            continue
        if line.startswith("["):
            current = sections.setdefault(line.strip("[]"), {})
            continue
        key, _, value = line.partition("=")
        current.setdefault(key.strip(), []).append(value.strip())
    return sections


def test_the_systemd_unit() -> None:
    service = unit_sections(UNIT.read_text(encoding="utf-8"))["Service"]
    assert int(service["LimitNOFILE"][0]) >= 65536
    assert service["ExecReload"][0].endswith("kill -HUP $MAINPID")
    assert service["User"][0] not in ("root", "0") and service["Restart"][0] == "on-failure"
    assert service["WorkingDirectory"][0].startswith("/")
    assert same_command(shlex.split(service["ExecStart"][0]), readme_run_command())
    assert service["ExecStart"][0].startswith(service["WorkingDirectory"][0])  # its venv
    assert service["RestartPreventExitStatus"] == ["2"]  # a bad config is not retried


def test_systemd_analyze_verifies_the_unit(tmp_path: Path) -> None:
    analyze = shutil.which("systemd-analyze")
    if analyze is None:
        pytest.skip("NO systemd-analyze: deploy/tmy.service was checked structurally only")
    home = tmp_path / "tmy"
    (home / ".venv" / "bin").mkdir(parents=True)
    (home / ".venv" / "bin" / "python3").symlink_to(sys.executable)
    (home / "data").mkdir()
    unit = tmp_path / "tmy.service"
    unit.write_text(UNIT.read_text(encoding="utf-8").replace("/opt/tmy", str(home)))
    done = subprocess.run(
        [analyze, "verify", "--man=no", str(unit)], capture_output=True, text=True, timeout=60
    )
    problems = [
        line for line in done.stderr.splitlines()
        if "tmy.service" in line and "is not executable" not in line
    ]  # fmt: skip
    assert done.returncode == 0 and not problems, done.stderr


@pytest.fixture
def restore_logs() -> Iterator[None]:
    yield
    logs.configure("warning")


def test_logrotate_rotates_the_log_and_tmy_follows_without_a_signal(
    tmp_path: Path, restore_logs: None
) -> None:
    """deploy/logrotate.conf, run by the real logrotate (forced) on tmy's log file: the lines
    before are in tmy.log.1, the lines after in the new tmy.log, none lost or doubled."""
    logrotate = shutil.which("logrotate")
    if logrotate is None:
        pytest.skip("NO logrotate: deploy/logrotate.conf was not run")
    user = pwd.getpwuid(os.getuid()).pw_name
    group = grp.getgrgid(os.getgid()).gr_name
    conf = (
        LOGROTATE.read_text(encoding="utf-8")
        .replace("/var/log/tmy", str(tmp_path))
        .replace("tmy tmy", f"{user} {group}")
    )
    (tmp_path / "logrotate.conf").write_text(conf)
    path = tmp_path / "tmy.log"
    logs.configure("info", path)
    log = logs.get_logger("tmy.test")
    for n in range(50):
        log.info("deploy.line", n=n)
    logs.flush()
    done = subprocess.run(
        [logrotate, "-f", "-s", str(tmp_path / "state"), str(tmp_path / "logrotate.conf")],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    for n in range(50, 100):
        log.info("deploy.line", n=n)
        if n == 50:
            logs.flush()  # the flush that finds the name moved; n=50 went to the old file
    logs.flush()

    def numbers(p: Path) -> list[int]:
        return [json.loads(line)["n"] for line in p.read_text().splitlines()]

    rotated = numbers(tmp_path / "tmy.log.1")
    assert rotated == list(range(51)) and numbers(path) == list(range(51, 100))
