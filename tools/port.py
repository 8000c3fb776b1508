"""``port``: carry every hook diff forward to a new torch release (see ``tools.port_cli`` for the command).

The source base of each patch's hook is ``--from``, else the nearest bases with a hook (its override or the
shared ``hook.diff``; closest lower, then closest higher; the first that merges cleanly wins). ``tools.port_merge``
carries it. A patch whose shared ``hook.diff`` applies to the new base as it is (offsets, no fuzz) and gives what
the carry gives needs no file; otherwise a clean carry is written as the override ``hooks/<patch>/vX.Y.Z.diff``
(an existing, different file only with ``force``). Then every hook of the new base is applied in series order as
``generate`` will. ``write`` adds the base to ``patchset.toml``.
"""

from __future__ import annotations

import dataclasses
import re
import tempfile
import tomllib
from pathlib import Path

from tools import bases as bases_mod
from tools import gitutil
from tools.baseenv import requirements_file, requirements_template
from tools.common import Patchset, PatchMeta, PatchsetError, progress, version_key
from tools.hookimports import dangling_imports
from tools.port_merge import Carry, HunkIssue, applies, carry_hook, diff_against
from tools.sources import SHARED_HOOK, Sources, hook_base, select_bases

VERSION_RE = re.compile(r"^\d+\.\d+\.\d+$")


def source_candidates(new: str, have: list[str]) -> list[str]:
    """The nearest of ``have`` to ``new``: the closest lower version first, then the closest higher one."""
    others = sorted((b for b in have if b != new), key=version_key)
    lower = [b for b in others if version_key(b) < version_key(new)]
    higher = [b for b in others if version_key(b) > version_key(new)]
    return ([lower[-1]] if lower else []) + ([higher[0]] if higher else [])



@dataclasses.dataclass
class PatchPort:
    patch: str
    # "inherited" | "wrote" | "unchanged" | "kept" | "conflict" | "no-hook" | "no-source" | "empty" | "collides"
    # | "imports" (its hook imports a module the new base would not have: tools.hookimports)
    status: str
    carry: Carry | None
    hook_file: Path  # the hook the new base will use: the one it inherits ("inherited") or its override
    notes: list[str]


@dataclasses.dataclass
class PortResult:
    version: str
    tree: Path
    patches: list[PatchPort]
    toml_written: bool
    listed: frozenset[str] = frozenset()  # "[patchset]" and the patches whose bases already list the version
    requirements: Path | None = None  # requirements/base-<version>.txt
    requirements_written: bool = False
    readme_lists_base: bool = False  # README.md's "Supported bases" table has a row for the version

    @property
    def needs_hand_work(self) -> list[PatchPort]:
        return [p for p in self.patches if p.status in ("conflict", "no-source", "collides", "imports")]

    def ported(self) -> list[str]:
        return [p.patch for p in self.patches if p.status in ("inherited", "wrote", "unchanged", "kept", "no-hook")]


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


def readme_lists_base(sources: Sources, version: str) -> bool:
    """Does README.md's "Supported bases" table have a row for ``version``?"""
    try:
        text = sources.root.joinpath("README.md").read_text()
    except OSError:
        return False
    section = text.partition("## Supported bases")[2].split("\n## ", 1)[0]
    return re.search(rf"^\|\s*{re.escape(version)}\s*\|", section, re.M) is not None


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
    if from_base is not None:
        select_bases(ps, [from_base], "--from")
    if from_base == version:
        raise PatchsetError(f"--from {from_base}", "is the version being ported to")
    names = [p.name for p in ps.patches]
    for n in only or ():
        if n not in names:
            raise PatchsetError(f"--patch {n}", f"no such patch in {sources.patchset_toml} ({', '.join(names)})")
    selected = [p for p in ps.patches if not only or p.name in only]
    if fetch and bases_mod.find_wheel(version, bases_mod.wheels_dir(cache_dir)) is None:
        progress(f"port: asking the package index whether torch {version} exists (pip index versions torch)")
        known = bases_mod.released_versions()
        if known is None:
            progress("port: pip could not list torch's releases; trying the download itself")
        elif version not in {k.partition("+")[0] for k in known}:
            shown = ", ".join(known[:12]) + (f" and {len(known) - 12} older" if len(known) > 12 else "")
            raise PatchsetError(f"torch {version}", f"not a release the package index knows (it lists {shown}); "
                                "nothing was downloaded")
    try:
        new_tree = bases_mod.ensure_base(version, cache_dir, fetch=fetch)
    except PatchsetError as e:
        if e.where.startswith("torch==") or "no torch-" in e.reason:
            raise PatchsetError(f"torch {version}", f"cannot get its wheel: {e.where}: {e.reason}") from e
        raise
    listed = frozenset(["[patchset]"] * (version in ps.bases) + [p.name for p in ps.patches if version in p.bases])
    result = PortResult(version, new_tree, [], False, listed, requirements_file(sources, version),
                        readme_lists_base=readme_lists_base(sources, version))
    with tempfile.TemporaryDirectory(prefix=f"patchset-port-v{version}-") as tmpd:
        tmp = Path(tmpd)
        (tmp / "m").mkdir()
        repo = tmp / "repo"
        for patch in selected:
            result.patches.append(_port_patch(patch, ps, sources, cache_dir, version, new_tree, from_base, force, tmp, repo, workdir))
        _check_series_order(result, ps, sources, version, repo, new_tree)
        _check_imports(result, ps, version, new_tree)
    if write:
        ported = result.ported()
        text = sources.patchset_toml.read_text()
        new_text = add_base_to_toml(text, version, ported, sources.patchset_toml)
        if new_text != text:
            sources.patchset_toml.write_text(new_text)
            sources.load()  # still valid
        result.toml_written = True
        if not result.requirements.is_file():
            result.requirements.parent.mkdir(parents=True, exist_ok=True)
            result.requirements.write_text(requirements_template(version))
            result.requirements_written = True
    return result


