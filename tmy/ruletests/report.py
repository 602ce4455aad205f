"""What a rule-test run reports: PASS/FAIL lines for people, or one JSON object."""

from __future__ import annotations

import sys
from dataclasses import dataclass, field
from typing import Any

from tmy.ruletests.cases import Outcome, one_line


@dataclass
class Report:
    outcomes: list[Outcome] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    found: int = 0  # cases in the files, selected or not

    @property
    def passed(self) -> int:
        return sum(o.ok for o in self.outcomes)

    @property
    def failed(self) -> int:
        return sum(not o.ok for o in self.outcomes)


def print_report(report: Report, out: Any = None) -> None:
    out = out or sys.stdout
    for o in report.outcomes:
        c = o.case
        if o.ok:
            shown = one_line(o.actual) if o.actual else "(no reply)"
            if o.error:
                shown = f"{shown}  [error: {one_line(o.error, 80)}]"
            print(f"PASS {c.where}  {c.label} → {shown}", file=out)
        else:
            print(f"FAIL {c.where}  {c.label}", file=out)
            for line in o.detail:
                print(f"     {line}", file=out)
    print(f"{report.passed} passed, {report.failed} failed", file=out)


def report_json(report: Report) -> dict[str, Any]:
    """``test --json``: the counts and every reported case (or the errors, nothing run)."""
    if report.errors:
        return {"passed": 0, "failed": 0, "errors": report.errors, "cases": []}
    return {
        "passed": report.passed,
        "failed": report.failed,
        "cases": [o.as_dict() for o in report.outcomes],
    }
