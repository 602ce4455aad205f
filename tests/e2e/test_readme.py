"""Every shell command in README.md is run by a test.

The commands are read from the README's fenced ``sh``/``bash``/``shell``/``console``
blocks (tests/e2e/readme_commands.py). Each one must be listed in exactly one of:

- ``runs(...)`` on a test in this module, which runs the command for real — in a copy of
  the checkout (``Sandbox``), by ``bash -c`` with ``python3`` the interpreter running the
  suite. Where the README names a place that is not here (``localhost:8080``, a Redis at
  10.0.0.5, an API key ``sk-…``), the test swaps in its own with :func:`local`, which fails
  when the README's text changed so the swap no longer applies;
- ``ELSEWHERE``: ``"tests/path.py::test_name"``, a test in another module that runs it
  (checked to exist);
- ``NOT_HERE``: why it cannot run in this suite (shown as a skip with that reason).

A README command in none of them fails ``test_every_readme_command_is_covered``, naming
the line; an entry whose command left the README fails as stale. To document a new
command, add it to the README and to one of the three.
"""

from __future__ import annotations

import contextlib
import importlib.util
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from importlib import metadata
from pathlib import Path
from typing import Any

import httpx
import pytest
from packaging.requirements import Requirement

from tests.e2e.readme_commands import Command, commands
from tests.support.checkout import shipped

pytestmark = pytest.mark.slow  # processes (tests/e2e is the slow lane anyway)

REPO = Path(__file__).resolve().parents[2]
README = REPO / "README.md"
COMMANDS: list[Command] = commands(README.read_text(encoding="utf-8"))
TEXTS = {c.text for c in COMMANDS}

VENV = "python3 -m venv .venv && . .venv/bin/activate"
SERVE = "python3 -m pip install -e . && python3 run.py"
SUITE = "python3 -m pip install -e '.[test]' && python3 -m pytest"
CURL = "curl -s localhost:8080/v1/messages -H 'Content-Type: application/json' -d "
CURL_MESSAGES = CURL + """'{"text": ".hello", "user": "ann"}'"""
PKILL = "pkill -HUP -f 'python3 ([^ ]*/)?run\\.py( serve)?$'"
RELOAD = "python3 run.py reload"
CURL_OPENAI = (
    "curl -s localhost:8080/v1/chat/completions -H 'Authorization: Bearer sk-tmy-change-me' "
    '-H \'Content-Type: application/json\' -d \'{"model": "tmy", "user": "ann", '
    '"messages": [{"role": "user", "content": ".ping"}]}\''
)
RELOAD_ELSEWHERE = "python3 run.py reload --url http://10.0.0.5:8080 --key sk-…"
LOG_SERVE = "python3 run.py serve 2> tmy.log &"
LOG_GREP = (
    """grep '"trace_id":"3f2a9c0d1b7e4e55"' tmy.log """
    """| jq -c '.steps[]? | {uri, input, result, error}'"""
)
REDIS = "python3 run.py --store redis://127.0.0.1:6379/0 serve"
REDIS_ENV = "TMY_STORE='redis://10.0.0.5:6379/0?prefix=mybot' python3 run.py"
CLUSTER = "redis+cluster://10.0.0.5:6379,10.0.0.6:6379/?prefix=mybot"
CLUSTER_ENV = f"TMY_STORE='{CLUSTER}' python3 run.py"
OPENAI = "OPENAI_API_KEY=sk-... python3 run.py"
OLLAMA_URL = "http://127.0.0.1:11434/v1"
OLLAMA = f"OPENAI_API_KEY=x OPENAI_BASE_URL={OLLAMA_URL} TMY_LLM_MODEL=qwen2.5 python3 run.py"

