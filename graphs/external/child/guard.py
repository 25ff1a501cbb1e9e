"""The boundary of an agent's process: it reaches the run's endpoint and its own job folder, nothing else.

Two layers. Standard library only: this file runs in the agent's interpreter (or, for a command,
Atelier's), which may not have Atelier installed.

- **Namespaces** (Linux; `isolation = "namespaces"`, the default). The process that calls `enter`
  runs as root of a user namespace (the launcher starts it under `guard.py --namespaces`, whose
  namespace maps root and, when the run is root, `JOB_ID`). `enter` gives the job namespaces of its
  own — user, network, mounts, PIDs, System V IPC, host name, cgroups — and returns in the job's
  process, PID 2 of its PID namespace:
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
  - *Who it is*: run as root, the job is `JOB_ID` (an unprivileged id of the machine; its folder is
    handed to it), so nothing of root's under `/proc/sys` or elsewhere is its; otherwise the run's
    user. `/proc` is read-only, the host name its own. Every capability is dropped, `no_new_privs`
    set, and a seccomp filter (`DENIED`, `seccomp_program`) refuses the system calls that make a
    namespace, mount, trace or read another process, so nothing in the job can undo a mount, regain
    capabilities in a user namespace of its own, or trace the init (which is not dumpable either).
  - *Limits* (`LIMITS`): its processes, each one's address space and file size, its /tmp and
    /dev/shm; no core dumps.
  - *Its session*: the file `session` names (beside the relay's socket, the run user's alone) is
    read by the job once inside, before its user changes: the agent server never held its token.
  Whatever a process of the job runs (a shell, curl, another interpreter, ctypes), the kernel bounds it.
- **The audit hook** (`install`): Python's own lookups of, and connections to, hosts that are not
  loopback are refused and noted, so the run reports what the agent tried (`meta.refused`). Python
  documents audit hooks as no sandbox: with `isolation = "none"` this is all there is.

`python guard.py --namespaces -- COMMAND` runs COMMAND as root of a user namespace of its own, in
mount, network and PID namespaces (the agent server, a jail, the probe). `python guard.py --probe`
enters a job's boundary and tries each thing a job must not do (`boundary_problems`): run by the
launcher inside `--namespaces` before a run, to learn whether this machine makes the boundary and
whether it holds. `python guard.py --jail SPEC` enters
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
import resource
import signal
import socket
import struct
import sys
import threading
import traceback
from collections.abc import Callable

LOCAL_NAMES = {"localhost", "localhost.localdomain", "ip6-localhost", ""}

CLONE_NEWNS, CLONE_NEWCGROUP, CLONE_NEWUTS, CLONE_NEWIPC = 0x00020000, 0x02000000, 0x04000000, 0x08000000
CLONE_NEWUSER, CLONE_NEWPID, CLONE_NEWNET = 0x10000000, 0x20000000, 0x40000000
NEW_NAMESPACES = (
    CLONE_NEWNS | CLONE_NEWCGROUP | CLONE_NEWUTS | CLONE_NEWIPC | CLONE_NEWUSER | CLONE_NEWPID | CLONE_NEWNET
)
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
PR_SET_PDEATHSIG, PR_SET_DUMPABLE, PR_SET_SECCOMP, PR_CAPBSET_DROP, PR_SET_NO_NEW_PRIVS = 1, 4, 22, 24, 38
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
JOB_HOSTNAME = "atelier-job"
CHUNK = 1 << 16
# Who a job is. When the run is root, the agent server's user namespace maps this one unprivileged
# id (user and group) of the machine beside root, and each job runs as JOB_ID inside its own user
# namespace, where it is that id of the machine too: no file, /proc/sys entry or process of root's is
# its. (Run as another user, a job is that user, without capabilities: the only id it can be.)
JOB_ID = 65533  # unused by Debian and systemd (65534 is nobody)
# What a job may use (`limits` of `enter`; the pipeline's `limits` option overrides each): processes
# of its user namespace, address space and file size of each process, its /tmp and /dev/shm.
LIMITS = {"processes": 128, "memory_mb": 8192, "file_mb": 16, "tmp_mb": 512, "shm_mb": 64}

# The seccomp filter every process of a job runs under: these system calls fail with EPERM, so
# nothing in the job makes a namespace (clone with a CLONE_NEW* flag too), mounts, traces or reads
# another process's memory, takes its descriptors, or reaches the kernel's keyrings, BPF, modules,
# io_uring or clock. clone3 (whose flags a filter cannot read) fails with ENOSYS: C libraries then
# use clone. Another architecture's or the x32 ABI's system calls end the process.
DENIED = (
    "unshare", "setns", "mount", "umount2", "pivot_root", "chroot", "fsopen", "fsconfig", "fsmount", "fspick",
    "move_mount", "open_tree", "mount_setattr", "ptrace", "process_vm_readv", "process_vm_writev", "pidfd_getfd",
    "keyctl", "add_key", "request_key", "bpf", "perf_event_open", "userfaultfd", "io_uring_setup",
    "io_uring_enter", "io_uring_register", "kexec_load", "kexec_file_load", "init_module", "finit_module",
    "delete_module", "open_by_handle_at", "name_to_handle_at", "swapon", "swapoff", "reboot", "acct",
    "quotactl", "syslog", "settimeofday", "clock_settime", "adjtimex", "sethostname", "setdomainname", "vhangup",
)  # fmt: skip
SYSCALLS = {  # x86_64: asm/unistd_64.h; aarch64 and riscv64: asm-generic/unistd.h
    "x86_64": {
        "unshare": 272, "setns": 308, "mount": 165, "umount2": 166, "pivot_root": 155, "chroot": 161,
        "fsopen": 430, "fsconfig": 431, "fsmount": 432, "fspick": 433, "move_mount": 429, "open_tree": 428,
        "mount_setattr": 442, "ptrace": 101, "process_vm_readv": 310, "process_vm_writev": 311,
        "pidfd_getfd": 438, "keyctl": 250, "add_key": 248, "request_key": 249, "bpf": 321, "perf_event_open": 298,
        "userfaultfd": 323, "io_uring_setup": 425, "io_uring_enter": 426, "io_uring_register": 427,
        "kexec_load": 246, "kexec_file_load": 320, "init_module": 175, "finit_module": 313, "delete_module": 176,
        "open_by_handle_at": 304, "name_to_handle_at": 303, "swapon": 167, "swapoff": 168, "reboot": 169,
        "acct": 163, "quotactl": 179, "syslog": 103, "settimeofday": 164, "clock_settime": 227, "adjtimex": 159,
        "sethostname": 170, "setdomainname": 171, "vhangup": 153, "clone": 56, "clone3": 435, "ioctl": 16,
        "pidfd_open": 434,
    },
    "aarch64": {
        "unshare": 97, "setns": 268, "mount": 40, "umount2": 39, "pivot_root": 41, "chroot": 51, "fsopen": 430,
        "fsconfig": 431, "fsmount": 432, "fspick": 433, "move_mount": 429, "open_tree": 428, "mount_setattr": 442,
        "ptrace": 117, "process_vm_readv": 270, "process_vm_writev": 271, "pidfd_getfd": 438, "keyctl": 219,
        "add_key": 217, "request_key": 218, "bpf": 280, "perf_event_open": 241, "userfaultfd": 282,
        "io_uring_setup": 425, "io_uring_enter": 426, "io_uring_register": 427, "kexec_load": 104,
        "kexec_file_load": 294, "init_module": 105, "finit_module": 273, "delete_module": 106,
        "open_by_handle_at": 265, "name_to_handle_at": 264, "swapon": 224, "swapoff": 225, "reboot": 142,
        "acct": 89, "quotactl": 60, "syslog": 116, "settimeofday": 170, "clock_settime": 112, "adjtimex": 171,
        "sethostname": 161, "setdomainname": 162, "vhangup": 58, "clone": 220, "clone3": 435, "ioctl": 29,
        "pidfd_open": 434,
    },
}  # fmt: skip
SYSCALLS["riscv64"] = SYSCALLS["aarch64"]
AUDIT_ARCH = {"x86_64": 0xC000003E, "aarch64": 0xC00000B7, "riscv64": 0xC00000F3}
X32_SYSCALL_BIT = 0x40000000
TIOCSTI, TIOCLINUX = 0x5412, 0x541C  # ioctls that type into, or take over, a terminal
SECCOMP_MODE_FILTER = 2
SECCOMP_RET_KILL_PROCESS, SECCOMP_RET_ERRNO, SECCOMP_RET_ALLOW = 0x80000000, 0x00050000, 0x7FFF0000
BPF_LD_W_ABS, BPF_JEQ, BPF_JGE, BPF_JSET, BPF_RET = 0x20, 0x15, 0x35, 0x45, 0x06


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


def _new_root(libc: ctypes.CDLL, sources: list[tuple[str, int | None, str, bool]], limits: dict[str, int]) -> None:
    """Make this process's root the job's: a read-only tmpfs showing `sources` (and a fresh, read-only
    /proc, a /tmp and /dev/shm of `limits`' sizes) and nothing else. Runs in the job's own mount and
    PID namespaces."""
    _mount(libc, None, "/", None, MS_REC | MS_PRIVATE)
    _mount(libc, "tmpfs", STAGE, "tmpfs", MS_NOSUID | MS_NODEV, b"mode=755,size=16m")
    for top in SYSTEM:
        if os.path.islink(top):  # a merged /usr: /bin -> usr/bin
            os.symlink(os.readlink(top), STAGE + top)
    for folder, size in (("/tmp", limits["tmp_mb"]), ("/dev/shm", limits["shm_mb"])):  # the job's own, writable
        os.makedirs(STAGE + folder)  # what is bound under them lies in them
        _mount(libc, "tmpfs", STAGE + folder, "tmpfs", MS_NOSUID | MS_NODEV, f"mode=1777,size={size}m".encode())
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
    # this PID namespace's /proc, read-only (no /proc/sys entry, no process setting is written through
    # it), mounted while the machine's is still in sight (the kernel asks for one)
    _mount(libc, "proc", f"{STAGE}/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC | MS_RDONLY)
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


def seccomp_program(machine: str, denied: tuple[str, ...] = DENIED) -> bytes:
    """The job's seccomp filter (classic BPF over `struct seccomp_data`: nr at 0, arch at 4, the
    arguments' low 32 bits at 16 + 8 i on these little-endian machines), as `struct sock_filter`s."""
    if machine not in SYSCALLS:
        raise BoundaryError(f"no seccomp filter is known for {machine} (known: {', '.join(sorted(SYSCALLS))})")
    numbers = SYSCALLS[machine]
    perm, kill = SECCOMP_RET_ERRNO | errno.EPERM, SECCOMP_RET_KILL_PROCESS

    def op(code: int, k: int, jt: int = 0, jf: int = 0) -> bytes:
        return struct.pack("HBBI", code, jt, jf, k)

    program = [op(BPF_LD_W_ABS, 4), op(BPF_JEQ, AUDIT_ARCH[machine], jt=1), op(BPF_RET, kill), op(BPF_LD_W_ABS, 0)]
    if machine == "x86_64":
        program += [op(BPF_JGE, X32_SYSCALL_BIT, jf=1), op(BPF_RET, kill)]
    for name in denied:
        program += [op(BPF_JEQ, numbers[name], jf=1), op(BPF_RET, perm)]
    program += [op(BPF_JEQ, numbers["clone3"], jf=1), op(BPF_RET, SECCOMP_RET_ERRNO | errno.ENOSYS)]
    # clone: refused with a namespace flag in its first argument
    program += [op(BPF_JEQ, numbers["clone"], jf=4), op(BPF_LD_W_ABS, 16), op(BPF_JSET, NEW_NAMESPACES, jf=1)]
    program += [op(BPF_RET, perm), op(BPF_RET, SECCOMP_RET_ALLOW)]
    # ioctl: refused when it would type into, or take over, a terminal
    program += [op(BPF_JEQ, numbers["ioctl"], jf=5), op(BPF_LD_W_ABS, 24), op(BPF_JEQ, TIOCSTI, jt=2)]
    program += [op(BPF_JEQ, TIOCLINUX, jt=1), op(BPF_RET, SECCOMP_RET_ALLOW), op(BPF_RET, perm)]
    return b"".join([*program, op(BPF_RET, SECCOMP_RET_ALLOW)])


class _SockFprog(ctypes.Structure):
    _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]


