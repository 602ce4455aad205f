"""The LLM step's own cost, without a network: the TESTONLY mock answering, on SQLite and Redis.

One conversation (user ``ann``) sends ``ask q<i>`` through ``Engine.handle``, one
message after another, to the rule ``ask *`` → ``LLM`` (the TESTONLY mock: no
HTTP). What is left is what tmy does around a model call: the budget check,
the usage counters, the ``ctx`` record of the last message, the prompt, the
``llm.call`` and ``run.done`` lines. The **floor** is the same message to a rule
whose one step is ``ADJUST`` (the engine's cost of a one-step run), measured in
the same run. Reported: wall and CPU per message (best of ``--rounds``). Two more
rows send each message from a new user (a new chat, as in ``bench/llm_fanout.py``):
``new *`` to the same step, ``hist *`` to the step with ``history: 4`` (the
conversation's history read in one ``get_many``, the turn written by one
``update``); their difference is the history's cost.

Before issue 24 each call wrote the ``ctx`` record and three usage counters in
four sequential store writes (on Redis 0.6–0.8 ms of a ~0.8 ms step); they now
wait in memory and go in one batch per ``llm.budget.flush_interval``.

    python bench/llm_step.py [--quick] [--messages 300 --rounds 5] [--compare CHECKOUT]
"""

from __future__ import annotations

import asyncio
import sys
import time
from typing import Any

import common

RULES = """\
rules:
  - id: ask
    triggers: ["ask *"]
    steps:
      - {plugin: LLM, system: "Be brief."}
  - id: new
    triggers: ["new *"]
    steps:
      - {plugin: LLM, system: "Be brief."}
  - id: hist
    triggers: ["hist *"]
    steps:
      - {plugin: LLM, system: "Be brief.", history: 4}
  - id: adj
    triggers: ["adj *"]
    steps:
      - {plugin: ADJUST, input: "ok {QUESTION}"}
"""


WORDS = ("ask", "new", "hist", "adj")


async def measure(store: str, n: int, rounds: int) -> dict[str, Any]:
    """Best wall and CPU per message for the LLM rule and the ADJUST floor, alternating."""
    from tmy.message import Message
    from tmy.testing import Bot

    best: dict[str, dict[str, float]] = {}
    wrong = 0
    async with Bot({"r.yaml": RULES}, store=store) as bot:
        for word in WORDS:  # warm-up: imports, the user's keys, the switch cache
            for i in range(20):
                await bot.engine.handle(Message(f"{word} w{i}", user="ann", platform="b"))
        for r in range(rounds):
            for word in WORDS:
                cpu0, t0 = time.process_time(), time.perf_counter()
                for i in range(n):
                    user = f"{word}{r}-{i}" if word in ("new", "hist") else "ann"  # a new chat
                    reply = await bot.engine.handle(
                        Message(f"{word} q{i}z", user=user, platform="b")
                    )
                    want = "ok q" if word == "adj" else "You said: q"
                    wrong += reply.error is not None or f"{want}{i}z" not in reply.text
                wall, cpu = time.perf_counter() - t0, time.process_time() - cpu0
                mine = best.setdefault(word, {"wall_us": 1e9, "cpu_us": 1e9})
                mine["wall_us"] = min(mine["wall_us"], wall / n * 1e6)
                mine["cpu_us"] = min(mine["cpu_us"], cpu / n * 1e6)
    return {
        "llm": {k: round(v, 1) for k, v in best["ask"].items()},
        "llm_new_user": {k: round(v, 1) for k, v in best["new"].items()},
        "llm_new_user_history": {k: round(v, 1) for k, v in best["hist"].items()},
        "floor": {k: round(v, 1) for k, v in best["adj"].items()},
        "wrong": wrong,
    }


def main() -> int:
    p = common.base_parser(__doc__.split("\n")[0])
    p.add_argument("--messages", type=int)
    p.add_argument("--rounds", type=int)
    p.add_argument("--compare", metavar="CHECKOUT", help="also run against this tmy checkout")
    args = p.parse_args()
    n = args.messages or (100 if args.quick else 300)
    rounds = args.rounds or (2 if args.quick else 5)
    rows, results = [], {}
    with common.temp_dir("llm-step") as tmp:
        common.configure_logs(tmp)
        stores = {"sqlite": f"sqlite:///{tmp / 'tmy.db'}"}
        prefix = common.redis_prefix() if common.redis_available() else ""
        if prefix:
            stores["redis"] = common.redis_url(prefix)
        try:
            for name, url in stores.items():
                res = results[name] = asyncio.run(measure(url, n, rounds))
                llm, floor = res["llm"], res["floor"]
                rows.append(
                    [
                        name,
                        llm["wall_us"],
                        llm["cpu_us"],
                        res["llm_new_user"]["cpu_us"],
                        res["llm_new_user_history"]["cpu_us"],
                        floor["wall_us"],
                        floor["cpu_us"],
                        llm["cpu_us"] / floor["cpu_us"],
                        res["wrong"],
                    ]
                )
        finally:
            if prefix:
                common.redis_cleanup(prefix)
            from tmy import logs

            logs.configure("warning")  # off the log file: its folder goes when the run ends
    print(
        common.table(
            f"LLM step with the TESTONLY mock, {n} sequential messages, best of {rounds}",
            [
                "store",
                "LLM wall µs/msg",
                "LLM CPU µs/msg",
                "new user CPU µs",
                "new user, history: 4, CPU µs",
                "floor (ADJUST) wall µs",
                "floor CPU µs",
                "CPU ratio",
                "wrong",
            ],
            rows,
        )
    )
    wrong = sum(r["wrong"] for r in results.values())
    compared = None
    if args.compare:
        import llm_fake

        compared = llm_fake.compare(
            args.compare, "llm_step.py", llm_fake.without_compare(sys.argv[1:])
        )
    if not args.no_write:
        payload = {"messages": n, "rounds": rounds, **results}
        if compared is not None:
            payload["compare"] = compared
        path = common.write_result("llm_step", payload, quick=args.quick)
        print(f"\nwritten: {path.relative_to(common.ROOT)}")
    return 0 if wrong == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
