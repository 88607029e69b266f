"""The engine's pure decisions: retry timing, outcomes, deadlines, fail semantics."""

from otel_lifecycle_hooks.actions.base import AttemptResult
from otel_lifecycle_hooks.engine.policies import (
    RetryPolicy,
    attempt_timeout,
    fails_transition,
    outcome_of,
    retry_policy_for,
)
from otel_lifecycle_hooks.template.model import HookAction, HookSpec


def hook(**overrides):
    values = {
        "name": "h",
        "on": ("post-start",),
        "action": HookAction(type="http", url="http://127.0.0.1/"),
    }
    values.update(overrides)
    return HookSpec(**values)


def transient(**kw):
    return AttemptResult("transient", 0.01, status_code=503, error_type="http.503", **kw)


def delays_until_stop(policy, results):
    delays, waited = [], 0.0
    for attempt, result in enumerate(results, start=1):
        decision = policy.decide(attempt, result, waited)
        if not decision.retry:
            return delays, decision.reason
        delays.append(decision.delay)
        waited += decision.delay
    raise AssertionError("policy never stopped")


def test_a_503_is_retried_after_1s_2s_and_4s_then_given_up():
    delays, reason = delays_until_stop(RetryPolicy(), [transient()] * 10)
    assert delays == [1.0, 2.0, 4.0]
    assert reason == "attempts exhausted"


def test_503_then_200_stops_after_the_success():
    delays, reason = delays_until_stop(
        RetryPolicy(), [transient(), AttemptResult("ok", 0.01, status_code=200)]
    )
    assert delays == [1.0]
    assert reason == "succeeded"


def test_a_4xx_is_permanent_and_never_retried():
    delays, _ = delays_until_stop(
        RetryPolicy(), [AttemptResult("permanent", 0.01, status_code=404)]
    )
    assert delays == []


def test_timeouts_are_retried_like_transient_failures():
    delays, _ = delays_until_stop(RetryPolicy(), [AttemptResult("timeout", 10.0)] * 5)
    assert delays == [1.0, 2.0, 4.0]


def test_retry_after_within_the_budget_replaces_the_backoff_delay():
    delays, _ = delays_until_stop(RetryPolicy(), [transient(retry_after=3.0)] * 5)
    # budget 7s: 3s, then 3s (6s waited), then 3s would exceed what is left (1s)
    assert delays == [3.0, 3.0]


def test_retry_after_beyond_the_budget_ends_the_retries():
    decision = RetryPolicy().decide(1, transient(retry_after=60.0), 0.0)
    assert not decision.retry
    assert "exceeds budget" in decision.reason


def test_only_on_error_retry_retries():
    assert retry_policy_for(hook(on_error="retry")).max_attempts == 4
    assert retry_policy_for(hook(on_error="log")).max_attempts == 1
    assert retry_policy_for(hook(on_error="fail", blocking=True)).max_attempts == 1


def test_outcomes():
    assert outcome_of(AttemptResult("ok", 0)) == "success"
    assert outcome_of(AttemptResult("timeout", 0)) == "timeout"
    assert outcome_of(AttemptResult("transient", 0)) == "failed"
    assert outcome_of(AttemptResult("permanent", 0)) == "failed"


def test_attempt_timeout_is_cut_by_the_deadline():
    h = hook(timeout=10.0)
    assert attempt_timeout(h, now=100.0, deadline=None) == 10.0
    assert attempt_timeout(h, now=100.0, deadline=102.5) == 2.5
    assert attempt_timeout(h, now=100.0, deadline=99.0) == 0.0


def test_only_a_blocking_fail_hook_that_did_not_succeed_fails_the_transition():
    assert fails_transition(hook(on_error="fail", blocking=True), "failed")
    assert fails_transition(hook(on_error="fail", blocking=True), "timeout")
    assert not fails_transition(hook(on_error="fail", blocking=True), "success")
    assert not fails_transition(hook(on_error="fail", blocking=True), "skipped")
    assert not fails_transition(hook(on_error="log", blocking=True), "failed")
    assert not fails_transition(hook(on_error="retry", blocking=True), "failed")
