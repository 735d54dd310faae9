"""Which `Host` values the emulator serves: a page that re-binds its own domain to 127.0.0.1
(DNS rebinding) reaches the port with its own name in `Host`, and is refused.

By default: the bound address, `localhost` and `127.0.0.1` (and `[::1]` on an IPv6 loopback
or wildcard bind), each with the port served or with no port (raw tools leave it out; a
browser always names the port of the origin it talks to). `--allowed-host NAME:PORT` adds that
exact authority (a container's published port); `--allowed-host NAME` adds NAME on any port.
A request without `Host` (HTTP/1.0, raw tools) is served: every browser sends one.
"""

from __future__ import annotations

import urllib.parse
from collections.abc import Iterable

_WILDCARDS = ("0.0.0.0", "::", "")
_DEFAULT_PORTS = {"http": 80, "https": 443}


def split_authority(authority: str) -> tuple[str, int | None]:
    """`name[:port]` -> (lower-case name, port or None); ValueError when malformed."""
    text = authority.strip().lower()
    if text.startswith("["):
        end = text.find("]")
        if end < 0:
            raise ValueError(f"malformed host {authority!r:.80}")
        name, rest = text[: end + 1], text[end + 1 :]
        if rest and not rest.startswith(":"):
            raise ValueError(f"malformed host {authority!r:.80}")
        port_text = rest[1:] if rest else None
    elif ":" in text:
        name, port_text = text.rsplit(":", 1)
    else:
        name, port_text = text, None
    if not name or any(c in name for c in "/\\@ "):
        raise ValueError(f"malformed host {authority!r:.80}")
    if port_text is None:
        return name, None
    if not port_text.isascii() or not port_text.isdigit() or not 0 < int(port_text) < 65536:
        raise ValueError(f"malformed port in host {authority!r:.80}")
    return name, int(port_text)


class HostAllowList:
    def __init__(self, bound_host: str, port: int, extra: Iterable[str] = ()) -> None:
        self.port = port
        names = {"localhost", "127.0.0.1"}
        bound = bound_host.strip().lower()
        if bound in ("::", "::1"):
            names.add("[::1]")
        if bound not in _WILDCARDS:
            names.add(f"[{bound}]" if ":" in bound else bound)
        self.names = frozenset(names)
        self.exact: set[tuple[str, int]] = {(name, port) for name in names}
        self.any_port: set[str] = set()
        for spec in extra:
            name, spec_port = split_authority(spec)
            if spec_port is None:
                self.any_port.add(name)
            else:
                self.exact.add((name, spec_port))

    def allows(self, host: str | None) -> bool:
        if host is None:
            return True
        try:
            name, port = split_authority(host)
        except ValueError:
            return False
        if name in self.any_port or (port is None and name in self.names):
            return True
        return (name, port) in self.exact

    def allows_target(self, target: str) -> bool:
        """An absolute-form request target names the host too (and wins over `Host`)."""
        if not target.lower().startswith(("http://", "https://")):
            return True
        try:
            netloc = urllib.parse.urlsplit(target).netloc
        except ValueError:
            return False
        return self.allows(netloc.rsplit("@", 1)[-1])

    def allows_origin(self, origin: str, scheme: str) -> bool:
        """Whether `Origin` (`SCHEME://NAME[:PORT]`) is this emulator's own: its scheme and a
        served host on the port served (`null`, another scheme or name is foreign). Unlike
        `Host`, an origin without a port means the scheme's default port."""
        origin_scheme, separator, rest = origin.strip().partition("://")
        if not separator or origin_scheme.lower() != scheme:
            return False
        try:
            name, port = split_authority(rest)
        except ValueError:
            return False
        port = port if port is not None else _DEFAULT_PORTS[scheme]
        return name in self.any_port or (name, port) in self.exact

    def describe(self) -> list[str]:
        return sorted(f"{n}:{p}" for n, p in self.exact) + sorted(self.any_port)
