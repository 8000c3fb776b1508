"""``python -m tools port X.Y.Z``: carry every hook diff forward to a new torch release.

1. Fetch ``torch==X.Y.Z`` and build its pristine tree (``tools.bases``; cached like every base).
2. For each patch of ``patchset.toml`` (table order), pick the source base: ``--from B`` if given, else the
   **nearest** bases that have ``hooks/<patch>/v<B>.diff``: the closest lower version, then the closest
   higher one. Both neighbours are tried; the first (lower before higher) from which every hunk carries
   cleanly is used, and the report says when the other one carries to a different hook or conflicts.
3. Carry a hook by three-way merge, per file: ``git merge-file --diff3`` of the hooked old file (the hook
   applied to the old pristine file), the old pristine file (merge base) and the new pristine file. Each
   hunk is also merged alone, so a conflict is attributed to the hook hunk that causes it.
4. A patch whose every hunk merged cleanly gets ``hooks/<patch>/vX.Y.Z.diff``: ``git diff`` of the new
   pristine tree against the merged files (default 3 lines of context, same headers as a hand-made hook),
   checked to apply to the new pristine tree. An existing, different file is kept unless ``--force``.
5. A patch with any hunk that needs hand work gets **no file**. Each such hunk is printed with the file,
   its line in the new base, the hook hunk it comes from, the reason (conflict with upstream's edit of
   the lines it changes or of its context; context deleted; file missing) and the merge's conflict text.
   ``--workdir DIR`` also leaves ``DIR/<patch>/``: a clone of the new base with that patch's merge result
   (conflict markers included) in the work tree, to finish and ``git diff`` into the hook file.
6. The ported hooks are applied in series order on the new pristine tree (as ``generate`` does), so
   hunks of two patches that ended up too close together are reported too.
7. ``--write`` adds the base to ``[patchset] bases`` and to each patch whose hook for it exists;
   without it the exact ``patchset.toml`` edit and the next commands are printed.

Re-runnable: a hook file that is already there is compared, never overwritten without ``--force``.
Exit status: 0 when every patch carried (or was already there), 1 when some hunk needs hand work, 2 on error.
"""

from __future__ import annotations

import argparse
import dataclasses
import difflib
import re
import sys
import tempfile
import tomllib
from pathlib import Path

from tools import bases as bases_mod
from tools import gitutil
from tools.common import Patchset, PatchMeta, PatchsetError, progress
from tools.patchapply import FileDiff, Hunk, apply_file_diff, parse_patch
from tools.series import Sources

VERSION_RE = re.compile(r"^\d+\.\d+\.\d+$")
CONFLICT_CONTEXT = 3  # lines of the merged file shown around a conflict block


def version_key(v: str) -> tuple[int, int, int]:
    a, b, c = (int(x) for x in v.split("."))
    return a, b, c


def source_candidates(new: str, have: list[str]) -> list[str]:
    """The nearest of ``have`` to ``new``: the closest lower version first, then the closest higher one."""
    others = sorted((b for b in have if b != new), key=version_key)
    lower = [b for b in others if version_key(b) < version_key(new)]
    higher = [b for b in others if version_key(b) > version_key(new)]
    return ([lower[-1]] if lower else []) + ([higher[0]] if higher else [])


# --------------------------------------------------------------------------------------------------
# results


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


@dataclasses.dataclass
class PatchPort:
    patch: str
    status: str  # "wrote" | "unchanged" | "kept" | "conflict" | "no-hook" | "no-source" | "empty" | "collides"
    carry: Carry | None
    hook_file: Path
    notes: list[str]


@dataclasses.dataclass
class PortResult:
    version: str
    tree: Path
    patches: list[PatchPort]
    toml_written: bool
    listed: frozenset[str] = frozenset()  # "[patchset]" and the patches whose bases already list the version

    @property
    def needs_hand_work(self) -> list[PatchPort]:
        return [p for p in self.patches if p.status in ("conflict", "no-source", "collides")]

    def ported(self) -> list[str]:
        return [p.patch for p in self.patches if p.status in ("wrote", "unchanged", "kept", "no-hook")]


# --------------------------------------------------------------------------------------------------
# three-way merge


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


