"""The hand-edited sources of the patch set: ``patchset.toml``, ``hooks/``, ``torch_overlay/``, ``test/``.

``Sources`` says where they are (tests point it at a fake repo) and which hook file a patch uses on a base
(``hook_diff``: the override ``hooks/<patch>/v<base>.diff`` if there is one, else the override of the nearest base
between it and ``hook_base`` on its side, else the shared ``hooks/<patch>/hook.diff``, made against ``hook_base``:
``inherited_hook``), ``validate_metadata`` holds ``patchset.toml`` to the
header rules of ``tools.patchfile``, and ``sources_digest`` fingerprints what ``generate`` reads for one base, so
that ``install``/``wheel`` can refuse a ``patches/`` that is older than its sources (``require_fresh_series``).
"""

from __future__ import annotations

import argparse
import dataclasses
import hashlib
import re
from pathlib import Path

from tools.common import (PYTORCH_REPO, REPO_ROOT, SUMMARY_MAX_WORDS, Patchset, PatchMeta, PatchsetError, load_patchset,
                          version_key)
from tools.patchfile import CATEGORIES, DATE_RE, SUBJECT_PREFIX, UPSTREAM_STATUS_FORMS, UPSTREAM_STATUS_RE
from tools.seriesfile import recorded_sources_digest

NAME_RE = re.compile(r"^[a-z0-9][a-z0-9._-]*$")
FIX_COMMAND = "python -m tools generate"
SHARED_HOOK = "hook.diff"  # hooks/<patch>/hook.diff: the hook of every base without its own v<base>.diff
UPSTREAM_TESTS = "upstream-tests.diff"  # hooks/<patch>/upstream-tests.diff: hunks to upstream tests (export-pr)
OVERRIDE_RE = re.compile(r"^v(\d+\.\d+\.\d+)\.diff$")


def hook_base(ps: Patchset, patch: PatchMeta) -> str:
    """The base a patch's shared hook is made against (and must apply to as it is): ``[patchset] primary-base``
    when the patch lists it, else the newest base the patch lists."""
    if ps.primary_base in patch.bases or not patch.bases:
        return ps.primary_base
    return max(patch.bases, key=version_key)


@dataclasses.dataclass(frozen=True)
class Sources:
    """Where the hand-edited sources and the generated patches live."""

    root: Path = REPO_ROOT

    @property
    def patchset_toml(self) -> Path:
        return self.root / "patchset.toml"

    @property
    def hooks_dir(self) -> Path:
        return self.root / "hooks"

    @property
    def overlay_dir(self) -> Path:
        return self.root / "torch_overlay"

    @property
    def patches_dir(self) -> Path:
        return self.root / "patches"

    def load(self) -> Patchset:
        ps = load_patchset(self.patchset_toml)
        validate_metadata(ps, self.patchset_toml)
        return ps

    def shared_hook(self, patch: PatchMeta) -> Path:
        """``hooks/<patch>/hook.diff``: used on every base that has no override."""
        return self.hooks_dir / patch.name / SHARED_HOOK

    def override_hook(self, patch: PatchMeta, base: str) -> Path:
        """``hooks/<patch>/v<base>.diff``: the hook of ``base`` only, instead of the shared one."""
        return self.hooks_dir / patch.name / f"v{base}.diff"

    def hook_diff(self, patch: PatchMeta, base: str, ps: Patchset | None = None) -> Path | None:
        """The hook ``generate`` applies for ``patch`` on ``base``: its own override, else the hook it inherits
        (``inherited_hook``), else None (the patch only adds files there)."""
        own = self.override_hook(patch, base)
        return own if own.is_file() else self.inherited_hook(patch, base, ps)

    def inherited_hook(self, patch: PatchMeta, base: str, ps: Patchset | None = None,
                       skip: Path | None = None) -> Path | None:
        """The hook ``base`` uses when it has no override of its own. Overrides extend away from the base the shared
        hook is made against (``hook_base``, the anchor): the override of the nearest base the patch lists between
        ``base`` and the anchor (on ``base``'s side; the anchor's own override counts only where there is no shared
        hook) serves ``base``, else the shared hook does. So ``v2.14.1.diff`` also serves 2.15.0, 2.16.0 ... until a
        later base has its own, and ``v2.11.0.diff`` serves 2.10.0. ``skip``: pretend that file is not there
        (``check``: what would a base use without this override?)."""
        ps = ps or self.load()
        anchor, k = version_key(hook_base(ps, patch)), version_key(base)
        shared = self.shared_hook(patch)
        has_shared = shared.is_file() and shared != skip

        def between(b: str) -> bool:
            v = version_key(b)
            if v == anchor:
                return not has_shared and v != k
            return anchor < v < k or k < v < anchor

        # nearest to ``base`` first: all candidates are on one side of it
        for b in sorted(filter(between, patch.bases), key=version_key, reverse=k > anchor):
            f = self.override_hook(patch, b)
            if f.is_file() and f != skip:
                return f
        return shared if has_shared else None

    def hook_users(self, patch: PatchMeta, hook: Path, ps: Patchset | None = None) -> list[str]:
        """The bases of ``patch`` whose hook is ``hook`` (an override: its own base and those that inherit it)."""
        ps = ps or self.load()
        return [b for b in patch.bases if self.hook_diff(patch, b, ps) == hook]

    def overlay_file(self, path: str) -> Path:
        return self.overlay_dir / path

    def test_file(self, path: str) -> Path:
        return self.root / path

    def rel(self, p: Path) -> Path:
        return p.relative_to(self.root) if p.is_relative_to(self.root) else p


