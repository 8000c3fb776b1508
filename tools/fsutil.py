"""File helpers shared by the subcommands: hashing, atomic file writes and the staged directory swap."""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
import tempfile
from pathlib import Path

from tools import interrupt


def sha256_bytes(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def sha256_file(path: Path) -> str | None:
    """Hex sha256 of the file's bytes; None when it does not exist (a missing file matches no digest)."""
    try:
        with open(path, "rb") as f:
            return hashlib.file_digest(f, "sha256").hexdigest()
    except FileNotFoundError:
        return None


def fsync_dir(d: Path) -> None:
    with contextlib.suppress(OSError):
        fd = os.open(d, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


def write_atomic(target: Path, data: bytes, mode: int | None = None, mtime_from: Path | None = None) -> None:
    """Replace ``target`` with ``data`` in one step (temp file beside it, fsync, ``os.replace``)."""
    tmp = target.with_name(f".{target.name}.patchset-tmp")
    with open(tmp, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())
    if mode is not None:
        os.chmod(tmp, mode)
    if mtime_from is not None:
        st = os.stat(mtime_from)
        os.utime(tmp, ns=(st.st_atime_ns, st.st_mtime_ns))
    os.replace(tmp, target)
    fsync_dir(target.parent)


def write_json(path: Path, obj) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    write_atomic(path, (json.dumps(obj, indent=2, sort_keys=True) + "\n").encode())


def staged_dir(dest: Path) -> Path:
    """A fresh empty directory beside ``dest`` (same file system), to be filled and then ``swap_in``-ed."""
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{dest.name}.tmp-", dir=dest.parent))
    tmp.chmod(0o755)
    return tmp


def _aside(staged: Path, dest: Path) -> Path:
    """Where ``swap_in`` moves the old ``dest`` while it puts ``staged`` there."""
    return dest.with_name(f".{dest.name}.old-{staged.name.rsplit('-', 1)[-1]}")


def swap_in(staged: Path, dest: Path) -> None:
    """Put the complete ``staged`` directory at ``dest``; the old ``dest`` (if any) goes only once the new one
    is in place, so a failure before this call leaves ``dest`` as it was."""
    old = None
    if dest.exists():
        old = _aside(staged, dest)
        dest.rename(old)
    staged.rename(dest)
    if old:
        shutil.rmtree(old, ignore_errors=True)


def settle_swap(staged: Path, dest: Path) -> None:
    """After ``swap_in(staged, dest)`` ran whole, in part or not at all: ``dest`` whole (the old one put back where
    the swap had moved it aside and not yet put ``staged`` there), nothing staged or moved aside left beside it.
    Safe to run twice."""
    old = _aside(staged, dest)
    if old.exists():
        if dest.exists():
            shutil.rmtree(old, ignore_errors=True)
        else:
            old.rename(dest)
    if staged.exists():
        shutil.rmtree(staged, ignore_errors=True)


@contextlib.contextmanager
def replacing_dir(dest: Path):
    """``with replacing_dir(d) as tmp:`` fill ``tmp``; on normal exit it replaces ``d`` whole, on an exception
    ``d`` is as it was and ``tmp`` is removed. An interrupt anywhere, between the swap's two renames or in this
    ``finally`` too, leaves ``d`` whole (the old one put back if the swap had moved it aside) and nothing staged
    beside it: the command's end settles what the ``finally`` could not (``interrupt.on_interrupt``)."""
    tmp = staged_dir(dest)

    def settle() -> None:
        settle_swap(tmp, dest)

    interrupt.on_interrupt(settle)
    try:
        yield tmp
        swap_in(tmp, dest)
    finally:
        settle()
        interrupt.done(settle)


class FileSnapshot:
    """The bytes, mode and mtime (or absence) of some files, to put back exactly; and the directories that did not
    exist, to remove again."""

    def __init__(self, files: list[Path]):
        self.files: dict[Path, tuple[bytes, int, int, int] | str | None] = {}
        self.missing_dirs: list[Path] = []
        for f in files:
            try:
                st = os.lstat(f)
            except FileNotFoundError:
                self.files[f] = None
                d = f.parent
                while not d.exists() and d not in self.missing_dirs:
                    self.missing_dirs.append(d)
                    d = d.parent
                continue
            self.files[f] = os.readlink(f) if os.path.islink(f) else (f.read_bytes(), st.st_mode & 0o7777,
                                                                      st.st_atime_ns, st.st_mtime_ns)

    def restore(self) -> None:
        for f, was in self.files.items():
            if was is None or isinstance(was, str) or os.path.islink(f) or os.path.isdir(f):
                with contextlib.suppress(FileNotFoundError, IsADirectoryError):
                    os.unlink(f)
                if os.path.isdir(f):
                    shutil.rmtree(f)
            if was is None:
                continue
            f.parent.mkdir(parents=True, exist_ok=True)
            if isinstance(was, str):
                os.symlink(was, f)
                continue
            data, mode, atime, mtime = was
            tmp = f.with_name(f".{f.name}.patchset-restore")
            tmp.write_bytes(data)
            os.chmod(tmp, mode)
            os.utime(tmp, ns=(atime, mtime))
            os.replace(tmp, f)
        for d in sorted(self.missing_dirs, key=lambda p: -len(p.parts)):
            with contextlib.suppress(OSError):
                d.rmdir()