def _hunk_header(h: Hunk) -> str:
    return f"@@ -{h.old_start},{len(h.old)} +{h.old_start},{len(h.new)} @@"


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
    """Three-way merge of ``hook`` (made against ``src_tree``) onto ``new_tree``. Writes nothing."""
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
                issues.append(HunkIssue(fd.path, None, _hunk_header(h), f"file missing in torch {new}{hint}"))
            continue
        new_lines = cur.splitlines(keepends=True)
        file_issues = []
        for h in fd.hunks:
            one = apply_file_diff(old.encode(), FileDiff(fd.path, "modify", [h]), str(hook)).decode()
            text, n = _merge_file(one, old, cur, labels, tmp)
            segs = _segments(text)
            if n == 0:
                if text == cur:
                    dropped.append(f"{fd.path}: hook hunk {_hunk_header(h)}: torch {new} already has this change")
                    continue
                got = text.splitlines(keepends=True)
                first = next((i for i, (a, b) in enumerate(zip(got, new_lines)) if a != b), min(len(got), len(new_lines)))
                lead = next((i for i, (a, b) in enumerate(zip(h.old, h.new)) if a != b), min(len(h.old), len(h.new)))
                start = first - lead + 1  # where the carried hunk's first (context) line sits in the new base
                moved.append(f"{fd.path}: hunk at line {h.old_start} (v{src}) -> line {start} (v{new}), offset {start - h.old_start:+d}")
                continue
            resolved, pos_of = [], {}
            for k, seg in enumerate(segs):
                if seg[0] == "conflict":
                    pos_of[k] = len(resolved)
                    resolved += seg[3]
                else:
                    resolved += seg[1]
            for k, pos in pos_of.items():
                line = _map_line(new_lines, resolved, pos) + 1
                file_issues.append(HunkIssue(fd.path, line, _hunk_header(h), _reason(h, segs[k][3], new_lines, new), _conflict_text(segs, k, labels)))
        text, n = _merge_file(apply_file_diff(old.encode(), fd, str(hook)).decode(), old, cur, labels, tmp)
        merged[fd.path] = text
        if n and not file_issues:
            # every hunk merges alone, but not together: upstream's changes brought two of them together
            segs = _segments(text)
            resolved, pos_of = [], {}
            for k, seg in enumerate(segs):
                if seg[0] == "conflict":
                    pos_of[k] = len(resolved)
                    resolved += seg[3]
                else:
                    resolved += seg[1]
            for k, pos in pos_of.items():
                line = _map_line(new_lines, resolved, pos) + 1
                file_issues.append(HunkIssue(fd.path, line, "(several)", "conflict: two of the hook's hunks overlap once carried", _conflict_text(segs, k, labels)))
        issues += file_issues
    return Carry(src, "", issues, moved, dropped, merged)


def _diff_against(new_tree: Path, files: dict[str, str | None], repo: Path) -> str:
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


def _applies(repo: Path, diff_text: str) -> str | None:
    """None if ``diff_text`` applies to the index of ``repo``; else git's reason."""
    r = gitutil.git("apply", "--cached", "--check", "-", cwd=repo, input=diff_text, check=False)
    return None if r.ok else gitutil.explain_apply_failure(r.output)[1]


# --------------------------------------------------------------------------------------------------
# patchset.toml


def _sorted_bases(bases: list[str]) -> list[str]:
    return sorted(dict.fromkeys(bases), key=version_key)