def _without_index(diff: str) -> str:
    return "".join(l for l in diff.splitlines(True) if not l.startswith("index "))


def _tree_of(repo: Path, new_tree: Path, diff: str) -> str | None:
    """The git tree of the pristine new base with ``diff`` applied (no fuzz), or None when it does not apply."""
    if not repo.exists():
        gitutil.clone_local(new_tree, repo, checkout=False)
    env = gitutil.isolated_env()
    gitutil.git("read-tree", "HEAD", cwd=repo, env=env)
    r = gitutil.git("apply", "--cached", "--whitespace=nowarn", "-", cwd=repo, env=env, input=diff, check=False)
    tree = gitutil.git("write-tree", cwd=repo, env=env).stdout.strip() if r.ok else None
    gitutil.git("read-tree", "HEAD", cwd=repo, env=env)
    return tree


def _shared_result(shared: Path, repo: Path, new_tree: Path) -> tuple[str | None, str]:
    """(``git diff`` of the new pristine tree with ``shared`` (the hook it inherits) applied as it is, or None; git's
    reason)."""
    if not repo.exists():
        gitutil.clone_local(new_tree, repo, checkout=False)
    env = gitutil.isolated_env()
    gitutil.git("read-tree", "HEAD", cwd=repo, env=env)
    r = gitutil.git("apply", "--cached", "--whitespace=nowarn", shared.resolve(), cwd=repo, env=env, check=False)
    out = gitutil.git("diff", "--cached", "--no-renames", "--no-color", cwd=repo, env=env).stdout if r.ok else None
    gitutil.git("read-tree", "HEAD", cwd=repo, env=env)
    return out, "" if r.ok else gitutil.explain_apply_failure(r.output)[1]


