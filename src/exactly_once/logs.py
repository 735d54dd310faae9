"""Log lines that a producer's bytes cannot forge."""

from __future__ import annotations

import json
import re

_SPLITS_A_FIELD = re.compile(r'[ "=\\]')


def log_value(value: object) -> str:
    """A value for a `key=value` log line that cannot forge lines or fields.

    Message ids, correlation ids and the like are the producer's bytes: anything beyond plain
    printable text without spaces, quotes or `=` is written as a JSON string, so a newline
    arrives as `\\n` and a reader can always split the line back into its fields.
    """
    text = str(value)
    if text and text.isprintable() and _SPLITS_A_FIELD.search(text) is None:
        return text
    return json.dumps(text)
