"""What the supervisor keeps out of the agent's environment: its own credentials.

The agent inherits the supervisor's environment (its harness needs PATH, its own keys, the
OTEL_* settings of its telemetry), but not what lets the supervisor act for the operator:

- the journal's settings: its location (`$LIFECYCLE_HOOKS_JOURNAL` or the older name; a
  PostgreSQL URL is a credential, and the agent writes no journal row itself: its events reach
  the supervisor's socket) and the journal key that seals session rows (journal/seal.py);
- every credential a hook names: the variables its `auth:` (token_env) and `signing_secret_env`
  read, secret-named variables (`*_TOKEN`, `*_SECRET`, `*_KEY`, ...) the hooks or the template's
  `env:` refer to, every variable (whatever its name, followed through `env:` entries) that
  stands where redaction sees a credential: a credential header's value (`Authorization`,
  `X-Api-Key`, ...), a URL's userinfo, a secret-looking query value (`?access_token=`); and
  GOOGLE_APPLICATION_CREDENTIALS when a hook authenticates with Google.

A template shares one of them on purpose by listing it under `share_with_agent:` (an agent that
needs the same token as a hook). A `secrets:` entry no hook reads is the agent's own and is
passed on as before. Pure functions: no I/O.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping

from .redact import Redactor, looks_like_secret_name, looks_like_secret_query_key
from .template.model import HookAction, Template
from .variables import JOURNAL_KEY_ENV, JOURNAL_KEY_FILE_ENV, JOURNAL_SETTINGS, referenced_names

# Not the journal package's own names: importing it would load SQLite before the agent starts.
_SUPERVISOR_SETTINGS = (*JOURNAL_SETTINGS, JOURNAL_KEY_ENV, JOURNAL_KEY_FILE_ENV)
_GOOGLE_CREDENTIALS = "GOOGLE_APPLICATION_CREDENTIALS"
# Only its header names are asked of it: which headers redaction takes as credentials.
_HEADERS = Redactor()
_AUTHORITY_END = re.compile(r"[/?#]")


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
        names |= _names_behind(_credential_texts(action), {**template.env, **action.env})
    referenced |= set(template.env)
    names |= {name for name in referenced if looks_like_secret_name(name)}
    return frozenset(names)


def _credential_texts(action: HookAction) -> Iterator[str]:
    """The parts of a hook's request that carry a credential, whatever their variables are
    called: what redaction takes out of a request (a credential header's value, a URL's
    userinfo, a secret-looking query value)."""
    for name, value in action.headers.items():
        if _HEADERS.is_secret_header(name):
            yield value
    url = action.url or ""
    _, scheme_end, rest = url.partition("://")
    authority = _AUTHORITY_END.split(rest, maxsplit=1)[0] if scheme_end else ""
    if "@" in authority:
        yield authority.rpartition("@")[0]
    for pair in url.partition("?")[2].partition("#")[0].split("&"):
        key, separator, value = pair.partition("=")
        if separator and looks_like_secret_query_key(key):
            yield value


def _names_behind(texts: Iterator[str], env: Mapping[str, str]) -> set[str]:
    """Every variable `texts` refer to, and those the `env:` entries they name refer to."""
    found: set[str] = set()
    pending = [name for text in texts for name in referenced_names(text)]
    while pending:
        name = pending.pop()
        if name in found:
            continue
        found.add(name)
        if name in env:
            pending.extend(referenced_names(env[name]))
    return found


def withheld_from_agent(template: Template) -> frozenset[str]:
    """The names the agent's environment must not hold (see the module's docstring)."""
    return (hook_credentials(template) - template.share_with_agent) | set(_SUPERVISOR_SETTINGS)


def agent_environment(env: Mapping[str, str], template: Template) -> dict[str, str]:
    """`env` without what `withheld_from_agent` names."""
    withheld = withheld_from_agent(template)
    return {name: value for name, value in env.items() if name not in withheld}