BACKUP = "python3 run.py backup backups/tmy.jsonl.gz"
RESTORE_DRY = "python3 run.py restore backups/tmy.jsonl.gz --dry-run"
RESTORE_REPLACE = "python3 run.py restore backups/tmy.jsonl.gz --replace"
MIGRATE_BACKUP = "python3 run.py backup migrate.jsonl.gz"
MIGRATE_RESTORE = "python3 run.py restore migrate.jsonl.gz --store redis://10.0.0.5:6379/0"
MIGRATED = "TMY_STORE='redis://10.0.0.5:6379/0' python3 run.py"
KB = [
    "python3 run.py kb add faq examples/knowledge/faq/",
    "python3 run.py kb list",
    "python3 run.py kb list faq",
    'python3 run.py kb search faq "how long until my refund arrives" --top 2',
    'python3 run.py kb search faq "退货要多久" --json',
    "python3 run.py kb rebuild faq",
    "python3 run.py kb del faq shipping.md",
    "python3 run.py kb del faq",
]
CLAUDE_MCP = (
    "claude mcp add --transport http tmy http://127.0.0.1:8080/mcp "
    '--header "Authorization: Bearer $TMY_API_KEY"'
)
DOCKER_BUILD = "docker build -t tmy ."
DOCKER_RUN = "docker run -d -p 127.0.0.1:8080:8080 -v tmy-data:/app/data tmy"
COMPOSE_UP = "docker compose up -d"
COMPOSE_REPLICAS = "docker compose --profile replicas up -d"

RUNS: dict[str, str] = {}  # command -> the test of this module that runs it

# command -> "tests/<path>.py::<test>" that runs it (another module's test)
DOCKER_TEST = "tests/e2e/test_deploy.py::test_the_image_builds_and_its_container_answers_healthz"
ELSEWHERE: dict[str, str] = {
    # builds the image and runs its container, asking /healthz (a loud skip without an engine)
    DOCKER_BUILD: DOCKER_TEST,
    DOCKER_RUN: DOCKER_TEST,
}

# command -> why it cannot run in this suite (a visible skip)
NOT_HERE: dict[str, str] = {
    CLAUDE_MCP: "needs Claude Code; tests/mcpserve/test_http.py connects the mcp SDK's own "
    "streamable HTTP client to /mcp with a key, as Claude Code would",
    COMPOSE_UP: "needs a Docker engine and the compose plugin; tests/e2e/test_deploy.py validates "
    "compose.yaml (docker compose config where it exists, its structure always)",
    COMPOSE_REPLICAS: "needs a Docker engine and the compose plugin; tests/e2e/test_deploy.py runs "
    "the two replicas' commands and environments on a real Redis without Docker",
}