def add_base_to_toml(text: str, new: str, patches: list[str], where: Path) -> str:
    """Add ``new`` to ``[patchset] bases`` and to ``bases`` of each named ``[[patch]]`` (one-line lists only)."""
    lines = text.splitlines(keepends=True)
    tables: list[list] = []  # [header, name, index of the bases line]
    for i, line in enumerate(lines):
        s = line.strip()
        if s.startswith("["):
            tables.append([s, None, None])
        elif tables and (m := re.match(r'^name\s*=\s*"([^"]+)"', s)):
            tables[-1][1] = m.group(1)
        elif tables and re.match(r"^bases\s*=", s):
            tables[-1][2] = i
    bases_at = {}
    for header, name, i in tables:
        if header == "[patchset]":
            bases_at["[patchset]"] = i
        elif header == "[[patch]]" and name:
            bases_at[name] = i
    for key in ["[patchset]", *patches]:
        i = bases_at.get(key)
        if i is None:
            raise PatchsetError(where, f"cannot find the bases = [...] line of {key if key == '[patchset]' else f'[[patch]] {key!r}'}")
        m = re.match(r"^(\s*bases\s*=\s*)(\[.*\])(\s*(#.*)?)$", lines[i].rstrip("\n"))
        if not m:
            raise PatchsetError(f"{where}:{i + 1}", "bases must be a one-line list to be edited by port --write")
        have = tomllib.loads(f"x = {m.group(2)}")["x"]
        lines[i] = m.group(1) + "[" + ", ".join(f'"{b}"' for b in _sorted_bases([*have, new])) + "]" + m.group(3) + "\n"
    return "".join(lines)


# --------------------------------------------------------------------------------------------------
# the command


def port(
    version: str,
    sources: Sources | None = None,
    cache_dir: Path | None = None,
    *,
    from_base: str | None = None,
    only: list[str] | None = None,
    force: bool = False,
    write: bool = False,
    fetch: bool = True,
    workdir: Path | None = None,
) -> PortResult:
    sources = sources or Sources()
    if not VERSION_RE.match(version):
        raise PatchsetError(f"torch {version}", "not a release version; give X.Y.Z, e.g. 2.14.1")
    ps = sources.load()
    if from_base is not None and from_base not in ps.bases:
        raise PatchsetError(f"--from {from_base}", f"not a base of this patch set ({', '.join(ps.bases)})")
    if from_base == version:
        raise PatchsetError(f"--from {from_base}", "is the version being ported to")
    names = [p.name for p in ps.patches]
    for n in only or ():
        if n not in names:
            raise PatchsetError(f"--patch {n}", f"no such patch in {sources.patchset_toml} ({', '.join(names)})")
    selected = [p for p in ps.patches if not only or p.name in only]
    try:
        new_tree = bases_mod.ensure_base(version, cache_dir, fetch=fetch)
    except PatchsetError as e:
        if e.where.startswith("torch==") or "no torch-" in e.reason:
            raise PatchsetError(f"torch {version}", f"cannot get its wheel: {e.where}: {e.reason}") from e
        raise
    listed = frozenset(["[patchset]"] * (version in ps.bases) + [p.name for p in ps.patches if version in p.bases])
    result = PortResult(version, new_tree, [], False, listed)
    with tempfile.TemporaryDirectory(prefix=f"patchset-port-v{version}-") as tmpd:
        tmp = Path(tmpd)
        (tmp / "m").mkdir()
        repo = tmp / "repo"
        for patch in selected:
            result.patches.append(_port_patch(patch, ps, sources, cache_dir, version, new_tree, from_base, force, tmp, repo, workdir))
        _check_series_order(result, ps, sources, version, repo, new_tree)
    if write:
        ported = result.ported()
        text = sources.patchset_toml.read_text()
        new_text = add_base_to_toml(text, version, ported, sources.patchset_toml)
        if new_text != text:
            sources.patchset_toml.write_text(new_text)
            sources.load()  # still valid
        result.toml_written = True
    return result


