"""``python -m tools apply /path/to/pytorch``: apply the series for the checkout's torch version as commits.

The version comes from ``version.txt`` (a PyTorch source checkout, e.g. ``2.13.0a0``) or else from
``torch/version.py`` (a pristine base tree, an unpacked wheel in git). The checkout must be clean: no
staged, modified or untracked (non-ignored) files; submodules are not looked at, since no patch touches one.

Each patch of ``patches/v<base>/series`` is ``git am``-ed (no 3-way merge, no fuzz) unless it is already
there, which is recognised three ways and reported:
  * the patch reverse-applies cleanly (its change is present verbatim);
  * its ``Upstream-Status: Submitted <PR url>`` appears as ``Pull Request resolved: <url>`` in the
    checkout's history (PyTorch's merge bot writes that line; PyTorch/XLA's cond_patch.py does the same);
  * every file the patch adds already exists with identical content.
If a patch fails, ``git am --abort`` runs and the branch goes back to the exact original HEAD (patches
applied earlier in the same run are undone too), and the error names the patch and the file.
"""

from __future__ import annotations

import argparse
import dataclasses
import re
from pathlib import Path

from tools import gitutil
from tools.common import PatchsetError, base_of_version, progress
from tools.series import Sources, read_series_names

_VERSION_PY_RE = re.compile(r"""^__version__\s*=\s*['"]([^'"]+)['"]""", re.M)
_PR_RESOLVED = "Pull Request resolved: "


def detect_version(checkout: Path) -> tuple[str, Path]:
    """(version string, file it came from)."""
    vt = checkout / "version.txt"
    if vt.is_file():
        v = vt.read_text().strip()
        if v:
            return v, vt
    vp = checkout / "torch" / "version.py"
    if vp.is_file():
        m = _VERSION_PY_RE.search(vp.read_text())
        if m:
            return m.group(1), vp
    raise PatchsetError(checkout, "cannot tell the torch version: no version.txt (PyTorch checkout) and no __version__ in torch/version.py")


@dataclasses.dataclass
class PatchInfo:
    path: Path
    subject: str
    pr_url: str | None
    new_files: dict[str, str]  # path -> blob sha of the added file


def read_patch_info(path: Path) -> PatchInfo:
    text = path.read_text(errors="replace")
    head = text.partition("\ndiff --git ")[0]
    subject = next((l[len("Subject: ") :] for l in head.splitlines() if l.startswith("Subject: ")), path.stem)
    m = re.search(r"^Upstream-Status: Submitted \[?(https?://\S+?)\]?$", head, re.M)
    new_files = {}
    for block in re.split(r"^diff --git ", text, flags=re.M)[1:]:
        if "\nnew file mode " not in block:
            continue
        idx = re.search(r"^index 0+\.\.([0-9a-f]{40})$", block, re.M)
        dst = re.search(r"^\+\+\+ b/(.+)$", block, re.M)
        if idx and dst:
            new_files[dst.group(1)] = idx.group(1)
    return PatchInfo(path, subject, m.group(1) if m else None, new_files)


def already_applied(checkout: Path, info: PatchInfo, env: dict) -> str | None:
    """Why the patch's change is already in the checkout, or None."""
    r = gitutil.git("apply", "--check", "--reverse", info.path.resolve(), cwd=checkout, env=env, check=False)
    if r.ok:
        return "its change is already there (the patch reverse-applies)"
    if info.pr_url:
        r = gitutil.git("log", "-1", "--format=%h", "-F", f"--grep={_PR_RESOLVED}{info.pr_url}", "HEAD", cwd=checkout, env=env, check=False)
        if r.ok and r.stdout.strip():
            return f"upstream merged {info.pr_url} (commit {r.stdout.strip()})"
    if info.new_files:
        for p, sha in info.new_files.items():
            r = gitutil.git("rev-parse", "--verify", "--quiet", f"HEAD:{p}", cwd=checkout, env=env, check=False)
            if not r.ok or r.stdout.strip() != sha:
                return None
        return f"the files it adds ({', '.join(info.new_files)}) are already there with identical content"
    return None


def _restore(checkout: Path, orig: str, env: dict) -> None:
    if (Path(gitutil.git("rev-parse", "--absolute-git-dir", cwd=checkout, env=env).stdout.strip()) / "rebase-apply").exists():
        gitutil.git("am", "--abort", cwd=checkout, env=env, check=False)
    if gitutil.rev_parse(checkout, env=env) != orig:
        gitutil.git("reset", "--quiet", "--keep", orig, cwd=checkout, env=env)


@dataclasses.dataclass
class ApplyResult:
    base: str
    version: str
    applied: list[str]
    skipped: list[tuple[str, str]]
    orig_head: str
    head: str


