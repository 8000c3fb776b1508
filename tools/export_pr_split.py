"""``export-pr`` for a patch proposed as several PRs, and the files of a PR to another repository.

Each ``[[patch.upstream.diff-pr]]`` of a patch is a PR that stands alone: a stored diff (``diff``) against the files
of a package's release (``package`` at ``version``, e.g. torchao's module as released; upstream lines only as
context, new files whole) with the patch's earlier diff PRs applied. Each depends on the one before it, and the
first that is not ``standalone = true`` on the patch's ``depends-on`` PRs too; the patch's own PR (unless ``own-pr
= false``: its files stay in the fork) depends on all of them. Only the release's files are needed, not an install
of it: ``release_files`` takes them from the running Python's install of exactly that
version, else from its wheel in the cache (``CACHE_DIR/wheels/``), which it downloads there when asked to (``pip
download --no-deps``, as ``tools bases`` does torch's). ``export_diff_prs`` writes each to ``<out>/<name>/``:

    <name>.patch   the stored diff
    files/         the files it changes or adds, as they are with it and the earlier diffs applied
    PR.md          title, summary, test plan and the ``measured`` text

``finish_files`` gives every file of a PR to another repository the ``[patch.upstream] header`` (that
repository's license header) and drops PyTorch's test ownership line (``# Owner(s): ...``).
"""

from __future__ import annotations

import dataclasses
import importlib.metadata
import shutil
import sys
import zipfile
from pathlib import Path, PurePosixPath

from tools import bases as bases_mod
from tools import gitutil
from tools.common import DiffPR, FilePR, PatchMeta, PatchsetError, UpstreamMeta, progress
from tools.patchfile import parse_patch
from tools.prmd import ForkPaths, added_lines, named_section, numbered, pasteability_findings, pr_markdown

OWNER_PREFIX = "# Owner(s):"


def diff_pr_meta(p: PatchMeta, dp: DiffPR) -> PatchMeta:
    """A diff PR of ``p`` as a patch of its own (for its PR.md, and for the "Depends on" of the PRs after it)."""
    assert p.upstream is not None
    up = UpstreamMeta(repo=p.upstream.repo, summary=dp.summary, test_plan=dp.test_plan,
                      depends_on=p.upstream.depends_on)
    return dataclasses.replace(p, name=dp.name, subject=dp.title, upstream=up)


def finish_files(root: Path, p: PatchMeta) -> None:
    """Each ``*.py`` under ``root``: PyTorch's ``# Owner(s):`` line dropped, ``header`` on top (once)."""
    header = p.upstream.header.strip() if p.upstream else ""
    for f in sorted(root.rglob("*.py")):
        lines = [x for x in f.read_text().splitlines(keepends=True) if not x.startswith(OWNER_PREFIX)]
        text = "".join(lines).lstrip("\n")
        if header and not text.startswith(header):
            text = f"{header}\n\n{text}"
        f.write_text(text)


@dataclasses.dataclass(frozen=True)
class ReleaseFiles:
    """The files of ``package`` at ``version``: an installed distribution's (``dist``) or a wheel's (``wheel``)."""

    package: str
    version: str
    dist: importlib.metadata.Distribution | None = None
    wheel: Path | None = None

    def read(self, path: str) -> bytes | None:
        """The bytes of ``path`` (relative to site-packages, e.g. ``torchao/x.py``), None when the release lacks it."""
        if self.dist is not None:
            f = Path(str(self.dist.locate_file(path)))
            return f.read_bytes() if f.is_file() else None
        assert self.wheel is not None
        with zipfile.ZipFile(self.wheel) as zf:
            try:
                return zf.read(PurePosixPath(path).as_posix())
            except KeyError:
                return None

    def describe(self) -> str:
        return f"the installed {self.package} {self.version}" if self.wheel is None else self.wheel.name


def download_command(package: str, version: str, cache_dir: Path | None = None) -> str:
    """The command that puts the release's wheel where ``release_files`` finds it."""
    return (f"{Path(sys.executable).name} -m pip download --no-deps --only-binary=:all: {package}=={version} "
            f"-d {bases_mod.wheels_dir(cache_dir)}")


