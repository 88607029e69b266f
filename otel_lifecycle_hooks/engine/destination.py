"""The variables deciding where a hook's request goes, for deliveries sent again from the journal.

`replay`, the page's Redeliver, `reconcile` and a later `run`'s recovery send a delivery again
from what the journal holds: the session's metadata (AGENT_NAME, GROVE_NAME, ...) and, for
`reconcile`, the non-secret variables the session's environment gave. The journal is written
beside the agent, which may rewrite it, so a journaled value never decides:

- **where a request goes**: what the template's trust rules (`template/trust.py`) call a URL's
  origin, its scheme, userinfo, host and port (everything up to the first `/`, `?` or `#`
  after `://`), and the `Host` header; followed through the `env:` entries that build them;
- **what runs**: every variable of a script's command line and `env:` (a recovered script runs
  on the recoverer's machine);
- **which credential is attached**: the variables the auth and signing settings read, every
  secret-named variable, and GOOGLE_APPLICATION_CREDENTIALS;
- nor the recoverer's own settings: `OTEL_*` (where its telemetry and the exporter's headers
  go), `LIFECYCLE_HOOKS_*`, `SCION_*`, and the variables that choose what a program loads.

Those come from the operator's side only: the process environment of the command, the
template's `env:` and `metadata:`, and for agent metadata its `SCION_*` variable
(`SCION_GROVE` for GROVE_NAME). What the template already lets a value fill beyond that (the
path, query, body, other headers) is the delivery's content and may come from the journal.
Pure functions: no I/O."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import NamedTuple

from ..reported import AGENT_CONTROLLED
from ..template.model import HookSpec, Template
from ..template.secrets import secret_names_for
from ..template.trust import LOADER_ENV, url_state_after
from ..variables import (
    METADATA_ENV,
    METADATA_VARIABLES,
    parse_template,
    referenced_names,
)

# Event values a redelivery takes from the journal (the row's event, the key's timestamp).
JOURNALED_EVENT_VALUES = frozenset({"EVENT", "TIMESTAMP"})
# Names whose journaled value would change the recoverer's own behaviour.
_OWN_SETTINGS = ("OTEL_", "LIFECYCLE_HOOKS_", "SCION_", "GOOGLE_", "HTTP_PROXY", "HTTPS_PROXY",
                 "ALL_PROXY", "NO_PROXY", "SSL_", "REQUESTS_CA_BUNDLE",
                 "CURL_CA_BUNDLE")  # fmt: skip
_CREDENTIALS_ENV = "GOOGLE_APPLICATION_CREDENTIALS"


class _Leaf(NamedTuple):
    """A reference that resolves to a value of its own, reached through the `env:` entries
    `via`; `source` is operator, metadata, event or unset."""

    name: str
    via: tuple[str, ...]
    source: str


class Unsupplied(NamedTuple):
    """A variable deciding where a hook's request goes (or what it runs) that the operator's
    side does not set: only the journal would."""

    hook: str
    name: str
    part: str  # "the URL's origin", "the Host header", "the command"

    def remedy(self) -> str:
        """How the operator supplies it."""
        if self.name in JOURNALED_EVENT_VALUES:
            return "it is the event's own value, which only the journal records: write it literally"
        setting = METADATA_ENV.get(self.name)
        if setting is not None:
            return (
                f"set {setting} in this command's environment "
                f"(or {self.name} in the template's metadata:)"
            )
        return f"set {self.name} in this command's environment"

    def message(self) -> str:
        return (
            f"hook {self.hook!r}: ${{{self.name}}} decides {self.part}, and neither this "
            "command's environment nor the template sets it (the journal's value is not used: "
            f"the agent can write the journal); {self.remedy()}"
        )


def operator_metadata(template: Template, environ: Mapping[str, str]) -> dict[str, str]:
    """Agent metadata as the operator gives it: the template's `metadata:`, then `SCION_*`."""
    metadata = {name: value for name, value in template.metadata.items() if value}
    for name, setting in METADATA_ENV.items():
        if environ.get(setting):
            metadata[name] = environ[setting]
    return metadata


def unsupplied(
    hook: HookSpec, template: Template, environ: Mapping[str, str], metadata: Mapping[str, str]
) -> list[Unsupplied]:
    """The variables deciding where `hook`'s request goes (or what its script runs) that neither
    `environ`, the template's `env:` nor the operator's `metadata` sets."""
    found: list[Unsupplied] = []
    for part, leaves in _deciding(hook, template.env, environ, metadata):
        for leaf in leaves:
            if leaf.source in ("unset", "event") and all(u.name != leaf.name for u in found):
                found.append(Unsupplied(hook.name, leaf.name, part))
    return found


def destination_names(template: Template) -> frozenset[str]:
    """Every variable that may decide where one of `template`'s requests goes or what its
    scripts run, whatever the environment sets: the names and the `env:` entries leading to
    them. A journaled value of any of them is never used."""
    names: set[str] = set()
    for hook in template.hooks:
        for _part, leaves in _deciding(hook, template.env, None, {}):
            for leaf in leaves:
                names.add(leaf.name)
                names.update(leaf.via)
    return frozenset(names)