def _install_seccomp(libc: ctypes.CDLL) -> None:
    """This process (and all it starts) under the job's seccomp filter; needs no_new_privs."""
    program = seccomp_program(os.uname().machine)
    buffer = ctypes.create_string_buffer(program, len(program))
    fprog = _SockFprog(len(program) // 8, ctypes.cast(buffer, ctypes.c_void_p))
    _check(libc.prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, ctypes.addressof(fprog), 0, 0), "seccomp filter")


def _drop_capabilities(libc: ctypes.CDLL, become: int | None = None) -> None:
    """None now, and none regained by any program this process or its children run; with `become`,
    this process is that user and group (and in no other group) from now on."""
    cap = 0
    while libc.prctl(PR_CAPBSET_DROP, cap, 0, 0, 0) == 0:
        cap += 1
    if ctypes.get_errno() != errno.EINVAL or cap == 0:  # EINVAL: past the last capability
        _check(-1, f"drop capability {cap} from the bounding set")
    if become is not None:  # a change from root to another user clears every capability with it
        os.setgroups([])
        os.setresgid(become, become, become)
        os.setresuid(become, become, become)
        # the change made it undumpable, which would give its own /proc/self/fd to root: its own again
        _check(libc.prctl(PR_SET_DUMPABLE, 1, 0, 0, 0), "dumpable by itself")
    _check(libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0), "no_new_privs")
    header = (ctypes.c_uint32 * 2)(LINUX_CAPABILITY_VERSION_3, 0)
    _check(libc.capset(header, (ctypes.c_uint32 * 6)()), "capset")
    _install_seccomp(libc)


