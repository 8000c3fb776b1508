"""A strict in-memory applier for the parsed series (``tools.patchfile``): the rules of ``git apply`` without
fuzz (every context and removed line must match byte for byte; a hunk may move only to an exact match).

Why ours and not ``git apply --directory``/``--unsafe-paths``: the user is the person who patches torch where
only Python is at hand, e.g. ``COPY``ing this repo into a ``python:3.x-slim`` image (no git) and running
``python -m tools install`` in a Dockerfile step, or ``python -m tools wheel`` on a build host. ``install``
must know every resulting byte before it touches site-packages (the whole install is one planned
transaction) and ``wheel`` patches zip members that are never written to disk; both would otherwise have to
stage files in a temp dir for git and read them back. ``apply --3way`` (pre-image blobs of later patches) and
``port`` (one hook hunk applied alone) use it on in-memory files too. It is ~60 lines on top of the parser
they need anyway, and ``tools/tests`` proves it gives the same bytes as ``git am`` on every base.
"""

from __future__ import annotations

from typing import Callable

from tools.common import PatchsetError
from tools.patchfile import FileDiff, Hunk, Patch, split_lines


def find_hunk(lines: list[bytes], h: Hunk, want: int) -> int | None:
    """Where hunk ``h``'s old lines sit in ``lines``: at ``want`` if they match there, else the nearest exact
    match. As in ``git apply``: a hunk that starts at line 1 must match at the beginning of the file, and one
    without trailing context lines must match at its end (so an offset cannot move either)."""
    old = h.old
    trailing = 0
    while trailing < min(len(old), len(h.new)) and old[-1 - trailing] == h.new[-1 - trailing]:
        trailing += 1
    at_end = bool(old) and trailing == 0

    def ok(j: int) -> bool:
        return lines[j : j + len(old)] == old and (not at_end or j + len(old) == len(lines))

    if h.old_start <= 1:
        return 0 if ok(0) else None
    if 0 <= want <= len(lines) - len(old) and ok(want):
        return want
    cands = [j for j in range(len(lines) - len(old) + 1) if ok(j)]
    return min(cands, key=lambda j: abs(j - want)) if cands else None


def apply_file_diff(content: bytes | None, fd: FileDiff, where: str) -> bytes | None:
    """Apply one file's hunks strictly. ``content`` None means the file does not exist."""
    if fd.kind == "add":
        if content is not None:
            raise PatchsetError(where, f"{fd.path}: patch adds this file but it already exists")
        lines: list[bytes] = []
    else:
        if content is None:
            raise PatchsetError(where, f"{fd.path}: patch modifies this file but it does not exist")
        lines = split_lines(content)
    delta = 0
    for k, h in enumerate(fd.hunks, 1):
        if h.old and h.old_start == 0:
            raise PatchsetError(where, f"{fd.path}: hunk #{k} has a bad start line")
        want = (h.old_start - 1 if h.old else h.old_start) + delta
        pos = find_hunk(lines, h, want)
        if pos is None:
            raise PatchsetError(where, f"{fd.path}: hunk #{k} (line {h.old_start}) does not apply: context differs")
        lines[pos : pos + len(h.old)] = h.new
        delta += (pos - want) + len(h.new) - len(h.old)
    if fd.kind == "delete":
        if lines:
            raise PatchsetError(where, f"{fd.path}: delete patch leaves content behind")
        return None
    return b"".join(lines)


def apply_series(
    patches: list[Patch],
    read: Callable[[str], bytes | None],
    prefix: str = "torch/",
) -> dict[str, tuple[bytes | None, bytes | None]]:
    """Apply the series' files under ``prefix`` in order. Returns path -> (before, after); None = absent."""
    state: dict[str, tuple[bytes | None, bytes | None]] = {}
    for p in patches:
        for fd in p.files:
            if not fd.path.startswith(prefix):
                continue
            if fd.path not in state:
                before = read(fd.path)
                state[fd.path] = (before, before)
            before, cur = state[fd.path]
            state[fd.path] = (before, apply_file_diff(cur, fd, str(p.path)))
    return {k: v for k, v in state.items() if v[0] != v[1]}
