"""``python -m tools export-pr``: one PR per patch, pasteable as is, against the newest base.

For each upstreamable patch of the base's series (default: the newest base, the closest to upstream ``main``), from the
committed ``patches/v<base>/<name>.patch`` (the file ``check`` verified) and its ``[patch.upstream]`` table:

    <out>/<name>/<name>.patch the PR as one commit in a ``git format-patch`` file (subject, summary, test plan;
                              by --author), upstream test hunks included: ``git am --keep`` it onto a PyTorch checkout
    <out>/<name>/PR.md        title, summary, the upstream test expectations it changes, test plan, headline table
    <out>/repo/               a standalone git clone of the pristine base; branch ``<name>`` holds that commit alone
                              on top of the base, for each patch whose commit the base can hold (below)
    <out>/<name>/files/       for a patch whose ``repo`` is not pytorch/pytorch (no branch): its files at their
                              paths in that repository, module names and relative imports rewritten

Upstream test changes always travel with the PR: ``hooks/<name>/upstream-tests.diff`` holds the patch's hunks to
upstream test files (upstream lines only as context), made once from upstream's files, and each
``[[patch.upstream.test-change]]`` needs its hunk there. The pristine base has no ``test/`` files (a wheel ships
none), so the hunks are written into ``<name>.patch`` next to the commit's own diff and ``git am`` applies them to
upstream's files. A branch needs those files: ``--upstream-checkout DIR`` (a PyTorch source checkout) takes them
from DIR, so the branches' parent is the base plus DIR's versions of them and each branch holds its hunks; without
it, a patch that changes upstream tests gets no branch (export says so), only its ``.patch``.

Nothing is written when a PR would not be pasteable as is: a path that exists only in this repo, a torch
release older than the base, or fork-internal wording in PR.md, the commit message, a line the PR adds (its
upstream test hunks included) or a file exported to another repository is an error naming the file and line
(``tools.prmd``).

A patch with ``[[patch.upstream.diff-pr]]`` tables is also proposed as those smaller PRs, stored diffs against a
package's release, written first (``tools.export_pr_split``); with ``own-pr = false`` they are all its PRs and its
own files stay in the fork (no ``<out>/<name>/``).

What it needs from outside this checkout is checked before anything is written: the base's pristine tree
(``CACHE_DIR/bases/v<base>/``) and, for a patch with a ``[[patch.upstream.diff-pr]]``, the files of that package's
release (``tools.export_pr_split.release_files``: installed here at that version, or its wheel in the cache). On a
fresh machine export-pr fetches what is missing itself, one progress line each: the pristine tree as ``python -m
tools bases --base <base>`` builds it, the package's wheel with ``pip download --no-deps`` into the cache (nothing is
installed). Where a fetch fails (no network), or with ``--no-fetch``, one error names everything missing, each with
the command that fetches it, and nothing is written (exit status 2).

``<out>`` defaults to ``build/export-pr/v<base>/`` and is replaced as a whole on the next export (only if an
earlier export made it). The author defaults to this checkout's ``git config user.name``/``user.email``.
"""

from __future__ import annotations

import dataclasses
import os
import re
from pathlib import Path

from tools import bases as bases_mod
from tools import export_pr_split, fsutil, gitutil
from tools.common import PYTORCH_REPO, PatchMeta, PatchsetError, add_subcommand, progress, version_key
from tools.patchfile import parse_patch, patch_date
from tools.prmd import (ForkPaths, added_lines, export_message, has_table, named_section, numbered, older_releases_re,
                        pasteability_findings, pr_markdown)
from tools.sources import (UPSTREAM_TESTS, Sources, add_repo_root_arg, require_fresh_series, select_bases,
                           sources_from_args)

MARKER = ".export-pr"
_AUTHOR_RE = re.compile(r"^\s*([^<>]*?)\s*<([^<>\s]+@[^<>\s]+)>\s*$")


def without_commands(lines: list[str]) -> list[str]:
    """A headline section without its ``Command:`` paragraphs (a command and its raw results' paths, which name
    this repo's files; the PR's test plan and benchmark say how instead)."""
    out, in_command = [], False
    for line in lines:
        in_command = line.startswith("Command:") or (in_command and line.strip() != "")
        if not in_command:
            out.append(line)
    return out