def _id_mapped(id_map: str, wanted: int) -> bool:
    """Whether `/proc/self/{uid,gid}_map`'s text maps `wanted` (an id of this namespace)."""
    for line in id_map.splitlines():
        inner, _, count = (int(field) for field in line.split())
        if inner <= wanted < inner + count:
            return True
    return False


def maps_job_id() -> bool:
    """Whether this process is root of a namespace that maps the job's id of the machine (the run is
    root): then its jobs run as that id; otherwise as the run's own user, the only id to map."""
    with open("/proc/self/uid_map", encoding="ascii") as uids, open("/proc/self/gid_map", encoding="ascii") as gids:
        uid_map, gid_map = uids.read(), gids.read()
    return os.geteuid() == 0 and _id_mapped(uid_map, JOB_ID) and _id_mapped(gid_map, JOB_ID)


def _write_id_maps(pid: int, uid_map: str, gid_map: str, deny_setgroups: bool) -> None:
    if deny_setgroups:  # an unprivileged writer may map its own group only once setgroups is off
        with open(f"/proc/{pid}/setgroups", "w", encoding="ascii") as fh:
            fh.write("deny")
    for name, text in (("uid_map", uid_map), ("gid_map", gid_map)):
        with open(f"/proc/{pid}/{name}", "w", encoding="ascii") as fh:
            fh.write(text)


