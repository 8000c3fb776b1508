"""A strict, dependency-free applier for the generated series (``git format-patch`` output).

Used by ``install`` and ``wheel`` so that neither needs ``git`` or a checkout: both only have site-packages
files or wheel members, plus ``patches/v<base>/``. Rules match ``git apply`` without fuzz: every context and
removed line must match byte for byte; a hunk may move (offset) only to an exact match. Renames, copies,
binary patches and mode-only changes are refused with the patch and file named (the generator never emits them).
"""

from __future__ import annotations

import dataclasses
import hashlib
import re
from pathlib import Path
from typing import Callable

from tools.common import PatchsetError

_HUNK_RE = re.compile(rb"^@@ -(\d+)(?:,(\d+))? \+(\d+)(?:,(\d+))? @@")


@dataclasses.dataclass
class Hunk:
    old_start: int
    old: list[bytes]  # lines with their endings, as in the file before
    new: list[bytes]


@dataclasses.dataclass
class FileDiff:
    path: str  # repo-relative, e.g. "torch/_inductor/config.py"
    kind: str  # "modify" | "add" | "delete"
    hunks: list[Hunk]
    mode: str | None = None  # new file mode, e.g. "100644"


@dataclasses.dataclass
class Patch:
    name: str
    path: Path
    sha256: str
    files: list[FileDiff]


def read_series(series_dir: Path) -> list[Path]:
    """The patch files listed in ``series_dir/series``, in order (quilt style: blank lines and # comments ok)."""
    series = series_dir / "series"
    try:
        text = series.read_text()
    except OSError as e:
        raise PatchsetError(series, f"cannot read series file: {e.strerror or e}") from e
    out = []
    for lineno, line in enumerate(text.splitlines(), 1):
        line = line.split("#", 1)[0].strip()
        if not line:
            continue
        p = series_dir / line
        if "/" in line or not line.endswith(".patch"):
            raise PatchsetError(f"{series}:{lineno}", f"expected a '<name>.patch' file name, got {line!r}")
        if not p.is_file():
            raise PatchsetError(f"{series}:{lineno}", f"listed patch {line} does not exist")
        out.append(p)
    if not out:
        raise PatchsetError(series, "series is empty")
    return out


def _strip_prefix(path: bytes, prefix: bytes, where: str) -> str:
    if not path.startswith(prefix):
        raise PatchsetError(where, f"path {path.decode(errors='replace')!r} lacks the {prefix.decode()} prefix")
    return path[len(prefix) :].decode("utf-8")