def _port_patch(patch: PatchMeta, ps: Patchset, sources: Sources, cache_dir, version, new_tree, from_base, force, tmp, repo, workdir) -> PatchPort:
    hook_file = sources.hook_diff(patch, version)
    rel = hook_file.relative_to(sources.root) if hook_file.is_relative_to(sources.root) else hook_file
    have = [b for b in patch.bases if b != version and sources.hook_diff(patch, b).is_file()]
    if from_base:
        cands = [from_base] if from_base in have else []
    else:
        cands = source_candidates(version, have)
    if not cands:
        if not any(sources.hook_diff(patch, b).is_file() for b in patch.bases):
            return PatchPort(patch.name, "no-hook", None, hook_file, ["no hook diff on any base: the patch only adds files"])
        why = f"no hooks/{patch.name}/v{from_base}.diff" if from_base else "no other base has a hook diff"
        return PatchPort(patch.name, "no-source", None, hook_file, [why])
    carries = []
    for src in cands:
        progress(f"port v{version}: {patch.name}: merging its v{src} hook")
        src_tree = bases_mod.require_base_tree(src, cache_dir)
        c = carry_hook(sources.hook_diff(patch, src), src, src_tree, version, new_tree, tmp / "m")
        if c.clean:
            c.diff = _diff_against(new_tree, c.merged, repo)
            why = _applies(repo, c.diff) if c.diff else None
            if why:  # cannot happen for a clean merge made against this very tree; say so rather than write it
                c.issues.append(HunkIssue(str(rel), None, "(all)", f"the carried diff does not apply to pristine torch {version}: {why}"))
        carries.append(c)
    chosen = next((c for c in carries if c.clean), carries[0])
    notes = []
    for c in carries:
        if c is chosen:
            continue
        if not c.clean:
            notes.append(f"from v{c.source} instead: {len(c.issues)} hunk(s) would need hand work: " + "; ".join(map(str, c.issues)))
        elif chosen.clean and c.diff != chosen.diff:
            notes.append(f"from v{c.source} instead: also clean but a different hook; compare before trusting either")
        elif chosen.clean:
            notes.append(f"from v{c.source} instead: the same hook")
    if not chosen.clean:
        if workdir is not None:
            d = workdir / patch.name
            if d.exists():
                notes.append(f"{d} exists; not touched (remove it to get a fresh work tree)")
            else:
                d.parent.mkdir(parents=True, exist_ok=True)
                gitutil.clone_local(new_tree, d, shared=False)
                for path, text in chosen.merged.items():
                    if text is not None:
                        (d / path).write_text(text)
                notes.append(f"work tree with the merge (conflict markers where listed): {d}; finish it, then: git -C {d} diff > {rel}")
        return PatchPort(patch.name, "conflict", chosen, hook_file, notes)
    if not chosen.diff:
        return PatchPort(patch.name, "empty", chosen, hook_file, notes + [f"torch {version} already has every change of the hook; nothing to write"])
    if hook_file.is_file():
        existing = hook_file.read_text()
        if existing == chosen.diff:
            return PatchPort(patch.name, "unchanged", chosen, hook_file, notes)
        if not force:
            return PatchPort(patch.name, "kept", chosen, hook_file, notes + [f"{rel} exists and differs from the carried hook; kept (--force overwrites it)"])
    hook_file.parent.mkdir(parents=True, exist_ok=True)
    hook_file.write_text(chosen.diff)
    return PatchPort(patch.name, "wrote", chosen, hook_file, notes)


def _check_series_order(result: PortResult, ps: Patchset, sources: Sources, version: str, repo: Path, new_tree: Path) -> None:
    """Apply every hook for the new base that now exists, in series order, as ``generate`` will."""
    if not repo.exists():
        gitutil.clone_local(new_tree, repo, checkout=False)
    gitutil.git("read-tree", "HEAD", cwd=repo)
    by_name = {p.patch: p for p in result.patches}
    before = []
    for patch in ps.patches:
        f = sources.hook_diff(patch, version)
        pp = by_name.get(patch.name)
        if not f.is_file() or (pp is not None and pp.status not in ("wrote", "unchanged", "kept")):
            continue
        r = gitutil.git("apply", "--cached", "--whitespace=nowarn", f.resolve(), cwd=repo, check=False)
        if not r.ok:
            _, why = gitutil.explain_apply_failure(r.output)
            msg = f"does not apply after {', '.join(before) or 'nothing'} on torch {version} ({why}): its hunks and another patch's are too close; move them 3+ lines apart"
            if pp is not None:
                pp.notes.append(msg)
                if pp.status in ("wrote", "unchanged", "kept"):
                    pp.status = "collides"
            continue
        before.append(patch.name)


