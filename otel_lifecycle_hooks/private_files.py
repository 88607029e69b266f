"""Files and directories made for the agent by a supervisor that may be root.

The privilege rule (docs/security.md): the supervisor never follows a path inside a directory
the agent's user can write. What it makes there is created through a descriptor of the
directory (`dir_fd`) with an exclusive, no-follow open, and changed through the new file's
own descriptor (`fchmod`, `fchown`), so that a link the agent swaps in at any moment is never
followed. A directory missing in the agent's space is made by the agent's user itself (a
short `mkdir -p` run with its uid and gid), never by root: root would create it where the
agent itself could not, and own whatever it made on the way.
"""

from __future__ import annotations

import contextlib
import errno
import os
import stat
import subprocess

_DIRECTORY_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_NEW_FILE_FLAGS = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
MKDIR_TIMEOUT = 10.0  # seconds for the agent's own `mkdir -p`; it takes milliseconds
_MAX_LINKS = 40  # as the kernel's own bound on links in one lookup
# A path's components are opened only to go through them (and to name files relative to the
# last): O_PATH needs no read permission, as a lookup does not (a 0711 directory).
_WALK_FLAGS = getattr(os, "O_PATH", os.O_RDONLY) | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


def open_own_directory(path: str) -> int:
    """A descriptor of the directory `path`, which must be this process's own and writable by
    no one else (so that nothing in it can change under us); `PermissionError` otherwise.
    Its last component must not be a link."""
    descriptor = os.open(path, _DIRECTORY_FLAGS)
    try:
        info = os.fstat(descriptor)
        if info.st_uid != os.geteuid() or info.st_mode & 0o022:
            raise PermissionError(
                f"{path}: owned by uid {info.st_uid} with mode "
                f"{stat.S_IMODE(info.st_mode):04o}; expected this process's own directory "
                "that no one else can write"
            )
    except BaseException:
        os.close(descriptor)
        raise
    return descriptor


def open_agent_directory(path: str, uid: int) -> int:
    """A descriptor of the directory `path` resolves to, which must belong to `uid`.

    Every component of the resolved path is opened without following a link, each relative
    to the one before, so what is checked is what is used, whatever is renamed meanwhile.
    `PermissionError` for a directory of another user, `FileNotFoundError` when missing."""
    resolved = os.path.realpath(path)
    descriptor = os.open("/", _DIRECTORY_FLAGS)
    try:
        for name in resolved.split("/"):
            if not name:
                continue
            child = os.open(name, _DIRECTORY_FLAGS, dir_fd=descriptor)
            os.close(descriptor)
            descriptor = child
        owner = os.fstat(descriptor).st_uid
        if owner != uid:
            raise PermissionError(
                f"{resolved}: owned by uid {owner}, not by the agent's uid {uid}; "
                "nothing is written there"
            )
    except BaseException:
        os.close(descriptor)
        raise
    return descriptor


def make_directories_as(path: str, uid: int, gid: int) -> None:
    """`mkdir -p path` as `uid`:`gid` (mode 0700 for what it makes): with the agent's rights,
    so a home or runtime directory the agent lacks stays missing. `OSError` on failure."""
    try:
        result = subprocess.run(
            ["mkdir", "-p", "--", path],
            user=uid,
            group=gid,
            extra_groups=[],
            umask=0o077,
            env={"PATH": os.defpath},
            cwd="/",
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            timeout=MKDIR_TIMEOUT,
            check=False,
        )
    except subprocess.SubprocessError as exc:
        raise OSError(f"mkdir -p {path} as uid {uid}: {exc}") from None
    if result.returncode != 0:
        reason = result.stderr.decode("utf-8", "replace").strip() or f"exit {result.returncode}"
        raise OSError(f"mkdir -p {path} as uid {uid}: {reason}")


def create_file(
    directory: int, name: str, data: bytes, mode: int, owner: tuple[int, int] | None = None
) -> None:
    """A new file `name` in the directory `directory` (a descriptor) holding `data`, with
    `mode` and, if given, `owner` (uid, gid) set through its own descriptor.
    `FileExistsError` when anything, a link included, is already there."""
    descriptor = os.open(name, _NEW_FILE_FLAGS, 0o600, dir_fd=directory)
    try:
        if owner is not None:
            os.fchown(descriptor, *owner)
        os.fchmod(descriptor, mode)
        view = memoryview(data)
        while view:
            view = view[os.write(descriptor, view) :]
    except BaseException:
        os.close(descriptor)
        _unlink_quietly(directory, name)
        raise
    os.close(descriptor)