def parse_author(text: str) -> tuple[str, str]:
    m = _AUTHOR_RE.match(text)
    if not m or not m.group(1):
        raise PatchsetError(f"--author {text}", "must be 'Full Name <email@example.com>'")
    return m.group(1), m.group(2)


# Domains reserved for documentation and tests (RFC 2606): no one can sign a CLA with such an address.
_PLACEHOLDER_DOMAIN_RE = re.compile(r"@(?:[^>\s]*\.)?(?:example|test|invalid|localhost|example\.(?:com|net|org))$", re.I)


def placeholder_author(author: tuple[str, str]) -> bool:
    """Whether ``author``'s address is one a PR cannot be opened with (a reserved domain)."""
    return bool(_PLACEHOLDER_DOMAIN_RE.search(author[1]))


def default_author(root: Path) -> tuple[str, str]:
    """The checkout's git identity (the person proposing the PRs), else the patch set's own identity."""
    got = [gitutil.git("config", key, cwd=root, env=gitutil.user_env(), check=False).stdout.strip()
           for key in ("user.name", "user.email")]
    return (got[0], got[1]) if all(got) else gitutil.PATCHSET_AUTHOR


def upstream_tests_diff(sources: Sources, patch: PatchMeta) -> Path:
    return sources.hooks_dir / patch.name / UPSTREAM_TESTS


def upstream_test_files(sources: Sources, patch: PatchMeta) -> list[str]:
    """The upstream test files ``hooks/<patch>/upstream-tests.diff`` changes (none when there is no such file)."""
    f = upstream_tests_diff(sources, patch)
    if not f.is_file():
        return []
    files = parse_patch(f).files
    for fd in files:
        if fd.kind != "modify" or not fd.path.startswith("test/"):
            raise PatchsetError(f, f"{fd.path}: an upstream-tests diff only modifies upstream files under test/")
    return [fd.path for fd in files]


def _require_upstream(ps_patch: PatchMeta, where: Path) -> None:
    up = ps_patch.upstream
    # a patch whose own files stay in the fork (own-pr = false) needs no PR text for them
    missing = [k for k, v in (("summary", up and (up.summary or not up.own_pr)),
                              ("test-plan", up and (up.test_plan or not up.own_pr)),
                              ("headline", up and up.headline)) if not v]
    if missing:
        raise PatchsetError(f"{where} [[patch]] {ps_patch.name!r}",
                            f"[patch.upstream] lacks {', '.join(missing)}: export-pr writes the PR from these fields")


def _context_commit(repo: Path, pristine: str, checkout: Path, files: list[str], env: dict, ienv: dict) -> str:
    """The base plus the checkout's versions of the upstream test files the PRs change: the parent of every
    branch, so that each test hunk is a modification of upstream's file."""
    gitutil.git("read-tree", pristine, cwd=repo, env=ienv)
    for f in files:
        src = checkout / f
        if not src.is_file():
            raise PatchsetError(src, f"missing: --upstream-checkout {checkout} is not a PyTorch source checkout with {f}")
        sha = gitutil.git("hash-object", "-w", "--no-filters", src.resolve(), cwd=repo, env=env).stdout.strip()
        gitutil.git("update-index", "--add", "--cacheinfo", f"100644,{sha},{f}", cwd=repo, env=ienv)
    tree = gitutil.git("write-tree", cwd=repo, env=ienv).stdout.strip()
    msg = f"upstream test files from {checkout.name}: {', '.join(files)}\n"
    return gitutil.git("commit-tree", tree, "-p", pristine, "-F", "-", cwd=repo, env=env, input=msg).stdout.strip()


_RELATIVE_IMPORT_RE = re.compile(r"^(\s*from )(\.+)([\w.]*)( import )", re.M)


