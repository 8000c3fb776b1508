"""Paths, the patch metadata in patchset.toml, errors and progress output shared by every subcommand."""

from __future__ import annotations

import argparse
import dataclasses
import os
import re
import sys
import tomllib
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
PATCHSET_TOML = REPO_ROOT / "patchset.toml"
PATCHES_DIR = REPO_ROOT / "patches"
OVERLAY_DIR = REPO_ROOT / "torch_overlay"
CACHE_DIR = Path(os.environ.get("TORCH_PATCHSET_CACHE", Path.home() / ".cache" / "torch-patchset"))


class PatchsetError(Exception):
    """A user-facing failure. Always names the file (or thing) at fault and the reason."""

    def __init__(self, where: str | os.PathLike, reason: str):
        self.where = str(where)
        self.reason = reason
        super().__init__(f"{self.where}: {reason}")


def add_subcommand(subparsers, name: str, help: str, description: str | None, func) -> argparse.ArgumentParser:
    """``python -m tools <name>``: ``description`` (a module docstring) is shown as written by ``--help``."""
    p = subparsers.add_parser(name, help=help, description=description, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.set_defaults(func=func)
    return p


def progress(msg: str) -> None:
    print(f"[patchset] {msg}", file=sys.stderr, flush=True)


@dataclasses.dataclass(frozen=True)
class TestChange:
    """An upstream test expectation a patch changes on purpose (``[[patch.upstream.test-change]]``)."""

    file: str  # e.g. "test/inductor/test_group_batch_fusion.py"
    test: str  # e.g. "TestCatLinearFusion.test_cat_linear_rejects_wide_output"
    assertion: str  # what the test asserted
    reason: str  # why it changes


@dataclasses.dataclass(frozen=True)
class UpstreamMeta:
    """``[patch.upstream]``: the PR that ``export-pr`` writes for the patch."""

    repo: str = "pytorch/pytorch"
    summary: str = ""  # the PR's Summary, for a reviewer (at most SUMMARY_MAX_WORDS words)
    headline: str = ""  # heading of the patch's headline table in benchmarks/README.md
    test_plan: tuple[str, ...] = ()  # the exact commands
    depends_on: tuple[str, ...] = ()  # names of patches whose PR must land first
    paths: tuple[tuple[str, str], ...] = ()  # tree path -> its path in ``repo`` (another repo than pytorch)
    modules: tuple[tuple[str, str], ...] = ()  # dotted module name -> its name there
    test_changes: tuple[TestChange, ...] = ()
    title: str = ""  # the PR's title where it is not the patch's subject (another repository's conventions)
    header: str = ""  # prepended to every file of a PR to another repository (its license header)
    diff_prs: tuple[DiffPR, ...] = ()  # smaller PRs, stored diffs, proposed first (``[[patch.upstream.diff-pr]]``)
    own_pr: bool = True  # False: the patch's own files stay in the fork; only its diff PRs are proposed
    file_prs: tuple[FilePR, ...] = ()  # PRs that replace one file whole (``[[patch.upstream.file-pr]]``)


@dataclasses.dataclass(frozen=True)
class DiffPR:
    """``[[patch.upstream.diff-pr]]``: a PR that is ``diff``, a stored diff against the files of ``package`` at
    ``version`` as released with the patch's earlier diff PRs applied (upstream lines only as context, new files
    whole), with its own title, summary, test plan and measured text. Each depends on the one before it, and the
    patch's own PR (unless ``own-pr = false``) on all of them (``tools.export_pr_split``); the first that is not
    ``standalone`` on the patch's ``depends-on`` too."""

    name: str
    title: str
    summary: str
    test_plan: tuple[str, ...]
    diff: str  # path in this repo
    package: str  # the distribution whose released files ``diff`` changes, e.g. "torchao"
    version: str  # the version of it that ``diff`` is made against
    measured: str
    standalone: bool = False  # needs none of the patch's ``depends-on`` PRs (a fix to the release alone)


@dataclasses.dataclass(frozen=True)
class FilePR:
    """``[[patch.upstream.file-pr]]``: a PR that replaces ``path`` of ``package``'s source tree at ``version`` whole
    with ``source``, a file generated in this repo (e.g. ``tools/torchao_kernel.py``'s port of ``csrc/``): no
    upstream line is stored. ``add``: (path in the package's tree, path in this repo) of new files it adds (its
    tests). ``diff``: a unified diff against the release's files (as a diff PR's) for what the file's change needs
    beside it, e.g. a fake kernel in Python. ``branch``: the development branch the PR goes to (e.g. ``main``),
    whose tree holds ``path`` (e.g. torchao main's per-ISA ``*_krnl.cpp``) while ``diff`` is still made against the
    release ``version``; without it the PR is for the release's own tree (a backport).
    It depends on no other PR; its Measured section is the ``headline`` section of benchmarks/README.md
    (``tools.export_pr_split.export_file_prs``)."""

    name: str
    title: str
    summary: str
    test_plan: tuple[str, ...]
    path: str  # in the package's source tree
    source: str  # path in this repo
    package: str
    version: str
    headline: str
    add: tuple[tuple[str, str], ...] = ()
    diff: str | None = None  # path in this repo
    branch: str | None = None


SUMMARY_MAX_WORDS = 300
PYTORCH_REPO = "pytorch/pytorch"


@dataclasses.dataclass(frozen=True)
class PatchMeta:
    name: str
    subject: str
    category: str
    upstream_status: str
    bases: tuple[str, ...]
    overlay: tuple[str, ...]  # every overlay file, on whichever bases it ships
    tests: tuple[str, ...]  # every test file, likewise
    last_update: str
    body: str
    # optional, for the Tested-On: trailer: e.g. ["2.13.0+cpu", "2.11.0+cu130 (H100)"]
    tested_on: tuple[str, ...] = ()
    # overlay/test files that ship on some bases only: (path, bases) ({path = ..., bases = [...]} in the toml)
    only: tuple[tuple[str, tuple[str, ...]], ...] = ()
    # the map of the feature (README renders it): examples, benchmark harnesses, docs, and the section of
    # benchmarks/README.md that holds its results
    examples: tuple[str, ...] = ()
    benchmarks: tuple[str, ...] = ()
    docs: tuple[str, ...] = ()
    results: str = ""
    upstream: UpstreamMeta | None = None
    # False: the patch only adds files (``hooks = false``): no hook is looked for, and one found is an error
    hooks: bool = True

    def ships_on(self, path: str, base: str) -> bool:
        return base in dict(self.only).get(path, (base,))

    def overlay_on(self, base: str) -> tuple[str, ...]:
        return tuple(o for o in self.overlay if self.ships_on(o, base))

    def tests_on(self, base: str) -> tuple[str, ...]:
        return tuple(t for t in self.tests if self.ships_on(t, base))


@dataclasses.dataclass(frozen=True)
class Patchset:
    name: str
    version: str
    primary_base: str
    bases: tuple[str, ...]
    patches: tuple[PatchMeta, ...]

    def series(self, base: str) -> list[PatchMeta]:
        return [p for p in self.patches if base in p.bases]


def _files(entries: list, field: str, where: str) -> tuple[tuple[str, ...], tuple[tuple[str, tuple[str, ...]], ...]]:
    """``overlay``/``tests`` entries: a path, or ``{path = "...", bases = ["2.11.0"]}`` for a file that ships on
    those bases only."""
    paths, only = [], []
    for e in entries:
        if isinstance(e, str):
            paths.append(e)
        elif isinstance(e, dict) and isinstance(e.get("path"), str) and isinstance(e.get("bases"), list) and set(e) == {"path", "bases"}:
            paths.append(e["path"])
            only.append((e["path"], tuple(e["bases"])))
        else:
            raise PatchsetError(where, f"{field} entry {e!r} must be a path or {{path = \"...\", bases = [...]}}")
    return tuple(paths), tuple(only)


def _upstream(d: dict | None, where: str) -> UpstreamMeta | None:
    if d is None:
        return None
    known = {"repo", "summary", "headline", "test-plan", "depends-on", "paths", "modules", "test-change", "header",
             "diff-pr", "file-pr", "own-pr", "title"}
    if unknown := sorted(set(d) - known):
        raise PatchsetError(where, f"[patch.upstream] has unknown keys {unknown} (known: {sorted(known)})")
    try:
        changes = tuple(TestChange(c["file"], c["test"], c["assertion"].strip(), c["reason"].strip())
                        for c in d.get("test-change", ()))
    except KeyError as e:
        raise PatchsetError(where, f"[[patch.upstream.test-change]] lacks field {e}") from e
    return UpstreamMeta(
        repo=d.get("repo", PYTORCH_REPO),
        summary=d.get("summary", "").strip(),
        headline=d.get("headline", ""),
        test_plan=tuple(d.get("test-plan", ())),
        depends_on=tuple(d.get("depends-on", ())),
        paths=tuple(d.get("paths", {}).items()),
        modules=tuple(d.get("modules", {}).items()),
        test_changes=changes,
        title=d.get("title", ""),
        header=d.get("header", ""),
        diff_prs=tuple(_diff_pr(x, where) for x in d.get("diff-pr", ())),
        file_prs=tuple(_file_pr(x, where) for x in d.get("file-pr", ())),
        own_pr=d.get("own-pr", True),
    )


def _diff_pr(d: dict, where: str) -> DiffPR:
    fields = {"name", "title", "summary", "test-plan", "diff", "package", "version", "measured"}
    if missing := sorted(fields - set(d)):
        raise PatchsetError(where, f"[[patch.upstream.diff-pr]] lacks {', '.join(missing)}")
    if unknown := sorted(set(d) - fields - {"standalone"}):
        raise PatchsetError(where, f"[[patch.upstream.diff-pr]] has unknown keys {unknown}")
    if not isinstance(d.get("standalone", False), bool):
        raise PatchsetError(where, "[[patch.upstream.diff-pr]] standalone must be true or false")
    return DiffPR(d["name"], d["title"], d["summary"].strip(), tuple(d["test-plan"]), d["diff"], d["package"],
                  d["version"], d["measured"].strip(), d.get("standalone", False))


def _file_pr(d: dict, where: str) -> FilePR:
    fields = {"name", "title", "summary", "test-plan", "path", "source", "package", "version", "headline"}
    if missing := sorted(fields - set(d)):
        raise PatchsetError(where, f"[[patch.upstream.file-pr]] lacks {', '.join(missing)}")
    if unknown := sorted(set(d) - fields - {"add", "diff", "branch"}):
        raise PatchsetError(where, f"[[patch.upstream.file-pr]] has unknown keys {unknown}")
    add = d.get("add", [])
    if not isinstance(add, list) or any(not isinstance(a, dict) or set(a) != {"path", "source"} for a in add):
        raise PatchsetError(where, f"[[patch.upstream.file-pr]] {d['name']}: add must be a list of "
                                   "{path = ..., source = ...}")
    branch = d.get("branch")
    if branch is not None and (not isinstance(branch, str) or not re.fullmatch(r"[\w.-]+", branch)):
        raise PatchsetError(where, f"[[patch.upstream.file-pr]] {d['name']}: branch must be a branch name, "
                                   'e.g. "main"')
    return FilePR(d["name"], d["title"], d["summary"].strip(), tuple(d["test-plan"]), d["path"], d["source"],
                  d["package"], d["version"], d["headline"], tuple((a["path"], a["source"]) for a in add),
                  d.get("diff"), branch)


def load_patchset(path: Path = PATCHSET_TOML) -> Patchset:
    try:
        data = tomllib.loads(path.read_text())
    except (OSError, tomllib.TOMLDecodeError) as e:
        raise PatchsetError(path, f"cannot read patch metadata: {e}") from e
    top = data.get("patchset", {})
    patches = []
    for i, p in enumerate(data.get("patch", [])):
        where = f"{path} [[patch]] #{i + 1}"
        try:
            overlay, only_o = _files(p.get("overlay", []), "overlay", where)
            tests, only_t = _files(p.get("tests", []), "tests", where)
            patches.append(
                PatchMeta(
                    name=p["name"],
                    subject=p["subject"],
                    category=p["category"],
                    upstream_status=p["upstream-status"],
                    bases=tuple(p["bases"]),
                    overlay=overlay,
                    tests=tests,
                    last_update=p["last-update"],
                    body=p["body"].strip(),
                    tested_on=tuple(p.get("tested-on", ())),
                    only=only_o + only_t,
                    examples=tuple(p.get("examples", ())),
                    benchmarks=tuple(p.get("benchmarks", ())),
                    docs=tuple(p.get("docs", ())),
                    results=p.get("results", ""),
                    upstream=_upstream(p.get("upstream"), where),
                    hooks=bool(p.get("hooks", True)),
                )
            )
        except KeyError as e:
            raise PatchsetError(path, f"[[patch]] #{i + 1} lacks field {e}") from e
    return Patchset(
        name=top["name"],
        version=top["version"],
        primary_base=top["primary-base"],
        bases=tuple(top["bases"]),
        patches=tuple(patches),
    )


def tests_not_on(base: str, path: Path = PATCHSET_TOML) -> list[str]:
    """Test files that ship only on other bases (a patch not in ``base``'s series, or an entry for other bases
    only): CMakeLists.txt does not run them on ``base``."""
    ps = load_patchset(path)
    ships = {t for p in ps.series(base) for t in p.tests_on(base)}
    return sorted({t for p in ps.patches for t in p.tests} - ships)


def version_key(v: str) -> tuple[int, int, int]:
    """'2.14.1' -> (2, 14, 1), for ordering bases."""
    a, b, c = (int(x) for x in v.split("."))
    return a, b, c


_VERSION_RE = re.compile(r"^(\d+\.\d+\.\d+)")


def base_of_version(version: str, patchset: Patchset | None = None, where: str | os.PathLike | None = None) -> str:
    """'2.11.0+cu130' -> '2.11.0'; raises PatchsetError for a version the patch set has no series for.
    ``where``: the file the version was read from (named in the error)."""
    m = _VERSION_RE.match(version)
    patchset = patchset or load_patchset()
    if not m or m.group(1) not in patchset.bases:
        raise PatchsetError(
            where or f"torch {version}",
            f"unsupported torch version {version}: this patch set has series for {', '.join(patchset.bases)}",
        )
    return m.group(1)