def add_repo_root_arg(p: argparse.ArgumentParser) -> None:
    p.add_argument("--repo-root", help=argparse.SUPPRESS)  # tests: a fake patch-set repo


def sources_from_args(args) -> Sources:
    return Sources(Path(args.repo_root).resolve()) if args.repo_root else Sources()


def select_bases(ps: Patchset, selected: list[str] | None, flag: str = "--base") -> list[str]:
    """``selected`` (deduplicated) after checking each is a base of the patch set; all bases when empty."""
    for b in selected or ():
        if b not in ps.bases:
            raise PatchsetError(f"{flag} {b}", f"not a base of this patch set ({', '.join(ps.bases)})")
    return list(dict.fromkeys(selected)) if selected else list(ps.bases)


def validate_metadata(ps: Patchset, where: Path) -> None:
    seen = set()
    for p in ps.patches:
        w = f"{where} [[patch]] {p.name!r}"
        if not NAME_RE.match(p.name):
            raise PatchsetError(w, "name must be a lowercase slug (it becomes <name>.patch and a branch name)")
        if p.name in seen:
            raise PatchsetError(w, "duplicate patch name")
        seen.add(p.name)
        if not p.subject.startswith(SUBJECT_PREFIX) or "\n" in p.subject:
            raise PatchsetError(w, f"subject must be one line starting with {SUBJECT_PREFIX!r}")
        if p.category not in CATEGORIES:
            raise PatchsetError(w, f"category {p.category!r} is not one of {', '.join(CATEGORIES)}")
        if not UPSTREAM_STATUS_RE.match(p.upstream_status):
            raise PatchsetError(w, f"upstream-status {p.upstream_status!r} must be {UPSTREAM_STATUS_FORMS}")
        if not DATE_RE.match(p.last_update):
            raise PatchsetError(w, f"last-update {p.last_update!r} is not YYYY-MM-DD")
        if not p.body.strip():
            raise PatchsetError(w, "body (why this patch exists) is empty")
        if re.search(r"^---\s*$|^diff --git |^Index: ", p.body, re.M):
            raise PatchsetError(w, "body contains a line git would take for the start of the diff")
        if not p.tests:
            raise PatchsetError(w, "lists no tests; every patch carries its test file(s)")
        for b in p.bases:
            if b not in ps.bases:
                raise PatchsetError(w, f"base {b} is not in [patchset] bases ({', '.join(ps.bases)})")
        for path in (*p.overlay, *p.tests):
            if path.startswith("/") or ".." in Path(path).parts:
                raise PatchsetError(w, f"path {path!r} must be relative to the tree root")
        for path, top in [*((o, "torch/") for o in p.overlay), *((t, "test/") for t in p.tests)]:
            if not path.startswith(top):
                raise PatchsetError(w, f"{'overlay' if top == 'torch/' else 'test'} path {path!r} must start with {top}")
        for path, only in p.only:
            if not only or not set(only) <= set(p.bases):
                raise PatchsetError(w, f"{path}: bases {list(only)} must be a non-empty subset of the patch's bases {list(p.bases)}")
        if len({path for path, _ in p.only}) != len(p.only) or len(set(p.overlay)) != len(p.overlay) or len(set(p.tests)) != len(p.tests):
            raise PatchsetError(w, "a file is listed twice in overlay/tests")
        for path in (*p.examples, *p.benchmarks, *p.docs):
            if path.startswith("/") or ".." in Path(path).parts:
                raise PatchsetError(w, f"path {path!r} must be relative to the repo root")
        if p.upstream is not None:
            validate_upstream(p, w)