def apply_series(checkout: Path, patches_dir: Path, sources: Sources | None = None) -> ApplyResult:
    checkout = checkout.resolve()
    sources = sources or Sources()
    if not checkout.is_dir():
        raise PatchsetError(checkout, "no such directory")
    if not gitutil.is_git_repo(checkout):
        raise PatchsetError(checkout, "not the top directory of a git checkout")
    version, vfile = detect_version(checkout)
    try:
        base = base_of_version(version, sources.load())
    except PatchsetError as e:
        raise PatchsetError(vfile, e.reason.replace("unsupported torch version", f"unsupported torch version {version}")) from e
    sdir = patches_dir / f"v{base}"
    series = sdir / "series"
    if not series.is_file():
        raise PatchsetError(series, f"missing; generate it with `python -m tools generate --base {base}`")
    names = [n for _, n in read_series_names(series)]
    for n in names:
        if not (sdir / n).is_file():
            raise PatchsetError(sdir / n, f"listed in {series} but missing")
    env = gitutil.user_env()
    if gitutil.git("var", "GIT_COMMITTER_IDENT", cwd=checkout, env=env, check=False).returncode != 0:
        env.update(GIT_COMMITTER_NAME=gitutil.PATCHSET_AUTHOR[0], GIT_COMMITTER_EMAIL=gitutil.PATCHSET_AUTHOR[1])
    git_dir = Path(gitutil.git("rev-parse", "--absolute-git-dir", cwd=checkout, env=env).stdout.strip())
    for busy in ("rebase-apply", "rebase-merge", "MERGE_HEAD", "CHERRY_PICK_HEAD"):
        if (git_dir / busy).exists():
            raise PatchsetError(checkout, f"a git operation is in progress ({git_dir / busy}); finish or abort it first")
    orig = gitutil.rev_parse(checkout, env=env)
    if orig is None:
        raise PatchsetError(checkout, "has no commit yet (HEAD is unborn)")
    dirty = gitutil.status_porcelain(checkout, env=env)
    if dirty:
        shown = ", ".join(l[3:] for l in dirty[:10]) + (f" and {len(dirty) - 10} more" if len(dirty) > 10 else "")
        raise PatchsetError(checkout, f"working tree is not clean ({shown}); commit or stash these first, nothing was changed")
    progress(f"apply: {checkout} is torch {version} ({vfile.name}); series {sdir} ({len(names)} patches)")
    applied, skipped = [], []
    try:
        for i, n in enumerate(names, 1):
            info = read_patch_info(sdir / n)
            why = already_applied(checkout, info, env)
            if why:
                progress(f"apply [{i}/{len(names)}] skip {n}: {why}")
                skipped.append((n, why))
                continue
            r = gitutil.git("am", "--no-3way", "--keep-non-patch", "--quiet", (sdir / n).resolve(), cwd=checkout, env=env, check=False)
            if not r.ok:
                file, reason = gitutil.explain_apply_failure(r.output)
                _restore(checkout, orig, env)
                raise PatchsetError(
                    sdir / n,
                    f"does not apply to {checkout}"
                    + (f" at {file}" if file else "")
                    + f": {reason}; git am aborted and HEAD restored to {orig[:12]}, nothing was changed",
                )
            progress(f"apply [{i}/{len(names)}] applied {n}")
            applied.append(n)
    except BaseException:
        # KeyboardInterrupt or any unexpected failure: same guarantee as a failing patch
        _restore(checkout, orig, env)
        raise
    head = gitutil.rev_parse(checkout, env=env)
    return ApplyResult(base, version, applied, skipped, orig, head)


def _cmd_apply(args) -> int:
    sources = Sources(Path(args.repo_root).resolve()) if args.repo_root else Sources()
    patches_dir = Path(args.patches).resolve() if args.patches else sources.patches_dir
    res = apply_series(Path(args.checkout), patches_dir, sources)
    print(f"torch {res.version}: applied {len(res.applied)}, skipped {len(res.skipped)} (already there)")
    for n, why in res.skipped:
        print(f"  skipped {n}: {why}")
    if res.applied:
        print(f"HEAD {res.orig_head[:12]} -> {res.head[:12]}; to undo: git -C {args.checkout} reset --keep {res.orig_head[:12]}")
    return 0


def register(subparsers) -> None:
    p = subparsers.add_parser(
        "apply",
        help="git am the series for a PyTorch checkout's version onto it",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("checkout", help="top directory of a PyTorch git checkout (or of a pristine base clone)")
    p.add_argument("--patches", metavar="DIR", help="directory holding v<base>/series (default: this repo's patches/)")
    p.add_argument("--repo-root", help=argparse.SUPPRESS)
    p.set_defaults(func=_cmd_apply)
