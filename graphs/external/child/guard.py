"""The offline guard of an agent's process: it may reach this machine and nothing else.

An audit hook refuses every DNS lookup and connection to a host that is not loopback, so an
agent (or a library it uses: telemetry, price maps, tokenizer downloads) cannot leave the
machine; each refusal is kept so the run can report it. Standard library only: this file runs
in the agent's interpreter, which may not have Atelier installed.
"""

from __future__ import annotations

import ipaddress
import sys

LOCAL_NAMES = {"localhost", "localhost.localdomain", "ip6-localhost", ""}


def is_local(host: object) -> bool:
    if host is None:
        return True
    if isinstance(host, bytes):
        host = host.decode(errors="replace")
    host = str(host).strip("[]").lower()
    if host in LOCAL_NAMES:
        return True
    try:
        return ipaddress.ip_address(host.split("%", 1)[0]).is_loopback
    except ValueError:
        return False


def install(refused: list[str]) -> None:
    """Refuse non-loopback lookups and connections from now on, noting each in `refused`."""

    def hook(event: str, args: tuple) -> None:
        if event == "socket.getaddrinfo":
            host, port = args[0], args[1]
        elif event == "socket.connect":
            address = args[1]
            if not isinstance(address, tuple):  # a unix socket path: local by definition
                return
            host, port = address[0], address[1]
        else:
            return
        if not is_local(host):
            what = f"{event.split('.', 1)[1]} {host}:{port}"
            refused.append(what)
            raise PermissionError(f"atelier offline guard: {what} refused (an external agent may reach only this machine)")

    sys.addaudithook(hook)
