"""Reading a folder that its owner may change while it is read: a student's submission in
the nbgrader exchange, which ``make collect`` reads as the instructor (on a hub, as root).

Whatever is checked by a name (is it a folder? whose is it?) can be changed before the
name is used: a folder of the submission swapped for a link to ``solutions/`` between
the check and the copy would have the collector copy the instructor's notebook as the
student's work. So here every folder and file is opened relative to the folder already
open, never through a link (``O_NOFOLLOW``), and judged by what was opened (``fstat``):
what is checked is what is read. What it guards against:

* links, and things that are neither files nor folders (pipes, sockets): not followed,
  not opened, named in ``Found``;
* files and folders of another account than ``owner`` (a classmate's file put into the
  folder, a hard link to someone else's file): not copied, named;
* a change while it is copied (a folder swapped, a file rewritten, anything changed
  after ``unchanged_since``): the copy stops with ``Refused``;
* a folder nested too deep, or holding too many entries or bytes: the walk stops at the
  limit, without looking at the rest, with ``Refused``.

The walk is a loop over a stack of open folders, not a recursion (so no nesting can
overflow Python's stack), and holds one descriptor per level open at a time.
"""

from __future__ import annotations

import errno
import fnmatch
import itertools
import os
import stat
from dataclasses import dataclass, field
from pathlib import Path

from .course import shown

# A released assignment is a notebook or two and a few data files, a folder or two deep:
# these leave room for a student's own extra files, and refuse a submission made to
# stall or fill the collection before it is read.
MAX_DEPTH = 32  # folders within the submission's folder
MAX_ENTRIES = 2_000  # files, folders and links, counted as they are listed
# nbgrader submit refuses a folder bigger than its max_dir_size (100 MB by default), so a
# bigger one was not made by it; and what is collected is copied onto the course's disk.
MAX_BYTES = 100_000_000

OPEN_FOLDER = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC  # never a link
# O_NONBLOCK: should a pipe take a file's place before it is opened, the open does not
# wait for a writer (what was opened is then seen not to be what was looked at).
_FILE = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
_CHUNK = 1 << 20
# What opening a name gives when it is no longer what was looked at a moment before.
_SWAPPED = (errno.ELOOP, errno.ENOTDIR, errno.ENOENT, errno.ENXIO)


class Refused(Exception):
    """The folder was not read to the end: the message says why (a limit, a change)."""


@dataclass
class Found:
    """What a walk found; names are relative to the folder, folders end in ``/``, and
    ``""`` is the folder itself."""

    entries: int = 0
    size: int = 0  # bytes in its regular files
    changed_ns: int = 0  # the latest change (st_ctime_ns) of the folder or anything in it
    links: list[str] = field(default_factory=list)  # not followed, not copied
    odd: list[str] = field(default_factory=list)  # neither files nor folders: not copied
    foreign: list[tuple[str, int]] = field(default_factory=list)  # (name, owner's uid)
    open_to_others: list[str] = field(default_factory=list)  # writable by every account


def survey(folder: Path, owner: int | None = None, ignored: tuple[str, ...] = ()) -> Found:
    """Look through ``folder`` (its files are not read) as ``copy`` would copy it.

    Parameters
    ----------
    folder : the folder to look through; its parent is trusted, not the folder.
    owner : when given, the uid that every folder and file must have; others are left out.
    ignored : name patterns (fnmatch) left out, as nbgrader leaves out ``*.pyc``.

    Raises ``Refused`` at a limit (``MAX_DEPTH``, ``MAX_ENTRIES``, ``MAX_BYTES``), and
    OSError when something cannot be read.
    """
    return _Walk(owner, ignored, None).run(folder, None)


def copy(
    folder: Path,
    target: Path,
    owner: int | None = None,
    ignored: tuple[str, ...] = (),
    unchanged_since: int | None = None,
) -> Found:
    """Copy the regular files and folders of ``folder`` into ``target`` (made here; its
    parent must exist), leaving out what ``survey`` leaves out. Files get the collector's
    modes (never a student's setuid bit), and keep their modification times.

    Raises ``Refused`` at a limit, or when anything in it changed after
    ``unchanged_since`` (a ctime in ns, from ``survey``) or while it was read; what was
    copied so far stays in ``target`` for the caller to remove.
    """
    return _Walk(owner, ignored, unchanged_since).run(folder, target)


@dataclass
class _Open:
    """A folder of the walk: its descriptor, its name in the walk and its copy, and the
    names in it still to visit (last first)."""

    fd: int
    path: str
    names: list[str]
    target: Path | None


