"""Dispatcher addresses: "tcp:HOST:PORT", "unix:PATH", or "HOST:PORT" for tcp.

A comma-separated list of them names an HA group ("tcp:a:5050,tcp:b:5050"): the C++ client
tries them in turn and follows a standby's "not the leader; the leader is ADDRESS".
"""

from __future__ import annotations

import ipaddress
import warnings

from dispatch.errors import InsecureConnectionWarning

warnings.simplefilter("always", InsecureConnectionWarning)


def _normalize_one(address: str) -> str:
    address = address.strip()
    if not address or address.startswith(("tcp:", "unix:")):
        return address  # an empty entry is left for the C++ client to name
    return "tcp:" + address


def normalize(address: str) -> str:
    if not isinstance(address, str) or not address:
        raise TypeError("a dispatcher address is a str such as 'tcp:127.0.0.1:5050'")
    return ",".join(_normalize_one(entry) for entry in address.split(","))


def _is_loopback_one(address: str) -> bool:
    if address.startswith("unix:"):
        return True
    host = address[len("tcp:"):].rsplit(":", 1)[0].strip("[]")
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def is_loopback(address: str) -> bool:
    """True when every address of the (normalized) list stays on this machine."""
    return all(_is_loopback_one(entry) for entry in address.split(","))


def checked(address: str, token: str | None, what: str) -> str:
    """The normalized address; warns loudly when it leaves the machine without a token.

    Pickled code runs on workers: whoever can reach the dispatcher can run code there.
    """
    address = normalize(address)
    if not token and not is_loopback(address):
        warnings.warn(
            f"{what} connects to {address} without a token: anyone who can reach that "
            "dispatcher can run code on its workers (closures are pickled Python). Start the "
            "dispatcher with --token and pass token=...", InsecureConnectionWarning, stacklevel=3)
    return address