def rewrite_for_repo(text: str, src_path: str, modules: tuple[tuple[str, str], ...]) -> str:
    """A file moved to another repository: relative imports of a ``torch/`` module become absolute (its package
    changes), then each module of ``modules`` is renamed, dotted or as ``from <package> import <module>``."""
    if src_path.startswith("torch/") and src_path.endswith(".py"):
        package = src_path.removesuffix(".py").split("/")[:-1]

        def absolute(m: re.Match[str]) -> str:
            up = len(m.group(2)) - 1
            base = package[: len(package) - up] if up else package
            return f"{m.group(1)}{'.'.join(base + ([m.group(3)] if m.group(3) else []))}{m.group(4)}"

        text = _RELATIVE_IMPORT_RE.sub(absolute, text)
    for old, new in modules:
        o_pkg, _, o_leaf = old.rpartition(".")
        n_pkg, _, n_leaf = new.rpartition(".")
        if o_pkg and n_pkg:
            text = re.sub(rf"\bfrom {re.escape(o_pkg)} import {re.escape(o_leaf)}\b", f"from {n_pkg} import {n_leaf}", text)
        text = re.sub(rf"(?<![\w])(?<!\w\.){re.escape(old)}(?![\w])", new, text)
    return text


def _require_test_hunks(sources: Sources, p: PatchMeta) -> list[str]:
    """The upstream test files the patch's PR changes; every ``[[patch.upstream.test-change]]`` must have its hunk
    stored, since a PR without it fails upstream's CI."""
    up = p.upstream
    assert up is not None
    diff = upstream_tests_diff(sources, p)
    files = upstream_test_files(sources, p)
    if files and up.repo != PYTORCH_REPO:
        raise PatchsetError(diff, f"changes tests of {PYTORCH_REPO}, and the PR of {p.name} is for {up.repo}")
    for c in up.test_changes:
        if c.file not in files:
            raise PatchsetError(f"[[patch.upstream.test-change]] of {p.name} ({c.file}, {c.test})",
                                f"no hunk for {c.file} in {diff}: make it from upstream's file (edit the test in a "
                                f"PyTorch checkout, `git diff > {diff}`)")
    return files


def _with_test_hunks(patch: bytes, diff: Path) -> bytes:
    """A ``git format-patch`` file (no signature: ``FORMAT_PATCH_FLAGS``) with the file sections of ``diff`` added
    after the commit's own, so that ``git am`` applies them in the same commit."""
    if not patch.endswith(b"\n"):
        raise PatchsetError(diff, "the commit's git format-patch output does not end with a newline")
    hunks = diff.read_bytes()
    if not hunks.startswith(b"diff --git "):
        raise PatchsetError(diff, "does not start with a `diff --git` line (make it with `git diff` in a PyTorch checkout)")
    return patch + hunks.rstrip(b"\n") + b"\n"


def _inputs(base: str, selected: list[PatchMeta], cache_dir: Path | None, fetch: bool
            ) -> tuple[Path, dict[str, export_pr_split.ReleaseFiles]]:
    """What export needs from outside this checkout: the base's pristine tree and, per patch with diff PRs, their
    package's release files. Each one missing is fetched when ``fetch`` (one progress line each); whatever is still
    missing then is named, all of it in one error, each with the command that fetches it."""
    missing: list[str] = []
    tree = None
    try:
        tree = bases_mod.require_base_tree(base, cache_dir)
    except PatchsetError:
        why = f"no {bases_mod.base_tree(base, cache_dir)}"
        if fetch:
            progress(f"export-pr: no pristine tree for torch {base} yet; building it as `python -m tools bases "
                     f"--base {base}` does")
            try:
                tree = bases_mod.ensure_base(base, cache_dir)
            except PatchsetError as e:
                why = str(e)
        if tree is None:
            missing.append(f"the pristine tree of torch {base} ({why}): python -m tools bases --base {base}")
    releases = {}
    for p in selected:
        up = p.upstream
        fp = next(iter([*up.diff_prs, *(f for f in up.file_prs if f.diff)]), None) if up else None
        if fp is None:
            continue
        try:
            releases[p.name] = export_pr_split.release_files(fp, cache_dir, fetch)
        except PatchsetError as e:
            missing.append(f"{fp.package} {fp.version}'s files, for the diffs of {p.name}'s PRs ({e.reason}): "
                           f"{export_pr_split.download_command(fp.package, fp.version, cache_dir)} (or install "
                           f"{fp.package}=={fp.version} into this Python)")
    if missing:
        then = ("run export-pr again once the network is back, or each command below" if fetch else
                "run each command below, or export-pr without --no-fetch")
        raise PatchsetError("export-pr", f"{len(missing)} thing(s) it needs are missing, so nothing was written; "
                            f"{then}:\n  - " + "\n  - ".join(missing))
    assert tree is not None
    return tree, releases


