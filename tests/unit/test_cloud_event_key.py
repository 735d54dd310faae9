"""`cloud_event_key` as the CloudEvents AMQP binding (1.0.2) reads an event: structured mode by
the content type (or, with none, a JSON body with a `specversion`), binary mode by the
`cloudEvents:` application properties; source and id together, kept apart unambiguously.
tests/core/test_message_keys.py sends both modes through the broker and the real SDK."""

from __future__ import annotations

import json
from typing import Any

import pytest

from exactly_once import Delivered, cloud_event_key


def structured_body(**attributes: Any) -> bytes:
    return json.dumps({"specversion": "1.0", "type": "t", **attributes, "data": {}}).encode()


def delivered(
    body: bytes, properties: dict[str, object] | None = None, content_type: str | None = None
) -> Delivered[None]:
    return Delivered(None, "message-id", body, properties or {}, content_type)


def test_structured_mode_reads_the_body_by_its_content_type_or_without_one() -> None:
    body = structured_body(source="/orders", id="e-1")

    with_type = cloud_event_key(delivered(body, content_type="application/cloudevents+json"))
    without_type = cloud_event_key(delivered(body))

    assert with_type == without_type == '["/orders","e-1"]'


def test_binary_mode_reads_the_prefixed_application_properties() -> None:
    properties: dict[str, object] = {
        "cloudEvents:specversion": "1.0",
        "cloudEvents:source": b"/orders",  # AMQP may carry a string as binary
        "cloudEvents:id": "e-1",
    }

    key = cloud_event_key(delivered(b'{"any": "data"}', properties, "application/json"))

    assert key == '["/orders","e-1"]'


def test_a_non_cloudevents_content_type_is_binary_mode_even_with_a_structured_body() -> None:
    """The binding: a content type not prefixed `application/cloudevents` means binary mode,
    whose attributes are the properties; here there are none, so there is no key."""
    body = structured_body(source="/orders", id="e-1")

    assert cloud_event_key(delivered(body, content_type="application/json")) is None


@pytest.mark.parametrize(
    "event",
    [
        delivered(structured_body(source="/orders")),
        delivered(structured_body(id="e-1", source="")),
        delivered(b"not json", content_type="application/cloudevents+json"),
        delivered(b'["a list"]', content_type="application/cloudevents+json"),
        delivered(b"{}", {"cloudEvents:source": "/orders"}),
        delivered(b"{}", {"cloudEvents:source": "/orders", "cloudEvents:id": b"\xff"}),
    ],
    ids=["no-id", "empty-source", "not-json", "not-an-object", "binary-no-id", "binary-bad-utf8"],
)
def test_an_event_without_source_or_id_has_no_key(event: Delivered[None]) -> None:
    assert cloud_event_key(event) is None


def test_source_and_id_stay_apart_whatever_they_hold() -> None:
    one = cloud_event_key(delivered(structured_body(source="a:b", id="c")))
    other = cloud_event_key(delivered(structured_body(source="a", id="b:c")))

    assert one is not None and other is not None and one != other
