"""The one place secrets are taken out of text, headers, URLs and records.

Everything that leaves the process (hook log, spans, metrics, journal, CLI output) passes through
a `Redactor` first. It knows two kinds of secret:

- known values: the resolved values of variables named as secrets and auth tokens. Each is
  replaced wherever it appears, also in its JSON-escaped and percent-encoded forms (the shapes
  rendering gives it; percent-encoding's hex in either case, and as encodeURIComponent writes
  it) and its base64 forms (standard and URL-safe, with or without padding, and inside a
  longer base64 value at any alignment: `user:secret` as HTTP Basic sends it). Values shorter
  than `MIN_SECRET_LENGTH` are ignored: replacing every `1` or `on` would shred the text and
  hide nothing worth hiding.
- secret-looking names: header names (`Authorization`, `Cookie`, `X-API-Key`, anything with
  token/secret/key/auth in it), URL query keys (token, key, sig, secret, password) and URL
  userinfo have their values replaced whatever they hold.

A secret that is itself a URL (a Slack webhook URL) is replaced by its scheme and host followed by
`[REDACTED]`, so a reader still sees where a request went. Webhook URLs are credentials by their
path: in any text, the path of a webhook service's URL (Slack, Discord, Microsoft Teams) is
replaced, and of any other URL the part after a `hooks` / `webhook` / `webhooks` segment. A
webhook URL of another shape belongs in a secret-named variable (`*_WEBHOOK_URL`).

The agent may echo a secret it saw (a token in ASSISTANT_TEXT): what it reports is redacted
like everything else before it reaches a span or a log record.
"""

from __future__ import annotations

import base64
import functools
import json
import re
from collections.abc import Iterable, Mapping
from typing import TypeAlias
from urllib.parse import quote, quote_plus, urlsplit, urlunsplit

REDACTED = "[REDACTED]"
MIN_SECRET_LENGTH = 4
# The shortest run of base64 taken as a secret's part of a longer value: shorter runs of a
# short secret could be found in unrelated base64 by chance (its whole forms are still kept).
MIN_BASE64_PART = 8
_PERCENT_ESCAPE = re.compile(r"%[0-9A-Fa-f]{2}")

DEFAULT_SECRET_HEADERS: frozenset[str] = frozenset(
    {"authorization", "proxy-authorization", "cookie", "set-cookie", "x-api-key"}
)
_SECRET_HEADER_WORDS = ("token", "secret", "key", "auth", "signature", "password")
_SECRET_QUERY_WORDS = ("token", "key", "sig", "secret", "password", "auth")
_SECRET_VARIABLE_WORDS = (
    "TOKEN",
    "SECRET",
    "PASSWORD",
    "PASSWD",
    "KEY",
    "CREDENTIAL",
    "WEBHOOK_URL",
    "AUTH",
)


def looks_like_secret_query_key(key: str) -> bool:
    """True for query parameters whose value redaction takes out (`access_token`, `sig`...)."""
    lower = key.lower()
    return any(word in lower for word in _SECRET_QUERY_WORDS)


def looks_like_secret_name(name: str) -> bool:
    """True for variable names that hold credentials by convention (`SLACK_WEBHOOK_URL`...)."""
    upper = name.upper()
    return any(word in upper for word in _SECRET_VARIABLE_WORDS)