def export_prs(
    sources: Sources,
    base: str | None = None,
    out: Path | None = None,
    names: list[str] | None = None,
    cache_dir: Path | None = None,
    patches_dir: Path | None = None,
    author: tuple[str, str] | None = None,
    upstream_checkout: Path | None = None,
    fetch: bool = True,
) -> Path:
    """``fetch``: fetch a missing pristine base or package release (``_inputs``); else name what is missing."""
    ps = sources.load()
    base = select_bases(ps, [base])[0] if base else max(ps.bases, key=version_key)
    series = ps.series(base)
    by_name = {p.name: p for p in ps.patches}
    proposable = [p for p in series if p.category == "upstreamable"]
    for n in names or ():
        if n not in {p.name for p in proposable}:
            raise PatchsetError(f"--patch {n}", f"no upstreamable patch of that name in the {base} series "
                                                f"({', '.join(p.name for p in proposable)})")
    selected = [by_name[n] for n in dict.fromkeys(names)] if names else proposable
    pdir = (patches_dir or sources.patches_dir) / f"v{base}"
    if (pdir / "series").is_file():
        require_fresh_series(pdir, base, sources.patchset_toml)
    readme = sources.root / "benchmarks" / "README.md"
    headlines = {}
    test_hunks = {}
    for p in selected:
        if not (pdir / f"{p.name}.patch").is_file():
            raise PatchsetError(pdir / f"{p.name}.patch", f"missing; run `python -m tools generate --base {base}` first")
        _require_upstream(p, sources.patchset_toml)
        assert p.upstream is not None
        test_hunks[p.name] = _require_test_hunks(sources, p)
        headlines[p.name] = named_section(readme, p.upstream.headline)
        if headlines[p.name] is None:
            raise PatchsetError(readme, f"no heading {p.upstream.headline!r} ([patch.upstream] headline of {p.name})")
    if upstream_checkout is not None and not upstream_checkout.is_dir():
        raise PatchsetError(f"--upstream-checkout {upstream_checkout}", "not a directory")
    out = (out or sources.root / "build" / "export-pr" / f"v{base}").resolve()
    if out.exists() and not (out / MARKER).exists() and (not out.is_dir() or any(out.iterdir())):
        raise PatchsetError(out, "exists and was not made by export-pr; choose another --out or remove it")
    tree, releases = _inputs(base, selected, cache_dir, fetch)
    if author is None:
        author = default_author(sources.root)
        if placeholder_author(author):
            progress(f"export-pr: warning: the commits' author {author[0]} <{author[1]}> (git config) has a placeholder "
                     "address that upstream's CLA check rejects; pass --author 'Your Name <you@your.domain>'")
    fork = ForkPaths.of(sources.root)
    older = older_releases_re(ps.bases, base)
    findings: list[str] = []
    with fsutil.replacing_dir(out) as tmp:
        repo = tmp / "repo"
        progress(f"export-pr v{base}: cloning {tree}")
        gitutil.clone_local(tree, repo, shared=False)
        env = gitutil.isolated_env()
        gitutil.git("remote", "remove", "origin", cwd=repo, env=env)
        pristine = gitutil.rev_parse(repo, env=env)
        ienv = gitutil.isolated_env(extra={"GIT_INDEX_FILE": str(tmp / "pr.index")})
        parent = pristine
        test_files = sorted({f for files in test_hunks.values() for f in files})
        if upstream_checkout is not None and test_files:
            parent = _context_commit(repo, pristine, upstream_checkout.resolve(), test_files, env, ienv)
        for i, p in enumerate(selected, 1):
            up = p.upstream
            assert up is not None
            deps = [by_name[n] for n in up.depends_on if n in by_name]
            # [[patch.upstream.diff-pr]]: written first; the patch's own PR depends on them
            diff_prs, found = export_pr_split.export_diff_prs(sources.root, p, tmp, deps, fork, older,
                                                              releases.get(p.name))
            findings += found
            findings += export_pr_split.export_file_prs(sources.root, p, tmp, fork, releases.get(p.name))
            if not up.own_pr:
                progress(f"export-pr v{base}: [{i}/{len(selected)}] {p.name}: its PRs are "
                         f"{', '.join(m.name for m in diff_prs)}; its own files stay in the fork (own-pr = false)")
                continue
            p = dataclasses.replace(p, subject=up.title or p.subject)  # the PR's title and commit subject
            patch_file = (pdir / f"{p.name}.patch").resolve()
            gitutil.git("read-tree", parent, cwd=repo, env=ienv)
            r = gitutil.git("apply", "--cached", patch_file, cwd=repo, env=ienv, check=False)
            if not r.ok:
                raise PatchsetError(patch_file, f"does not apply alone on pristine torch {base}: {gitutil.apply_failure_text(r.output)}")
            d = tmp / p.name
            d.mkdir()
            message = export_message(p)
            files: list[tuple[str, str]] = []
            if up.repo == PYTORCH_REPO:
                diff = upstream_tests_diff(sources, p).resolve()
                # the hunks go into the commit where upstream's test files are at hand, else next to it in the .patch
                in_commit = bool(test_hunks[p.name]) and upstream_checkout is not None
                if in_commit:
                    r = gitutil.git("apply", "--cached", diff, cwd=repo, env=ienv, check=False)
                    if not r.ok:
                        raise PatchsetError(diff, f"does not apply to the test files of {upstream_checkout}: "
                                                  f"{gitutil.apply_failure_text(r.output)}")
                t = gitutil.git("write-tree", cwd=repo, env=ienv).stdout.strip()
                penv = gitutil.isolated_env(date=patch_date(p), author=author)
                commit = gitutil.git("commit-tree", t, "-p", parent, "-F", "-", cwd=repo, env=penv, input=message).stdout.strip()
                patch_bytes = gitutil.format_patch(repo, commit)
                if test_hunks[p.name] and not in_commit:
                    patch_bytes = _with_test_hunks(patch_bytes, diff)
                    what = (f"{p.name}/{p.name}.patch, no branch for {p.name} (its upstream test hunks need upstream's "
                            "test files: --upstream-checkout)")
                else:
                    gitutil.git("update-ref", f"refs/heads/{p.name}", commit, cwd=repo, env=env)
                    what = f"{p.name}/{p.name}.patch, branch {p.name} ({commit[:12]})"
                (d / f"{p.name}.patch").write_bytes(patch_bytes)
                added = added_lines(patch_bytes.decode())
            else:
                _export_files(repo, ienv, parent, p, d, files)
                export_pr_split.finish_files(d / "files", p)
                _tidy_imports(d / "files", p, sources.root)
                stray = sorted({f.relative_to(d / "files").as_posix() for f in (d / "files").rglob("*")
                                if not f.is_dir()} - {t for t, _ in files})
                if stray:
                    raise PatchsetError(d / "files", f"holds files that are not the PR's: {', '.join(stray)}")
                added = {t: numbered((d / "files" / t).read_text()) for t, _ in files}
                what = f"{len(files)} files for {up.repo} in {p.name}/files/"
            text = pr_markdown(p, without_commands(headlines[p.name] or []), [*diff_prs, *deps], files)
            (d / "PR.md").write_text(text)
            findings += pasteability_findings(f"{p.name}/PR.md", numbered(text), fork, older)
            findings += pasteability_findings(f"{p.name}: commit message", numbered(message), fork, older)
            for path, lines in added.items():
                findings += pasteability_findings(f"{p.name}: {path}", lines, fork, older)
            if not has_table(headlines[p.name] or []):
                progress(f"warning: {p.name}: the headline section {up.headline!r} of {readme.name} has no table yet")
            progress(f"export-pr v{base}: [{i}/{len(selected)}] {what}, {p.name}/PR.md")
        if findings:
            raise PatchsetError("export-pr", f"{len(findings)} line(s) would not survive a reviewer; nothing was "
                                "written:\n  " + "\n  ".join(findings))
        (tmp / MARKER).write_text(f"exported by python -m tools export-pr from {pdir}\n")
        (tmp / "pr.index").unlink(missing_ok=True)
    progress(f"export-pr: made against torch {base}; rebase each branch onto upstream main before opening its PR")
    return out


