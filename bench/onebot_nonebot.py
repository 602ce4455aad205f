"""NoneBot2 as ``onebot_path.py`` runs it: OneBot v11 reverse WebSocket, N ``on_startswith`` rules.

Run by ``onebot_path.py`` under an interpreter that has ``nonebot2[fastapi]`` and
``nonebot-adapter-onebot`` (``bench/requirements-peers.txt``)::

    python bench/onebot_nonebot.py PORT N TOKEN

Rule ``i`` fires on messages starting with ``kw<i> `` and answers ``ok-r<i>``
with ``matcher.send`` (one ``send_msg`` action, awaited), as tmy's rules do.
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

PLUGIN = """
import os
from nonebot import on_startswith
from nonebot.matcher import Matcher

N = int(os.environ["BENCH_NB_N"])


def _make(i):
    matcher = on_startswith(f"kw{i} ")  # the space: kw1 must not take kw10's messages
    answer = f"ok-r{i}"

    @matcher.handle()
    async def _handle(m: Matcher):
        await m.send(answer)

    return matcher


MATCHERS = [_make(i) for i in range(N)]
"""


def main() -> None:
    import os

    port, n, token = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
    os.environ["BENCH_NB_N"] = str(n)
    import nonebot
    from nonebot.adapters.onebot.v11 import Adapter

    nonebot.init(
        driver="~fastapi",
        host="127.0.0.1",
        port=port,
        onebot_access_token=token,
        log_level="WARNING",
    )
    nonebot.get_driver().register_adapter(Adapter)
    plugins = Path(tempfile.mkdtemp(prefix="tmy-bench-nb-"))
    (plugins / "onebot_bench_rules.py").write_text(PLUGIN, encoding="utf-8")
    sys.path.insert(0, str(plugins))
    nonebot.load_plugin("onebot_bench_rules")
    nonebot.run()


if __name__ == "__main__":
    main()
