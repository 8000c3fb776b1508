"""The merge engine of ``port``: carry one hook diff from the base it was made on to a new torch release.

Per file of the hook: ``git merge-file --diff3`` of (old pristine + hook, old pristine, new pristine). Each hunk
is also merged alone, so that a conflict is pinned on the hook hunk that causes it; a conflict's line in the new
base comes from mapping the merge (conflicts taken from the new side) back onto the new file. A clean carry
becomes a new hook by ``git diff`` in a scratch clone of the new tree. Nothing here writes outside temp dirs.
"""

from __future__ import annotations

import dataclasses
import difflib
from pathlib import Path

from tools import gitutil
from tools.common import PatchsetError
from tools.patchapply import apply_file_diff, find_hunk
from tools.patchfile import FileDiff, Hunk, parse_patch, split_lines

CONFLICT_CONTEXT = 3  # lines of the merged file shown around a conflict block


@dataclasses.dataclass
class HunkIssue:
    file: str
    line: int | None  # in the new base, 1-based; None when the file is missing there
    hunk: str  # the hook hunk's header on the source base, e.g. "@@ -332,6 +332,15 @@"
    reason: str
    conflict: str = ""  # the merge's conflict text (diff3 markers) with a little surrounding context

    def __str__(self) -> str:
        where = f"{self.file}:{self.line}" if self.line else self.file
        return f"{where}: hook hunk {self.hunk}: {self.reason}"


@dataclasses.dataclass
class Carry:
    """One patch's hook carried from ``source`` to the new base."""

    source: str
    diff: str  # the new hook diff ("" when nothing is left to hook)
    issues: list[HunkIssue]
    moved: list[str]  # "file: hunk at line A (vOLD) -> line B (vNEW)" for every carried hunk
    dropped: list[str]  # hunks whose change the new base already has
    merged: dict[str, str | None]  # path -> merged content (conflict markers included)

    @property
    def clean(self) -> bool:
        return not self.issues


def _show(tree: Path, path: str) -> str | None:
    r = gitutil.git("show", f"HEAD:{path}", cwd=tree, check=False)
    return r.stdout if r.ok else None


def _merge_file(ours: str, base: str, theirs: str, labels: tuple[str, str, str], tmp: Path) -> tuple[str, int]:
    """``git merge-file -p --diff3``: (merged text with markers, number of conflicts)."""
    paths = []
    for name, text in zip(("ours", "base", "theirs"), (ours, base, theirs)):
        p = tmp / name
        p.write_bytes(text.encode("utf-8", "surrogateescape"))
        paths.append(p)
    r = gitutil.git("merge-file", "-p", "--diff3", *(x for lab in labels for x in ("-L", lab)), *paths, cwd=tmp, check=False)
    if r.returncode < 0 or r.returncode > 127:
        raise PatchsetError(labels[0], f"git merge-file failed: {r.output}")
    return r.stdout, r.returncode


_MARK = {"<": "<<<<<<< ", "|": "||||||| ", "=": "=======", ">": ">>>>>>> "}


def _segments(merged: str) -> list[tuple[str, list[str], list[str], list[str]]]:
    """diff3 output -> [("ok", lines, [], []) | ("conflict", ours, base, theirs)], lines with endings."""
    out: list = []
    state, ours, base, theirs = None, [], [], []
    for line in merged.splitlines(keepends=True):
        s = line.rstrip("\n")
        if state is None and s.startswith(_MARK["<"]):
            state, ours, base, theirs = "ours", [], [], []
        elif state == "ours" and s.startswith(_MARK["|"]):
            state = "base"
        elif state in ("ours", "base") and s == _MARK["="]:
            state = "theirs"
        elif state == "theirs" and s.startswith(_MARK[">"]):
            out.append(("conflict", ours, base, theirs))
            state = None
        elif state == "ours":
            ours.append(line)
        elif state == "base":
            base.append(line)
        elif state == "theirs":
            theirs.append(line)
        elif out and out[-1][0] == "ok":
            out[-1][1].append(line)
        else:
            out.append(("ok", [line], [], []))
    return out


