"""The options every subcommand takes (before or after it), each with a ``TMY_*`` twin."""

from __future__ import annotations

import argparse
import os
from collections.abc import Iterable
from typing import Any

from tmy.config import Settings, load_settings
from tmy.extension import Extension
from tmy.message import Message

# name -> (help, env var)
COMMON = {
    "config": (
        "config file; its relative paths are relative to its directory (default: "
        "./config/tmy.yaml, else the checkout's config/tmy.yaml)",
        "TMY_CONFIG",
    ),
    "rules": ("rules directory", "TMY_RULES"),
    "store": ("store URL: sqlite:///data/tmy.db or redis://host:6379/0", "TMY_STORE"),
    "user": (
        "user id for chat/ask/vars/explain/mcp-serve (default: $USER, else console)",
        "TMY_USER",
    ),
    "user-name": (
        "display name (USER_NAME) for chat/ask/explain (default: the user id)",
        "TMY_USER_NAME",
    ),
    "chat": ("chat id for chat/ask/vars/mcp-serve (default: private chat)", "TMY_CHAT"),
    "platform": (
        "platform name for chat/ask/vars/mcp-serve (default: console; mcp-serve: mcp)",
        "TMY_PLATFORM",
    ),
    "log-level": ("debug | info | warning | error", "TMY_LOG_LEVEL"),
}


def common_parser() -> argparse.ArgumentParser:
    """The parent parser of the common options (absent ones stay absent: SUPPRESS)."""
    parent = argparse.ArgumentParser(add_help=False)
    for name, (help_, env) in COMMON.items():
        parent.add_argument(f"--{name}", default=argparse.SUPPRESS, help=f"{help_} [{env}]")
    return parent


def option(args: argparse.Namespace, name: str) -> Any:
    """A common option: the flag, else its environment variable, else None."""
    value = getattr(args, name.replace("-", "_"), None)
    if value is None:
        value = os.environ.get(COMMON[name][1]) or None
    return value


def settings_from(args: argparse.Namespace, extensions: Iterable[Extension] = ()) -> Settings:
    """The settings: config file, environment, then the common options; ``extensions``
    parse the config sections they claim."""
    return load_settings(
        option(args, "config"),
        extensions=extensions,
        rules=option(args, "rules"),
        store=option(args, "store"),
        log_level=option(args, "log-level"),
    )


def identity(args: argparse.Namespace) -> dict[str, str]:
    """Who the CLI speaks as: ``--user``/``--chat``/``--platform``/``--user-name``."""
    who = {
        "user": option(args, "user") or os.environ.get("USER") or "console",
        "chat": option(args, "chat") or "",
        "platform": option(args, "platform") or "console",
    }
    name = option(args, "user-name")
    if name:
        who["user_name"] = name
    return who


def sender(args: argparse.Namespace) -> Message:
    """:func:`identity` as the message a command acts for."""
    return Message("", **identity(args))
