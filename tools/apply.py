"""``python -m tools apply /path/to/pytorch``: apply the series for the checkout's torch version as commits.

The version comes from ``version.txt`` (a PyTorch source checkout, e.g. ``2.13.0a0``) or else from
``torch/version.py`` (a pristine base tree, an unpacked wheel in git). The checkout must be clean: no
staged, modified or untracked (non-ignored) files; submodules are not looked at, since no patch touches one.
The series must be what ``install`` and ``wheel`` accept too: not older than its sources (refused: run
``generate``), and a series that differs from the committed one is applied with a warning (``check`` has not
vouched for it).

The checkout is not touched until the whole series has applied. The patches are ``git am``-ed in a temporary
linked worktree of the checkout (detached at its HEAD, sparse: only the files the series touches are checked out,
so it costs well under a second on a full PyTorch checkout); when every patch is in, the checkout is
fast-forwarded to the result (``git read-tree -m -u`` of the files that changed, then ``HEAD`` moved with
``git update-ref``, one reflog entry). On any failure, Ctrl-C or SIGTERM (``tools/interrupt.py``: git itself
never gets the signal, and the fast-forward is a commit step that is rolled back whole) the worktree and the
temporary directory are removed and the checkout is as it was: HEAD, refs and reflogs, index (byte for byte),
every file and its mtime, no ``ORIG_HEAD``, no ``.git/rebase-apply``; an interrupted run prints "interrupted;
nothing changed". What does remain: the git objects of the attempt (unreferenced; ``git gc`` removes them).

Each patch is ``git am``-ed (no 3-way merge, no fuzz) unless it is already there, which is recognised three
ways and reported:
  * the patch reverse-applies cleanly (its change is present verbatim);
  * its ``Upstream-Status: Submitted <PR url>`` appears as ``Pull Request resolved: <url>`` in the
    checkout's history (PyTorch's merge bot writes that line; PyTorch/XLA's cond_patch.py does the same);
  * every file of it is there, each one checked on its own (it reverse-applies file by file).
A patch is "already there" only if all of it is. One that is there only in part (for example the files it adds,
but not its hook in an upstream file) is applied for the rest: ``git am --exclude`` of the files already there,
one commit with the patch's message, and the output names both parts. A file of it that is neither there nor
applies is a failure as usual.

``--base X.Y.Z`` uses that base's series whatever the checkout's version says (a fork tracking main, a
nightly, a release we have no series for); the output says which version was found and which series used.
A failure names every file with a hunk that does not match, says which series matches the checkout's own
version when ``--base`` picked another one, and suggests ``--3way`` for a checkout with its own edits.

``--3way`` is for a checkout with its own edits in the files we touch (a fork). A patch that does not apply
as it is gets ``git am --3way``: git merges the patch into the file using the pristine blobs that the
patch's ``index`` lines name (the series are made with ``--full-index``). A real PyTorch clone has them
(fetch the release tag); a checkout without one is refused naming the patch, the file and the blob. On a
conflict every conflicting hunk is reported (file, line range in the merged file, reason).
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import re
import shutil
import tempfile
from pathlib import Path

from tools import gitutil, interrupt
from tools.common import PatchsetError, add_subcommand, base_of_version, progress
from tools.fsutil import FileSnapshot
from tools.patchfile import Patch, parse_patch
from tools.seriesfile import read_series, series_state
from tools.sources import Sources, add_repo_root_arg, fresh_series_dir, select_bases, sources_from_args
from tools.threeway import ConflictError, conflict_hunks, missing_base_blobs, series_preimages

_VERSION_PY_RE = re.compile(r"""^__version__\s*=\s*['"]([^'"]+)['"]""", re.M)
_PR_RESOLVED = "Pull Request resolved: "
UNTOUCHED = "nothing in the checkout was touched (HEAD, index, files and their mtimes as they were)"


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


def _present(tree: Path, patch: Patch, env: dict, path: str | None = None) -> bool:
    """Does (the part of) ``patch`` (for ``path``) reverse-apply to the work tree of ``tree``?"""
    inc = [f"--include={path}"] if path else []
    return gitutil.git("apply", "--check", "--reverse", *inc, patch.path.resolve(), cwd=tree, env=env, check=False).ok


def already_applied(tree: Path, patch: Patch, env: dict) -> tuple[str | None, list[str]]:
    """(why the whole patch is already in the work tree of ``tree``, or None; the files of it that are there when
    only some are: apply excludes them and applies the rest)."""
    if _present(tree, patch, env):
        return "its change is already there (the patch reverse-applies)", []
    url = patch.header.submitted_url
    if url:
        r = gitutil.git("log", "-1", "--format=%h", "-F", f"--grep={_PR_RESOLVED}{url}", "HEAD", cwd=tree, env=env, check=False)
        if r.ok and r.stdout.strip():
            return f"upstream merged {url} (commit {r.stdout.strip()})", []
    there = [fd.path for fd in patch.files if _present(tree, patch, env, fd.path)]
    if there and len(there) == len(patch.files):
        return f"every file of it is already there ({', '.join(there)})", []
    return None, there


@dataclasses.dataclass
class ApplyResult:
    base: str
    version: str
    applied: list[str]
    skipped: list[tuple[str, str]]
    orig_head: str
    head: str
    merged: list[str] = dataclasses.field(default_factory=list)  # applied by three-way merge
    partial: list[tuple[str, list[str], list[str]]] = dataclasses.field(default_factory=list)  # (patch, there, applied)


def _sparse_env(env: dict) -> dict:
    """``env`` plus core.sparseCheckout for every git command in the scratch worktree (config by environment: the
    user's .git/config is never written)."""
    n = int(env.get("GIT_CONFIG_COUNT", "0") or 0)
    return {**env, "GIT_CONFIG_COUNT": str(n + 2),
            f"GIT_CONFIG_KEY_{n}": "core.sparseCheckout", f"GIT_CONFIG_VALUE_{n}": "true",
            f"GIT_CONFIG_KEY_{n + 1}": "core.sparseCheckoutCone", f"GIT_CONFIG_VALUE_{n + 1}": "false"}


def _sparse_pattern(path: str) -> str:
    return "/" + re.sub(r"([\\*?\[\]!# ])", r"\\\1", path)


@contextlib.contextmanager
def scratch_worktree(checkout: Path, commit: str, paths: list[str], env: dict):
    """A temporary linked worktree of ``checkout``, detached at ``commit``, with only ``paths`` checked out.
    Yields (its directory, the env for git there). Removed on exit, with its admin dir under ``.git/worktrees``
    (and that directory itself when this made it)."""
    common = Path(gitutil.git("rev-parse", "--git-common-dir", cwd=checkout, env=env).stdout.strip())
    common = common if common.is_absolute() else (checkout / common).resolve()
    had_worktrees = (common / "worktrees").exists()
    tmp = wt = admin = None

    def remove() -> None:
        if wt is not None:
            r = gitutil.git("worktree", "remove", "--force", "--force", wt, cwd=checkout, env=env, check=False)
            if not r.ok:
                if admin is not None:
                    shutil.rmtree(admin, ignore_errors=True)
                gitutil.git("worktree", "prune", cwd=checkout, env=env, check=False)
        if tmp is not None:
            shutil.rmtree(tmp, ignore_errors=True)
        if not had_worktrees:
            with contextlib.suppress(OSError):
                (common / "worktrees").rmdir()

    try:
        with interrupt.deferred():  # made whole or not at all, so that remove() knows what to remove
            interrupt.on_interrupt(remove)  # in case a signal pre-empts the finally below
            tmp = Path(tempfile.mkdtemp(prefix="patchset-apply-"))
            wt = tmp / "worktree"
            gitutil.git("-c", "core.hooksPath=/dev/null", "worktree", "add", "--no-checkout", "--detach", wt, commit,
                        cwd=checkout, env=env)
            admin = Path(gitutil.git("rev-parse", "--absolute-git-dir", cwd=wt, env=env).stdout.strip())
            (admin / "info").mkdir(exist_ok=True)
            (admin / "info" / "sparse-checkout").write_text("".join(_sparse_pattern(p) + "\n" for p in paths))
            wenv = _sparse_env(env)
            gitutil.git("read-tree", "-m", "-u", "HEAD", cwd=wt, env=wenv)
        yield wt, wenv
    finally:
        with interrupt.deferred():  # a second Ctrl-C does not cut the cleanup short
            remove()
            interrupt.done(remove)


def _fast_forward(checkout: Path, orig: str, new: str, env: dict, msg: str) -> None:
    """Move the clean ``checkout`` from ``orig`` to its descendant ``new``: only the files that differ are
    written, HEAD (its branch) moves in one reflog entry. This is apply's commit step: it runs with SIGINT/SIGTERM
    deferred (``tools.interrupt``); on any failure, or a signal that came meanwhile, everything it wrote (work-tree
    files, the index, HEAD, the branch and their reflogs) is put back byte for byte, mtimes too."""
    git_dir = Path(gitutil.git("rev-parse", "--absolute-git-dir", cwd=checkout, env=env).stdout.strip())
    common = Path(gitutil.git("rev-parse", "--git-common-dir", cwd=checkout, env=env).stdout.strip())
    common = common if common.is_absolute() else (checkout / common).resolve()
    changed = gitutil.git("diff", "--name-only", "-z", "--no-renames", orig, new, cwd=checkout, env=env).stdout
    branch = gitutil.git("symbolic-ref", "-q", "HEAD", cwd=checkout, env=env, check=False).stdout.strip()
    index = Path(env.get("GIT_INDEX_FILE") or git_dir / "index")
    index = index if index.is_absolute() else checkout / index
    git_files = [index, git_dir / "HEAD", git_dir / "logs" / "HEAD"]
    if branch:
        git_files += [common / branch, common / "logs" / branch]
    with interrupt.deferred():
        snap = FileSnapshot(git_files + [checkout / p for p in changed.split("\0") if p])
        try:
            # stat info first (the read-only `status` above does not write it): read-tree refuses stale entries
            gitutil.git("update-index", "-q", "--refresh", cwd=checkout, env=env, check=False)
            gitutil.git("read-tree", "-m", "-u", orig, new, cwd=checkout, env=env)
            interrupt.step()
            gitutil.git("update-ref", "-m", msg, "HEAD", new, orig, cwd=checkout, env=env)
            interrupt.step()
            interrupt.check()  # a signal during the commit step: roll it back
            interrupt.commit_point()
        except BaseException:
            snap.restore()
            raise


def _hints(version: str, vfile: Path, base: str, forced: bool, three_way: bool, ps, patches_dir: Path) -> str:
    out = []
    if forced:
        try:
            own = base_of_version(version, ps)
        except PatchsetError:
            own = None
        if own and own != base and (patches_dir / f"v{own}" / "series").is_file():
            out.append(f"this checkout is torch {version} ({vfile.name}), and {patches_dir / f'v{own}'} is the series "
                       f"made for it: drop --base (or use --base {own})")
    if not three_way:
        out.append("if the checkout has its own edits in these files (a fork, a newer main), --3way merges each "
                   "patch with them")
    return "".join(f"; {h}" for h in out)


def apply_series(checkout: Path, patches_dir: Path, sources: Sources | None = None, *, base: str | None = None,
                 three_way: bool = False, warn=progress) -> ApplyResult:
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
            raise PatchsetError(vfile, e.reason + "; to apply one anyway: --base X.Y.Z (with --3way if the files "
                                "differ from that base)") from e
    sdir = patches_dir / f"v{base}"
    if not (sdir / "series").is_file():
        raise PatchsetError(sdir / "series", f"missing; generate it with `python -m tools generate --base {base}`")
    fresh_series_dir(patches_dir, base, sources.patchset_toml)  # refuses a series older than its sources
    state, detail = series_state(sdir)
    if state == "modified":
        warn(f"warning: {sdir}: the series {detail}; `python -m tools check` has not vouched for it")
    names = [p.name for p in read_series(sdir)]
    patches = [parse_patch(sdir / n) for n in names]
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
    applied, skipped, merged_names, partial = [], [], [], []
    paths = sorted({fd.path for p in patches for fd in p.files})
    with scratch_worktree(checkout, orig, paths, env) as (wt, wenv):
        pre = series_preimages(wt, sdir, names, wenv) if three_way else None
        for i, (n, patch) in enumerate(zip(names, patches), 1):
            why, there = already_applied(wt, patch, wenv)
            if why:
                progress(f"apply [{i}/{len(names)}] skip {n}: {why}")
                skipped.append((n, why))
                continue
            path = (sdir / n).resolve()
            excl = [f"--exclude={f}" for f in there]
            merged = False
            if three_way and not gitutil.git("apply", "--check", *excl, path, cwd=wt, env=wenv, check=False).ok:
                missing = [(f, b) for f, b in missing_base_blobs(wt, pre, n, wenv) if f not in there]
                if missing:
                    f, blob = missing[0]
                    raise PatchsetError(
                        sdir / n,
                        f"does not apply to {checkout} as it is, and --3way needs the pristine torch {base} version of {f} "
                        f"(blob {blob[:12]}), which this checkout lacks"
                        + (f" (also: {', '.join(x for x, _ in missing[1:])})" if len(missing) > 1 else "")
                        + f"; fetch the v{base} release into it (a PyTorch clone has it); {UNTOUCHED}",
                    )
                merged = True
            r = gitutil.git("am", "--3way" if merged else "--no-3way", "--keep-non-patch", "--quiet", *excl, path,
                            cwd=wt, env=wenv, check=False)
            if not r.ok and merged:
                hunks = conflict_hunks(wt, r.output, wenv)
                raise ConflictError(
                    sdir / n,
                    f"three-way merge onto {checkout} conflicts in {len(hunks)} hunk(s) ({UNTOUCHED}):\n  "
                    + "\n  ".join(map(str, hunks)),
                    hunks,
                )
            if not r.ok:
                files, reason = gitutil.explain_apply_failure_files(r.output)
                where = f" in {len(files)} files ({', '.join(files)})" if len(files) > 1 else f" at {files[0]}" if files else ""
                raise PatchsetError(
                    sdir / n,
                    f"does not apply to {checkout}{where}: {reason}"
                    + _hints(version, vfile, base, forced, three_way, ps, patches_dir) + f"; {UNTOUCHED}",
                )
            rest = [fd.path for fd in patch.files if fd.path not in there]
            how = " (three-way merge)" if merged else ""
            if there:
                how += f": {', '.join(there)} already there; applied the rest ({', '.join(rest)})"
                partial.append((n, there, rest))
            progress(f"apply [{i}/{len(names)}] applied {n}{how}")
            applied.append(n)
            if merged:
                merged_names.append(n)
        head = gitutil.rev_parse(wt, env=wenv)
    if head != orig:
        _fast_forward(checkout, orig, head, env, f"patchset apply: {len(applied)} patch(es) of the v{base} series")
    return ApplyResult(base, version, applied, skipped, orig, head, merged_names, partial)


def _cmd_apply(args) -> int:
    sources = sources_from_args(args)
    patches_dir = Path(args.patches).resolve() if args.patches else sources.patches_dir
    res = apply_series(Path(args.checkout), patches_dir, sources, base=args.base, three_way=args.three_way)
    print(f"torch {res.version}{f' (series v{res.base}, --base)' if args.base else ''}: applied {len(res.applied)}, skipped {len(res.skipped)} (already there)")
    for n, why in res.skipped:
        print(f"  skipped {n}: {why}")
    for n in res.merged:
        print(f"  {n}: applied by three-way merge with this checkout's own changes")
    for n, there, rest in res.partial:
        print(f"  {n}: partly there already ({', '.join(there)}); applied the rest ({', '.join(rest)})")
    if res.applied:
        print(f"HEAD {res.orig_head[:12]} -> {res.head[:12]}; to undo: git -C {args.checkout} reset --keep {res.orig_head[:12]}")
    return 0


def register(subparsers) -> None:
    p = add_subcommand(subparsers, "apply", "git am the series for a PyTorch checkout's version onto it", __doc__, _cmd_apply)
    p.set_defaults(atomic=True)  # tools.interrupt: SIGINT/SIGTERM leave the checkout as it was
    p.add_argument("checkout", help="top directory of a PyTorch git checkout (or of a pristine base clone)")
    p.add_argument("--patches", metavar="DIR", help="directory holding v<base>/series (default: this repo's patches/)")
    p.add_argument("--base", metavar="X.Y.Z", help="use this base's series whatever the checkout's version says")
    p.add_argument("--3way", dest="three_way", action="store_true", help="three-way merge a patch that does not apply as it is (a checkout with its own edits)")
    add_repo_root_arg(p)