def _map_line(new_lines: list[str], resolved: list[str], pos: int) -> int:
    """Line index in ``new_lines`` of index ``pos`` of ``resolved`` (the merge with every conflict taken from
    the new base, so only cleanly merged hook lines differ)."""
    sm = difflib.SequenceMatcher(None, new_lines, resolved, autojunk=False)
    for tag, i1, i2, j1, j2 in sm.get_opcodes():
        if j1 <= pos < j2 or (j1 == j2 == pos):
            return i1 + (pos - j1 if tag == "equal" else 0)
    return len(new_lines)


def _conflict_lines(segs, new_lines: list[str]) -> list[tuple[int, int]]:
    """(segment index, 1-based line in the new base) of every conflict block of a merge."""
    resolved, pos_of = [], {}
    for k, seg in enumerate(segs):
        if seg[0] == "conflict":
            pos_of[k] = len(resolved)
            resolved += seg[3]
        else:
            resolved += seg[1]
    return [(k, _map_line(new_lines, resolved, pos) + 1) for k, pos in pos_of.items()]


def _conflict_text(seg_list, k: int, labels) -> str:
    """Conflict block ``k`` of ``seg_list`` in diff3 form with CONFLICT_CONTEXT lines either side."""
    kind, ours, base, theirs = seg_list[k]
    before = seg_list[k - 1][1][-CONFLICT_CONTEXT:] if k > 0 and seg_list[k - 1][0] == "ok" else []
    after = seg_list[k + 1][1][:CONFLICT_CONTEXT] if k + 1 < len(seg_list) and seg_list[k + 1][0] == "ok" else []
    lines = [*before, f"<<<<<<< {labels[0]}\n", *ours, f"||||||| {labels[1]}\n", *base, "=======\n", *theirs, f">>>>>>> {labels[2]}\n", *after]
    return "".join(l if l.endswith("\n") else l + "\n" for l in lines)


def _reason(h: Hunk, theirs: list[str], new_lines: list[str], new: str) -> str:
    removed = [l.decode("utf-8", "replace") for l in h.old if l not in h.new]
    if not theirs:
        return f"context gone: torch {new} lacks the lines this hunk sits in"
    new_set = set(new_lines)
    gone = [l for l in removed if l not in new_set]
    if gone:
        return f"conflict: torch {new} changed the lines this hunk replaces ({gone[0].strip()!r} is gone)"
    return f"conflict: torch {new} changed this hunk's context (the lines next to its change)"


def _missing_file_hint(tree: Path, path: str) -> str:
    name = path.rsplit("/", 1)[-1]
    r = gitutil.git("ls-files", "--", f"*/{name}", cwd=tree, check=False)
    same = [p for p in r.stdout.splitlines() if p != path][:3]
    return f" (a file named {name} is at {', '.join(same)})" if same else ""


