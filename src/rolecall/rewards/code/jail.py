"""Filesystem jail of the code sandbox: a private read-only root for `runner.py`'s boot.

Stdlib only, never imports rolecall; `runner.py` (and its sibling scripts `runner_server.py`,
`runner_child.py`) import it at start-up, before the private root hides this directory.
Builds a tmpfs root holding read-only binds of the system dirs and Python, a minimal /dev, a
fresh /proc, tmpfs /tmp and run dir, then pivots into it. It also owns the libc handle and
the `prctl` wrapper that the boot, server and test-child processes share.
"""
from __future__ import annotations

import ctypes
import os

# mount(2) constants (linux/fs.h).
MS_RDONLY, MS_NOSUID, MS_NODEV, MS_NOEXEC = 1, 2, 4, 8
MS_REMOUNT, MS_BIND, MS_MOVE, MS_REC, MS_PRIVATE = 32, 4096, 8192, 16384, 1 << 18
MNT_DETACH = 2
_PIVOT_ROOT_SYSCALL = {"x86_64": 155, "aarch64": 41, "riscv64": 41}
# prctl(2) constants (linux/prctl.h).
PR_SET_PDEATHSIG, PR_SET_DUMPABLE, PR_CAPBSET_DROP = 1, 4, 24
PR_SET_NO_NEW_PRIVS, PR_SET_CHILD_SUBREAPER = 38, 36

_libc = None


def libc():
    global _libc
    if _libc is None:
        _libc = ctypes.CDLL(None, use_errno=True)
        _libc.mount.argtypes = [ctypes.c_char_p] * 3 + [ctypes.c_ulong, ctypes.c_char_p]
        _libc.umount2.argtypes = [ctypes.c_char_p, ctypes.c_int]
        _libc.prctl.argtypes = [ctypes.c_int] + [ctypes.c_ulong] * 4
    return _libc


def check(ret: int, what: str) -> None:
    if ret != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"{what}: {os.strerror(err)}")


def prctl(option: int, arg: int = 0) -> None:
    check(libc().prctl(option, arg, 0, 0, 0), f"prctl {option}")


def _mount(src, target, fstype, flags, data=None) -> None:
    enc = lambda s: None if s is None else os.fsencode(s)  # noqa: E731
    check(libc().mount(enc(src), enc(target), enc(fstype), flags, enc(data)), f"mount {target}")


def enter_private_root(cfg: dict) -> None:
    """A tmpfs root holding read-only system dirs and Python, a tmpfs run dir, /tmp, /dev, /proc.

    Everything else on the host (home dirs, datasets, the trainer's files) is simply absent.
    """
    new, mb = cfg["root_mount"], cfg["tmpfs_mb"]
    _mount(None, "/", None, MS_REC | MS_PRIVATE)
    _mount("tmpfs", new, "tmpfs", MS_NOSUID | MS_NODEV, "size=1m,nr_inodes=4096,mode=0755")
    for path in cfg["ro_paths"]:
        _bind_read_only(path, new)
    _make_dev(new, mb)
    _tmpfs(new + "/tmp", mb, "mode=1777")
    os.mkdir(new + "/proc")
    try:  # a fresh proc shows only this PID namespace; Python itself does not need it
        _mount("proc", new + "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC)
    except OSError:
        pass
    owner = f",uid={cfg['uid']},gid={cfg['gid']}" if cfg["uid"] is not None else ""
    _tmpfs(new + cfg["workdir"], mb, "mode=0700" + owner)
    _pivot(new)
    _mount(None, "/", None, MS_REMOUNT | MS_RDONLY | MS_NOSUID | MS_NODEV)


def _tmpfs(path: str, mb: int, opts: str) -> None:
    os.makedirs(path, exist_ok=True)
    _mount("tmpfs", path, "tmpfs", MS_NOSUID | MS_NODEV, f"size={mb}m,nr_inodes=16384,{opts}")


def _bind_read_only(path: str, new: str) -> None:
    target = new + path
    os.makedirs(os.path.dirname(target), exist_ok=True)
    if os.path.islink(path):        # merged-/usr layouts: /bin -> usr/bin
        os.symlink(os.readlink(path), target)
        return
    if not os.path.isdir(path):
        return
    os.makedirs(target, exist_ok=True)
    _mount(path, target, None, MS_BIND | MS_REC)
    # A remount in a user namespace must keep the flags the source mount has locked.
    noexec = MS_NOEXEC if os.statvfs(path).f_flag & os.ST_NOEXEC else 0
    _mount(None, target, None, MS_REMOUNT | MS_BIND | MS_RDONLY | MS_NOSUID | MS_NODEV | noexec)


def _make_dev(new: str, mb: int) -> None:
    dev = new + "/dev"
    os.mkdir(dev)
    _mount("tmpfs", dev, "tmpfs", MS_NOSUID | MS_NOEXEC, "size=64k,mode=0755")
    for name in ("null", "zero", "full", "random", "urandom"):
        open(f"{dev}/{name}", "w").close()
        _mount(f"/dev/{name}", f"{dev}/{name}", None, MS_BIND)
    for name, target in (("fd", "/proc/self/fd"), ("stdin", "/proc/self/fd/0"),
                         ("stdout", "/proc/self/fd/1"), ("stderr", "/proc/self/fd/2")):
        os.symlink(target, f"{dev}/{name}")
    _tmpfs(dev + "/shm", mb, "mode=1777")


def _pivot(new: str) -> None:
    os.chdir(new)
    nr = _PIVOT_ROOT_SYSCALL.get(os.uname().machine)
    if nr is not None and libc().syscall(ctypes.c_long(nr), b".", b".") == 0:
        check(libc().umount2(b".", MNT_DETACH), "umount old root")   # the old root sat on top
    else:  # unknown architecture: move the mount over / and chroot (caps are dropped later)
        _mount(".", "/", None, MS_MOVE)
        os.chroot(".")
    os.chdir("/")
