"""Rule tests written in YAML: the ``tests:`` list of a rules file, run by ``run.py test``.

A rules file may carry its own tests, next to the rules they check::

    tests:
      - send: "签到"
        user: ann
        expect: "签到成功，累计 1 次"
      - send: "签到"
        user: ann
        expect_re: "已经签到"
        now: "2026-11-22T09:00:00+08:00"

``python run.py test [PATH…] [-k PATTERN] [--json]`` loads each path (a rules
directory or one file) with the real loader, then runs every file's cases in
order through the real engine against one fresh temporary SQLite store per
file — the cases of a file share state, so the second 签到 sees the first.
Whatever the configuration says, the LLM is the TESTONLY mock, and outbound
HTTP never leaves the machine: a request that no ``http:`` canned response of
the case matches fails with "outbound HTTP refused in tests".

Random draws (``randint``, ``choice``, ``input: PICK`` …) are pinned with
``seed: 42`` on a case, or at the top of the file (a default for every case
in it; a case's own wins): each seeded case draws from ``random.Random(seed)``
afresh, so it draws the same values every run, whatever ran before it.

Exit codes: 0 every case passed, 1 a case failed (or none ran), 2 a rules file
or a test case is invalid (``file:line`` errors, all of them, nothing run).

Python plugin authors keep :class:`tmy.testing.Bot`; this module is for people
who write YAML.

Parts: :mod:`~tmy.ruletests.cases` (a case), :mod:`~tmy.ruletests.parsing`
(validating them), :mod:`~tmy.ruletests.running` (running them),
:mod:`~tmy.ruletests.report` (the report); ``tmy test`` itself is in :mod:`tmy.cli.programs`.
"""

from __future__ import annotations

from tmy.ruletests.cases import Canned, Case, Outcome, normalise_now
from tmy.ruletests.parsing import load_cases
from tmy.ruletests.report import Report, print_report, report_json
from tmy.ruletests.running import REFUSED, run_tests, sandbox_settings

__all__ = [
    "REFUSED",
    "Canned",
    "Case",
    "Outcome",
    "Report",
    "load_cases",
    "normalise_now",
    "print_report",
    "report_json",
    "run_tests",
    "sandbox_settings",
]