def carry_hook(hook: Path, src: str, src_tree: Path, new: str, new_tree: Path, tmp: Path) -> Carry:
    """Three-way merge of ``hook`` (the hook ``src_tree`` uses: its override, or a shared hook that applies to it
    with offsets) onto ``new_tree``. Writes nothing."""
    fds = parse_patch(hook).files
    labels = (f"hooked v{src}", f"v{src}", f"v{new}")
    issues: list[HunkIssue] = []
    moved: list[str] = []
    dropped: list[str] = []
    merged: dict[str, str | None] = {}
    for fd in fds:
        old = _show(src_tree, fd.path)
        cur = _show(new_tree, fd.path)
        if fd.kind != "modify":
            # hooks change upstream files; a hook that adds or deletes one is carried only if the new base agrees
            if (fd.kind == "add") != (cur is None):
                issues.append(HunkIssue(fd.path, None, "(whole file)", f"the hook {'adds' if fd.kind == 'add' else 'deletes'} this file and torch {new} {'has' if cur is not None else 'lacks'} it"))
                continue
            merged[fd.path] = None if fd.kind == "delete" else apply_file_diff(None, fd, str(hook)).decode()
            continue
        if old is None:
            raise PatchsetError(hook, f"{fd.path}: not in the pristine torch {src} tree it was made against")
        if cur is None:
            hint = _missing_file_hint(new_tree, fd.path)
            for h in fd.hunks:
                issues.append(HunkIssue(fd.path, None, h.header, f"file missing in torch {new}{hint}"))
            continue
        new_lines = cur.splitlines(keepends=True)
        old_lines = split_lines(old.encode())
        file_issues = []
        for h in fd.hunks:
            one = apply_file_diff(old.encode(), FileDiff(fd.path, "modify", [h]), str(hook)).decode()
            text, n = _merge_file(one, old, cur, labels, tmp)
            segs = _segments(text)
            if n == 0:
                if text == cur:
                    dropped.append(f"{fd.path}: hook hunk {h.header}: torch {new} already has this change")
                    continue
                got = text.splitlines(keepends=True)
                first = next((i for i, (a, b) in enumerate(zip(got, new_lines)) if a != b), min(len(got), len(new_lines)))
                lead = next((i for i, (a, b) in enumerate(zip(h.old, h.new)) if a != b), min(len(h.old), len(h.new)))
                start = first - lead + 1  # where the carried hunk's first (context) line sits in the new base
                at = find_hunk(old_lines, h, h.old_start - 1)  # a shared hook made on another base sits elsewhere in src
                was = at + 1 if at is not None else h.old_start
                moved.append(f"{fd.path}: hunk at line {was} (v{src}) -> line {start} (v{new}), offset {start - was:+d}")
                continue
            for k, line in _conflict_lines(segs, new_lines):
                file_issues.append(HunkIssue(fd.path, line, h.header, _reason(h, segs[k][3], new_lines, new), _conflict_text(segs, k, labels)))
        text, n = _merge_file(apply_file_diff(old.encode(), fd, str(hook)).decode(), old, cur, labels, tmp)
        merged[fd.path] = text
        if n and not file_issues:
            # every hunk merges alone, but not together: upstream's changes brought two of them together
            segs = _segments(text)
            for k, line in _conflict_lines(segs, new_lines):
                file_issues.append(HunkIssue(fd.path, line, "(several)", "conflict: two of the hook's hunks overlap once carried", _conflict_text(segs, k, labels)))
        issues += file_issues
    return Carry(src, "", issues, moved, dropped, merged)


def diff_against(new_tree: Path, files: dict[str, str | None], repo: Path) -> str:
    """``git diff`` of the new pristine tree against ``files`` (made in a scratch clone at ``repo``)."""
    env = gitutil.isolated_env()
    if not repo.exists():
        gitutil.clone_local(new_tree, repo, checkout=False)
    gitutil.git("read-tree", "HEAD", cwd=repo, env=env)
    for path, text in files.items():
        if text is None:
            gitutil.git("update-index", "--force-remove", "--", path, cwd=repo, env=env)
            continue
        sha = gitutil.git("hash-object", "-w", "--stdin", cwd=repo, env=env, input=text).stdout.strip()
        gitutil.git("update-index", "--add", "--cacheinfo", f"100644,{sha},{path}", cwd=repo, env=env)
    out = gitutil.git("diff", "--cached", "--no-renames", "--no-color", cwd=repo, env=env).stdout
    gitutil.git("read-tree", "HEAD", cwd=repo, env=env)
    return out


def applies(repo: Path, diff_text: str) -> str | None:
    """None if ``diff_text`` applies to the index of ``repo``; else git's reason."""
    r = gitutil.git("apply", "--cached", "--check", "-", cwd=repo, input=diff_text, check=False)
    return None if r.ok else gitutil.explain_apply_failure(r.output)[1]