def _port_patch(patch: PatchMeta, ps: Patchset, sources: Sources, cache_dir, version, new_tree, from_base, force, tmp, repo, workdir) -> PatchPort:
    hook_file = sources.override_hook(patch, version)
    shared = sources.shared_hook(patch)
    if version == hook_base(ps, patch) and shared.is_file():
        hook_file = shared  # the base the shared hook is made against: its hook is hook.diff, never an override
    rel = sources.rel(hook_file)
    current = sources.hook_diff(patch, version, ps)
    if version in patch.bases and current is not None and not force and not from_base:
        as_is, _ = _shared_result(current, repo, new_tree)
        if as_is is not None:  # already ported: the hook this base uses applies to it as it is
            what = "its own override" if current == sources.override_hook(patch, version) else \
                f"the hook torch {version} inherits"
            return PatchPort(patch.name, "unchanged", None, current, [
                f"torch {version} is already one of the patch's bases and {sources.rel(current)} ({what}) applies "
                f"to it as it is: nothing to carry (--force or --from B carries one anyway)"])
    have = [b for b in patch.bases if b != version and sources.hook_diff(patch, b, ps) is not None]
    if from_base:
        cands = [from_base] if from_base in have else []
    else:
        cands = source_candidates(version, have)
    if not cands:
        if not any(sources.hook_diff(patch, b, ps) is not None for b in patch.bases):
            return PatchPort(patch.name, "no-hook", None, hook_file, ["no hook diff on any base: the patch only adds files"])
        why = f"no hooks/{patch.name}/v{from_base}.diff or {SHARED_HOOK}" if from_base else "no other base has a hook diff"
        return PatchPort(patch.name, "no-source", None, hook_file, [why])
    carries = []
    for src in cands:
        used = sources.hook_diff(patch, src, ps)
        progress(f"port v{version}: {patch.name}: merging its v{src} hook ({sources.rel(used)})")
        src_tree = bases_mod.require_base_tree(src, cache_dir)
        c = carry_hook(used, src, src_tree, version, new_tree, tmp / "m")
        if c.clean:
            c.diff = diff_against(new_tree, c.merged, repo)
            why = applies(repo, c.diff) if c.diff else None
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
    # the hook the new base inherits (the shared one, or a neighbouring base's override: Sources.inherited_hook) as it
    # is (offsets, no fuzz): used, with no file written, when it gives what the carry gives
    inherited = sources.inherited_hook(patch, version, ps, skip=hook_file)
    ih = f"{sources.rel(inherited)} (the hook torch {version} inherits)" if inherited else ""
    as_is, why_not = _shared_result(inherited, repo, new_tree) if inherited else (None, "")
    if as_is is not None and not hook_file.is_file():
        if chosen.clean and as_is == chosen.diff:
            return PatchPort(patch.name, "inherited", chosen, inherited, notes)
        if chosen.clean:
            notes.append(f"{ih} also applies to torch {version} as it is, but gives another result than the "
                         f"carry from v{chosen.source}; the carry is written as an override: compare the two")
        else:
            notes.append(f"{ih} applies to torch {version} as it is; if its lines are right there, no override "
                         f"is needed: add {version} to the patch's bases by hand")
    elif inherited and as_is is None and chosen.clean:
        notes.append(f"{ih} does not apply to torch {version} as it is ({why_not}), so the base gets an override")
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
        if inherited and _tree_of(repo, new_tree, existing) == _tree_of(repo, new_tree, inherited.read_text()) is not None:
            notes.append(f"{rel} gives the same files as {ih}; it can be deleted (`check` warns about it)")
        if existing == chosen.diff:
            return PatchPort(patch.name, "unchanged", chosen, hook_file, notes)
        if not force and _tree_of(repo, new_tree, existing) == _tree_of(repo, new_tree, chosen.diff) is not None:
            form = ("only its `index` lines differ (blob ids git apply does not use; the carried hook's are the "
                    "pristine and hooked files' own)" if _without_index(existing) == _without_index(chosen.diff)
                    else "it differs in form only (hunk layout or context lines)")
            return PatchPort(patch.name, "unchanged", chosen, hook_file, notes + [
                f"{rel} gives the same files as the carried hook on torch {version}; {form}; kept (--force rewrites it)"])
        if not force:
            return PatchPort(patch.name, "kept", chosen, hook_file, notes + [f"{rel} exists and differs from the carried hook; kept (--force overwrites it)"])
    hook_file.parent.mkdir(parents=True, exist_ok=True)
    hook_file.write_text(chosen.diff)
    return PatchPort(patch.name, "wrote", chosen, hook_file, notes)


def _check_imports(result: PortResult, ps: Patchset, version: str, new_tree: Path) -> None:
    """A ported hook that imports a torch module the new base would have neither upstream nor in its series'
    overlay (a backport module shipped for an older base only) needs hand work: extend the overlay entry's bases."""
    ok = ("inherited", "wrote", "unchanged", "kept")
    hooks = {p.patch: p.hook_file for p in result.patches if p.status in ok}
    ported = set(result.ported())
    ps_new = dataclasses.replace(ps, patches=tuple(
        dataclasses.replace(p, bases=tuple(dict.fromkeys((*p.bases, version)))) if p.name in ported else p
        for p in ps.patches))
    by_hook = {p.hook_file: p for p in result.patches if p.status in ok}
    for hook, why in dangling_imports(version, ps_new, hooks, new_tree):
        pp = by_hook[hook]
        pp.status = "imports"
        pp.notes.append(f"{hook.name}: {why}")


def _check_series_order(result: PortResult, ps: Patchset, sources: Sources, version: str, repo: Path, new_tree: Path) -> None:
    """Apply every hook for the new base that now exists, in series order, as ``generate`` will."""
    if not repo.exists():
        gitutil.clone_local(new_tree, repo, checkout=False)
    gitutil.git("read-tree", "HEAD", cwd=repo)
    by_name = {p.patch: p for p in result.patches}
    before = []
    for patch in ps.patches:
        pp = by_name.get(patch.name)
        if pp is not None:
            f = pp.hook_file if pp.status in ("inherited", "wrote", "unchanged", "kept") else None
        elif version in patch.bases or sources.override_hook(patch, version).is_file():
            f = sources.hook_diff(patch, version, ps)  # not ported in this run: what generate will use
        else:
            f = None
        if f is None:
            continue
        r = gitutil.git("apply", "--cached", "--whitespace=nowarn", f.resolve(), cwd=repo, check=False)
        if not r.ok:
            _, why = gitutil.explain_apply_failure(r.output)
            msg = f"does not apply after {', '.join(before) or 'nothing'} on torch {version} ({why}): its hunks and another patch's are too close; move them 3+ lines apart"
            if pp is not None:
                pp.notes.append(msg)
                if pp.status in ("inherited", "wrote", "unchanged", "kept"):
                    pp.status = "collides"
            continue
        before.append(patch.name)