def runs(*texts: str) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Register the README commands the decorated test runs."""

    def mark(test: Callable[..., Any]) -> Callable[..., Any]:
        for text in texts:
            assert text not in RUNS, f"two tests claim {text!r}"
            RUNS[text] = test.__name__
        return test

    return mark


def local(command: str, **swaps: str) -> str:
    """``command`` with the README's places swapped for this test's (``old=new`` pairs given
    as ``{"old": "new"}`` through ``**``); each old text must be there."""
    for old, new in swaps.items():
        assert old in command, f"the README command changed: {old!r} is not in {command!r}"
        command = command.replace(old, new)
    return command


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


NOT_COPIED = shutil.ignore_patterns(
    ".git", ".venv", "data", "__pycache__", "*.egg-info", ".*_cache", ".benchmarks",
    "results", "tmy.log",
)  # fmt: skip


def copy_checkout(to: Path) -> None:
    """The checkout's files as git sees them (tracked, and new files not ignored) — not its
    data/, caches or .venv, and nothing another process is writing into a cache meanwhile."""
    listed = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        cwd=REPO, capture_output=True, timeout=60,
    )  # fmt: skip
    if listed.returncode != 0:  # not a git checkout (an unpacked archive): copy the tree
        shutil.copytree(REPO, to, ignore=NOT_COPIED)
        return
    operators = {p.relative_to(REPO).as_posix() for p in (REPO / "rules").rglob("*")}
    operators -= {p.relative_to(REPO).as_posix() for p in shipped("rules")}
    for name in filter(None, listed.stdout.decode().split("\0")):
        if name in operators:  # rules an operator added to rules/: the README shows the starter set
            continue
        source = REPO / name
        if source.is_file():  # a file deleted but not yet staged is listed too
            (to / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, to / name)
            if name.endswith(".py"):
                copy_bytecode(source, to / name)


def copy_bytecode(source: Path, copy: Path) -> None:
    """Beside a copied module, its bytecode as this interpreter compiled it in the checkout.

    The suite runs with ``PYTHONDONTWRITEBYTECODE`` where the Dockerfile sets it, so every
    ``python3 run.py`` in a sandbox would compile all of tmy again (~0.2 s of CPU each, a
    few dozen times per test). Python checks a pyc against its source's mtime and size, both
    kept by ``copy2``: one that no longer matches is ignored and the source compiled as
    before. A pyc is written whole and renamed into place, so a copy is never half of one.
    """
    cached = Path(importlib.util.cache_from_source(str(source)))
    if cached.is_file():
        target = Path(importlib.util.cache_from_source(str(copy)))
        target.parent.mkdir(exist_ok=True)
        shutil.copy2(cached, target)


class Sandbox:
    """A copy of the checkout to run README commands in (its data/, its rules/), with
    ``python3`` on PATH being this interpreter and no TMY_* / OPENAI_* from outside."""

    def __init__(self, tmp_path: Path) -> None:
        self.root = tmp_path / "checkout"
        copy_checkout(self.root)
        self.bin = tmp_path / "bin"  # pkill/pgrep shims (confine_signals)
        self.bin.mkdir()
        here = Path(sys.executable).parent
        if not (here / "python3").exists() or not (here / "python3").samefile(sys.executable):
            here = self.bin  # no python3 beside this interpreter: a shim that runs it
            (here / "python3").write_text(f'#!/bin/sh\nexec "{sys.executable}" "$@"\n')
            (here / "python3").chmod(0o755)
        base = {k: v for k, v in os.environ.items() if not k.startswith(("TMY_", "OPENAI_"))}
        path = os.pathsep.join(dict.fromkeys([str(self.bin), str(here), base.get("PATH", "")]))
        self.env = {**base, "PATH": path}

    def run(
        self, command: str, *, stdin: str = "", timeout: float = 120, **env: str
    ) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            ["bash", "-c", command],
            cwd=self.root,
            env={**self.env, **env},
            input=stdin,
            capture_output=True,
            text=True,
            timeout=timeout,
        )

    def confine_signals(self, *sessions: int) -> None:
        """``pkill``/``pgrep`` on PATH that see only these sessions' processes (the README's
        pattern is matched for real, but parallel tests' daemons are never signalled)."""
        listed = ",".join(str(s) for s in sessions)
        for tool in ("pkill", "pgrep"):
            real = shutil.which(tool)
            assert real, f"{tool} is not installed"
            shim = self.bin / tool
            shim.write_text(f'#!/bin/sh\nexec "{real}" "$@" -s {listed}\n')
            shim.chmod(0o755)


class Daemon:
    """A README command that starts the daemon, on a free port, in its own session.

    Its standard error is ``log``; a command that sends it elsewhere itself and puts the
    daemon in the background (``serve 2> tmy.log &``) gives ``background=True`` and the
    file it writes: the shell returns at once and the daemon runs on in its session.
    """

    def __init__(
        self, box: Sandbox, command: str, log: Path, *, background: bool = False, **env: str
    ) -> None:
        self.port = free_port()
        self.log = log
        self.background = background
        self.proc = subprocess.Popen(
            ["bash", "-c", command],
            cwd=box.root,
            env={**box.env, "TMY_HTTP": f"127.0.0.1:{self.port}", **env},
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL if background else log.open("w"),
            start_new_session=True,
        )
        self.url = f"http://127.0.0.1:{self.port}"

    def wait_healthy(self, timeout: float = 60) -> dict[str, Any]:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if not self.background:
                assert self.proc.poll() is None, f"the daemon exited:\n{self.log.read_text()}"
            with contextlib.suppress(httpx.HTTPError):
                got = httpx.get(f"{self.url}/healthz", timeout=2)
                if got.status_code == 200:
                    return got.json()
            time.sleep(0.1)
        raise AssertionError(f"no /healthz within {timeout} s:\n{self.log.read_text()}")

    def events(self, name: str) -> list[dict[str, Any]]:
        found = []
        if not self.log.exists():
            return found
        for line in self.log.read_text(encoding="utf-8").splitlines():
            with contextlib.suppress(ValueError):
                record = json.loads(line)
                if record.get("event") == name:
                    found.append(record)
        return found

    def wait_event(self, name: str, timeout: float = 30) -> dict[str, Any]:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if seen := self.events(name):
                return seen[-1]
            time.sleep(0.05)
        raise AssertionError(f"no {name} in the log:\n{self.log.read_text()}")

    def say(self, text: str, user: str = "ann") -> dict[str, Any]:
        got = httpx.post(f"{self.url}/v1/messages", json={"text": text, "user": user}, timeout=30)
        assert got.status_code == 200, got.text
        return got.json()

    def stop(self) -> int:
        """SIGTERM, as an operator (or systemd) stops it; its exit status (a background
        daemon's: 0 once its session is empty, as its shell's status says nothing)."""
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.proc.pid, signal.SIGTERM)
        try:
            code = self.proc.wait(30)
            if self.background:
                deadline = time.monotonic() + 30
                while _session_alive(self.proc.pid) and time.monotonic() < deadline:
                    time.sleep(0.05)
                code = 1 if _session_alive(self.proc.pid) else 0
            return code
        finally:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, signal.SIGKILL)


