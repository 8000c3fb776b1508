"""The one owner of the patch file format: a ``git format-patch`` file of the series (or a bare hook diff).

Writing: ``commit_message`` builds the message ``generate`` commits (subject, the why, the fork's trailers) and
the regexes below are what ``check`` and ``generate`` hold it to. Reading: ``parse_patch`` gives the header
(first line, subject, body, trailers) and the per-file diffs (path, add/modify/delete, the ``index`` line's
blobs, hunks with their exact lines), which ``apply``, ``install``, ``wheel``, ``port`` and ``check`` use.
Renames, copies, binary patches and mode-only changes are refused with the file named (never generated).
"""

from __future__ import annotations

import dataclasses
import email
import email.policy
import functools
import hashlib
import re
from pathlib import Path

from tools.common import PatchMeta, PatchsetError

SUBJECT_PREFIX = "[inductor] "
CATEGORIES = ("upstreamable", "fork-only", "incompatible")
ZERO_FROM_LINE = "From 0000000000000000000000000000000000000000 Mon Sep 17 00:00:00 2001"
# Yocto's check_upstream_status, narrowed to the forms we use. Brackets are optional, as in Yocto.
UPSTREAM_STATUS_RE = re.compile(
    r"^(?:Pending"
    r"|Submitted \[?(?P<submitted>https?://\S+?)\]?"
    r"|Backport \[?(?P<backport>v?\d+\.\d+(?:\.\d+)?\S*|[0-9a-f]{7,40}|https?://\S+?)\]?"
    r"|Denied"
    r"|Inappropriate \[?(?P<inappropriate>\S.*?)\]?)$"
)
UPSTREAM_STATUS_FORMS = "Pending | Submitted <url> | Backport <version> | Denied | Inappropriate <reason>"
AFFECTS_RE = re.compile(r"^torch(?:==\d+\.\d+\.\d+|(?:(?:>=|<=|<|>)\d+\.\d+(?:\.\d+)?)(?:,(?:>=|<=|<|>)\d+\.\d+(?:\.\d+)?)*)$")
DATE_RE = re.compile(r"^\d{4}-(0[1-9]|1[0-2])-(0[1-9]|[12]\d|3[01])$")
# trailer -> (required, repeatable)
TRAILERS = {
    "Category": (True, False),
    "Upstream-Status": (True, False),
    "Affects": (True, False),
    "Tested-On": (True, False),
    "Overlay": (True, True),
    "Test": (True, True),
    "Last-Update": (True, False),
}


# --------------------------------------------------------------------------------------------------
# writing


def tested_on(patch: PatchMeta, base: str) -> str:
    hits = [t for t in patch.tested_on if re.match(rf"{re.escape(base)}($|[+ ])", t)]
    return ", ".join(hits) if hits else "none yet"


def commit_message(patch: PatchMeta, base: str, *, fork_trailers: bool = True) -> str:
    """Subject, the why, then (for the fork) the trailers of design note section 6."""
    msg = f"{patch.subject}\n\n{patch.body.strip()}\n"
    if not fork_trailers:
        return msg
    t = [
        f"Category: {patch.category}",
        f"Upstream-Status: {patch.upstream_status}",
        f"Affects: torch=={base}",
        f"Tested-On: {tested_on(patch, base)}",
        *(f"Overlay: {o}" for o in patch.overlay_on(base) or ("none",)),
        *(f"Test: {t}" for t in patch.tests_on(base)),
        f"Last-Update: {patch.last_update}",
    ]
    return msg + "\n" + "\n".join(t) + "\n"


def patch_date(patch: PatchMeta) -> str:
    return f"{patch.last_update}T00:00:00+0000"


# --------------------------------------------------------------------------------------------------
# reading


@dataclasses.dataclass
class Hunk:
    old_start: int
    old: list[bytes]  # lines with their endings, as in the file before
    new: list[bytes]
    at: str = ""  # the "@@ -a,b +c,d @@ <section>" line as written in the file (for messages)

    @property
    def header(self) -> str:
        return f"@@ -{self.old_start},{len(self.old)} +{self.old_start},{len(self.new)} @@"


@dataclasses.dataclass
class FileDiff:
    path: str  # repo-relative, e.g. "torch/_inductor/config.py"
    kind: str  # "modify" | "add" | "delete"
    hunks: list[Hunk]
    mode: str | None = None  # new file mode, e.g. "100644"
    old_blob: str | None = None  # the ``index <old>..<new>`` line; all zeros for an added file
    new_blob: str | None = None


@dataclasses.dataclass
class Header:
    first_line: str
    subject: str  # unfolded: a Subject header wrapped over several lines is one line here
    body: str  # the message without its trailers
    trailers: list[tuple[str, str]]

    @property
    def submitted_url(self) -> str | None:
        """The PR url of ``Upstream-Status: Submitted <url>``, if that is the status."""
        for k, v in self.trailers:
            m = UPSTREAM_STATUS_RE.match(v) if k == "Upstream-Status" else None
            if m and m.group("submitted"):
                return m.group("submitted")
        return None


@dataclasses.dataclass
class Patch:
    name: str
    path: Path
    data: bytes
    files: list[FileDiff]

    @functools.cached_property
    def sha256(self) -> str:
        return hashlib.sha256(self.data).hexdigest()

    @functools.cached_property
    def header(self) -> Header:
        return parse_header(self.data)

    @property
    def new_files(self) -> dict[str, str]:
        """Path -> blob sha of every file the patch adds."""
        return {f.path: f.new_blob for f in self.files if f.kind == "add" and f.new_blob}


