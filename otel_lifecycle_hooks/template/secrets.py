"""The variables of a template whose values are secrets, so that every route that shows a value
(the hook log, spans, the journal, `dry-run`) redacts them."""

from __future__ import annotations

from ..redact import looks_like_secret_name
from ..variables import referenced_names
from .model import Template


def secret_names_for(template: Template) -> frozenset[str]:
    """Every variable whose value must be redacted for this template.

    The `secrets:` block, the variables the auth and signing settings name, and any `env:` key
    or referenced name that looks like a credential (`*_TOKEN`, `*_SECRET`, `*_WEBHOOK_URL`...).
    """
    names = set(template.secrets)
    candidates = set(template.env)
    for hook in template.hooks:
        action = hook.action
        for name in (action.auth.token_env, action.signing_secret_env):
            if name:
                names.add(name)
        texts = [action.url or "", action.body or "", *action.headers.values()]
        texts += [*action.command, *action.env.values()]
        for text in texts:
            candidates |= referenced_names(text)
    names |= {name for name in candidates if looks_like_secret_name(name)}
    return frozenset(names)
