"""Checks: pure functions over schema objects that find "wrong SSM state cached" bugs.

Usable live (a session's frames), on a snapshot file, or on a recording; nothing here imports
the TUI, zmq, sglang or torch.

    from mcinspect.checks import StepView, check_step, run_checks, views

    violations = run_checks(views((state, events) for state, events in recording))

    view = StepView.first(snapshot.state, engine=info)     # live: one step at a time
    view = view.next(state, events)
    new = check_step(view)

Each check reports what broke at the step it broke, once: state invariants are checked on what
changed since the previous boundary (everything on the first view), event invariants on the
step's events. `CHECKS` lists the checks with what each catches and cannot see.
"""

from __future__ import annotations

from collections.abc import Iterable

from ..errors import McinspectError
from .grouping import ViolationGroup, ViolationGroups, cause_of, group_violations
from .history import StepView, views
from .registry import CHECKS, NOT_CHECKED, CheckSpec, UnknownCheck
from .violation import Violation

__all__ = [
    "CHECKS",
    "NOT_CHECKED",
    "CheckFailed",
    "CheckSpec",
    "StepView",
    "UnknownCheck",
    "Violation",
    "ViolationGroup",
    "ViolationGroups",
    "cause_of",
    "check_step",
    "group_violations",
    "run_checks",
    "select",
    "views",
]


class CheckFailed(McinspectError, RuntimeError):
    """A check raised on its input (a malformed state, or a bug in the check); `check` exits 2."""

    def __init__(self, name: str, step: int, cause: BaseException) -> None:
        super().__init__(f"check {name} crashed at step {step}: {type(cause).__name__}: {cause}")
        self.name = name
        self.step = step


def select(names: Iterable[str] | None = None) -> list[CheckSpec]:
    """The registered checks called `names` (all, in registry order, when None)."""
    if names is None:
        return list(CHECKS.values())
    chosen = []
    for name in names:
        if name not in CHECKS:
            raise UnknownCheck(f"unknown check {name!r} (known: {', '.join(CHECKS)})")
        chosen.append(CHECKS[name])
    return chosen


def check_step(view: StepView, names: Iterable[str] | None = None) -> list[Violation]:
    """What broke at `view`'s step (only this step: earlier ones are not re-checked)."""
    return _run(view, select(names))


def run_checks(history: Iterable[StepView], names: Iterable[str] | None = None) -> list[Violation]:
    """All violations of a history of views (see `views`), in step order."""
    specs = select(names)
    out: list[Violation] = []
    for view in history:
        out += _run(view, specs)
    return out


def _run(view: StepView, specs: list[CheckSpec]) -> list[Violation]:
    out: list[Violation] = []
    for spec in specs:
        try:
            out += spec.run(view)
        except (AttributeError, IndexError, KeyError, TypeError, ValueError) as error:
            raise CheckFailed(spec.name, view.step, error) from error
    return out
