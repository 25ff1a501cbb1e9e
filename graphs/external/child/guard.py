"""The boundary of an agent's process: it reaches the run's endpoint and nothing else.

Two layers. Standard library only: this file runs in the agent's interpreter, which may not have
Atelier installed.

- **Namespaces** (Linux; `isolation = "namespaces"`, the default). The agent server runs in its
  own user, network, PID and mount namespaces (`unshare`, started by `graphs/external/launcher.py`):
  no network but a loopback of its own, and a fresh /proc in which no process of the machine is
  seen, so no `/proc/<pid>/environ` of the run's. Each job then `enter`s its own network and mount
  namespaces: its loopback's one listener is on the endpoint's port and forwards every connection
  to the Unix socket the launcher relays to the run's endpoint; /tmp and /run are fresh (the
  machine's Unix sockets there — tmux, ssh-agent, D-Bus, Docker — are gone) but for the job's own
  folders; and every capability is dropped, so nothing in the agent's tree can undo the mounts or
  make namespaces of its own. Whatever a process of the job runs (a shell, curl, another
  interpreter, ctypes), the kernel bounds it.
- **The audit hook** (`install`): Python's own lookups of, and connections to, hosts that are not
  loopback are refused and noted, so the run reports what the agent tried (`meta.refused`). Python
  documents audit hooks as no sandbox: with `isolation = "none"` this is all there is.

`python guard.py --probe` enters a job's boundary and checks it holds (run by the launcher inside
the server's namespaces, to learn whether this machine can make them).
"""

from __future__ import annotations

import ctypes
import errno
import fcntl
import ipaddress
import os
import socket
import struct
import sys
import threading

LOCAL_NAMES = {"localhost", "localhost.localdomain", "ip6-localhost", ""}

CLONE_NEWNS = 0x00020000
CLONE_NEWNET = 0x40000000
MS_NOSUID, MS_NODEV, MS_BIND, MS_REC, MS_PRIVATE = 0x2, 0x4, 0x1000, 0x4000, 0x40000
PR_CAPBSET_DROP, PR_SET_NO_NEW_PRIVS = 24, 38
LINUX_CAPABILITY_VERSION_3 = 0x20080522
SIOCGIFFLAGS, SIOCSIFFLAGS, IFF_UP = 0x8913, 0x8914, 0x1
IFREQ = "16sH22x"  # struct ifreq: the interface's name, then ifr_flags (40 bytes in all)
# Where Unix sockets of the machine's services and sessions live; a job sees fresh ones.
MASKED = {"/tmp": b"mode=1777", "/run": b"mode=755"}
CHUNK = 1 << 16


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
            raise PermissionError(
                f"atelier offline guard: {what} refused (an external agent may reach only this machine)"
            )

    sys.addaudithook(hook)


def _libc() -> ctypes.CDLL:
    libc = ctypes.CDLL(None, use_errno=True)
    libc.mount.argtypes = [ctypes.c_char_p, ctypes.c_char_p, ctypes.c_char_p, ctypes.c_ulong, ctypes.c_void_p]
    libc.prctl.argtypes = [ctypes.c_int, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong]
    return libc


def _check(result: int, what: str) -> None:
    if result != 0:
        code = ctypes.get_errno()
        raise OSError(code, f"{what}: {os.strerror(code)}")


def _under(path: str, root: str) -> bool:
    return path == root or path.startswith(root.rstrip("/") + "/")


def _hide_machine_sockets(libc: ctypes.CDLL, keep: list[str]) -> None:
    """Fresh /tmp and /run, in which the folders in `keep` that lay under them are again where they were."""
    kept: list[tuple[str, int]] = []
    for path in sorted({os.path.realpath(p) for p in keep if p}):
        if (
            any(_under(path, root) for root in MASKED)
            and os.path.isdir(path)
            and not any(_under(path, outer) for outer, _ in kept)
        ):
            kept.append((path, os.open(path, os.O_PATH | os.O_DIRECTORY)))  # reachable once covered
    for root, options in MASKED.items():
        if os.path.isdir(root) and not os.path.islink(root):
            _check(
                libc.mount(b"tmpfs", root.encode(), b"tmpfs", MS_NOSUID | MS_NODEV, options), f"mount tmpfs on {root}"
            )
    for path, fd in kept:
        os.makedirs(path, exist_ok=True)
        _check(libc.mount(f"/proc/self/fd/{fd}".encode(), path.encode(), None, MS_BIND | MS_REC, None), f"bind {path}")
        os.close(fd)