def parse_header(data: bytes) -> Header:
    text = data.decode("utf-8", "replace")
    first, _, rest = text.partition("\n")
    msg = email.message_from_string(rest, policy=email.policy.default)
    subject = " ".join(str(msg.get("Subject", "")).split())
    payload = msg.get_payload(decode=True)
    body = payload.decode("utf-8", "replace") if isinstance(payload, bytes) else str(msg.get_payload())
    body = body.split("\n---\n", 1)[0] if "\n---\n" in body else body.split("\ndiff --git ", 1)[0]
    paras = body.strip("\n").split("\n\n")
    trailers: list[tuple[str, str]] = []
    tail = paras[-1].splitlines() if paras else []
    if tail and all(re.match(r"^[A-Za-z][A-Za-z0-9-]*: ", line) for line in tail):
        trailers = [tuple(line.split(": ", 1)) for line in tail]
        paras = paras[:-1]
    return Header(first, subject, "\n\n".join(paras).strip(), trailers)


_HUNK_RE = re.compile(rb"^@@ -(\d+)(?:,(\d+))? \+(\d+)(?:,(\d+))? @@")
_INDEX_RE = re.compile(rb"^index ([0-9a-f]+)\.\.([0-9a-f]+)")
_REFUSED = {
    (b"rename ", b"copy ", b"similarity index", b"dissimilarity index"): "renames/copies are not supported",
    (b"Binary files", b"GIT binary patch"): "binary patches are not supported",
    (b"old mode", b"new mode"): "mode changes are not supported",
}


def split_lines(content: bytes) -> list[bytes]:
    """Lines with their endings; the last one lacks "\\n" when the content does."""
    parts = content.split(b"\n")
    return [p + b"\n" for p in parts[:-1]] + ([parts[-1]] if parts[-1] else [])


def _read_hunk(lines: list[bytes], i: int, fpath: str, where: str) -> tuple[Hunk, int]:
    start = lines[i]
    hm = _HUNK_RE.match(start)
    if not hm:
        raise PatchsetError(where, f"{fpath}: malformed hunk header {lines[i]!r}")
    old_count = int(hm.group(2)) if hm.group(2) is not None else 1
    new_count = int(hm.group(4)) if hm.group(4) is not None else 1
    i += 1
    h_old: list[bytes] = []
    h_new: list[bytes] = []
    last: list[list[bytes]] = []
    while i < len(lines) and (len(h_old) < old_count or len(h_new) < new_count or lines[i].startswith(b"\\")):
        line = lines[i]
        tag, body = line[:1], line[1:]
        if tag == b" " or line == b"\n":  # an empty context line may lose its space
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
    return Hunk(int(hm.group(1)), h_old, h_new, start.decode("utf-8", "replace").rstrip("\r\n")), i


def parse_diffs(data: bytes, where: str) -> list[FileDiff]:
    lines = split_lines(data)
    files: list[FileDiff] = []
    i, n = 0, len(lines)
    while i < n:
        if not lines[i].startswith(b"diff --git "):
            i += 1
            continue
        m = re.match(rb"^diff --git a/(\S+) b/(\S+)\s*$", lines[i])
        if not m or m.group(1) != m.group(2):
            raise PatchsetError(where, f"unsupported diff header (rename or odd path): {lines[i].decode(errors='replace').strip()}")
        fd = FileDiff(m.group(1).decode("utf-8"), "modify", [])
        i += 1
        while i < n and not lines[i].startswith((b"--- ", b"diff --git ", b"@@ ")):  # extended header lines
            h = lines[i]
            if h.startswith(b"new file mode "):
                fd.kind, fd.mode = "add", h.split()[-1].decode()
            elif h.startswith(b"deleted file mode "):
                fd.kind = "delete"
            elif im := _INDEX_RE.match(h):
                fd.old_blob, fd.new_blob = im.group(1).decode(), im.group(2).decode()
            for prefixes, why in _REFUSED.items():
                if h.startswith(prefixes):
                    raise PatchsetError(where, f"{fd.path}: {why}")
            i += 1
        if i < n and lines[i].startswith(b"--- "):
            for line, prefix in ((lines[i], b"--- a/"), (lines[i + 1] if i + 1 < n else b"", b"+++ b/")):
                name = line[4:].rstrip(b"\n")
                if name != b"/dev/null" and not line.startswith(prefix):
                    raise PatchsetError(where, f"path {name.decode(errors='replace')!r} lacks the {prefix[4:].decode()} prefix")
            i += 2
            while i < n and lines[i].startswith(b"@@ "):
                hunk, i = _read_hunk(lines, i, fd.path, where)
                fd.hunks.append(hunk)
        files.append(fd)
    if not files:
        raise PatchsetError(where, "no 'diff --git' sections found (not git format-patch output?)")
    return files


def parse_patch(path: Path) -> Patch:
    """A series ``.patch`` file or a hook ``.diff`` (which has no header: do not ask for one)."""
    try:
        data = path.read_bytes()
    except OSError as e:
        raise PatchsetError(path, f"cannot read: {e.strerror or e}") from e
    name = path.name.removesuffix(".patch")
    return Patch(name, path, data, parse_diffs(data, str(path)))
