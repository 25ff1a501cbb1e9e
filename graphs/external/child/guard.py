"""The boundary of an agent's process: it reaches the run's endpoint and its own job folder, nothing else.

Two layers. Standard library only: this file runs in the agent's interpreter (or, for a command,
Atelier's), which may not have Atelier installed.

- **Namespaces** (Linux; `isolation = "namespaces"`, the default). The process that calls `enter`
  runs in a user namespace in which it holds capabilities (the launcher starts it under `unshare
  --user --map-root-user`). `enter` gives the job namespaces of its own — network, mounts, PIDs,
  System V IPC — and returns in the job's process, PID 2 of its PID namespace:
  - *Network*: its loopback's one listener is on the endpoint's port and forwards every connection
    to the Unix socket the launcher relays to the run's endpoint. Abstract Unix sockets belong to
    the network namespace, so none of the machine's is reachable either.
  - *Filesystem*: a new root (`pivot_root`) on an empty, read-only tmpfs into which only this is
    bound: the system's programs and libraries (`/usr`, `/bin`, `/lib*`, `/sbin`), a few files of
    `/etc` a program needs to start (`ETC`: users, hosts, certificates, the loader's cache — not
    `/etc/environment`, pip's or git's config), a few devices (`/dev/null`, `/dev/urandom`, ...),
    read-only: the agent's interpreter and packages (`interpreter_paths`: its prefixes and every
    folder on its `sys.path`, wherever they are — a virtual environment under `/tmp` included) and
    the paths the launcher names; read-write: the job's own folder. `/tmp`, `/dev/shm` are fresh
    and the job's own; `HOME` is `/tmp`. Nothing else of the machine exists there: no `$HOME`, no
    cache, no data set, no recipe, no `/var`, no `/run`, no other job's folder, no Unix socket.
  - *Processes*: PID 1 of the job's namespace is a small init (this module) that forwards the
    endpoint's connections and reaps; the job is PID 2. No process of the machine, of the agent
    server or of another job is in sight, so none can be signalled or read through `/proc`; when
    the job ends its init ends, and with it every process the job left behind.
  - Every capability is dropped (and `no_new_privs`), so nothing in the job can undo a mount,
    make a namespace or trace the init (which is not dumpable).
  Whatever a process of the job runs (a shell, curl, another interpreter, ctypes), the kernel bounds it.
- **The audit hook** (`install`): Python's own lookups of, and connections to, hosts that are not
  loopback are refused and noted, so the run reports what the agent tried (`meta.refused`). Python
  documents audit hooks as no sandbox: with `isolation = "none"` this is all there is.

`python guard.py --probe` enters a job's boundary and checks it holds (run by the launcher inside
its `unshare`, to learn whether this machine can make it). `python guard.py --jail SPEC` enters
the boundary SPEC (JSON: `port`, `socket`, `writable`, `read_only`, `cwd`, `env`, `command`)
describes and executes `command` inside it: how the launcher seals any command, not only a
Python agent.
"""

from __future__ import annotations

import ctypes
import errno
import fcntl
import ipaddress
import json
import os
import signal
import socket
import struct
import sys
import threading
import traceback

LOCAL_NAMES = {"localhost", "localhost.localdomain", "ip6-localhost", ""}

CLONE_NEWNS, CLONE_NEWIPC, CLONE_NEWPID, CLONE_NEWNET = 0x00020000, 0x08000000, 0x20000000, 0x40000000
MS_RDONLY, MS_NOSUID, MS_NODEV, MS_NOEXEC, MS_REMOUNT = 0x1, 0x2, 0x4, 0x8, 0x20
MS_NOATIME, MS_NODIRATIME, MS_BIND, MS_REC, MS_PRIVATE, MS_RELATIME = 0x400, 0x800, 0x1000, 0x4000, 0x40000, 0x200000
MNT_DETACH = 2
# A bind mount's remount must keep the flags its original was mounted with (the kernel locks them
# in a user namespace): statvfs's flag -> mount's flag.
KEPT_FLAGS = (
    (os.ST_NOSUID, MS_NOSUID),
    (os.ST_NODEV, MS_NODEV),
    (os.ST_NOEXEC, MS_NOEXEC),
    (os.ST_NOATIME, MS_NOATIME),
    (os.ST_NODIRATIME, MS_NODIRATIME),
    (os.ST_RELATIME, MS_RELATIME),
)
PR_SET_PDEATHSIG, PR_SET_DUMPABLE, PR_CAPBSET_DROP, PR_SET_NO_NEW_PRIVS = 1, 4, 24, 38
LINUX_CAPABILITY_VERSION_3 = 0x20080522
SYS_PIVOT_ROOT = {"x86_64": 155, "aarch64": 41, "riscv64": 41}
SIOCGIFFLAGS, SIOCSIFFLAGS, IFF_UP = 0x8913, 0x8914, 0x1
IFREQ = "16sH22x"  # struct ifreq: the interface's name, then ifr_flags (40 bytes in all)
SYSTEM = ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32")
# What of /etc a program needs to start, resolve localhost and check a certificate; nothing else
# of it (/etc/environment, pip.conf, gitconfig, npmrc may hold a key).
ETC = (
    "passwd", "group", "hosts", "host.conf", "nsswitch.conf", "resolv.conf", "gai.conf", "localtime",
    "timezone", "ssl", "ca-certificates", "ca-certificates.conf", "pki", "ld.so.cache", "ld.so.conf",
    "ld.so.conf.d", "alternatives", "mime.types", "protocols", "services", "os-release", "debian_version",
    "fonts", "magic", "magic.mime",
)  # fmt: skip
DEVICES = ("null", "zero", "full", "random", "urandom", "tty")
# Where the new root is built: a tmpfs mounted over this folder of the job's own mount namespace.
STAGE = "/tmp"
JOB_HOME = "/tmp"
CHUNK = 1 << 16