def parse_patch(path: Path) -> Patch:
    data = path.read_bytes()
    lines = data.split(b"\n")
    # keep endings: every element but the last had a "\n"
    lines = [l + b"\n" for l in lines[:-1]] + ([lines[-1]] if lines[-1] else [])
    files: list[FileDiff] = []
    i = 0
    n = len(lines)
    where = str(path)
    while i < n:
        line = lines[i]
        if not line.startswith(b"diff --git "):
            i += 1
            continue
        m = re.match(rb"^diff --git a/(\S+) b/(\S+)\s*$", line)
        if not m or m.group(1) != m.group(2):
            raise PatchsetError(where, f"unsupported diff header (rename or odd path): {line.decode(errors='replace').strip()}")
        fpath = m.group(1).decode("utf-8")
        kind, mode = "modify", None
        i += 1
        # extended header lines
        while i < n and not lines[i].startswith((b"--- ", b"diff --git ", b"@@ ")):
            h = lines[i]
            if h.startswith(b"new file mode "):
                kind, mode = "add", h.split()[-1].decode()
            elif h.startswith(b"deleted file mode "):
                kind = "delete"
            elif h.startswith((b"rename ", b"copy ", b"similarity index", b"dissimilarity index")):
                raise PatchsetError(where, f"{fpath}: renames/copies are not supported by the installer")
            elif h.startswith((b"Binary files", b"GIT binary patch")):
                raise PatchsetError(where, f"{fpath}: binary patches are not supported")
            elif h.startswith((b"old mode", b"new mode")):
                raise PatchsetError(where, f"{fpath}: mode changes are not supported")
            i += 1
        hunks: list[Hunk] = []
        if i < n and lines[i].startswith(b"--- "):
            old = lines[i][4:].rstrip(b"\n")
            new = lines[i + 1][4:].rstrip(b"\n") if i + 1 < n else b""
            if old != b"/dev/null":
                _strip_prefix(old, b"a/", where)
            if new != b"/dev/null":
                _strip_prefix(new, b"b/", where)
            i += 2
            while i < n and lines[i].startswith(b"@@ "):
                hm = _HUNK_RE.match(lines[i])
                if not hm:
                    raise PatchsetError(where, f"{fpath}: malformed hunk header {lines[i]!r}")
                old_start = int(hm.group(1))
                old_count = int(hm.group(2)) if hm.group(2) is not None else 1
                new_count = int(hm.group(4)) if hm.group(4) is not None else 1
                i += 1
                h_old: list[bytes] = []
                h_new: list[bytes] = []
                last: list[list[bytes]] = []
                while i < n and (len(h_old) < old_count or len(h_new) < new_count or lines[i].startswith(b"\\")):
                    l = lines[i]
                    tag, body = l[:1], l[1:]
                    if tag == b" " or l == b"\n":  # an empty context line may lose its space
                        body = body if tag == b" " else b"\n"
                        h_old.append(body)
                        h_new.append(body)
                        last = [h_old, h_new]
                    elif tag == b"-":
                        h_old.append(body)
                        last = [h_old]
                    elif tag == b"+":
                        h_new.append(body)
                        last = [h_new]
                    elif tag == b"\\":  # "\ No newline at end of file" applies to the previous line
                        for lst in last:
                            lst[-1] = lst[-1].rstrip(b"\n")
                    else:
                        raise PatchsetError(where, f"{fpath}: truncated hunk at line {i + 1}")
                    i += 1
                if len(h_old) != old_count or len(h_new) != new_count:
                    raise PatchsetError(where, f"{fpath}: hunk line counts do not match its header")
                hunks.append(Hunk(old_start, h_old, h_new))
        files.append(FileDiff(fpath, kind, hunks, mode))
    if not files:
        raise PatchsetError(where, "no 'diff --git' sections found (not git format-patch output?)")
    name = path.name[: -len(".patch")] if path.name.endswith(".patch") else path.name
    return Patch(name, path, hashlib.sha256(data).hexdigest(), files)


def _split(content: bytes) -> list[bytes]:
    parts = content.split(b"\n")
    return [p + b"\n" for p in parts[:-1]] + ([parts[-1]] if parts[-1] else [])


def apply_file_diff(content: bytes | None, fd: FileDiff, where: str) -> bytes | None:
    """Apply one file's hunks strictly. ``content`` None means the file does not exist."""
    if fd.kind == "add":
        if content is not None:
            raise PatchsetError(where, f"{fd.path}: patch adds this file but it already exists")
        lines: list[bytes] = []
    else:
        if content is None:
            raise PatchsetError(where, f"{fd.path}: patch modifies this file but it does not exist")
        lines = _split(content)
    delta = 0
    for k, h in enumerate(fd.hunks, 1):
        want = (h.old_start - 1 if h.old else h.old_start) + delta
        if h.old and h.old_start == 0:
            raise PatchsetError(where, f"{fd.path}: hunk #{k} has a bad start line")
        pos = None
        if lines[want : want + len(h.old)] == h.old:
            pos = want
        else:  # offset (never fuzz): the nearest exact match
            cands = [j for j in range(len(lines) - len(h.old) + 1) if lines[j : j + len(h.old)] == h.old]
            if cands:
                pos = min(cands, key=lambda j: abs(j - want))
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


def load_series(series_dir: Path) -> list[Patch]:
    return [parse_patch(p) for p in read_series(series_dir)]


def series_digest(patches: list[Patch]) -> str:
    h = hashlib.sha256()
    for p in patches:
        h.update(f"{p.name}\0{p.sha256}\n".encode())
    return h.hexdigest()
