"""Write what the registry of consumers derives into the two checked-in emulator files.

- emulators/servicebus/config.json: the official Service Bus emulator (for Docker users) reads
  its entities from it. One subscription of the events topic per entry of
  `orders.service.registry` on the topic (with the rule that keeps other subscriptions'
  delayed retries out, as the Bicep's), after the example subscriptions written by hand
  (kept as they are, rules included); the queues are written by hand too.
- local.settings.sample.json: the emulator settings for `func start`. The host resolves each
  trigger's `%<NAME>_SUBSCRIPTION%` from the settings, so each entry's setting is written, after
  ORDER_EVENTS_TOPIC.

`--check` writes nothing and exits 1 when a file is not what this would write
(tests/infra/test_emulators.py runs it, so a consumer added to the registry fails the tests
until `make derived-config` ran). A consumer removed from the registry leaves its subscription
and setting behind: delete them by hand.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from exactly_once.delayed_retries import subscription_filter
from orders.service.registry import subscription_consumers
from orders.settings import Settings

REPO = Path(__file__).resolve().parents[1]
CONFIG = REPO / "emulators" / "servicebus" / "config.json"
LOCAL_SETTINGS = REPO / "local.settings.sample.json"
# The official emulator's limits: locks PT5S..PT5M, TTL PT5M..PT1H, at most 10 deliveries.
SUBSCRIPTION_PROPERTIES: dict[str, Any] = {
    "DeadLetteringOnMessageExpiration": True,
    "DefaultMessageTimeToLive": "PT1H",
    "LockDuration": "PT1M",
    "MaxDeliveryCount": 10,
    "ForwardDeadLetteredMessagesTo": "",
    "ForwardTo": "",
    "RequiresSession": False,
}


def own_delayed_retries(subscription: str) -> dict[str, Any]:
    """The rule that replaces a subscription's default one, as the Bicep does: every message
    but a delayed retry's copy addressed to another subscription (`exactly_once.delayed_retries`).
    The emulator refuses the `$Default` name; a config's rules replace the default anyway."""
    return {
        "Name": "own-delayed-retries",
        "Properties": {
            "FilterType": "Sql",
            "SqlFilter": {"SqlExpression": subscription_filter(subscription)},
        },
    }


def regenerated(config: dict[str, Any]) -> dict[str, Any]:
    """`config` with one subscription per registered topic consumer on the events topic."""
    topic_name = Settings(cosmos_endpoint="").order_events_topic
    generated = [spec.name for spec in subscription_consumers()]
    (namespace,) = config["UserConfig"]["Namespaces"]
    (topic,) = [topic for topic in namespace["Topics"] if topic["Name"] == topic_name]
    by_hand = [s for s in topic["Subscriptions"] if s["Name"] not in generated]
    topic["Subscriptions"] = by_hand + [
        {
            "Name": name,
            "Properties": dict(SUBSCRIPTION_PROPERTIES),
            "Rules": [own_delayed_retries(name)],
        }
        for name in generated
    ]
    return config


def with_settings(sample: dict[str, Any]) -> dict[str, Any]:
    """`sample` with each registered topic consumer's `<NAME>_SUBSCRIPTION` after the topic's."""
    settings = {spec.setting: spec.name for spec in subscription_consumers()}
    values: dict[str, Any] = {}
    for name, value in sample["Values"].items():
        if name in settings:
            continue
        values[name] = value
        if name == "ORDER_EVENTS_TOPIC":
            values.update(settings)
    assert settings.keys() <= values.keys(), "the sample has no ORDER_EVENTS_TOPIC to follow"
    return {**sample, "Values": values}


def render(document: dict[str, Any]) -> str:
    return json.dumps(document, indent=2) + "\n"


def stale(path: Path, derive: Callable[[dict[str, Any]], dict[str, Any]], check: bool) -> bool:
    """Whether `path` differs from what `derive` makes of it; rewritten unless `check`."""
    current = path.read_text(encoding="utf-8")
    wanted = render(derive(json.loads(current)))
    if current == wanted:
        return False
    if check:
        print(f"{path} is stale: run `make derived-config`", file=sys.stderr)
    else:
        path.write_text(wanted, encoding="utf-8")
        print(f"wrote {path}")
    return True


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", type=Path, default=CONFIG)
    parser.add_argument("--local-settings", type=Path, default=LOCAL_SETTINGS)
    parser.add_argument("--check", action="store_true", help="exit 1 if a file is stale")
    args = parser.parse_args(argv)
    found = [
        stale(args.config, regenerated, args.check),
        stale(args.local_settings, with_settings, args.check),
    ]
    return 1 if args.check and any(found) else 0


if __name__ == "__main__":
    sys.exit(main())