def _unshare_with_user(libc: ctypes.CDLL, flags: int, uid_map: str, gid_map: str, deny_setgroups: bool) -> None:
    """unshare(CLONE_NEWUSER | `flags`), the new user namespace's ids mapped as given by a helper
    left in this one (only a process outside a user namespace may map more than its own id into it).
    Returns as root of the new namespace, with every capability in it."""
    ready_read, ready_write = os.pipe()
    helper = os.fork()
    if helper == 0:
        code = 1
        try:
            os.close(ready_write)
            _check(libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0), "die with the parent")
            if os.read(ready_read, 1) == b"1":
                _write_id_maps(os.getppid(), uid_map, gid_map, deny_setgroups)
                code = 0
        except BaseException:  # noqa: BLE001 - into the job's log; its exit code fails the unshare
            traceback.print_exc()
        finally:
            os._exit(code)
    os.close(ready_read)
    try:
        _check(libc.unshare(CLONE_NEWUSER | flags), "unshare (user, mounts, network, PIDs, IPC, host name)")
        os.write(ready_write, b"1")
    finally:
        os.close(ready_write)
        _, status = os.waitpid(helper, 0)
    if os.waitstatus_to_exitcode(status) != 0:
        raise BoundaryError("the new user namespace's ids could not be mapped (see above)")
    os.setresgid(0, 0, 0)
    os.setresuid(0, 0, 0)


