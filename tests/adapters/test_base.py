"""tmy.adapters.base.AdapterHealth: the state every adapter reports, counted and scrubbed
the same way in each (``connected`` once per connection, ``failed`` without credentials)."""

from __future__ import annotations

import asyncio

from tmy import metrics, redact
from tmy.adapters.base import AdapterHealth, cancel_tasks, placeholder
from tmy.message import Attachment


def counted(name: str, adapter: str) -> float:
    return metrics.REGISTRY.get_sample_value(name, {"adapter": adapter}) or 0.0


def test_connected_counts_a_connection_once_and_a_later_one_as_a_reconnect() -> None:
    health = AdapterHealth()
    assert health.connected("unit-base") is True
    assert health.connected("unit-base") is False  # a long poll answered again: no new count
    health.set("reconnecting", "lost")
    assert health.connected("unit-base") is True
    assert health.state == "connected" and health.error is None
    assert counted("tmy_adapter_connects_total", "unit-base") == 2
    assert counted("tmy_adapter_reconnects_total", "unit-base") == 1


def test_failed_keeps_credentials_out_of_the_state_and_the_returned_text() -> None:
    redact.add("s3cret-token-for-health")
    health = AdapterHealth()
    said = health.failed("refused s3cret-token-for-health")
    assert health.state == "failed"
    assert "s3cret-token-for-health" not in said and health.error == said


def test_stopped_keeps_a_failure_shown() -> None:
    health = AdapterHealth()
    health.set("connected")
    health.stopped()
    assert health.state == "stopped"
    health.failed("the token was refused")
    health.stopped()
    assert (health.state, health.error) == ("failed", "the token was refused")


async def test_cancel_tasks_ends_what_runs_skips_what_never_started() -> None:
    async def forever() -> None:
        await asyncio.Event().wait()

    async def broken() -> None:
        raise RuntimeError("crashed before the stop")

    running, crashed = asyncio.create_task(forever()), asyncio.create_task(broken())
    await asyncio.sleep(0)
    await cancel_tasks(running, None, crashed)
    assert running.cancelled() and crashed.done()


def test_a_media_only_message_reads_as_the_same_placeholder_on_every_platform() -> None:
    image, voice = Attachment("image", url="u1"), Attachment("voice", file_id="f1")
    assert placeholder([image, voice]) == "[image] [voice]"
    assert placeholder(()) == ""