def credential_names(template: Template) -> frozenset[str]:
    """The variables a credential is read from."""
    return secret_names_for(template) | {_CREDENTIALS_ENV}


def journaled_metadata(
    journaled: Mapping[str, str], operator: Mapping[str, str], template: Template
) -> dict[str, str]:
    """A session's journaled metadata fit to render with: the metadata names that decide a
    destination take the operator's value, or none (the lookup then goes on to the
    environment); the others keep the journal's, as the delivery's content."""
    deciding = destination_names(template)
    metadata = {k: v for k, v in journaled.items() if k not in deciding}
    metadata.update({k: operator[k] for k in deciding if operator.get(k)})
    return metadata


def journaled_variables(journaled: Mapping[str, str], template: Template) -> dict[str, str]:
    """A session's journaled variables that may fill what the recoverer's environment does not
    set: only names the template reads, none that decides a destination, what runs or a
    credential, and none of the recoverer's own settings."""
    read: set[str] = set()
    for text in _template_texts(template):
        read |= referenced_names(text)
    refused = destination_names(template) | credential_names(template) | LOADER_ENV
    return {
        name: value
        for name, value in journaled.items()
        if name in read
        and name not in refused
        and name not in METADATA_VARIABLES
        and not name.upper().startswith(_OWN_SETTINGS)
    }


# -- the walk ---------------------------------------------------------------------------------


def _template_texts(template: Template) -> Iterator[str]:
    yield from template.env.values()
    for hook in template.hooks:
        action = hook.action
        yield from (action.url or "", action.body or "", *action.headers.values())
        yield from (*action.command, *action.env.values())


def _deciding(
    hook: HookSpec,
    env: Mapping[str, str],
    environ: Mapping[str, str] | None,
    metadata: Mapping[str, str],
) -> Iterator[tuple[str, list[_Leaf]]]:
    """Each deciding place of `hook` and the leaves standing in it."""
    action = hook.action
    if action.url:
        yield (
            "where its request goes (the URL's origin)",
            _origin(_expand(action.url, env, environ, metadata, ())),
        )
    for name, value in action.headers.items():
        if name.lower() in ("host", ":authority"):
            pieces = _expand(value, env, environ, metadata, ())
            yield (
                "where its request goes (the Host header)",
                [p for p in pieces if isinstance(p, _Leaf)],
            )
    if action.type == "script":
        for text in (*action.command, *action.env.values()):
            pieces = _expand(text, env, environ, metadata, ())
            yield "what its script runs", [p for p in pieces if isinstance(p, _Leaf)]


def _expand(
    text: str,
    env: Mapping[str, str],
    environ: Mapping[str, str] | None,
    metadata: Mapping[str, str],
    via: tuple[str, ...],
) -> list[str | _Leaf]:
    """`text` with its references resolved as `variables.Variables` would at a redelivery:
    agent metadata the operator gives, then `env:` entries (unless the environment sets the
    name and the entry does not extend it), then the environment. With `environ` None every
    `env:` entry is followed (for the names that may decide)."""
    pieces: list[str | _Leaf] = []
    for piece in parse_template(text):
        if isinstance(piece, str):
            pieces.append(piece)
            continue
        name = piece.name
        if name in AGENT_CONTROLLED:
            continue  # refused in these places when the template is loaded
        if name in JOURNALED_EVENT_VALUES:
            pieces.append(_Leaf(name, via, "event"))
        elif metadata.get(name) or name == "HOOK_NAME":
            pieces.append(_Leaf(name, via, "operator"))
        elif name in env and name not in via and not _environ_wins(name, env, environ):
            pieces.extend(_expand(env[name], env, environ, metadata, (*via, name)))
            if environ is None:
                pieces.append(_Leaf(name, via, "operator"))  # its own value may be set too
        elif environ is not None and environ.get(name):
            pieces.append(_Leaf(name, via, "operator"))
        elif piece.default is not None:
            pieces.append(_Leaf(name, via, "operator"))  # the author's literal default
        else:
            pieces.append(_Leaf(name, via, "unset"))
    return pieces


def _environ_wins(name: str, env: Mapping[str, str], environ: Mapping[str, str] | None) -> bool:
    return bool(environ and environ.get(name)) and name not in referenced_names(env[name])


def _origin(pieces: list[str | _Leaf]) -> list[_Leaf]:
    """The leaves that stand in the scheme or the authority (as `template/trust.py` reads a
    URL: a value that starts it holds its scheme and host)."""
    leaves: list[_Leaf] = []
    state = "scheme"
    for piece in pieces:
        if state == "rest":
            break
        if isinstance(piece, _Leaf):
            leaves.append(piece)
            if state == "scheme":
                state = "authority"
            continue
        state = url_state_after(state, piece)
    return leaves
