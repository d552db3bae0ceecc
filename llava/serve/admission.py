"""Which workers the controller admits: an address on the allow-list, an origin and nothing more, and a status the
controller fetched itself.

Upstream's controller lists whatever ``/register_worker`` claims (its ``worker_status`` included) and later POSTs
users' requests to ``worker_name + "/worker_generate_stream"``, so anyone who can reach it can make it send
requests to any URL and relay the reply (fault case K18). Here:

1. the address must be an origin, ``http(s)://host[:port]`` with no path, query, fragment or user name (so no
   other URL can be spelled by appending to it);
2. its host must be on the allow-list (:class:`AllowedHosts`; loopback always, more with
   ``--allowed-worker-hosts``), checked before anything is sent to it;
3. the controller asks the address for ``/worker_get_status`` itself and lists the worker only for a well-formed
   answer (:func:`parse_status`); a status in the registration body is ignored;
4. one worker is one entry: addresses are compared by :func:`worker_identity` (every loopback spelling is one
   host, IP addresses in their canonical form, host names without case or a trailing dot, default ports filled
   in), so ``localhost``, ``127.0.0.1`` and ``127.0.3.9`` with one port are the same worker, not three.

An allow-list entry that covers every address (``*``, ``0.0.0.0/0``, ``::/0``) is warned about
(:attr:`AllowedHosts.match_all`). Link-local addresses (``169.254.0.0/16``, ``fe80::/10``) and cloud metadata
services (``169.254.169.254``, ``fd00:ec2::254``, ``100.100.100.200``, ``metadata.google.internal``) are admitted
only when an entry names them (the address itself, or a network inside the link-local range), never through
``*`` or a wider network.
"""

from __future__ import annotations

import ipaddress
import math
import urllib.parse
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from llava.net import is_loopback
from llava.utils import UserError

#: Longest model name and most model names one worker may report.
MAX_MODEL_NAME_CHARS = 512
MAX_MODEL_NAMES = 64

#: Where cloud metadata services answer (with credentials): admitted only when an entry names them.
LINK_LOCAL_NETWORKS = (ipaddress.ip_network("169.254.0.0/16"), ipaddress.ip_network("fe80::/10"))
METADATA_ADDRESSES = frozenset(ipaddress.ip_address(a) for a in ("169.254.169.254", "fd00:ec2::254", "100.100.100.200"))
METADATA_NAMES = frozenset({"metadata.google.internal", "metadata"})

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address


def _ip(host: str) -> IPAddress | None:
    """``host`` as an IP address (an IPv4-mapped IPv6 address as its IPv4 one), or ``None`` for a name."""
    try:
        address = ipaddress.ip_address(host.strip("[]"))
    except ValueError:
        return None
    mapped = getattr(address, "ipv4_mapped", None)
    return mapped if mapped is not None else address


def _host_name(host: str) -> str:
    return host.lower().strip("[]").rstrip(".")


def named_only(host: str) -> bool:
    """Whether ``host`` is a link-local or metadata address (or a metadata service's name)."""
    address = _ip(host)
    if address is None:
        return _host_name(host) in METADATA_NAMES
    return address in METADATA_ADDRESSES or any(address in network for network in LINK_LOCAL_NETWORKS)


class WorkerRefused(ValueError):
    """A worker address the controller will not contact; ``status`` is the HTTP status of the refusal."""

    def __init__(self, message: str, status: int) -> None:
        super().__init__(message)
        self.status = status


@dataclass(frozen=True)
class AllowedHosts:
    """Hosts a worker may live on: loopback always, plus ``entries`` (exact host names, IP addresses, networks in
    CIDR notation, or ``*`` for any host).

    Raises:
        UserError: For an entry that is none of those (e.g. a URL).
    """

    entries: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        names, networks = set(), []
        for entry in self.entries:
            entry = entry.strip().lower()
            if not entry:
                continue
            if entry == "*":
                names.add("*")
                continue
            try:
                networks.append(ipaddress.ip_network(entry.strip("[]"), strict=False))
                continue
            except ValueError:
                pass
            if not all(part and all(c.isalnum() or c == "-" for c in part) for part in entry.split(".")):
                raise UserError(
                    f"--allowed-worker-hosts entry {entry!r} is not a host name, IP address or network; give e.g. "
                    "gpu-node-1, 10.0.0.5 or 10.0.0.0/24 (no scheme or port)"
                )
            names.add(entry)
        object.__setattr__(self, "_names", frozenset(names))
        object.__setattr__(self, "_networks", tuple(networks))

    @classmethod
    def parse(cls, values: Iterable[str] | None) -> AllowedHosts:
        """From the flag's values, each a host or a comma-separated list of hosts."""
        return cls(tuple(part for value in values or () for part in value.split(",")))

    @property
    def any_host(self) -> bool:
        return "*" in self._names  # type: ignore[attr-defined]

    @property
    def match_all(self) -> bool:
        """Whether an entry admits every address: ``*``, or a network of prefix length 0 (``0.0.0.0/0``, ``::/0``)."""
        return self.any_host or any(network.prefixlen == 0 for network in self._networks)  # type: ignore[attr-defined]

    def _names_explicitly(self, host: str) -> bool:
        """An entry names ``host`` itself: its name, its single address, or a network inside the link-local range."""
        if _host_name(host) in self._names - {"*"}:  # type: ignore[attr-defined]
            return True
        address = _ip(host)
        return address is not None and any(
            address in network and (network.num_addresses == 1 or any(network.subnet_of(space) for space in LINK_LOCAL_NETWORKS
                                                                      if space.version == network.version))
            for network in self._networks  # type: ignore[attr-defined]
        )

    def allows(self, host: str) -> bool:
        if is_loopback(host.strip("[]")) or self._names_explicitly(host):
            return True
        if named_only(host):
            return False  # link-local and metadata: never through * or a wider network
        if self.any_host or _host_name(host) in self._names:  # type: ignore[attr-defined]
            return True
        try:
            address = ipaddress.ip_address(host.strip("[]"))
        except ValueError:
            return False
        return any(address in network for network in self._networks)  # type: ignore[attr-defined]

    def describe(self) -> str:
        extra = sorted(self._names) + [str(network) for network in self._networks]  # type: ignore[attr-defined]
        return "loopback" + (" and " + ", ".join(extra) if extra else " only")


