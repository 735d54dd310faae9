"""The core's guide, run by the Python of a clean venv where only the built wheel is installed.

tests/core/test_installed_wheel.py starts this file with that venv's interpreter (isolated:
`python -I`, so neither the working folder nor PYTHONPATH can lend it the source tree). It reads
the guide from the installed package (the wheel carries its README), runs every ```python block
in order, as tests/core/test_guide.py does, then sends one greeting, its duplicate, a
conflicting resend and a poison message through our Service Bus emulator, lets the guide's
`work` settle them, and prints what it saw as JSON: where `exactly_once` was imported from, the
dead letters' reasons, what is left on the queue and the documents written. Only the standard
library and what the wheel and the guide install are imported here.
"""

from __future__ import annotations

import asyncio
import json
import re
import sys
from importlib import metadata, resources
from typing import Any

from azure.servicebus import ServiceBusMessage, ServiceBusSubQueue
from azure.servicebus.aio import ServiceBusClient

import exactly_once

BLOCK = re.compile(r"^```python\n(.*?)^```", re.DOTALL | re.MULTILINE)


def run_guide() -> dict[str, Any]:
    guide = resources.files(exactly_once).joinpath("README.md").read_text(encoding="utf-8")
    namespace: dict[str, Any] = {"__name__": "guide"}
    for number, block in enumerate(BLOCK.findall(guide), start=1):
        code = compile(block, f"README.md python block {number}", "exec", dont_inherit=True)
        exec(code, namespace)
    return namespace


async def main(connection: str, queue: str, user: str, greeting_id: str) -> dict[str, Any]:
    guide = run_guide()
    await guide["create_container"]()
    first = {"greeting_id": greeting_id, "user_id": user, "text": "hello"}
    conflicting = {**first, "text": "bye"}
    async with ServiceBusClient.from_connection_string(connection) as client:
        async with client.get_queue_sender(queue) as sender:
            await sender.send_messages(
                [
                    ServiceBusMessage(json.dumps(first), message_id=greeting_id),
                    ServiceBusMessage(json.dumps(first), message_id=greeting_id),
                    ServiceBusMessage(json.dumps(conflicting), message_id=greeting_id),
                    ServiceBusMessage(b"{not json", message_id="poison"),
                ]
            )
        async with client.get_queue_receiver(queue) as receiver:
            await guide["work"](receiver)
            left = [m.message_id for m in await receiver.peek_messages(max_message_count=50)]
        async with client.get_queue_receiver(
            queue, sub_queue=ServiceBusSubQueue.DEAD_LETTER
        ) as dead_letters:
            letters = {
                m.message_id: m.dead_letter_reason
                for m in await dead_letters.peek_messages(max_message_count=50)
            }
    async with guide["cosmos"], guide["servicebus_client"]:
        documents = [
            item["id"]
            async for item in guide["container"].query_items(
                "SELECT c.id FROM c", partition_key=user
            )
        ]
    return {
        "module": exactly_once.__file__,
        "prefix": sys.prefix,
        "version": metadata.version("exactly-once-azure"),
        "left": left,
        "dead_letters": letters,
        "documents": sorted(documents),
    }


if __name__ == "__main__":
    connection_string, queue_name, user_id, greeting = sys.argv[1:5]
    print(json.dumps(asyncio.run(main(connection_string, queue_name, user_id, greeting))))