class BoundaryError(Exception):
    """The boundary cannot be made as asked (a path the job must not see would be in sight)."""


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
    libc.umount2.argtypes = [ctypes.c_char_p, ctypes.c_int]
    libc.prctl.argtypes = [ctypes.c_int, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong]
    return libc


def _check(result: int, what: str) -> None:
    if result != 0:
        code = ctypes.get_errno()
        raise OSError(code, f"{what}: {os.strerror(code)}")


def _under(path: str, root: str) -> bool:
    return path == root or path.startswith(root.rstrip("/") + "/")


def interpreter_paths() -> list[str]:
    """What this interpreter needs to run and import (read-only in the boundary): its prefixes,
    the folder of its executable, and every existing absolute entry of its `sys.path`."""
    paths = {
        sys.prefix,
        sys.base_prefix,
        sys.exec_prefix,
        sys.base_exec_prefix,
        os.path.dirname(os.path.abspath(sys.executable)),
        os.path.dirname(os.path.realpath(sys.executable)),
        os.path.dirname(os.path.abspath(__file__)),
    }
    paths.update(p for p in sys.path if os.path.isabs(p))
    return sorted(p for p in paths if p and os.path.exists(p))


def _mount(
    libc: ctypes.CDLL, source: str | None, target: str, kind: str | None, flags: int, data: bytes | None = None
) -> None:
    _check(
        libc.mount(source.encode() if source else None, target.encode(), kind.encode() if kind else None, flags, data),
        f"mount {source or kind} on {target}",
    )


def _remount(libc: ctypes.CDLL, target: str, flags: int) -> None:
    """Remount the bind mount at `target` with `flags`, keeping the flags the kernel locks."""
    found = os.statvfs(target).f_flag
    kept = sum(ms for st, ms in KEPT_FLAGS if found & st)
    _mount(libc, None, target, None, MS_REMOUNT | MS_BIND | flags | kept)


def _plan(writable: list[str], read_only: list[str]) -> list[tuple[str, str]]:
    """The (path, how) pairs to mount, outermost first — how: "rw", "ro", or "mask" (an empty
    read-only folder over the part of a read-only path that leads to a writable one: a command's
    working folder may hold the run folder, whose other jobs the job must not see) — none inside one
    that already shows it. A read-only path that holds `$HOME` or `/` is refused."""
    rw = {os.path.realpath(p) for p in writable if p}
    ro = {os.path.realpath(p) for p in read_only if p} - rw
    home = os.path.realpath(os.environ.get("HOME") or "/")
    masks = set()
    for path in sorted(ro):
        held = [h for h in (home, "/") if _under(h, path)]
        if held:
            raise BoundaryError(
                f"{path} would be visible to the job (its interpreter, its command or its working folder) and it "
                f"holds {held[0]}: give the agent a folder of its own"
            )
        for inner in rw:
            if inner != path and _under(inner, path):
                masks.add(os.path.join(path, os.path.relpath(inner, path).split(os.sep, 1)[0]))
    plan: list[tuple[str, str]] = []
    for path in sorted(rw | ro | masks, key=lambda p: p.split("/")):
        how = "rw" if path in rw else "mask" if path in masks else "ro"
        outer = next((h for p, h in reversed(plan) if _under(path, p)), None)
        if outer is None or how != "ro" or outer == "mask":
            plan.append((path, how))
    return plan