def _loopback_up() -> None:
    """A new network namespace's loopback is down: nothing would connect even to itself."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as control:
        flags = struct.unpack(IFREQ, fcntl.ioctl(control, SIOCGIFFLAGS, struct.pack(IFREQ, b"lo", 0)))[1]
        fcntl.ioctl(control, SIOCSIFFLAGS, struct.pack(IFREQ, b"lo", flags | IFF_UP))


def _drop_capabilities(libc: ctypes.CDLL) -> None:
    """None now, and none regained by any program this process or its children run."""
    cap = 0
    while libc.prctl(PR_CAPBSET_DROP, cap, 0, 0, 0) == 0:
        cap += 1
    if ctypes.get_errno() != errno.EINVAL or cap == 0:  # EINVAL: past the last capability
        _check(-1, f"drop capability {cap} from the bounding set")
    _check(libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0), "no_new_privs")
    header = (ctypes.c_uint32 * 2)(LINUX_CAPABILITY_VERSION_3, 0)
    _check(libc.capset(header, (ctypes.c_uint32 * 6)()), "capset")


class _Link:
    """One forwarded connection: two pumps; the last to finish closes both ends."""

    def __init__(self, a: socket.socket, b: socket.socket) -> None:
        self.ends = (a, b)
        self.running = 2
        self.lock = threading.Lock()
        for src, dst in ((a, b), (b, a)):
            threading.Thread(target=self.pump, args=(src, dst), daemon=True).start()

    def pump(self, src: socket.socket, dst: socket.socket) -> None:
        try:
            while data := src.recv(CHUNK):
                dst.sendall(data)
            dst.shutdown(socket.SHUT_WR)
        except OSError:
            pass  # either side went away: the connection is over, as it would be without the forwarder
        with self.lock:
            self.running -= 1
            if self.running:
                return
        for end in self.ends:
            end.close()


def _forward(listener: socket.socket, socket_path: str) -> None:
    while True:
        client, _ = listener.accept()
        upstream = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            upstream.connect(socket_path)
        except OSError:
            client.close()  # the relay is gone (the job is ending): the client sees the connection close
            upstream.close()
            continue
        _Link(client, upstream)


def enter(port: int, socket_path: str, keep: list[str]) -> socket.socket:
    """Put this process (a job just forked by the server) in its boundary: its own network with one
    listener, 127.0.0.1:`port`, that forwards to the Unix socket `socket_path`; fresh /tmp and /run
    but for the folders in `keep`; no capabilities. Returns the listener."""
    libc = _libc()
    _check(libc.unshare(CLONE_NEWNET | CLONE_NEWNS), "unshare (network, mounts)")
    _check(libc.mount(None, b"/", None, MS_REC | MS_PRIVATE, None), "make / private")
    _hide_machine_sockets(libc, [*keep, os.path.dirname(socket_path)])
    _loopback_up()
    listener = socket.create_server(("127.0.0.1", port), backlog=128)
    _drop_capabilities(libc)
    threading.Thread(target=_forward, args=(listener, socket_path), name="endpoint-forwarder", daemon=True).start()
    return listener


def probe() -> None:
    """Enter a job's boundary, then check that it holds: nothing routes out, no namespace can be made."""
    listener = enter(0, "/nonexistent/endpoint.sock", [])
    with socket.socket() as out:
        try:
            out.connect(("192.0.2.1", 80))  # TEST-NET-1: no host, but a route would be tried
            raise SystemExit("atelier boundary probe: a connection left the namespace")
        except OSError as exc:
            if exc.errno != errno.ENETUNREACH:
                raise SystemExit(
                    f"atelier boundary probe: a connection out failed otherwise than unreachable: {exc}"
                ) from exc
    if _libc().unshare(CLONE_NEWNET) == 0:
        raise SystemExit("atelier boundary probe: a job could still make a namespace of its own")
    listener.close()
    print("ok")


if __name__ == "__main__" and sys.argv[1:] == ["--probe"]:
    probe()