class Redactor:
    """Replaces secrets with `[REDACTED]`; immutable, extend it with `with_values`."""

    def __init__(
        self,
        secret_values: Iterable[str] = (),
        secret_header_names: Iterable[str] = DEFAULT_SECRET_HEADERS,
    ) -> None:
        self._values = frozenset(v for v in secret_values if v and len(v) >= MIN_SECRET_LENGTH)
        self._header_names = frozenset(name.lower() for name in secret_header_names)
        # Each form's replacement, keyed by the form with its percent-escapes' hex upper-case.
        self._replacements: dict[str, str] = {}
        for value in self._values:
            replacement = _replacement_for(value)
            for form in encoded_forms(value):
                if len(form) >= MIN_SECRET_LENGTH:
                    self._replacements.setdefault(_upper_hex(form), replacement)
        self._pattern = _any_of(frozenset(self._replacements)) if self._replacements else None
        # The last URL redacted and its result: an attempt's URL is redacted for its span, its
        # execution's record and its journal row, three times running.
        self._last_url: tuple[str, str] = ("", "")

    def with_values(
        self, secret_values: Iterable[str] = (), secret_header_names: Iterable[str] = ()
    ) -> Redactor:
        """A redactor that also hides these values and these header names."""
        return Redactor(
            (*self._values, *secret_values), (*self._header_names, *secret_header_names)
        )

    def redact_text(self, text: str) -> str:
        """`text` with every known secret value replaced, and webhook services' URL paths."""
        if not text:
            return text
        if self._pattern is not None:
            text = self._pattern.sub(self._replacement, text)
        return redact_webhook_urls(text)

    def _replacement(self, match: re.Match[str]) -> str:
        found = match.group(0)
        return self._replacements.get(_upper_hex(found) if "%" in found else found, REDACTED)

    def is_secret_header(self, name: str) -> bool:
        """True when a header of this name carries a credential, whatever its value."""
        lower = name.lower()
        return lower in self._header_names or any(w in lower for w in _SECRET_HEADER_WORDS)

    def redact_headers(self, headers: Mapping[str, str]) -> dict[str, str]:
        """Credential headers replaced whole; known secret values taken out of the others."""
        return {
            name: REDACTED if self.is_secret_header(name) else self.redact_text(value)
            for name, value in headers.items()
        }

    def redact_url(self, url: str) -> str:
        """Userinfo and secret-looking query values replaced, then known values taken out."""
        last = self._last_url
        if last[0] == url and url:
            return last[1]
        redacted = self._redact_url(url)
        self._last_url = (url, redacted)
        return redacted

    def _redact_url(self, url: str) -> str:
        try:
            parts = urlsplit(url)
        except ValueError:
            return self.redact_text(url)
        netloc = parts.netloc
        if "@" in netloc:
            netloc = REDACTED + "@" + netloc.rpartition("@")[2]
        query = parts.query
        if query:
            query = "&".join(_redact_query_pair(pair) for pair in query.split("&"))
        rebuilt = urlunsplit((parts.scheme, netloc, parts.path, query, parts.fragment))
        return self.redact_text(rebuilt)

    def redact_mapping(self, mapping: Mapping[str, object]) -> dict[str, object]:
        """A copy with secret-looking keys' values replaced and known values taken out, nested."""
        return {key: self._redact_item(key, value) for key, value in mapping.items()}

    def _redact_item(self, key: str, value: object) -> object:
        if isinstance(value, str) and (self.is_secret_header(key) or looks_like_secret_name(key)):
            return REDACTED
        return self._redact_value(value)

    def _redact_value(self, value: object) -> object:
        if isinstance(value, str):
            return self.redact_text(value)
        if isinstance(value, Mapping):
            return {str(k): self._redact_item(str(k), v) for k, v in value.items()}
        if isinstance(value, (list, tuple)):
            return [self._redact_value(item) for item in value]
        return value


def _redact_query_pair(pair: str) -> str:
    key, separator, _ = pair.partition("=")
    if separator and looks_like_secret_query_key(key):
        return f"{key}={REDACTED}"
    return pair


# Redactors are made again as an engine's secrets change (a refreshed token), mostly of the
# same values: their forms and pattern (about 1 ms for three secrets) are worked out once.
@functools.lru_cache(maxsize=256)
def encoded_forms(value: str) -> frozenset[str]:
    """The shapes a value takes once rendered or passed on: as is, JSON-escaped, percent-encoded
    (as a URL component or path, as a form field, as encodeURIComponent writes it), as a header
    value (only its non-ASCII and control characters percent-encoded), and base64-encoded
    (`base64_forms`). Percent-encoding's hex is matched in either case by `Redactor`."""
    return frozenset(
        {
            value,
            json.dumps(value, ensure_ascii=False)[1:-1],
            json.dumps(value)[1:-1],
            quote(value, safe=""),
            quote(value, safe="/"),
            quote(value, safe="!'()*"),
            quote_plus(value, safe=""),
            quote_plus(value, safe="/"),
            _header_form(value),
            *base64_forms(value),
        }
    )


