"""`SupervisorOptions`: what one `run` supervises, and how."""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Literal

from ..engine.observers import ExecutionWatcher
from ..template.model import Template

if TYPE_CHECKING:
    from typing import TypeAlias

    from ..hooklog import HookLog
    from ..journal.base import Journal

    # A journal, a path, None for the default (opened at its first use), False for none.
    JournalOption: TypeAlias = Journal | str | os.PathLike[str] | Literal[False] | None

DEFAULT_GRACE_PERIOD = 10.0


@dataclass(slots=True)
class SupervisorOptions:
    """What one `run` supervises, and how."""

    command: Sequence[str]
    template: Template
    grace_period: float = DEFAULT_GRACE_PERIOD
    # From flags; wins over the SCION_* variables and the template.
    metadata: Mapping[str, str] = field(default_factory=dict)
    environ: Mapping[str, str] = field(default_factory=lambda: dict(os.environ))
    journal: JournalOption = None  # a journal, a path, None: the default, False: none
    hook_log: HookLog | str | None = None  # a hook log, its path, None for the default
    user: str | None = None  # the agent's user (the supervisor runs as root)
    on_running: Callable[[], None] | None = None  # called once post-start is done
    # Told of every execution (the run's report, the running file `status` reads).
    watchers: Sequence[ExecutionWatcher] = ()