def _place(target: str, is_dir: bool) -> None:
    """The mount point for a bind at `target` (a folder, or an empty file for a file)."""
    if os.path.lexists(target):
        return
    os.makedirs(target if is_dir else os.path.dirname(target), exist_ok=True)
    if not is_dir:
        os.close(os.open(target, os.O_WRONLY | os.O_CREAT, 0o644))


def _open_sources(writable: list[str], read_only: list[str]) -> list[tuple[str, int | None, str, bool]]:
    """(path, O_PATH descriptor, how, is a folder) of everything the new root shows, opened before
    any mount covers them (a path under /tmp stays reachable through its descriptor); a mask has
    no descriptor."""
    system = [p for p in SYSTEM if os.path.isdir(p) and not os.path.islink(p)]
    etc = [f"/etc/{name}" for name in ETC]
    sources: list[tuple[str, int | None, str, bool]] = []
    for path, how in _plan(writable, [*read_only, *system, *etc]):
        if how == "mask":
            sources.append((path, None, how, True))
            continue
        try:
            fd = os.open(path, os.O_PATH | os.O_CLOEXEC)
        except FileNotFoundError:
            continue  # a dangling /etc link, a path that went away: nothing to show
        sources.append((path, fd, how, os.path.isdir(f"/proc/self/fd/{fd}")))
    for name in DEVICES:
        path = f"/dev/{name}"
        if os.path.exists(path):
            sources.append((path, os.open(path, os.O_PATH | os.O_CLOEXEC), "device", False))
    return sources


def _new_root(libc: ctypes.CDLL, sources: list[tuple[str, int | None, str, bool]]) -> None:
    """Make this process's root the job's: a read-only tmpfs showing `sources` (and a fresh /proc,
    /tmp, /dev/shm) and nothing else. Runs in the job's own mount and PID namespaces."""
    _mount(libc, None, "/", None, MS_REC | MS_PRIVATE)
    _mount(libc, "tmpfs", STAGE, "tmpfs", MS_NOSUID | MS_NODEV, b"mode=755")
    for top in SYSTEM:
        if os.path.islink(top):  # a merged /usr: /bin -> usr/bin
            os.symlink(os.readlink(top), STAGE + top)
    for folder in ("/tmp", "/dev/shm"):  # the job's own, writable; what is bound under them lies in them
        os.makedirs(STAGE + folder)
        _mount(libc, "tmpfs", STAGE + folder, "tmpfs", MS_NOSUID | MS_NODEV, b"mode=1777")
    masks = []
    for path, fd, how, is_dir in sources:
        target = STAGE + path
        _place(target, is_dir)
        if fd is None:  # a mask: an empty folder in place of what leads to the job's own folder
            _mount(libc, "tmpfs", target, "tmpfs", MS_NOSUID | MS_NODEV, b"mode=755")
            masks.append(target)
            continue
        _mount(libc, f"/proc/self/fd/{fd}", target, None, MS_BIND)
        if how != "device":
            _remount(libc, target, MS_NOSUID | MS_NODEV | (0 if how == "rw" else MS_RDONLY))
        os.close(fd)
    for target in masks:  # once what lies in them is in place
        _mount(libc, None, target, None, MS_REMOUNT | MS_RDONLY | MS_NOSUID | MS_NODEV)
    os.makedirs(f"{STAGE}/proc")
    for name, target in (("fd", "/proc/self/fd"), ("stdin", "/proc/self/fd/0"), ("stdout", "/proc/self/fd/1"),
                         ("stderr", "/proc/self/fd/2")):  # fmt: skip
        os.symlink(target, f"{STAGE}/dev/{name}")
    # this PID namespace's /proc, mounted while the machine's is still in sight (the kernel asks for one)
    _mount(libc, "proc", f"{STAGE}/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC)
    os.chdir(STAGE)
    machine = os.uname().machine
    if machine not in SYS_PIVOT_ROOT:
        raise OSError(errno.ENOSYS, f"pivot_root: no system call number known for {machine}")
    _check(libc.syscall(SYS_PIVOT_ROOT[machine], b".", b"."), "pivot_root")
    _check(libc.umount2(b".", MNT_DETACH), "detach the machine's root")  # it was stacked over the new one
    os.chdir("/")
    _mount(libc, None, "/", None, MS_REMOUNT | MS_BIND | MS_RDONLY | MS_NOSUID | MS_NODEV)


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


def _exit_code(status: int) -> int:
    code = os.waitstatus_to_exitcode(status)
    return 128 - code if code < 0 else code  # killed by signal N: 128 + N, as a shell says


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


def _init(libc: ctypes.CDLL, job: int, listener: socket.socket, socket_path: str) -> None:
    """PID 1 of the job's namespace: forward the endpoint's connections, reap, and end (taking every
    process left in the namespace with it) when the job ends, with its exit code."""
    # default actions: the kernel drops a signal the job sends its namespace's init unless it is handled
    for number in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGUSR1, signal.SIGUSR2):
        signal.signal(number, signal.SIG_DFL)
    _drop_capabilities(libc)
    _check(libc.prctl(PR_SET_DUMPABLE, 0, 0, 0, 0), "not dumpable")  # the job cannot trace it
    threading.Thread(target=_forward, args=(listener, socket_path), name="endpoint-forwarder", daemon=True).start()
    while True:
        pid, status = os.wait()
        if pid == job:
            os._exit(_exit_code(status))