def report(res: PortResult, sources: Sources, out=sys.stdout) -> None:
    def rel(p: Path) -> str:
        return str(p.relative_to(sources.root)) if p.is_relative_to(sources.root) else str(p)

    head = gitutil.rev_parse(res.tree) or "?"
    print(f"port to torch {res.version}: pristine tree {res.tree} ({head[:12]})", file=out)
    print("source base of each hook: --from, else the closest lower base with a hook, else the closest higher (both tried; the first that merges cleanly is used)", file=out)
    for p in res.patches:
        c = p.carry
        src = f" from v{c.source}" if c else ""
        verdict = {
            "wrote": f"carried{src}; wrote {rel(p.hook_file)}",
            "unchanged": f"carried{src}; {rel(p.hook_file)} already says the same",
            "kept": f"carried{src}; existing {rel(p.hook_file)} kept",
            "conflict": f"NEEDS HAND WORK{src}: {len(c.issues) if c else 0} hunk(s); nothing written",
            "no-source": "NEEDS HAND WORK: no hook to carry",
            "no-hook": "nothing to carry (no hook diff on any base)",
            "empty": f"carried{src}: nothing left to hook; nothing written",
            "collides": f"carried{src}, but collides with another patch's hunks in series order",
        }[p.status]
        print(f"\n{p.patch}: {verdict}", file=out)
        if c:
            for m in c.moved:
                print(f"  carried: {m}", file=out)
            for d in c.dropped:
                print(f"  dropped: {d}", file=out)
            for i in c.issues:
                print(f"  HAND WORK: {i}", file=out)
                if i.conflict:
                    for l in i.conflict.rstrip("\n").split("\n"):
                        print(f"    | {l}", file=out)
        for n in p.notes:
            print(f"  note: {n}", file=out)
    hand = res.needs_hand_work
    ported = res.ported()
    print(f"\nsummary: {len(ported)} of {len(res.patches)} patches ported to {res.version}; {len(hand)} need hand work" + (f" ({', '.join(p.patch for p in hand)})" if hand else ""), file=out)
    print("next steps:", file=out)
    step = 1
    if hand:
        print(f"  {step}. finish by hand: make hooks/<patch>/v{res.version}.diff in a clone of {res.tree} (CONTRIBUTING.md), using the conflict text above", file=out)
        step += 1
    if res.toml_written:
        print(f"  {step}. patchset.toml: {res.version} added to [patchset] bases and to {', '.join(ported) or 'no patch'}" + ("; add it to the patches finished by hand" if hand else ""), file=out)
    else:
        todo = [n for n in ["[patchset]", *ported, *(p.patch for p in hand)] if n not in res.listed]
        if todo:
            print(f"  {step}. patchset.toml: add \"{res.version}\" to bases of {', '.join(todo)} (or re-run with --write)", file=out)
        else:
            print(f"  {step}. patchset.toml: already lists {res.version} in [patchset] and every patch here", file=out)
    print(f"  {step + 1}. python -m tools generate --base {res.version} && python -m tools check", file=out)
    print(f"  {step + 2}. README.md 'Supported bases': add {res.version}", file=out)


def _cmd_port(args) -> int:
    sources = Sources(Path(args.repo_root).resolve()) if args.repo_root else Sources()
    res = port(
        args.version,
        sources,
        from_base=args.from_base,
        only=args.patch,
        force=args.force,
        write=args.write,
        workdir=Path(args.workdir).resolve() if args.workdir else None,
    )
    report(res, sources)
    return 1 if res.needs_hand_work else 0


def register(subparsers) -> None:
    p = subparsers.add_parser(
        "port",
        help="carry every hook diff to a new torch release by three-way merge",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("version", help="the torch release to port to, X.Y.Z (e.g. 2.14.1)")
    p.add_argument("--from", dest="from_base", metavar="X.Y.Z", help="carry every hook from this base (default: the nearest, see above)")
    p.add_argument("--patch", action="append", metavar="NAME", help="only this patch (repeatable)")
    p.add_argument("--force", action="store_true", help="overwrite an existing hooks/<patch>/v<version>.diff that differs")
    p.add_argument("--write", action="store_true", help="add the version to patchset.toml's bases ([patchset] and each ported patch)")
    p.add_argument("--workdir", metavar="DIR", help="for each patch that needs hand work, leave DIR/<patch>/: the new base with its merge result")
    p.add_argument("--repo-root", help=argparse.SUPPRESS)
    p.set_defaults(func=_cmd_port)