def base64_forms(value: str) -> set[str]:
    """`value`'s UTF-8 bytes in base64 and URL-safe base64, whole (with and without padding),
    and the part of a longer base64 value that only `value`'s bytes decide, for each of the
    three offsets it may start at (`user:secret` in HTTP Basic); each also percent-encoded,
    as it appears in a URL."""
    data = value.encode("utf-8", "surrogatepass")
    forms: set[str] = set()
    for encode in (base64.b64encode, base64.urlsafe_b64encode):
        whole = encode(data).decode("ascii")
        forms.update((whole, whole.rstrip("=")))
        for offset in range(3):
            # Base64 writes 6 bits a character: with `offset` bytes before the value, the
            # characters from bit 8*offset to the value's last whole 6 bits are its own.
            encoded = encode(bytes(offset) + data).decode("ascii")
            part = encoded[-(-8 * offset // 6) : 8 * (offset + len(data)) // 6]
            if len(part) >= MIN_BASE64_PART:
                forms.add(part)
    forms.update([quote(form, safe="") for form in forms])
    return forms


# A word of a pattern: a percent-escape (its hex in either case) or one character.
_TOKEN = re.compile(r"%[0-9A-Fa-f]{2}|.", re.DOTALL)
_END = ""  # the key that marks where a word ends in a trie node (no token is empty)
_Trie: TypeAlias = dict[str, "_Trie"]


@functools.lru_cache(maxsize=64)
def _any_of(words: frozenset[str]) -> re.Pattern[str]:
    """A pattern matching any of `words` literally, the longest where several start at one
    place, percent-escapes' hex in either case.

    It is written as a trie (`abc|abd` as `ab(?:c|d)`): at each place of a text the engine
    follows one branch, where an alternation of every form tries each in turn wherever one
    could start, and base64 forms start with any letter."""
    root: _Trie = {}
    for word in words:
        node = root
        for token in _TOKEN.findall(word):
            node = node.setdefault(token.upper() if len(token) == 3 else token, {})
        node[_END] = {}
    return re.compile(_trie_pattern(root))


def _trie_pattern(node: _Trie) -> str:
    parts: list[str] = []
    children = [(token, child) for token, child in node.items() if token != _END]
    # A run of single children is a plain sequence: followed in a loop, so a long secret
    # (a PEM key) does not recurse once a character.
    while len(children) == 1 and _END not in node:
        token, node = children[0]
        parts.append(_token_pattern(token))
        children = [(token, child) for token, child in node.items() if token != _END]
    if children:
        branches = "|".join(
            _token_pattern(token) + _trie_pattern(child) for token, child in children
        )
        # Greedy: a longer form is tried before the shorter one that ends here.
        parts.append(f"(?:{branches})?" if _END in node else f"(?:{branches})")
    return "".join(parts)


def _token_pattern(token: str) -> str:
    if len(token) == 3:  # a percent-escape
        return "%" + "".join(f"[{c}{c.lower()}]" if c.isalpha() else c for c in token[1:])
    return re.escape(token)


def _upper_hex(text: str) -> str:
    return _PERCENT_ESCAPE.sub(lambda escape: escape.group(0).upper(), text)


def _header_form(value: str) -> str:
    """What rendering makes of a value in a header (render._ascii_header_text)."""
    if value.isascii() and value.isprintable():
        return value
    return "".join(
        char if " " <= char <= "~" or char == "\t" else quote(char, safe="", errors="replace")
        for char in value
    )


# Webhook URLs carry their credential in the path. Of a webhook service's URL (Slack, Discord,
# Microsoft Teams) only the scheme and host are kept; of any other URL whose path has a `hooks`,
# `webhook` or `webhooks` segment (Mattermost, Rocket.Chat, GitLab, self-hosted receivers), the
# path up to that segment. In any text: the rule needs no template to know which URL is secret.
_WEBHOOK_URL = re.compile(
    r"(?P<origin>https?://(?:hooks\.slack\.com|(?:ptb\.|canary\.)?discord(?:app)?\.com"
    r"(?=/api/webhooks/)|[A-Za-z0-9-]+\.webhook\.office\.com|outlook\.office\.com"
    r"(?=/webhook)))(?P<rest>/[^\s\"'<>]*)"
    r"|(?P<prefix>https?://[^\s\"'<>/?#]+(?:/[^\s\"'<>/?#]+){0,16}?/(?:web)?hooks?/)"
    r"(?P<key>[^\s\"'<>?#]+)"
)


def _webhook_replacement(match: re.Match[str]) -> str:
    if match.group("origin"):
        return f"{match.group('origin')}/{REDACTED}"
    return f"{match.group('prefix')}{REDACTED}"


def redact_webhook_urls(text: str) -> str:
    """`https://hooks.slack.com/services/T/B/X` -> `https://hooks.slack.com/[REDACTED]`."""
    if "://" not in text:
        return text
    return _WEBHOOK_URL.sub(_webhook_replacement, text)


def _replacement_for(value: str) -> str:
    """`https://hooks.slack.com/services/T/B/X` -> `https://hooks.slack.com/[REDACTED]`."""
    if not value.startswith(("http://", "https://")):
        return REDACTED
    try:
        parts = urlsplit(value)
        host = parts.hostname
        port = parts.port
    except ValueError:
        return REDACTED
    if not host or any(c in host for c in "[]/\\\"'<> "):
        return REDACTED
    authority = host if port is None else f"{host}:{port}"
    return f"{parts.scheme}://{authority}/{REDACTED}"
