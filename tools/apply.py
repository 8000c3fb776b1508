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

``--base X.Y.Z`` uses that base's series whatever the checkout's version says (a fork tracking main, a
nightly, a release we have no series for); the output says which version was found and which series used.

``--3way`` is for a checkout with its own edits in the files we touch (a fork). A patch that does not apply
as it is gets ``git am --3way``: git merges the patch into the file using the pristine blobs that the
patch's ``index`` lines name (the series are made with ``--full-index``). A real PyTorch clone has them
(fetch the release tag); a checkout without one is refused naming the patch, the file and the blob. On a
conflict every conflicting hunk is reported (file, line range in the merged file, reason), then the run is
undone as above: HEAD, index and work tree as they were, no ``.git/rebase-apply`` left.
"""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

from tools import gitutil
from tools.common import PatchsetError, add_subcommand, base_of_version, progress
from tools.patchfile import Patch, parse_patch
from tools.seriesfile import read_series
from tools.sources import Sources, add_repo_root_arg, select_bases, sources_from_args
from tools.threeway import ConflictError, conflict_hunks, missing_base_blobs, series_preimages

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


def already_applied(checkout: Path, patch: Patch, env: dict) -> str | None:
    """Why the patch's change is already in the checkout, or None."""
    r = gitutil.git("apply", "--check", "--reverse", patch.path.resolve(), cwd=checkout, env=env, check=False)
    if r.ok:
        return "its change is already there (the patch reverse-applies)"
    url = patch.header.submitted_url
    if url:
        r = gitutil.git("log", "-1", "--format=%h", "-F", f"--grep={_PR_RESOLVED}{url}", "HEAD", cwd=checkout, env=env, check=False)
        if r.ok and r.stdout.strip():
            return f"upstream merged {url} (commit {r.stdout.strip()})"
    new_files = patch.new_files
    if new_files:
        for p, sha in new_files.items():
            r = gitutil.git("rev-parse", "--verify", "--quiet", f"HEAD:{p}", cwd=checkout, env=env, check=False)
            if not r.ok or r.stdout.strip() != sha:
                return None
        return f"the files it adds ({', '.join(new_files)}) are already there with identical content"
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
    merged: list[str] = dataclasses.field(default_factory=list)  # applied by three-way merge


def apply_series(checkout: Path, patches_dir: Path, sources: Sources | None = None, *, base: str | None = None, three_way: bool = False) -> ApplyResult:
    checkout = checkout.resolve()
    sources = sources or Sources()
    if not checkout.is_dir():
        raise PatchsetError(checkout, "no such directory")
    if not gitutil.is_git_repo(checkout):
        raise PatchsetError(checkout, "not the top directory of a git checkout")
    version, vfile = detect_version(checkout)
    ps = sources.load()
    forced = base is not None
    if base is not None:
        select_bases(ps, [base])
    else:
        try:
            base = base_of_version(version, ps)
        except PatchsetError as e:
            raise PatchsetError(
                vfile,
                e.reason.replace("unsupported torch version", f"unsupported torch version {version}")
                + "; to apply one anyway: --base X.Y.Z (with --3way if the files differ from that base)",
            ) from e
    sdir = patches_dir / f"v{base}"
    if not (sdir / "series").is_file():
        raise PatchsetError(sdir / "series", f"missing; generate it with `python -m tools generate --base {base}`")
    names = [p.name for p in read_series(sdir)]
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
    said = f"torch {version} ({vfile.name})"
    if forced:
        said += f"; using the v{base} series as --base asks"
    progress(f"apply: {checkout} is {said}; series {sdir} ({len(names)} patches{', three-way' if three_way else ''})")
    applied, skipped, merged_names = [], [], []
    pre = series_preimages(checkout, sdir, names, env) if three_way else None
    try:
        for i, n in enumerate(names, 1):
            why = already_applied(checkout, parse_patch(sdir / n), env)
            if why:
                progress(f"apply [{i}/{len(names)}] skip {n}: {why}")
                skipped.append((n, why))
                continue
            path = (sdir / n).resolve()
            merged = False
            if three_way and not gitutil.git("apply", "--check", path, cwd=checkout, env=env, check=False).ok:
                missing = missing_base_blobs(checkout, pre, n, env)
                if missing:
                    _restore(checkout, orig, env)
                    f, blob = missing[0]
                    raise PatchsetError(
                        sdir / n,
                        f"does not apply to {checkout} as it is, and --3way needs the pristine torch {base} version of {f} "
                        f"(blob {blob[:12]}), which this checkout lacks"
                        + (f" (also: {', '.join(x for x, _ in missing[1:])})" if len(missing) > 1 else "")
                        + f"; fetch the v{base} release into it (a PyTorch clone has it); HEAD restored to {orig[:12]}, nothing was changed",
                    )
                merged = True
            r = gitutil.git("am", "--3way" if merged else "--no-3way", "--keep-non-patch", "--quiet", path, cwd=checkout, env=env, check=False)
            if not r.ok and merged:
                hunks = conflict_hunks(checkout, r.output, env)
                _restore(checkout, orig, env)
                raise ConflictError(
                    sdir / n,
                    f"three-way merge onto {checkout} conflicts in {len(hunks)} hunk(s) (git am aborted, HEAD restored to "
                    f"{orig[:12]}, nothing was changed):\n  " + "\n  ".join(map(str, hunks)),
                    hunks,
                )
            if not r.ok:
                file, reason = gitutil.explain_apply_failure(r.output)
                _restore(checkout, orig, env)
                raise PatchsetError(
                    sdir / n,
                    f"does not apply to {checkout}"
                    + (f" at {file}" if file else "")
                    + f": {reason}; git am aborted and HEAD restored to {orig[:12]}, nothing was changed",
                )
            progress(f"apply [{i}/{len(names)}] applied {n}{' (three-way merge)' if merged else ''}")
            applied.append(n)
            if merged:
                merged_names.append(n)
    except BaseException:
        # KeyboardInterrupt or any unexpected failure: same guarantee as a failing patch
        _restore(checkout, orig, env)
        raise
    head = gitutil.rev_parse(checkout, env=env)
    return ApplyResult(base, version, applied, skipped, orig, head, merged_names)


def _cmd_apply(args) -> int:
    sources = sources_from_args(args)
    patches_dir = Path(args.patches).resolve() if args.patches else sources.patches_dir
    res = apply_series(Path(args.checkout), patches_dir, sources, base=args.base, three_way=args.three_way)
    print(f"torch {res.version}{f' (series v{res.base}, --base)' if args.base else ''}: applied {len(res.applied)}, skipped {len(res.skipped)} (already there)")
    for n, why in res.skipped:
        print(f"  skipped {n}: {why}")
    for n in res.merged:
        print(f"  {n}: applied by three-way merge with this checkout's own changes")
    if res.applied:
        print(f"HEAD {res.orig_head[:12]} -> {res.head[:12]}; to undo: git -C {args.checkout} reset --keep {res.orig_head[:12]}")
    return 0


def register(subparsers) -> None:
    p = add_subcommand(subparsers, "apply", "git am the series for a PyTorch checkout's version onto it", __doc__, _cmd_apply)
    p.add_argument("checkout", help="top directory of a PyTorch git checkout (or of a pristine base clone)")
    p.add_argument("--patches", metavar="DIR", help="directory holding v<base>/series (default: this repo's patches/)")
    p.add_argument("--base", metavar="X.Y.Z", help="use this base's series whatever the checkout's version says")
    p.add_argument("--3way", dest="three_way", action="store_true", help="three-way merge a patch that does not apply as it is (a checkout with its own edits)")
    add_repo_root_arg(p)