def summary_words(text: str) -> int:
    return len(text.split())


def validate_upstream(p: PatchMeta, w: str) -> None:
    """``[patch.upstream]``: what ``export-pr`` needs to write a PR that is pasted as is."""
    up = p.upstream
    assert up is not None
    if not re.fullmatch(r"[\w.-]+/[\w.-]+", up.repo):
        raise PatchsetError(w, f"[patch.upstream] repo {up.repo!r} is not 'owner/name'")
    if (n := summary_words(up.summary)) > SUMMARY_MAX_WORDS:
        raise PatchsetError(w, f"[patch.upstream] summary has {n} words; a reviewer gets at most {SUMMARY_MAX_WORDS}")
    if re.search(r"^---\s*$|^diff --git |^Index: ", up.summary, re.M):
        raise PatchsetError(w, "[patch.upstream] summary contains a line git would take for the start of the diff")
    for kind, prs in (("diff-pr", up.diff_prs), ("file-pr", up.file_prs)):
        for x in prs:
            if (n := summary_words(x.summary)) > SUMMARY_MAX_WORDS:
                raise PatchsetError(w, f"[[patch.upstream.{kind}]] {x.name}: summary has {n} words; a reviewer gets "
                                       f"at most {SUMMARY_MAX_WORDS}")
    if len({(dp.package, dp.version) for dp in up.diff_prs}) > 1:
        raise PatchsetError(w, "[[patch.upstream.diff-pr]]: each is made on the ones before it, so all need one "
                               "package and version")
    flags = [dp.standalone for dp in up.diff_prs]
    if any(b and not a for a, b in zip(flags, flags[1:])):
        raise PatchsetError(w, "[[patch.upstream.diff-pr]]: standalone ones come first (a later one is made on the "
                               "ones before it)")
    if not up.own_pr and not up.diff_prs:
        raise PatchsetError(w, "[patch.upstream] own-pr = false proposes nothing without a [[patch.upstream.diff-pr]]")
    files = set(p.overlay) | set(p.tests)
    for src, _ in up.paths:
        if src not in files:
            raise PatchsetError(w, f"[patch.upstream] paths: {src!r} is not an overlay or test file of the patch")
    if up.own_pr and up.repo != PYTORCH_REPO and set(dict(up.paths)) != files:
        missing = sorted(files - set(dict(up.paths)))
        raise PatchsetError(w, f"[patch.upstream] repo is {up.repo}: paths must give each file's path there (missing: {missing})")
    for c in up.test_changes:
        if not c.file.startswith("test/") or not c.test or not c.assertion or not c.reason:
            raise PatchsetError(w, f"[[patch.upstream.test-change]] {c.file!r}: needs a test/ file, test, assertion and reason")


def sources_digest(ps: Patchset, sources: Sources, base: str) -> str:
    """sha256 over everything ``generate`` reads for ``base``: each patch's metadata (not its map or upstream PR
    fields), the name and content of the
    hook it uses there (override or shared), overlay and test files (a missing one counts as missing). So an edit
    of the shared hook changes the digest of every base without an override, and adding or removing an override
    changes its base's. Cheap: a handful of small files."""
    h = hashlib.sha256()
    for p in ps.series(base):
        # what the series is made from on this base (the map and [patch.upstream] are not)
        made_from = (p.name, p.subject, p.category, p.upstream_status, p.bases, p.overlay_on(base), p.tests_on(base),
                     p.last_update, p.body, p.tested_on)
        h.update(repr(made_from).encode() + b"\0")
        hook = sources.hook_diff(p, base, ps) or sources.override_hook(p, base)  # which file counts: its name is hashed
        files = [hook] + [sources.overlay_file(o) for o in p.overlay_on(base)] + [sources.test_file(t) for t in p.tests_on(base)]
        for f in files:
            h.update(str(sources.rel(f)).encode() + b"\0")
            h.update(hashlib.sha256(f.read_bytes()).digest() if f.is_file() else b"missing")
    return h.hexdigest()