def release_files(fp: DiffPR | FilePR, cache_dir: Path | None = None, fetch: bool = False) -> ReleaseFiles:
    """The files a diff PR is made against: the running Python's install of ``fp.package`` when it is
    exactly ``fp.version``, else that release's wheel in the cache, else (``fetch``) the wheel downloaded there
    (``bases.download_wheel``). A PatchsetError naming the command that fetches it when there is none."""
    try:
        dist = importlib.metadata.distribution(fp.package)
    except importlib.metadata.PackageNotFoundError:
        dist = None
    if dist is not None and dist.version == fp.version:
        return ReleaseFiles(fp.package, fp.version, dist=dist)
    wdir = bases_mod.wheels_dir(cache_dir)
    wheel = bases_mod.find_wheel(fp.version, wdir, fp.package)
    if wheel is None and fetch:
        progress(f"export-pr: downloading {fp.package}=={fp.version} into {wdir} (pip download --no-deps; its files "
                 f"are what {fp.diff} is made against, nothing is installed)")
        wheel = bases_mod.download_wheel(fp.package, fp.version, wdir)
    if wheel is None:
        here = f"{dist.version} is installed here" if dist is not None else "is not installed here"
        raise PatchsetError(f"{fp.package} {fp.version}", f"{fp.package} {here} and no {fp.package}-{fp.version} wheel "
                                                          f"is in {wdir}")
    return ReleaseFiles(fp.package, fp.version, wheel=wheel)


def export_diff_prs(root: Path, p: PatchMeta, out: Path, deps: list[PatchMeta], fork: ForkPaths,
                    older, release: ReleaseFiles | None = None) -> tuple[list[PatchMeta], list[str]]:
    """Write each diff PR of ``p`` under ``out``, in order; their metadata (for the "Depends on" of the patch's own
    PR) and the lines a reviewer would not accept. Each depends on the one before it, and the first that is not
    ``standalone`` on ``deps`` too. ``release``: the files the diffs are made against (default: ``release_files``
    without fetching)."""
    assert p.upstream is not None
    metas: list[PatchMeta] = []
    findings: list[str] = []
    applied: dict[str, bytes] = {}  # the release's files as the earlier diffs leave them
    carried = False  # whether an earlier diff PR depends on ``deps`` already
    for i, dp in enumerate(p.upstream.diff_prs, 1):
        release = release or release_files(dp)
        meta = diff_pr_meta(p, dp)
        listed = _apply_diff(root / dp.diff, dp, p, out / dp.name, release, applied)
        depends = metas[-1:] + ([] if dp.standalone or carried else deps)
        carried = carried or not dp.standalone
        text = pr_markdown(meta, [dp.measured], depends, listed)
        (out / dp.name / "PR.md").write_text(text)
        findings += pasteability_findings(f"{dp.name}/PR.md", numbered(text), fork, older)
        for path, lines in added_lines((root / dp.diff).read_text()).items():
            findings += pasteability_findings(f"{dp.name}: {path}", lines, fork, older)
        progress(f"export-pr: {p.name}, PR {i} of {len(p.upstream.diff_prs) + p.upstream.own_pr}: {len(listed)} "
                 f"files for {p.upstream.repo} in {dp.name}/files/, {dp.name}/PR.md")
        metas.append(meta)
    return metas, findings


def _apply_diff(diff: Path, dp: DiffPR | FilePR, p: PatchMeta, d: Path, release: ReleaseFiles,
                applied: dict[str, bytes]) -> list[tuple[str, str]]:
    """``diff`` applied to the release's files with the earlier diffs applied (``applied``, updated), written to
    ``d/files/``, and the diff to ``d/<name>.patch``; the files it touches, each a module or a test."""
    if not diff.is_file():
        raise PatchsetError(diff, f"missing (the diff of {dp.name}, a PR of {p.name})")
    files = d / "files"
    files.mkdir(parents=True)
    parsed = parse_patch(diff).files
    for fd in parsed:
        data = applied.get(fd.path)
        if data is None and fd.kind != "add":
            data = release.read(fd.path)
            if data is None:
                raise PatchsetError(diff, f"{fd.path}: not a file of {dp.package} {dp.version} ({release.describe()})")
        if data is not None:
            (files / fd.path).parent.mkdir(parents=True, exist_ok=True)
            (files / fd.path).write_bytes(data)
    env = gitutil.isolated_env()
    gitutil.git("init", "-q", ".", cwd=files, env=env)
    r = gitutil.git("apply", "--whitespace=nowarn", diff.resolve(), cwd=files, env=env, check=False)
    shutil.rmtree(files / ".git")
    if not r.ok:
        on = f" with {', '.join(sorted(applied))} as the earlier diffs leave them" if applied else ""
        raise PatchsetError(diff, f"does not apply to {dp.package} {dp.version}{on}: "
                                  f"{gitutil.apply_failure_text(r.output)}")
    for fd in parsed:
        if (files / fd.path).is_file():
            applied[fd.path] = (files / fd.path).read_bytes()
    shutil.copyfile(diff, d / f"{dp.name}.patch")
    return [(fd.path, "test" if fd.path.startswith("test/") else "module") for fd in parsed]