def _export_files(repo: Path, ienv: dict, parent: str, p: PatchMeta, d: Path, files: list[tuple[str, str]]) -> None:
    """A patch for another repository: its files at their paths there (``[patch.upstream] paths``), rewritten
    (``rewrite_for_repo``). Only patches that add files can go elsewhere: a hook belongs to PyTorch."""
    up = p.upstream
    assert up is not None
    changed = gitutil.git("diff", "--cached", "--name-status", "--no-renames", parent, cwd=repo, env=ienv).stdout.split("\n")
    mapping = dict(up.paths)
    for line in filter(None, changed):
        status, path = line.split("\t", 1)
        if status != "A":
            raise PatchsetError(f"[patch.upstream] of {p.name}", f"{path} is an upstream PyTorch file; a PR for {up.repo} can only add files")
        target = mapping[path]
        text = gitutil.git("show", f":{path}", cwd=repo, env=ienv).stdout
        text = rewrite_for_repo(text, path, up.modules)
        dest = d / "files" / target
        dest.parent.mkdir(parents=True, exist_ok=True)
        dest.write_text(text)
        files.append((target, "test" if path.startswith("test/") else "module"))


def find_ruff(root: Path) -> list[str] | None:
    """How to run ruff: the running interpreter's (``-m ruff``), else the project's environment's
    (``<root>/.venv/bin/ruff``, requirements-dev.txt pins it), else ruff on PATH; None when there is none."""
    import importlib.util
    import shutil
    import sys

    if importlib.util.find_spec("ruff") is not None:
        return [sys.executable, "-m", "ruff"]
    venv = root / ".venv" / "bin" / "ruff"
    if venv.is_file() and os.access(venv, os.X_OK):
        return [str(venv)]
    on_path = shutil.which("ruff")
    return [on_path] if on_path else None