def _session_alive(group: int) -> bool:
    try:
        os.killpg(group, 0)
    except ProcessLookupError:
        return False
    return True


@contextlib.contextmanager
def daemon(
    box: Sandbox, command: str, tmp_path: Path, log: Path | None = None, **env: str
) -> Iterator[Daemon]:
    """The daemon ``command`` starts, healthy; stopped by SIGTERM after, exiting 0."""
    background = log is not None
    log = log or tmp_path / f"daemon-{free_port()}.log"
    running = Daemon(box, command, log, background=background, **env)
    try:
        running.wait_healthy()
        yield running
        assert running.stop() == 0, running.log.read_text()
    finally:
        running.stop()


RELOADED = re.compile(r"reloaded: 3 rules from 2 files \([\d.]+ ms\)\n\Z")


def wait_for_cmdline(pid: int, shown: str, timeout: float = 30) -> None:
    """Until process ``pid``'s command line reads ``shown`` (as ``pgrep -a`` prints it)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        raw = Path(f"/proc/{pid}/cmdline").read_bytes()
        if raw.rstrip(b"\0").replace(b"\0", b" ").decode() == shown:
            return
        time.sleep(0.05)
    raise AssertionError(f"process {pid} never became {shown!r}")


@pytest.fixture
def box(tmp_path: Path) -> Sandbox:
    return Sandbox(tmp_path)


# -- the mapping -------------------------------------------------------------------------------


def _test_exists(ref: str) -> bool:
    path, _, name = ref.partition("::")
    file = REPO / path
    return file.is_file() and re.search(rf"^(async )?def {re.escape(name)}\(", file.read_text(
        encoding="utf-8"), re.M) is not None  # fmt: skip


def uncovered(found: list[Command]) -> list[str]:
    """``README.md:LINE: command`` for each command no test runs, maps or excuses."""
    covered = RUNS.keys() | ELSEWHERE.keys() | NOT_HERE.keys()
    return [f"README.md:{c.line}: {c.text}" for c in found if c.text not in covered]


def test_every_readme_command_is_covered() -> None:
    covered = RUNS.keys() | ELSEWHERE.keys() | NOT_HERE.keys()
    missing = uncovered(COMMANDS)
    assert not missing, (
        "README commands that no test runs — run each in a test of tests/e2e/test_readme.py "
        "(@runs(command)), or map it in ELSEWHERE to the test that runs it, or say in "
        "NOT_HERE why it cannot run here:\n" + "\n".join(missing)
    )
    stale = sorted(covered - TEXTS)
    assert not stale, f"mapped commands that are no longer in the README: {stale}"
    twice = [t for t in TEXTS if sum(t in m for m in (RUNS, ELSEWHERE, NOT_HERE)) > 1]
    assert not twice, f"mapped more than once: {twice}"
    gone = {c: ref for c, ref in ELSEWHERE.items() if not _test_exists(ref)}
    assert not gone, f"ELSEWHERE names tests that do not exist: {gone}"


def test_a_new_command_in_any_shell_block_is_caught() -> None:
    """What the lead pastes (a Deploy section, say) is read the same way: every block kind,
    indented blocks, continuations, trailing comments, console prompts."""
    pasted = (
        "## Deploy\n\n```bash\n# build it\ndocker compose logs -f   # tmy + Redis\n"
        "python3 run.py backup /tmp/b.jsonl \\\n    --store x\n```\n\n"
        "- step:\n\n  ```console\n  $ python3 run.py ask '.ping'  # the reply\n  pong (console)\n"
        "  ```\n\n```yaml\nnot: a command\n```\n"
    )
    found = commands(README.read_text(encoding="utf-8") + pasted)
    assert [c.text for c in found[-3:]] == [
        "docker compose logs -f",
        "python3 run.py backup /tmp/b.jsonl --store x",
        "python3 run.py ask '.ping'",
    ]
    assert found[-1].output == ("pong (console)",)
    assert [line.split(": ", 1)[1] for line in uncovered(found)] == [
        "docker compose logs -f", "python3 run.py backup /tmp/b.jsonl --store x",
        "python3 run.py ask '.ping'",
    ]  # fmt: skip


@pytest.mark.parametrize("command", sorted(NOT_HERE) or [None])
def test_commands_that_cannot_run_here(command: str | None) -> None:
    if command is None:
        pytest.skip("no README command is marked NOT_HERE")
    pytest.skip(f"README command not run here: {command!r}: {NOT_HERE[command]}")


def test_the_readme_opens_with_the_venv_and_the_two_set_up_commands() -> None:
    first = [c.text for c in COMMANDS[:3]]
    assert first == [VENV, SERVE, SUITE]
    ci = (REPO / ".ci" / "run").read_text(encoding="utf-8")
    assert SUITE.replace("python3 -m pytest", "") in ci and "python3 -m pytest" in ci


# -- the quick start ---------------------------------------------------------------------------


@runs(VENV)
def test_the_venv_step_creates_and_enters_a_virtual_environment(tmp_path: Path) -> None:
    box = Sandbox(tmp_path)
    done = box.run(VENV + " && python3 -c 'import sys; print(sys.prefix)'", timeout=180)
    assert done.returncode == 0, done.stderr
    assert Path(done.stdout.strip()) == box.root / ".venv"
    assert (box.root / ".venv" / "bin" / "pip").exists()  # the next line's pip is the venv's
    assert ".venv/" in (REPO / ".gitignore").read_text(encoding="utf-8").splitlines()


def _satisfied(extra: str | None) -> list[str]:
    """The requirements of tmy (of ``extra``) that the running environment does not meet."""
    unmet = []
    for spec in metadata.requires("tmy") or []:
        req = Requirement(spec)
        wanted = req.marker is None or req.marker.evaluate({"extra": extra or ""})
        if not wanted or (req.marker is None and extra is not None):
            continue
        try:
            have = metadata.version(req.name)
        except metadata.PackageNotFoundError:
            unmet.append(f"{req} (not installed)")
            continue
        if not req.specifier.contains(have, prereleases=True):
            unmet.append(f"{req} (have {have})")
    return unmet


@runs(SUITE)
@pytest.mark.timeout(600)
def test_the_install_steps_resolve_and_are_installed(box: Sandbox) -> None:
    """The ``pip install`` halves: the test command's (``-e '.[test]'``, a superset of the
    first's ``-e .``) runs as ``--dry-run`` in the copy — pip builds the checkout's metadata
    and resolves every dependency, changing nothing — and what both install is checked
    installed in the environment running this suite. The ``pytest`` half of the test
    command is the run this test is part of (and .ci/run's, checked above)."""
    assert SERVE.split(" && ")[0] + "[test]" == SUITE.split(" && ")[0].replace("'", "")
    install = SUITE.split(" && ")[0]
    done = box.run(install.replace("install ", "install --dry-run ", 1), timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "Would install tmy-" in done.stdout
    assert _satisfied(None) == [] and _satisfied("test") == []


@runs(SERVE, CURL_MESSAGES, PKILL, RELOAD)
def test_the_quick_start_daemon_answers_and_reloads_by_signal(box: Sandbox, tmp_path: Path) -> None:
    """``python3 run.py`` exactly as the README starts it; the README's curl; its ``pkill``
    reloads that daemon and spares a ``run.py chat`` one-shot; ``run.py reload``; SIGTERM."""
    start = SERVE.split(" && ")[1]
    with daemon(box, start, tmp_path) as bot:
        health = bot.wait_healthy()
        assert health["status"] == "ok" and health["adapters"]["http"]["state"] == "connected"
        done = box.run(local(CURL_MESSAGES, **{"localhost:8080": f"localhost:{bot.port}"}))
        answer = json.loads(done.stdout)
        assert (answer["rule"], answer["answer"]) == (
            "my-first-rule", "Hello ann! That is greeting number 1 from you."
        )  # fmt: skip
        chat = subprocess.Popen(
            ["bash", "-c", "python3 run.py chat"], cwd=box.root, env=box.env,
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
            text=True, start_new_session=True,
        )  # fmt: skip
        try:
            wait_for_cmdline(chat.pid, "python3 run.py chat")  # bash has exec'd python3
            box.confine_signals(bot.proc.pid, chat.pid)
            listed = box.run("pgrep -af 'python3 ([^ ]*/)?run\\.py( serve)?$'").stdout
            assert [line.split(" ", 1)[1] for line in listed.splitlines()] == ["python3 run.py"]
            pattern = re.compile(PKILL.split("'")[1])  # the same ERE, as pkill reads it
            daemons = ["python3 run.py", "python3 run.py serve", "python3 /opt/tmy/run.py",
                       "/opt/tmy/.venv/bin/python3 run.py"]  # fmt: skip
            assert all(pattern.search(cmdline) for cmdline in daemons)
            others = ["python3 run.py chat", "vim run.py", "less run.py", "python3 run.py ask x"]
            assert not any(pattern.search(cmdline) for cmdline in others)
            assert box.run(PKILL).returncode == 0
            assert bot.wait_event("reload.done")["reason"] == "SIGHUP"
            time.sleep(0.5)
            assert chat.poll() is None, "the README's pattern signalled `run.py chat`"
        finally:
            chat.kill()
            chat.wait()
        done = box.run(RELOAD, TMY_HTTP=f"127.0.0.1:{bot.port}")
        assert done.returncode == 0 and RELOADED.match(done.stdout), done.stdout + done.stderr
        assert bot.say(".hello")["answer"] == "Hello ann! That is greeting number 2 from you."


# -- one-shot commands: each run for real, its output checked ---------------------------------

ONE_SHOT: dict[str, tuple[str, str]] = {  # command -> (stdin, a regex its stdout must match)
    'python3 run.py ask ".ping"': ("", r"\Apong \(console\)\n\Z"),
    'python3 run.py ask ".hello" --json': ("", r'"rule": "my-first-rule"'),
    "python3 run.py chat": (".ping\n/quit\n", r"pong \(console\)"),
    "python3 run.py check": ("", r"\Aok: 3 rules, 3 triggers, 1 variables in 2 files\n"),
    'python3 run.py explain ".hello"': ("", r"\Amatched rule 'my-first-rule' by trigger '.hello'"),
    "python3 run.py test rules/": ("", r"\n6 passed, 0 failed\n\Z"),
    'python3 run.py --rules examples ask "joke"': ("", r"\AWhy do programmers prefer dark mode"),
    "python3 run.py test examples/": ("", r" passed, 0 failed\n\Z"),
    "python3 run.py test docs/cookbook/": ("", r" passed, 0 failed\n\Z"),
    "python3 run.py test docs/cookbook/ -k 签到 --json": ("", r'"failed": 0'),
    'python3 run.py --rules examples explain "tell me a joke" --user ann': ("", r"."),
    "python3 run.py --rules examples explain secret --group": ("", r"."),
    'python3 run.py --rules docs/cookbook/lottery.yaml --user ann explain "抽奖" --seed 42': (
        "",
        r"drew: +'二等奖：保温杯' from PICK prizes",
    ),
    "python3 run.py --rules docs/cookbook/digest.yaml cron fire digest --dry-run": (
        "",
        r"\Adry run of digest at .*: nothing is sent or stored\n",
    ),
    "python3 run.py --rules docs/cookbook/welcome.yaml explain --event member_join "
    "--user ann --chat group:1": (
        "",
        r"\Amatched rule 'welcome' for the event member_join .*\n(.*\n)*"
        r"reply: '欢迎加入！你是本群第 1 位新成员，群规见群公告。'\nwith: 1 mention\n",
    ),
    "python3 run.py test docs/cookbook/join_approval.yaml": ("", r"\n8 passed, 0 failed\n\Z"),
}


@runs(*ONE_SHOT)
@pytest.mark.parametrize("command", sorted(ONE_SHOT))
def test_one_shot_commands_do_what_the_readme_says(box: Sandbox, command: str) -> None:
    stdin, shape = ONE_SHOT[command]
    done = box.run(command, stdin=stdin)
    assert done.returncode == 0, done.stdout + done.stderr
    assert re.search(shape, done.stdout), done.stdout
    shown = next((c.output for c in COMMANDS if c.text == command), ())
    printed = done.stdout.splitlines()
    for line in shown:  # a console block: its lines without an ellipsis are printed verbatim
        if "…" not in line:
            assert line in printed, f"the README shows {line!r}; it printed:\n{done.stdout}"


# -- the API keys, a remote reload -------------------------------------------------------------


@runs(CURL_OPENAI, RELOAD_ELSEWHERE)
def test_the_openai_facade_with_api_keys_and_a_reload_elsewhere(
    box: Sandbox, tmp_path: Path
) -> None:
    keys = "sk-tmy-change-me,sk-tmy-second"
    with daemon(box, "python3 run.py", tmp_path, TMY_HTTP_API_KEYS=keys) as bot:
        done = box.run(local(CURL_OPENAI, **{"localhost:8080": f"localhost:{bot.port}"}))
        body = json.loads(done.stdout)
        assert body["choices"][0]["message"]["content"] == "pong (openai)", done.stdout
        here = {"http://10.0.0.5:8080": bot.url, "sk-…": "sk-tmy-second"}
        done = box.run(local(RELOAD_ELSEWHERE, **here))
        assert done.returncode == 0 and RELOADED.match(done.stdout), done.stdout + done.stderr
        wrong = box.run(local(RELOAD_ELSEWHERE, **{**here, "sk-…": "sk-wrong"}))
        assert wrong.returncode != 0


# -- logs to a file, read back with grep and jq ------------------------------------------------


@runs(LOG_SERVE, LOG_GREP)
def test_a_run_is_found_in_the_log_by_its_trace_id(box: Sandbox, tmp_path: Path) -> None:
    assert shutil.which("jq"), "jq is not installed: the README's log example needs it"
    with daemon(box, LOG_SERVE, tmp_path, log=box.root / "tmy.log") as bot:
        trace = bot.say(".hello")["trace_id"]
        bot.wait_event("run.done")
        done = box.run(local(LOG_GREP, **{"3f2a9c0d1b7e4e55": trace}))
        steps = [json.loads(line) for line in done.stdout.splitlines()]
        assert [s["uri"] for s in steps] == ["my-first-rule/0", "my-first-rule/1"], done.stderr
        assert steps[1]["result"] == "Hello ann! That is greeting number 1 from you."


# -- Redis, Redis Cluster ----------------------------------------------------------------------


def _serves_on(box: Sandbox, tmp_path: Path, command: str, store_kind: str) -> None:
    with daemon(box, command, tmp_path) as bot:
        health = bot.wait_healthy()
        assert health["store"]["state"] == "ok", health
        assert bot.say(".hello")["answer"] == "Hello ann! That is greeting number 1 from you."
        assert bot.say(".hello")["answer"].endswith("number 2 from you.")
        assert bot.events("app.ready")[-1]["store"].startswith(store_kind)


@runs(REDIS, REDIS_ENV)
def test_the_daemon_on_redis(box: Sandbox, tmp_path: Path, redis_store_url: str) -> None:
    """Each command on the suite's Redis under this test's own prefix (not database 0)."""
    first = local(REDIS, **{"redis://127.0.0.1:6379/0": redis_store_url})
    _serves_on(box, tmp_path, first, "redis")
    second = local(REDIS_ENV, **{"redis://10.0.0.5:6379/0?prefix=mybot": redis_store_url + "-b"})
    _serves_on(box, tmp_path, second, "redis")


@runs(CLUSTER_ENV)
def test_the_daemon_on_a_redis_cluster(
    box: Sandbox, tmp_path: Path, cluster_store_url: str
) -> None:
    here = local(CLUSTER_ENV, **{CLUSTER: cluster_store_url})
    _serves_on(box, tmp_path, here, "redis")


# -- a real LLM endpoint -----------------------------------------------------------------------


@runs(OPENAI, OLLAMA)
async def test_the_daemon_against_an_openai_compatible_endpoint(
    box: Sandbox, tmp_path: Path, provider: Any
) -> None:
    """The Ollama line against a loopback stand-in for Ollama (examples/llm.yaml served);
    the OpenAI line starts, serves and stops (no request goes to OpenAI from here)."""
    shutil.copy(box.root / "examples" / "llm.yaml", box.root / "rules" / "llm.yaml")
    here = local(OLLAMA, **{OLLAMA_URL: provider.base_url})
    with daemon(box, here, tmp_path) as bot:
        answer = await _say(bot, "ai hello")
        assert answer["answer"] == "echo: hello", answer
        assert not bot.events("llm.mock")
    assert [body["model"] for body in provider.seen()] == ["qwen2.5"]
    with daemon(box, OPENAI, tmp_path) as bot:
        assert (await _say(bot, ".ping"))["answer"] == "pong (http)"
        assert not bot.events("llm.mock"), "a key is set: the mock must not answer"


async def _say(bot: Daemon, text: str) -> dict[str, Any]:
    """As :meth:`Daemon.say`, without blocking the loop the fake provider answers on."""
    async with httpx.AsyncClient(timeout=30) as client:
        got = await client.post(f"{bot.url}/v1/messages", json={"text": text, "user": "ann"})
    assert got.status_code == 200, got.text
    return got.json()


# -- backup, restore, and the move to Redis ----------------------------------------------------


@runs(BACKUP, RESTORE_DRY, RESTORE_REPLACE, MIGRATE_BACKUP, MIGRATE_RESTORE, MIGRATED)
def test_backup_restore_and_the_move_to_redis(
    box: Sandbox, tmp_path: Path, redis_store_url: str
) -> None:
    assert box.run('python3 run.py ask ".hello" --user ann').returncode == 0
    done = box.run(BACKUP)
    assert done.returncode == 0 and (box.root / "backups" / "tmy.jsonl.gz").is_file(), done.stderr
    greet = 'python3 run.py ask ".hello" --user ann'
    assert box.run(greet).returncode == 0  # a second greeting, undone by the restore
    dry = box.run(RESTORE_DRY)
    assert dry.returncode == 0, dry.stdout + dry.stderr
    done = box.run(RESTORE_REPLACE)
    assert done.returncode == 0, done.stdout + done.stderr
    again = box.run('python3 run.py ask ".hello" --user ann')
    assert again.stdout == "Hello ann! That is greeting number 2 from you.\n", again.stdout
    # the move: backup of SQLite, restore into an empty Redis, the daemon on that Redis
    assert box.run(MIGRATE_BACKUP).returncode == 0
    here = {"redis://10.0.0.5:6379/0": redis_store_url}
    done = box.run(local(MIGRATE_RESTORE, **here))
    assert done.returncode == 0, done.stdout + done.stderr
    with daemon(box, local(MIGRATED, **here), tmp_path) as bot:
        assert bot.wait_healthy()["store"]["state"] == "ok"
        assert bot.events("app.ready")[-1]["store"].startswith("redis")
        # the console user's greetings came along (the daemon's HTTP users are another platform)
        moved = box.run('python3 run.py ask ".hello" --user ann', TMY_STORE=redis_store_url)
        assert moved.stdout == "Hello ann! That is greeting number 3 from you.\n", moved.stderr


# -- the knowledge base's commands --------------------------------------------------------------


@runs(*KB)
def test_the_kb_commands_on_the_shipped_example_documents(box: Sandbox) -> None:
    outs = []
    for command in KB:
        done = box.run(command)
        assert done.returncode == 0, f"{command}: {done.stdout}{done.stderr}"
        outs.append(done.stdout)
    added, bases, docs, search, search_zh, rebuilt, deleted, dropped = outs
    assert added.startswith("faq: 3 added")
    assert bases.startswith("faq: 3 documents")
    assert all(name in docs for name in ("returns.md", "shipping.md", "退货.md"))
    assert search.startswith("1. returns.md (chars ") and "score" in search
    found = json.loads(search_zh)
    assert found["passages"][0]["source"] == "退货.md" and found["passages"][0]["score"] > 0
    assert rebuilt.startswith("faq: 3 added") and "shipping.md" in deleted
    assert "deleted" in dropped
    assert box.run("python3 run.py kb list").stdout.startswith("no knowledge bases")