def require_fresh_series(series_dir: Path, base: str, metadata: Path) -> None:
    """Refuse a series generated from other sources than the ones next to ``metadata`` (an overlay, hook, test or
    patchset.toml edit without `generate`). A series that records no digest (made by hand) is not judged."""
    recorded = recorded_sources_digest(series_dir)
    if recorded is None:
        return
    sources = Sources(metadata.resolve().parent)
    try:
        ps = sources.load()
    except PatchsetError:
        return  # not a source checkout (metadata alone): nothing to compare with
    if sources_digest(ps, sources, base) != recorded:
        raise PatchsetError(series_dir / "series", f"out of date: hooks/, torch_overlay/, test/ or patchset.toml "
                            f"changed since it was generated; run `{FIX_COMMAND}` (then `python -m tools check`)")


def fresh_series_dir(patches_dir: Path, base: str, metadata: Path) -> Path:
    """``patches_dir/v<base>``, which must hold a series that is not older than its sources."""
    d = patches_dir / f"v{base}"
    if not patches_dir.is_dir():
        raise PatchsetError(patches_dir, "no such directory (--patches names a directory holding v<base>/series)"
                            if not patches_dir.exists() else "not a directory")
    if not (d / "series").is_file():
        raise PatchsetError(d / "series", f"no generated series for base {base} (run `{FIX_COMMAND}`)")
    require_fresh_series(d, base, metadata)
    return d


def unclaimed_overlay_files(ps: Patchset, sources: Sources) -> list[Path]:
    """Files under torch_overlay/ that no patch lists: they would silently never ship."""
    claimed = {o for p in ps.patches for o in p.overlay}
    out = []
    if sources.overlay_dir.is_dir():
        for f in sorted(sources.overlay_dir.rglob("*")):
            rel = f.relative_to(sources.overlay_dir)
            if f.is_file() and "__pycache__" not in rel.parts and f.suffix != ".pyc" and rel.as_posix() not in claimed:
                out.append(f)
    return out


def orphan_hook_files(ps: Patchset, sources: Sources) -> list[tuple[Path, str]]:
    """Files under hooks/ that generate never reads (unknown patch, a base the patch does not list, a shared hook
    every base overrides, stray file)."""
    by_name = {p.name: p for p in ps.patches}
    wanted = {f for p in ps.patches for b in p.bases if (f := sources.hook_diff(p, b, ps)) is not None}
    wanted |= {sources.hooks_dir / p.name / UPSTREAM_TESTS for p in ps.patches}
    out = []
    if sources.hooks_dir.is_dir():
        for f in sorted(sources.hooks_dir.rglob("*")):
            if not f.is_file() or f in wanted:
                continue
            rel = f.relative_to(sources.hooks_dir)
            patch = by_name.get(rel.parts[0])
            m = OVERRIDE_RE.fullmatch(f.name)
            if patch is None:
                why = f"no [[patch]] named {rel.parts[0]!r} in patchset.toml"
            elif m and len(rel.parts) == 2:
                why = f"patch {rel.parts[0]} does not list base {m.group(1)} in patchset.toml"
            elif f.name == SHARED_HOOK and len(rel.parts) == 2:
                why = f"every base of {patch.name} has its own v<base>.diff override, so the shared hook is never used"
            else:
                why = f"not a hooks/<patch-name>/{SHARED_HOOK}, v<base>.diff or {UPSTREAM_TESTS} file"
            out.append((f, why))
    return out


def shadowed_shared_hooks(ps: Patchset, sources: Sources) -> list[tuple[Path, str]]:
    """Overrides of the very base a shared hook is made against: the shared hook would then be made against a
    base that never uses it. The change belongs in hook.diff (and overrides on the other bases where needed)."""
    out = []
    for p in ps.patches:
        base = hook_base(ps, p)
        shared, override = sources.shared_hook(p), sources.override_hook(p, base)
        if shared.is_file() and override.is_file() and base in p.bases:
            out.append((override, f"overrides {sources.rel(shared)} on {base}, the base the shared hook is made against; "
                                  f"put this change in {SHARED_HOOK} (CONTRIBUTING.md) and keep overrides for other bases only"))
    return out