def namespaces(command: list[str]) -> None:
    """`guard.py --namespaces COMMAND...`: run COMMAND (the agent server, a job's `--jail`, the probe)
    as root of a user namespace of its own, in mount, network and PID namespaces of its own (PID 1
    there, with a read-only /proc of them); exit with its code. Run as root, the user namespace maps
    root and `JOB_ID`, so that its jobs can be that id; otherwise the run's user alone."""
    libc = _libc()
    if os.geteuid() == 0:
        ids = f"0 0 1\n{JOB_ID} {JOB_ID} 1\n"
        _unshare_with_user(libc, CLONE_NEWNS | CLONE_NEWNET | CLONE_NEWPID, ids, ids, deny_setgroups=False)
    else:
        uid_map, gid_map = f"0 {os.geteuid()} 1\n", f"0 {os.getegid()} 1\n"
        _unshare_with_user(libc, CLONE_NEWNS | CLONE_NEWNET | CLONE_NEWPID, uid_map, gid_map, deny_setgroups=True)
    _mount(libc, None, "/", None, MS_REC | MS_PRIVATE)
    sys.stdout.flush()
    sys.stderr.flush()
    child = os.fork()
    if child == 0:
        try:
            _check(libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0), "die with the parent")
            # only the processes (no /proc/sys to write to), writable: a job's user namespace is mapped through it
            _mount(libc, "proc", "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC, b"subset=pid")
            os.execvp(command[0], command)
        except BaseException:  # noqa: BLE001 - said on stderr; the exit code says the namespaces failed
            traceback.print_exc()
            os._exit(125)
    _, status = os.waitpid(child, 0)
    os._exit(_exit_code(status))


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


def _limit(limits: dict[str, int]) -> None:
    """This process's (and its children's) share: processes of its user (namespace), address space
    and file size of each (a write past it fails with EFBIG: SIGXFSZ is ignored)."""
    mib = 1 << 20
    for kind, value in (
        (resource.RLIMIT_NPROC, limits["processes"]),
        (resource.RLIMIT_AS, limits["memory_mb"] * mib),
        (resource.RLIMIT_FSIZE, limits["file_mb"] * mib),
        (resource.RLIMIT_CORE, 0),  # no core dump: a machine's core_pattern may hand it to a program of root's
    ):
        resource.setrlimit(kind, (value, value))
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)