def enter(port: int, socket_path: str, writable: list[str], read_only: list[str]) -> None:
    """Put this process's job in its boundary (see the module's docstring); returns only in the job's
    process, PID 2 of its own namespaces. This process waits for the job and exits with its code;
    the job's init (PID 1) forwards 127.0.0.1:`port` to the Unix socket `socket_path`. The job sees
    `writable` read-write, `read_only` (and the system's files) read-only, nothing else."""
    libc = _libc()
    _check(
        libc.unshare(CLONE_NEWNS | CLONE_NEWNET | CLONE_NEWPID | CLONE_NEWIPC), "unshare (mounts, network, PIDs, IPC)"
    )
    sources = _open_sources(writable, [*read_only, os.path.dirname(socket_path)])  # of this mount namespace
    sys.stdout.flush()
    sys.stderr.flush()
    init = os.fork()
    if init:  # outside the job's PID namespace: wait for it and say how it ended
        for _, fd, _, _ in sources:
            if fd is not None:
                os.close(fd)
        _, status = os.waitpid(init, 0)
        os._exit(_exit_code(status))
    try:
        _check(libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0), "die with the parent")
        _new_root(libc, sources)
        _loopback_up()
        listener = socket.create_server(("127.0.0.1", port), backlog=128)
        sys.stdout.flush()
        sys.stderr.flush()
        job = os.fork()
    except BaseException:  # noqa: BLE001 - into the job's log; its exit code says the boundary failed
        traceback.print_exc()
        sys.stderr.flush()
        os._exit(125)
    if job:
        try:
            _init(libc, job, listener, socket_path)
        finally:
            os._exit(125)
    listener.close()
    _drop_capabilities(libc)
    os.environ["HOME"] = os.environ["TMPDIR"] = JOB_HOME


def probe() -> None:
    """Enter a job's boundary, then check that it holds: nothing routes out, no namespace can be made,
    the root cannot be written, no process but the job's own is in sight."""
    enter(0, "/nonexistent/endpoint.sock", [], interpreter_paths())
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
    try:
        os.close(os.open("/atelier-probe", os.O_WRONLY | os.O_CREAT, 0o600))
        raise SystemExit("atelier boundary probe: the job's root can be written")
    except OSError as exc:
        if exc.errno != errno.EROFS:
            raise SystemExit(
                f"atelier boundary probe: writing the job's root failed otherwise than read-only: {exc}"
            ) from exc
    seen = sorted(int(p) for p in os.listdir("/proc") if p.isdigit())
    if seen != [1, os.getpid()]:
        raise SystemExit(f"atelier boundary probe: the job sees processes {seen}, not only its init and itself")
    print("ok")


def jail(spec_path: str) -> None:
    """Run the command a boundary spec (a JSON file, removed once read) names, inside that boundary."""
    with open(spec_path, encoding="utf-8") as fh:
        spec = json.load(fh)
    os.unlink(spec_path)  # it names the session's token: gone before anything of the job runs
    enter(spec["port"], spec["socket"], spec["writable"], spec["read_only"])
    os.chdir(spec["cwd"])
    command = spec["command"]
    try:
        os.execvpe(command[0], command, {**spec["env"], "HOME": JOB_HOME, "TMPDIR": JOB_HOME})
    except OSError as exc:
        print(
            f"atelier boundary: cannot run {command[0]} inside the boundary ({exc.strerror}); a command sees the "
            "system's programs, its own interpreter and the paths its system names read-only",
            file=sys.stderr,
        )
        os._exit(127)


if __name__ == "__main__":
    if sys.argv[1:] == ["--probe"]:
        probe()
    elif len(sys.argv) == 3 and sys.argv[1] == "--jail":
        jail(sys.argv[2])
