"""``apply --3way``: the pre-image blobs ``git am --3way`` needs, and the conflicts it leaves.

``git am --3way`` merges a patch using the blobs its ``index`` lines name (the series are made with
``--full-index``). For the first patch touching a file that is the pristine release's blob, which a real PyTorch
clone has; for a later one it is "release + the earlier patches", a blob no clone has, computed here with the
strict applier and written to the checkout's object store only when that patch needs the merge.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

from tools import gitutil
from tools.common import PatchsetError
from tools.patchapply import apply_file_diff
from tools.patchfile import parse_patch


@dataclasses.dataclass
class PreImages:
    """The blobs ``git am --3way`` needs for each patch: path -> (pre-image blob, its content, or None when
    the content must come from the checkout, i.e. the pristine blob of the first patch touching the file).
    Later patches touching the same file start from "pristine + the earlier patches", a blob no PyTorch clone
    has; it is computed here (strict applier, same bytes as ``git am``) and written to the checkout's object
    store only when that patch needs the merge."""

    per_patch: dict[str, list[tuple[str, str, bytes | None]]]


def series_preimages(checkout: Path, sdir: Path, names: list[str], env: dict) -> PreImages:
    state: dict[str, bytes | None] = {}
    per_patch = {}
    for n in names:
        path = sdir / n
        need = []
        for fd in parse_patch(path).files:
            blob = fd.old_blob
            if fd.kind == "add" or blob is None or set(blob) == {"0"}:
                cur = None
            elif fd.path in state:
                cur = state[fd.path]
                need.append((fd.path, blob, cur))
            else:
                r = gitutil.git("cat-file", "blob", blob, cwd=checkout, env=env, check=False, binary=True)
                cur = r.stdout if r.returncode == 0 else None
                need.append((fd.path, blob, None))
                if cur is None:
                    state[fd.path] = None
                    continue
            if fd.path in state and state[fd.path] is None and fd.kind != "add":
                continue  # its pristine blob is missing: already reported for the first patch
            try:
                state[fd.path] = apply_file_diff(cur, fd, str(path))
            except PatchsetError:
                state[fd.path] = None
        per_patch[n] = need
    return PreImages(per_patch)


def missing_base_blobs(checkout: Path, pre: PreImages, name: str, env: dict) -> list[tuple[str, str]]:
    """Write the computed pre-images ``name`` needs; return (file, blob) for those neither there nor computable."""
    missing = []
    for f, blob, content in pre.per_patch.get(name, []):
        if gitutil.git("cat-file", "-e", f"{blob}^{{blob}}", cwd=checkout, env=env, check=False).ok:
            continue
        if content is None:
            missing.append((f, blob))
            continue
        got = gitutil.git("hash-object", "-w", "--no-filters", "--stdin", cwd=checkout, env=env, input=content).stdout.strip()
        if got != blob:
            missing.append((f, blob))
    return missing


@dataclasses.dataclass
class ConflictHunk:
    file: str
    first: int  # line range of the conflict block in the merged file, 1-based
    last: int
    reason: str

    def __str__(self) -> str:
        return f"{self.file}:{self.first}-{self.last}: {self.reason}"


def conflict_hunks(checkout: Path, am_output: str, env: dict) -> list[ConflictHunk]:
    """The conflicts a stopped ``git am --3way`` left: each marker block of each unmerged file, or git's
    CONFLICT line for a file without markers (modify/delete ...)."""
    files = list(dict.fromkeys(gitutil.git("diff", "--name-only", "--diff-filter=U", cwd=checkout, env=env, check=False).stdout.split()))
    out = []
    for f in files:
        p = checkout / f
        blocks = []
        if p.is_file():
            start = None
            for i, line in enumerate(p.read_text(errors="replace").splitlines(), 1):
                if line.startswith("<<<<<<< ") or line == "<<<<<<<":
                    start = i
                elif start and (line.startswith(">>>>>>> ") or line == ">>>>>>>"):
                    blocks.append(ConflictHunk(f, start, i, "conflict: the checkout and the patch both change these lines"))
                    start = None
        if not blocks:
            why = next((l.strip() for l in am_output.splitlines() if l.startswith("CONFLICT") and f in l), "unmerged (no conflict markers)")
            blocks.append(ConflictHunk(f, 0, 0, why))
        out += blocks
    return out




class ConflictError(PatchsetError):
    """A three-way merge conflict; ``hunks`` lists them. The checkout has been restored."""

    def __init__(self, where, reason: str, hunks: list[ConflictHunk]):
        super().__init__(where, reason)
        self.hunks = hunks


