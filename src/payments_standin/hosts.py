"""The `Host` names the stand-in answers to.

A web page can re-bind its own domain to 127.0.0.1 (DNS rebinding) and so reach this port from
a browser, past every same-origin check; its requests still carry its own name in `Host`. A
request for a name the stand-in does not serve is refused before anything is read or done.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass

from .validation import InvalidInput

DEFAULT_HTTP_PORT = 80
# RFC 3986 authority, narrowed to what a local server is called by: a DNS name or IPv4
# address, or a bracketed IPv6 literal, then an optional port.
AUTHORITY = re.compile(
    r"(?P<name>\[[0-9A-Fa-f:.]{2,45}\]|[A-Za-z0-9](?:[A-Za-z0-9._-]{0,252}))"
    r"(?::(?P<port>[0-9]{1,5}))?"
)


def authority(text: str, default_port: int) -> tuple[str, int]:
    """(lower-case name, port) of `NAME[:PORT]`; the default port when none is given."""
    found = AUTHORITY.fullmatch(text)
    port = default_port if found is None or found["port"] is None else int(found["port"])
    if found is None or not 1 <= port <= 65535:
        raise InvalidInput(f"{text[:80]!r} is not a host name or address with an optional port")
    return found["name"].lower(), port


@dataclass(frozen=True)
class AllowedHosts:
    served: frozenset[tuple[str, int]]

    @classmethod
    def for_server(cls, bound_host: str, port: int, extra: Iterable[str] = ()) -> AllowedHosts:
        """The bound address, `localhost` and `127.0.0.1` with the bound port, plus `extra`
        (`NAME[:PORT]`, the bound port when none is given); ValueError names a bad entry."""
        bound = f"[{bound_host}]" if ":" in bound_host else bound_host
        served = {(name.lower(), port) for name in (bound, "localhost", "127.0.0.1")}
        for entry in extra:
            try:
                served.add(authority(entry, port))
            except InvalidInput as exc:
                raise ValueError(f"--allowed-host: {exc}") from None
        return cls(frozenset(served))

    def allows(self, host_headers: list[str]) -> bool:
        """Whether this request's one `Host` header names a served host. InvalidInput when there
        is none, more than one, or one that is not a host (RFC 9112 answers those with 400)."""
        if len(host_headers) != 1:
            raise InvalidInput("send exactly one Host header")
        return authority(host_headers[0].strip(), DEFAULT_HTTP_PORT) in self.served
