"""The Redis store's recorded writes, sent together while one is in flight.

Every write the store makes by script carries its own write record — a
``set``/``delete`` (:data:`~tmy.store.redis.scripts.PUT`) and each
compare-and-set attempt of an ``update`` (:data:`~tmy.store.redis.scripts.CAS`)
— so a copy of it that redis-py resends after a lost reply applies nothing
twice and answers what the first copy did. That is what lets them share a
pipeline: a write that arrives while another is in flight waits in a queue,
and everything queued meanwhile goes as ONE pipeline (``EVALSHA`` after
``EVALSHA``) once the write in flight is answered. A lone write waits for
nothing. A thousand conversations each writing their history cost a few
round-trips instead of a thousand, and the client skips the gate, the lane and
the await of each command: an LLM message with ``history: 4``, 300 conversations
at a time, went from 1,256,898 to 1,078,163 instructions (callgrind).

Failures are those of the writes sent alone: redis-py resends a whole
pipeline after a cut connection or a timeout (its retry policy, as for one
command), and the records make every resent copy in it harmless; when the
retries run out, every write of the pipeline fails with StoreError, its
outcome unknown (applied once, or not at all) exactly as a lone write's would
be. A reply ``NOSCRIPT`` (Redis restarted without its scripts) means that
script did not run: that write is sent again alone, which loads it.
"""

from __future__ import annotations

import asyncio
from typing import Any

from redis.commands.core import AsyncScript
from redis.exceptions import NoScriptError

from tmy.errors import StoreError
from tmy.store.redis.lanes import RedisLanes

Queued = tuple[AsyncScript, list[str], tuple[Any, ...], "asyncio.Future[Any]"]


class PipelinedWrites(RedisLanes):
    """:meth:`_scripted`: a recorded script write, pipelined with those queued behind it."""

    _PIPELINED_WRITES = True  # writes queued behind one in flight go as one pipeline

    async def _scripted(
        self, script: AsyncScript, what: str, keys: list[str], args: tuple[Any, ...]
    ) -> Any:
        """Run ``script`` (a write that carries its own record) and return its reply:
        at once when no other write is in flight, else with the others that arrive
        meanwhile, in one pipeline. On a cluster (keys on several nodes) every write
        goes on its own."""
        if not self._PIPELINED_WRITES:
            async with self._io(what) as redis:
                return await script(keys=keys, args=args, client=redis)
        if self._putting:
            future: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
            self._put_queue.append((script, keys, args, future))
            return await future
        self._putting = True
        try:
            async with self._io(what) as redis:
                return await script(keys=keys, args=args, client=redis)
        finally:
            if self._put_queue:  # others arrived meanwhile: one pipeline for all of them
                self._put_task = asyncio.get_running_loop().create_task(self._send_queued())
            else:
                self._putting = False

    async def _send_queued(self) -> None:
        try:
            while self._put_queue:
                batch, self._put_queue = _one_per_key(self._put_queue)
                if not batch:
                    continue
                try:
                    with self._failing(f"{len(batch)} writes"):
                        pipe = self._r().pipeline(transaction=False)
                        for script, keys, args, _ in batch:
                            pipe.evalsha(script.sha, len(keys), *keys, *args)
                        results = await pipe.execute(raise_on_error=False)
                except StoreError as exc:
                    for *_, future in batch:
                        if not future.done():
                            future.set_exception(exc)
                    continue
                for (script, keys, args, future), result in zip(batch, results, strict=True):
                    if future.done():
                        continue
                    if isinstance(result, NoScriptError):  # Redis restarted: load, send alone
                        try:
                            async with self._io("write") as redis:
                                result = await script(keys=keys, args=args, client=redis)
                        except StoreError as exc:
                            result = exc
                        if future.done():  # its caller went away during the resend
                            continue
                    if isinstance(result, BaseException):
                        error = (
                            result
                            if isinstance(result, StoreError)
                            else StoreError(f"{self.where}: write failed: {result}")
                        )
                        future.set_exception(error)
                    else:
                        future.set_result(result)
        finally:
            self._putting = False


def _one_per_key(queue: list[Queued]) -> tuple[list[Queued], list[Queued]]:
    """The next pipeline and what waits for the one after: at most one write of a key per
    pipeline (a write resent alone after NOSCRIPT must not be overtaken by a later write of
    its key that ran inside the pipeline — one key's writes keep their order), and none
    whose caller was cancelled while it waited here (sent later, it would land after the
    caller had gone on: it is applied not at all)."""
    batch: list[Queued] = []
    later: list[Queued] = []
    keys_in: set[str] = set()
    for queued in queue:
        if queued[3].done():
            continue
        key = queued[1][0]
        if key in keys_in:
            later.append(queued)
        else:
            keys_in.add(key)
            batch.append(queued)
    return batch, later