def worker_origin(address: Any, allowed: AllowedHosts | None) -> str:
    """The worker address as ``scheme://host[:port]`` (trailing ``/`` dropped), checked against ``allowed``
    (``None``: its form only, as a worker checks its own ``--worker-address``).

    Raises:
        WorkerRefused: 400 for an address that is not a bare origin, 403 for a host not on the allow-list.
    """
    if not isinstance(address, str) or not address.strip():
        raise WorkerRefused(f"worker_name must be the worker's address, e.g. http://localhost:21002, got {address!r}", 400)
    parts = urllib.parse.urlsplit(address.strip())
    try:
        port = parts.port
    except ValueError:
        port = -1
    if (parts.scheme.lower() not in ("http", "https") or not parts.hostname or parts.username is not None
            or parts.password is not None or parts.path not in ("", "/") or parts.query or parts.fragment
            or "?" in address or "#" in address or port == -1):
        raise WorkerRefused(
            f"worker address {address!r} must be an origin, http://host:port with nothing after it; "
            "give the address the worker listens on", 400,
        )
    if allowed is not None and not allowed.allows(parts.hostname):
        special = " (a link-local or metadata address is admitted only when an entry names it)" if named_only(parts.hostname) else ""
        raise WorkerRefused(
            f"worker host {parts.hostname!r} is not on the controller's allow-list ({allowed.describe()}){special}; start "
            "the controller with --allowed-worker-hosts to admit it", 403,
        )
    host = f"[{parts.hostname}]" if ":" in parts.hostname else parts.hostname
    return f"{parts.scheme.lower()}://{host}" + (f":{port}" if port is not None else "")


def worker_identity(origin: str) -> tuple[str, int]:
    """``(host, port)`` telling workers apart, of an origin :func:`worker_origin` accepted: every loopback spelling
    (``localhost``, ``127.0.0.1``, ``127.0.3.9``, ``::1``) is ``"loopback"``, an IP address its canonical form
    (``::ffff:10.0.0.5`` is ``10.0.0.5``), a host name lower-case without a trailing dot; the port is filled in
    (80 for ``http``, 443 for ``https``)."""
    parts = urllib.parse.urlsplit(origin)
    host = parts.hostname or ""
    port = parts.port or (443 if parts.scheme.lower() == "https" else 80)
    address = _ip(host)
    if is_loopback(host) or (address is not None and address.is_loopback):
        return "loopback", port
    return (address.compressed if address is not None else _host_name(host)), port


def parse_status(data: Any) -> dict[str, Any] | None:
    """A worker's ``/worker_get_status`` answer as ``{"model_names", "speed", "queue_length"}``, or ``None``
    when it is not one (what another service at that address would answer)."""
    if not isinstance(data, Mapping):
        return None
    names, speed, queue = data.get("model_names"), data.get("speed", 1), data.get("queue_length", 0)
    if (not isinstance(names, list) or not 0 < len(names) <= MAX_MODEL_NAMES
            or not all(isinstance(name, str) and 0 < len(name) <= MAX_MODEL_NAME_CHARS for name in names)):
        return None
    if isinstance(speed, bool) or not isinstance(speed, (int, float)) or not math.isfinite(speed) or speed < 0:
        return None
    if isinstance(queue, bool) or not isinstance(queue, int) or queue < 0:
        return None
    return {"model_names": list(names), "speed": float(speed), "queue_length": queue}


__all__ = ["AllowedHosts", "MAX_MODEL_NAMES", "WorkerRefused", "named_only", "parse_status", "worker_identity", "worker_origin"]