@dataclass
class _Walk:
    owner: int | None
    ignored: tuple[str, ...]
    since: int | None  # a change after this ctime stops the walk; None: no check
    found: Found = field(default_factory=Found)

    def run(self, folder: Path, target: Path | None) -> Found:
        parent = os.open(folder.parent, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        stack: list[_Open] = []
        try:
            stack.append(self._top(parent, folder.name, target))
            while stack:
                here = stack[-1]
                if not here.names:
                    stack.pop()
                    self._leave(here)
                    continue
                name = here.names.pop()
                deeper = self._visit(
                    here.fd,
                    name,
                    here.path + name,
                    here.target / name if here.target else None,
                    depth=len(stack),
                )
                if deeper is not None:
                    stack.append(deeper)
        finally:
            for here in stack:
                os.close(here.fd)
            os.close(parent)
        return self.found

    def _top(self, parent: int, name: str, target: Path | None) -> _Open:
        """The folder itself, opened: the caller judged it by its name a moment ago."""
        info = os.stat(name, dir_fd=parent, follow_symlinks=False)
        self._note_change(info, "")
        mine = self.owner is None or info.st_uid == self.owner
        if not (stat.S_ISDIR(info.st_mode) and mine):
            raise Refused("its folder changed while it was read: a link or another's folder now")
        if info.st_mode & stat.S_IWOTH:
            self.found.open_to_others.append("")
        return self._enter(parent, name, "", info, target)

    def _visit(
        self, dir_fd: int, name: str, path: str, target: Path | None, depth: int
    ) -> _Open | None:
        """Look at one entry (not followed); returns it opened when it is a folder to
        walk. A file is copied at once."""
        info = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
        self._note_change(info, path)
        if stat.S_ISLNK(info.st_mode):
            self.found.links.append(path)
            return None
        is_folder = stat.S_ISDIR(info.st_mode)
        if not (is_folder or stat.S_ISREG(info.st_mode)):
            self.found.odd.append(path)
            return None
        shown_as = f"{path}/" if is_folder and path else path
        if self.owner is not None and info.st_uid != self.owner:
            self.found.foreign.append((shown_as, info.st_uid))
            return None
        if info.st_mode & stat.S_IWOTH:
            self.found.open_to_others.append(shown_as)
        if is_folder:
            if depth > MAX_DEPTH:
                raise Refused(
                    f"folders nested more than {MAX_DEPTH} deep (at {shown(path)}/): "
                    f"a submission may nest {MAX_DEPTH}"
                )
            return self._enter(dir_fd, name, shown_as, info, target)
        self.found.size += info.st_size
        if self.found.size > MAX_BYTES:
            raise Refused(
                f"more than {MAX_BYTES // 10**6} MB in its files (counting stopped at "
                f"{shown(path)}): a submission may hold {MAX_BYTES // 10**6} MB, "
                "as nbgrader submit allows"
            )
        if target is not None:
            self._copy_file(dir_fd, name, path, info, target)
        return None

    def _enter(self, dir_fd: int, name: str, path: str, info, target: Path | None) -> _Open:
        fd = self._open(dir_fd, name, path, OPEN_FOLDER, info)
        try:
            names = self._names(fd, path)
            if target is not None:
                target.mkdir()
        except BaseException:
            os.close(fd)
            raise
        return _Open(fd, path, names, target)

    def _names(self, fd: int, path: str) -> list[str]:
        """The names in a folder, listed only as far as the limit on entries allows."""
        room = MAX_ENTRIES - self.found.entries
        with os.scandir(fd) as listing:  # scandir works on a copy of the descriptor
            names = [entry.name for entry in itertools.islice(listing, room + 1)]
        self.found.entries += len(names)
        if self.found.entries > MAX_ENTRIES:
            where = shown(path) or "its folder"
            raise Refused(
                f"more than {MAX_ENTRIES} files and folders (counting stopped in {where}): "
                f"a submission may hold {MAX_ENTRIES}"
            )
        kept = [n for n in names if not any(fnmatch.fnmatch(n, p) for p in self.ignored)]
        return sorted(kept, reverse=True)

    def _leave(self, here: _Open) -> None:
        """A folder walked to its end: changed while it was listed?"""
        try:
            self._note_change(os.fstat(here.fd), here.path)
        finally:
            os.close(here.fd)

    def _open(self, dir_fd: int, name: str, path: str, flags: int, info) -> int:
        """Open what was looked at, or stop when something else is there now."""
        try:
            fd = os.open(name, flags, dir_fd=dir_fd)
        except OSError as error:
            if error.errno in _SWAPPED:
                raise Refused(_changed(path)) from error
            raise
        opened = os.fstat(fd)
        if (opened.st_dev, opened.st_ino) != (info.st_dev, info.st_ino):
            os.close(fd)
            raise Refused(_changed(path))
        return fd

    def _copy_file(self, dir_fd: int, name: str, path: str, info, target: Path) -> None:
        fd = self._open(dir_fd, name, path, _FILE, info)
        try:
            left = info.st_size
            with open(target, "xb") as out:
                while left > 0:
                    chunk = os.read(fd, min(left, _CHUNK))
                    if not chunk:
                        break
                    out.write(chunk)
                    left -= len(chunk)
            after = os.fstat(fd)
        finally:
            os.close(fd)
        if left or (after.st_size, after.st_ctime_ns) != (info.st_size, info.st_ctime_ns):
            raise Refused(_changed(path))
        os.utime(target, ns=(info.st_atime_ns, info.st_mtime_ns))

    def _note_change(self, info, path: str) -> None:
        self.found.changed_ns = max(self.found.changed_ns, info.st_ctime_ns)
        if self.since is not None and info.st_ctime_ns > self.since:
            raise Refused(_changed(path))


def _changed(path: str) -> str:
    return f"it changed while it was read ({shown(path) or 'its folder'})"
