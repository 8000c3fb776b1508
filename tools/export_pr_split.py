"""``export-pr`` for a patch proposed as two PRs, and the files of a PR to another repository.

A patch whose ``[patch.upstream]`` has a ``[patch.upstream.first-pr]`` table is proposed as two PRs: first a small
one that stands alone, a diff (``diff``) against the files of an installed package (``package`` at ``version``,
e.g. torchao's module as released; upstream lines only as context, new files whole), then the patch's own PR,
which says it depends on the first. ``export_first_pr`` writes the first one to ``<out>/<first-pr name>/``:

    <name>.patch   the stored diff
    files/         the files it changes or adds, with the diff applied to the installed package's files
    PR.md          title, summary, test plan and the ``measured`` text

``finish_files`` gives every file of a PR to another repository the ``[patch.upstream] header`` (that
repository's license header) and drops PyTorch's test ownership line (``# Owner(s): ...``).
"""

from __future__ import annotations

import dataclasses
import importlib.metadata
import shutil
from pathlib import Path

from tools import gitutil
from tools.common import PatchMeta, PatchsetError, UpstreamMeta, progress
from tools.patchfile import parse_patch
from tools.prmd import ForkPaths, added_lines, numbered, pasteability_findings, pr_markdown

OWNER_PREFIX = "# Owner(s):"


def first_pr_meta(p: PatchMeta) -> PatchMeta | None:
    """The first PR of ``p`` as a patch of its own (for its PR.md, and for the second PR's "Depends on")."""
    fp = p.upstream.first_pr if p.upstream else None
    if fp is None:
        return None
    assert p.upstream is not None
    up = UpstreamMeta(repo=p.upstream.repo, summary=fp.summary, test_plan=fp.test_plan,
                      depends_on=p.upstream.depends_on)
    return dataclasses.replace(p, name=fp.name, subject=fp.title, upstream=up)


def finish_files(root: Path, p: PatchMeta) -> None:
    """Each ``*.py`` under ``root``: PyTorch's ``# Owner(s):`` line dropped, ``header`` on top (once)."""
    header = p.upstream.header.strip() if p.upstream else ""
    for f in sorted(root.rglob("*.py")):
        lines = [x for x in f.read_text().splitlines(keepends=True) if not x.startswith(OWNER_PREFIX)]
        text = "".join(lines).lstrip("\n")
        if header and not text.startswith(header):
            text = f"{header}\n\n{text}"
        f.write_text(text)


def export_first_pr(root: Path, p: PatchMeta, out: Path, deps: list[PatchMeta], fork: ForkPaths,
                    older) -> tuple[str, list[str]]:
    """Write the first PR of ``p`` under ``out``; its directory name and the lines a reviewer would not accept."""
    first = first_pr_meta(p)
    assert first is not None and p.upstream is not None and p.upstream.first_pr is not None
    fp = p.upstream.first_pr
    where = f"[patch.upstream.first-pr] of {p.name}"
    diff = root / fp.diff
    if not diff.is_file():
        raise PatchsetError(diff, f"missing ({where})")
    try:
        dist = importlib.metadata.distribution(fp.package)
    except importlib.metadata.PackageNotFoundError:
        raise PatchsetError(where, f"{fp.package} is not installed in this environment: the first PR is made from "
                                   f"its installed files (pip install {fp.package}=={fp.version})") from None
    if dist.version != fp.version:
        raise PatchsetError(where, f"{fp.package} {dist.version} is installed, but {diff.name} is made against "
                                   f"{fp.version} (pip install {fp.package}=={fp.version})")
    d = out / fp.name
    files = d / "files"
    files.mkdir(parents=True)
    for fd in parse_patch(diff).files:
        if fd.kind == "add":
            continue
        src = Path(str(dist.locate_file(fd.path)))
        if not src.is_file():
            raise PatchsetError(diff, f"{fd.path}: not a file of the installed {fp.package} {fp.version}")
        (files / fd.path).parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(src, files / fd.path)
    env = gitutil.isolated_env()
    gitutil.git("init", "-q", ".", cwd=files, env=env)
    r = gitutil.git("apply", "--whitespace=nowarn", diff.resolve(), cwd=files, env=env, check=False)
    shutil.rmtree(files / ".git")
    if not r.ok:
        raise PatchsetError(diff, f"does not apply to {fp.package} {fp.version}: {gitutil.apply_failure_text(r.output)}")
    shutil.copyfile(diff, d / f"{fp.name}.patch")
    listed = [(fd.path, "test" if fd.path.startswith("test/") else "module") for fd in parse_patch(diff).files]
    text = pr_markdown(first, [fp.measured], deps, listed)
    (d / "PR.md").write_text(text)
    findings = pasteability_findings(f"{fp.name}/PR.md", numbered(text), fork, older)
    for path, lines in added_lines(diff.read_text()).items():
        findings += pasteability_findings(f"{fp.name}: {path}", lines, fork, older)
    progress(f"export-pr: {p.name}, first of two PRs: {len(listed)} files for {p.upstream.repo} in {fp.name}/files/, "
             f"{fp.name}/PR.md")
    return fp.name, findings
