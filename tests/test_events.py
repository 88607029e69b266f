from otel_lifecycle_hooks import events


def test_span_event_names_write_dashes_as_underscores():
    assert events.span_event_name("pre-stop") == "agent.lifecycle.pre_stop"
    assert events.event_from_span_event_name("agent.lifecycle.pre_stop") == "pre-stop"


def test_foreign_span_event_names_are_not_ours():
    assert events.event_from_span_event_name("exception") is None
    assert events.event_from_span_event_name("agent.lifecycle.nonsense") is None


def test_every_event_round_trips_through_its_span_event_name():
    for event in events.ALL_EVENTS:
        assert events.event_from_span_event_name(events.span_event_name(event)) == event
