"""`SupervisorOptions`: what one `run` supervises, and how."""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Literal

from ..template.model import Template

if TYPE_CHECKING:
    from typing import TypeAlias

    from ..engine.observers import ExecutionWatcher
    from ..hooklog import HookLog
    from ..journal.base import Journal

    # A journal, a path, None for the default (opened at its first use), False for none.
    JournalOption: TypeAlias = Journal | str | os.PathLike[str] | Literal[False] | None

DEFAULT_GRACE_PERIOD = 10.0


class SupervisorOptions:
    """What one `run` supervises, and how. Not a dataclass: see template/problems.py."""

    __slots__ = (
        "command",
        "environ",
        "grace_period",
        "hook_log",
        "journal",
        "metadata",
        "on_running",
        "template",
        "user",
        "watchers",
    )

    def __init__(
        self,
        command: Sequence[str],
        template: Template,
        grace_period: float = DEFAULT_GRACE_PERIOD,
        metadata: Mapping[str, str] | None = None,
        environ: Mapping[str, str] | None = None,
        journal: JournalOption = None,
        hook_log: HookLog | str | None = None,
        user: str | None = None,
        on_running: Callable[[], None] | None = None,
        watchers: Sequence[ExecutionWatcher] = (),
    ) -> None:
        self.command = command
        self.template = template
        self.grace_period = grace_period
        # From flags; wins over the SCION_* variables and the template.
        self.metadata: Mapping[str, str] = {} if metadata is None else metadata
        self.environ: Mapping[str, str] = dict(os.environ) if environ is None else environ
        self.journal = journal  # a journal, a path, None: the default, False: none
        self.hook_log = hook_log  # a hook log, its path, None for the default
        self.user = user  # the agent's user (the supervisor runs as root)
        self.on_running = on_running  # called once post-start is done
        # Told of every execution (the run's report, the running file `status` reads).
        self.watchers = watchers