def replace_file(
    directory: int, name: str, data: bytes, mode: int, owner: tuple[int, int] | None = None
) -> None:
    """Put a file holding `data` at `name` in `directory` (a descriptor) in one rename: it is
    made under a random name first (`create_file`), so a reader never sees half of it and a
    link planted at a name we would use is never written through."""
    temporary = f".{name}.{os.urandom(8).hex()}.tmp"
    create_file(directory, temporary, data, mode, owner)
    try:
        os.replace(temporary, name, src_dir_fd=directory, dst_dir_fd=directory)
    except BaseException:
        _unlink_quietly(directory, temporary)
        raise


def _unlink_quietly(directory: int, name: str) -> None:
    with contextlib.suppress(OSError):
        os.unlink(name, dir_fd=directory)


def is_trusted_directory(descriptor: int) -> bool:
    """Whether only root or this process's user can change the directory (by its mode):
    a link in it, or anything made in it, was put there by one of them."""
    info = os.fstat(descriptor)
    return info.st_uid in (0, os.geteuid()) and not info.st_mode & 0o022


def _is_root_sticky(info: os.stat_result) -> bool:
    return info.st_uid == 0 and bool(info.st_mode & stat.S_ISVTX)


def open_directory_path(path: str | os.PathLike[str], make: bool = False, mode: int = 0o700) -> int:
    """A descriptor of the directory at `path`, reached without following a link another
    user could have planted: each component is opened relative to the one before it with
    `O_NOFOLLOW`; a link is followed only where it sits in a directory only root or this user
    can change (or is theirs, in a root-owned sticky directory such as /tmp); with `make`, a
    missing component is made (`mode`) only in such a directory. `PermissionError` names the
    component refused; `FileNotFoundError` when missing and not `make`. The descriptor is for
    naming files relative to it and for `fstat` (an `O_PATH` one on Linux: it reads nothing)."""
    text = os.path.abspath(os.fspath(path))
    pending = [part for part in text.split("/") if part and part != "."]
    descriptor = os.open("/", _WALK_FLAGS)
    links = 0
    try:
        while pending:
            name = pending.pop(0)
            try:
                child = os.open(name, _WALK_FLAGS, dir_fd=descriptor)
            except FileNotFoundError:
                if not make:
                    raise
                _require_trusted(descriptor, text, name, "made")
                with contextlib.suppress(FileExistsError):
                    os.mkdir(name, mode, dir_fd=descriptor)
                pending.insert(0, name)  # opened as any other: what is there now is checked
                continue
            except OSError as exc:
                if exc.errno not in (errno.ELOOP, errno.ENOTDIR):
                    raise
                info = os.stat(name, dir_fd=descriptor, follow_symlinks=False)
                if not stat.S_ISLNK(info.st_mode):
                    raise
                _require_trusted(descriptor, text, name, "followed", link=info)
                links += 1
                if links > _MAX_LINKS:
                    raise OSError(errno.ELOOP, os.strerror(errno.ELOOP), text) from None
                target = os.readlink(name, dir_fd=descriptor)
                if target.startswith("/"):
                    os.close(descriptor)
                    descriptor = os.open("/", _WALK_FLAGS)
                pending[:0] = [part for part in target.split("/") if part and part != "."]
                continue
            os.close(descriptor)
            descriptor = child
    except BaseException:
        os.close(descriptor)
        raise
    return descriptor


def _require_trusted(
    descriptor: int, path: str, name: str, what: str, link: os.stat_result | None = None
) -> None:
    """PermissionError unless `name` may be `what` ("made", "followed") in `descriptor`."""
    if is_trusted_directory(descriptor):
        return
    info = os.fstat(descriptor)
    if _is_root_sticky(info) and (link is None or link.st_uid in (0, os.geteuid())):
        return  # /tmp: others cannot rename or remove what root or we put there
    raise PermissionError(
        errno.EACCES,
        f"{name!r} is not {what} on the way to {path}: it is in a directory uid "
        f"{info.st_uid} or others can change (mode {stat.S_IMODE(info.st_mode):04o})",
    )
