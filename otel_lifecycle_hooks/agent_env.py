"""What the supervisor keeps out of the agent's environment: its own credentials.

The agent inherits the supervisor's environment (its harness needs PATH, its own keys, the
OTEL_* settings of its telemetry), but not what lets the supervisor act for the operator:

- the journal's settings: its location (`$LIFECYCLE_HOOKS_JOURNAL` or the older name; a
  PostgreSQL URL is a credential, and the agent writes no journal row itself: its events reach
  the supervisor's socket) and the journal key that seals session rows (journal/seal.py);
- every credential a hook names: the variables its `auth:` (token_env) and `signing_secret_env`
  read, secret-named variables (`*_TOKEN`, `*_SECRET`, `*_KEY`, ...) the hooks or the template's
  `env:` refer to, and GOOGLE_APPLICATION_CREDENTIALS when a hook authenticates with Google.

A template shares one of them on purpose by listing it under `share_with_agent:` (an agent that
needs the same token as a hook). A `secrets:` entry no hook reads is the agent's own and is
passed on as before. Pure functions: no I/O.
"""

from __future__ import annotations

from collections.abc import Mapping

from .redact import looks_like_secret_name
from .template.model import Template
from .variables import JOURNAL_KEY_ENV, JOURNAL_KEY_FILE_ENV, JOURNAL_SETTINGS, referenced_names

# Not the journal package's own names: importing it would load SQLite before the agent starts.
_SUPERVISOR_SETTINGS = (*JOURNAL_SETTINGS, JOURNAL_KEY_ENV, JOURNAL_KEY_FILE_ENV)
_GOOGLE_CREDENTIALS = "GOOGLE_APPLICATION_CREDENTIALS"


def hook_credentials(template: Template) -> frozenset[str]:
    """The variables a credential of the template's hooks is read from."""
    names: set[str] = set()
    referenced: set[str] = set()
    for value in template.env.values():
        referenced |= referenced_names(value)
    for hook in template.hooks:
        action = hook.action
        names.update(n for n in (action.auth.token_env, action.signing_secret_env) if n)
        if action.auth.type.startswith("gcp"):
            names.add(_GOOGLE_CREDENTIALS)
        for text in (action.url or "", action.body or "", *action.headers.values(),
                     *action.command, *action.env.values()):  # fmt: skip
            referenced |= referenced_names(text)
    referenced |= set(template.env)
    names |= {name for name in referenced if looks_like_secret_name(name)}
    return frozenset(names)


def withheld_from_agent(template: Template) -> frozenset[str]:
    """The names the agent's environment must not hold (see the module's docstring)."""
    return (hook_credentials(template) - template.share_with_agent) | set(_SUPERVISOR_SETTINGS)


def agent_environment(env: Mapping[str, str], template: Template) -> dict[str, str]:
    """`env` without what `withheld_from_agent` names."""
    withheld = withheld_from_agent(template)
    return {name: value for name, value in env.items() if name not in withheld}