def enter(
    port: int,
    socket_path: str,
    writable: list[str],
    read_only: list[str],
    limits: dict[str, int] | None = None,
    session: str | None = None,
) -> dict[str, str]:
    """Put this process's job in its boundary (see the module's docstring); returns only in the job's
    process, PID 2 of its own namespaces. This process waits for the job and exits with its code;
    the job's init (PID 1) forwards 127.0.0.1:`port` to the Unix socket `socket_path`. The job sees
    `writable` read-write, `read_only` (and the system's files) read-only, nothing else; it runs as
    `JOB_ID` where the run is root, within `limits` (over `LIMITS`). Returns the session the JSON file
    `session` holds (the job's environment: its token), read by the job alone, once in its boundary."""
    libc = _libc()
    limits = {**LIMITS, **(limits or {})}
    as_job_id = maps_job_id()
    ids = f"0 0 1\n{JOB_ID} {JOB_ID} 1\n" if as_job_id else "0 0 1\n"
    flags = CLONE_NEWNS | CLONE_NEWNET | CLONE_NEWPID | CLONE_NEWIPC | CLONE_NEWUTS | CLONE_NEWCGROUP
    _unshare_with_user(libc, flags, ids, ids, deny_setgroups=False)
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
        _new_root(libc, sources, limits)
        hostname = JOB_HOSTNAME.encode()
        _check(libc.sethostname(hostname, len(hostname)), "sethostname")  # its own: not the machine's name
        _loopback_up()
        if as_job_id:  # the job's folders are the job's
            for path in {os.path.realpath(p) for p in writable if p}:
                os.chown(path, JOB_ID, JOB_ID)
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
    secrets = {}
    if session is not None:  # before the job's user changes: the file is in the run's user's 0700 folder
        with open(session, encoding="utf-8") as fh:
            secrets = json.load(fh)
    _limit(limits)
    _drop_capabilities(libc, become=JOB_ID if as_job_id else None)
    os.environ["HOME"] = os.environ["TMPDIR"] = JOB_HOME
    return secrets


def _refused(what: str, attempt: Callable[[], int]) -> str | None:
    """None when `attempt` (a C call: -1 and errno on failure) fails; else what succeeded."""
    return None if attempt() == -1 else what


def _in_child(attempt: Callable[[], bool]) -> bool:
    """Whether `attempt` succeeded, run in a child process of its own (its exit code)."""
    pid = os.fork()
    if pid == 0:
        try:
            os._exit(0 if attempt() else 1)
        except BaseException:  # noqa: BLE001 - an exception is a failed attempt
            os._exit(1)
    return os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]) == 0


def _opened_for_writing(path: str) -> bool:
    try:
        os.close(os.open(path, os.O_WRONLY))
    except OSError:
        return False
    return True


