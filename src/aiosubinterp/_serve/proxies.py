"""Which peers of serve's HTTP server are trusted proxies (--forwarded-allow-ips).

Used by main, to check the entries before anything starts, and by every
interpreter, to match peers: one parser for both. It imports only socket
(not ipaddress, which every interpreter would otherwise pay for).
"""

from __future__ import annotations

import socket
from typing import Any

_V4_MAPPED = bytes(10) + b"\xff\xff"


def _parse_ip(text: str) -> tuple[int, int, bool] | None:
    """(bits, value, was IPv4-mapped IPv6) of an address; None for anything else (a name)."""
    for family, bits in ((socket.AF_INET, 32), (socket.AF_INET6, 128)):
        try:
            packed = socket.inet_pton(family, text)
        except (OSError, ValueError):
            continue
        if bits == 128 and packed[:12] == _V4_MAPPED:  # ::ffff:127.0.0.1 on a dual-stack socket
            return 32, int.from_bytes(packed[12:]), True
        return bits, int.from_bytes(packed), False
    return None


class TrustedProxies:
    """The peers whose X-Forwarded-For and X-Forwarded-Proto headers are believed.

    Entries (``--forwarded-allow-ips``; main checks them by making one): IP addresses,
    networks in CIDR notation, ``*`` (any peer), ``unix:`` (peers on a Unix
    domain socket). Matched without the ipaddress module, which every
    interpreter would otherwise import.
    """

    def __init__(self, entries: tuple[str, ...]) -> None:
        self.everyone = "*" in entries
        self.unix = "unix:" in entries
        self.networks: list[tuple[int, int, int]] = []  # (bits, value >> shift, shift)
        for entry in entries:
            if entry in ("*", "unix:"):
                continue
            text, slash, prefix = entry.partition("/")
            parsed = _parse_ip(text)
            if parsed is None or (slash and not prefix.isdigit()):
                raise ValueError(f"{entry!r} is not an IP address or network")
            bits, value, mapped = parsed
            full = 128 if mapped else bits
            length = int(prefix) if slash else full
            if length > full:
                raise ValueError(f"{entry!r} is not an IP address or network")
            if mapped:
                length = max(0, length - 96)
            shift = bits - length
            self.networks.append((bits, value >> shift, shift))

    def trusts(self, host: str | None) -> bool:
        """Whether host (None: a Unix socket peer) is a proxy whose headers count."""
        if self.everyone:
            return True
        if host is None:
            return self.unix
        parsed = _parse_ip(host)
        if parsed is None:  # a name, "unknown", an obfuscated identifier
            return False
        bits, value, _ = parsed
        return any(b == bits and value >> shift == net for b, net, shift in self.networks)

    def apply(self, scope: dict[str, Any], headers: list[tuple[bytes, bytes]]) -> None:
        """Set scope's client and scheme from the forwarding headers of a trusted peer."""
        hops: list[str] = []
        proto = None
        for name, value in headers:
            if name == b"x-forwarded-for":
                hops.extend(h.strip() for h in value.decode("latin-1").split(","))
            elif name == b"x-forwarded-proto" and proto is None:
                proto = value.decode("latin-1").split(",")[0].strip().lower()
        if proto in ("http", "https"):
            scope["scheme"] = proto
        hops = [h for h in hops if h]
        if hops:
            # From the nearest hop back: the first one that is not a trusted
            # proxy is the client (a client can put anything on the left).
            client = hops[0]
            for hop in reversed(hops):
                if not self.trusts(hop):
                    client = hop
                    break
            scope["client"] = (client, 0)
