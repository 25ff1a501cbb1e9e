"""Bound sockets for the servers Atelier starts on loopback: the local model (here, in `agents`)
and the sandbox web (`tools`). Binding before serving makes the port — an ephemeral one for
port 0 — known, and certainly free, before the server runs."""

from __future__ import annotations

import socket

from atelier.benchmarks.common.errors import AtelierError


def bind_socket(host: str, port: int) -> socket.socket:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError as exc:
        sock.close()
        raise AtelierError(f"cannot listen on {host}:{port}: {exc.strerror}") from None
    return sock
