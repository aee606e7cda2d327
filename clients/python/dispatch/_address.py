"""Dispatcher addresses: "tcp:HOST:PORT", "unix:PATH", or "HOST:PORT" for tcp."""

from __future__ import annotations

import ipaddress
import warnings

from dispatch.errors import InsecureConnectionWarning

warnings.simplefilter("always", InsecureConnectionWarning)


def normalize(address: str) -> str:
    if not isinstance(address, str) or not address:
        raise TypeError("a dispatcher address is a str such as 'tcp:127.0.0.1:5050'")
    if address.startswith(("tcp:", "unix:")):
        return address
    return "tcp:" + address


def is_loopback(address: str) -> bool:
    if address.startswith("unix:"):
        return True
    host = address[len("tcp:"):].rsplit(":", 1)[0].strip("[]")
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


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