def boundary_problems(as_job_id: bool) -> list[str]:
    """What a job could do that it must not: each forbidden action tried from inside the boundary
    (each would succeed without the layer that refuses it); empty when every one was refused."""
    libc = _libc()
    numbers = SYSCALLS[os.uname().machine]

    def syscall(name: str, *args: int | bytes) -> int:
        return libc.syscall(numbers[name], *(a if isinstance(a, bytes) else ctypes.c_long(a) for a in args))

    problems = []
    with socket.socket() as out:
        try:
            out.connect(("192.0.2.1", 80))  # TEST-NET-1: no host, but a route would be tried
            problems.append("a connection left the namespace")
        except OSError as exc:
            if exc.errno != errno.ENETUNREACH:
                problems.append(f"a connection out failed otherwise than unreachable: {exc}")
    with open("/proc/self/status", encoding="ascii") as fh:
        status = dict(line.split(":\t", 1) for line in fh.read().splitlines())
    if status.get("CapEff", "").strip("0\n ") or status.get("CapBnd", "").strip("0\n "):
        problems.append(f"the job holds capabilities (CapEff {status.get('CapEff')}, CapBnd {status.get('CapBnd')})")
    if status.get("NoNewPrivs") != "1" or status.get("Seccomp") != "2":
        problems.append("the job runs without no_new_privs and a seccomp filter")
    if as_job_id and os.getuid() != JOB_ID:
        problems.append(f"the job runs as uid {os.getuid()}, not as the unprivileged JOB_ID {JOB_ID}")
    if os.uname().nodename != JOB_HOSTNAME:
        problems.append("the job shares the machine's host name (UTS namespace)")
    for path in ("/proc/sys/kernel/core_pattern", "/proc/sys/kernel/hostname", "/proc/sysrq-trigger"):
        if _opened_for_writing(path):
            problems.append(f"{path} opens for writing")
    hostname = b"probe"
    nested = _refused("a user namespace", lambda: libc.unshare(CLONE_NEWUSER))
    cloned = _in_child(lambda: syscall("clone", CLONE_NEWUSER | signal.SIGCHLD, 0, 0, 0, 0) != -1)
    problems += [p for p in (
        nested,
        _refused("a network namespace", lambda: libc.unshare(CLONE_NEWNET)),
        "a user namespace by clone" if cloned else None,
        _refused("setns into its own UTS namespace", lambda: libc.setns(os.open("/proc/self/ns/uts", os.O_RDONLY), 0)),
        _refused("a tmpfs mounted on /tmp", lambda: libc.mount(b"tmpfs", b"/tmp", b"tmpfs", 0, None)),
        _refused("sethostname", lambda: libc.sethostname(hostname, len(hostname))),
        _refused("keyctl", lambda: syscall("keyctl", 0, -4, 1, 0, 0)),  # the user keyring's id
    ) if p]  # fmt: skip
    if _in_child(lambda: syscall("ptrace", 0, 0, 0, 0) == 0):  # PTRACE_TRACEME
        problems.append("ptrace")
    local = ctypes.create_string_buffer(8)
    iovec = struct.pack("PN", ctypes.addressof(local), 8)
    if syscall("process_vm_readv", os.getpid(), iovec, 1, iovec, 1, 0) != -1:
        problems.append("process_vm_readv")
    pidfd = syscall("pidfd_open", os.getpid(), 0)
    if pidfd >= 0 and syscall("pidfd_getfd", pidfd, 0, 0) != -1:
        problems.append("pidfd_getfd")
    try:
        os.close(os.open("/atelier-probe", os.O_WRONLY | os.O_CREAT, 0o600))
        problems.append("the job's root can be written")
    except OSError as exc:
        if exc.errno not in (errno.EROFS, errno.EACCES):
            problems.append(f"writing the job's root failed otherwise than read-only: {exc}")
    seen = sorted(int(p) for p in os.listdir("/proc") if p.isdigit())
    if seen != [1, os.getpid()]:
        problems.append(f"the job sees processes {seen}, not only its init and itself")
    return problems


def probe() -> None:
    """Enter a job's boundary, then check that it holds (`boundary_problems`) and that the job can
    read its interpreter; exit 1 naming each problem, else print ok."""
    as_job_id = maps_job_id()
    paths = interpreter_paths()
    enter(0, "/nonexistent/endpoint.sock", [], paths)
    prefixes = {sys.prefix, sys.base_prefix, os.path.dirname(os.path.realpath(sys.executable))}
    unreadable = [p for p in sorted(prefixes) if not os.access(p, os.R_OK | os.X_OK)]
    if unreadable:
        raise SystemExit(
            f"atelier boundary probe: the job's user (uid {os.getuid()}) cannot read its interpreter's "
            f"{unreadable[0]}: make it readable by others (chmod o+rX)"
        )
    problems = boundary_problems(as_job_id)
    if problems:
        raise SystemExit("atelier boundary probe: a job could do what it must not: " + "; ".join(problems))
    print("ok")


def jail(spec_path: str) -> None:
    """Run the command a boundary spec (a JSON file, removed once read) names, inside that boundary."""
    with open(spec_path, encoding="utf-8") as fh:
        spec = json.load(fh)
    os.unlink(spec_path)  # it names the session's token: gone before anything of the job runs
    enter(spec["port"], spec["socket"], spec["writable"], spec["read_only"], spec.get("limits"))
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
    elif len(sys.argv) > 3 and sys.argv[1:3] == ["--namespaces", "--"]:
        namespaces(sys.argv[3:])
    elif len(sys.argv) == 3 and sys.argv[1] == "--jail":
        jail(sys.argv[2])
