"""Which variables of a template are secrets: the `secrets:` block, the auth and signing settings,
and every credential-looking name it sets or references."""

from __future__ import annotations

from otel_lifecycle_hooks.template.model import AuthSpec, HookAction, HookSpec, Template
from otel_lifecycle_hooks.template.secrets import secret_names_for


def test_secret_names_for_a_template_gather_every_source() -> None:
    hook = HookSpec(
        name="notify",
        on=("session-end",),
        action=HookAction(
            type="http",
            url="${SLACK_WEBHOOK_URL}",
            headers={"X-Trace": "${AGENT_ID}"},
            auth=AuthSpec(type="bearer-token", token_env="MONITORING_BEARER"),
            signing_secret_env="WHSEC",
        ),
    )
    template = Template(
        hooks=(hook,),
        env={"GCP_PROJECT": "p", "DB_PASSWORD": "x"},
        secrets=frozenset({"GOOGLE_APPLICATION_CREDENTIALS"}),
    )
    assert secret_names_for(template) == {
        "GOOGLE_APPLICATION_CREDENTIALS",
        "MONITORING_BEARER",
        "WHSEC",
        "SLACK_WEBHOOK_URL",
        "DB_PASSWORD",
    }