def _tidy_imports(root: Path, p: PatchMeta, repo_root: Path) -> None:
    """Files moved to another repository have new absolute imports: sort them and format the files (ruff's
    isort rules and formatter, defaults, run in the files' root so that their package is first-party; no cache,
    so nothing but the files is left there). Without ruff, a warning says that it is left to do."""
    import subprocess

    ruff = find_ruff(repo_root)
    if ruff is None:
        progress(f"warning: {p.name}: ruff is not installed here, in {repo_root / '.venv'} or on PATH: sort the "
                 f"imports of {root} (ruff check --select I --fix; ruff format) before proposing it")
        return
    for cmd in (["check", "--isolated", "--no-cache", "--select", "I", "--fix", "--quiet", "."],
                ["format", "--isolated", "--no-cache", "--quiet", "."]):
        r = subprocess.run([*ruff, *cmd], cwd=root, capture_output=True, text=True, check=False)
        if r.returncode:
            raise PatchsetError(root, f"ruff {cmd[0]} failed: {(r.stdout + r.stderr).strip()}")


def _cmd_export_pr(args) -> int:
    sources = sources_from_args(args)
    author = parse_author(args.author) if args.author else None
    checkout = Path(args.upstream_checkout) if args.upstream_checkout else None
    out = export_prs(sources, args.base, Path(args.out) if args.out else None, args.patch, author=author,
                     upstream_checkout=checkout, fetch=not args.no_fetch)
    print(out)
    print(f"each PR: git am --keep {out}/<patch-name>/<patch-name>.patch onto a PyTorch checkout; "
          f"branches are in {out / 'repo'}: git -C {out / 'repo'} push <your-fork> <patch-name>")
    return 0


def register(subparsers) -> None:
    p = add_subcommand(subparsers, "export-pr", "one upstream PR (branch, .patch, PR.md) per patch", __doc__, _cmd_export_pr)
    p.add_argument("--base", metavar="X.Y.Z", help="base to export from (default: the newest base)")
    p.add_argument("--out", metavar="DIR", help="output directory (default: build/export-pr/v<base>/)")
    p.add_argument("--patch", action="append", metavar="NAME", help="only this patch (repeatable)")
    p.add_argument("--author", metavar="'NAME <EMAIL>'", help="author and committer of the PR commits (default: git config user.name/user.email)")
    p.add_argument("--upstream-checkout", metavar="DIR",
                   help="a PyTorch source checkout: the upstream test files the patches change are taken from it, so "
                        "that a patch with upstream test hunks gets a branch too (its .patch carries them either way)")
    p.add_argument("--no-fetch", action="store_true",
                   help="download nothing: where the pristine base or a diff PR's package release is missing, name "
                        "each with the command that fetches it and stop (default: fetch them into the cache)")
    add_repo_root_arg(p)