def file_pr_meta(p: PatchMeta, fp: FilePR) -> PatchMeta:
    """A file PR of ``p`` as a patch of its own, for its PR.md: it depends on no other PR."""
    assert p.upstream is not None
    up = UpstreamMeta(repo=p.upstream.repo, summary=fp.summary, test_plan=fp.test_plan, headline=fp.headline)
    return dataclasses.replace(p, name=fp.name, subject=fp.title, upstream=up)


def export_file_prs(root: Path, p: PatchMeta, out: Path, fork: ForkPaths,
                    release: ReleaseFiles | None = None) -> list[str]:
    """Write each file PR of ``p`` to ``out/<name>/``: ``files/<path>`` (its ``source``), ``files/<added path>``
    for each file it adds, the release's files its ``diff`` changes with it applied (and the diff as
    ``<name>.patch``), and ``PR.md`` (Measured: the ``headline`` section of benchmarks/README.md); the lines a
    reviewer would not accept. A torch release it names is not one (a package's PR says which torch it was
    measured with). ``release``: the files the diff is made against where it is ``fp``'s package and version
    (else ``release_files`` without fetching)."""
    assert p.upstream is not None
    findings: list[str] = []
    readme = root / "benchmarks" / "README.md"
    for fp in p.upstream.file_prs:
        into = f"{fp.branch}'s file" if fp.branch else f"{fp.package} {fp.version}'s file"
        copies = [(fp.path, fp.source, f"replaces {into} whole")]
        copies += [(path, source, "new") for path, source in fp.add]
        for _, source, _ in copies:
            if not (root / source).is_file():
                raise PatchsetError(root / source, f"missing ([[patch.upstream.file-pr]] {fp.name} of {p.name}); "
                                                   "run `python -m tools generate`")
        measured = named_section(readme, fp.headline)
        if measured is None:
            raise PatchsetError(readme, f"no heading {fp.headline!r} ([[patch.upstream.file-pr]] {fp.name})")
        d = out / fp.name
        # the names of the PR's own files are no longer this repo's alone
        fork_here = ForkPaths(fork.paths, fork.names - {Path(path).name for path, _, _ in copies})
        changed: list[tuple[str, str]] = []
        if fp.diff:
            ours = release is not None and (release.package, release.version) == (fp.package, fp.version)
            listed = _apply_diff(root / fp.diff, fp, p, d, release if ours else release_files(fp), {})
            on = f" (made against {fp.package} {fp.version})" if fp.branch else ""
            changed = [(path, f"changed{on}") for path, _ in listed]
            for path, lines in added_lines((root / fp.diff).read_text()).items():
                findings += pasteability_findings(f"{fp.name}: {path}", lines, fork_here, None)
        for path, source, _ in copies:
            (d / "files" / path).parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(root / source, d / "files" / path)
            findings += pasteability_findings(f"{fp.name}: {path}", numbered((root / source).read_text()),
                                              fork_here, None)
        text = pr_markdown(file_pr_meta(p, fp), [x for x in measured if not x.startswith("Command:")], [],
                           [(path, what) for path, _, what in copies] + changed)
        (d / "PR.md").write_text(text)
        findings += pasteability_findings(f"{fp.name}/PR.md", numbered(text), fork_here, None)
        written = [path for path, _, _ in copies] + [path for path, _ in changed]
        progress(f"export-pr: {p.name}: {fp.name}/files/ ({', '.join(written)}), "
                 f"{fp.name}/PR.md")
    return findings
