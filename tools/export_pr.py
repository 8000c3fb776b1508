"""``python -m tools export-pr``: one ready-to-propose upstream unit per patch.

For each patch of the base's series (default: the newest base, the closest to upstream ``main``), from the
committed ``patches/v<base>/<name>.patch`` (the file ``check`` verified):

    <out>/repo/               a standalone git clone of the pristine base; branch ``<name>`` holds the patch
                              alone on top of the base, as one commit without the fork's trailers, by --author
    <out>/<name>/<name>.patch the same commit as a ``git format-patch`` file
    <out>/<name>/PR.md        title, summary, why, changed files, test plan, measured table (``tools.prmd``)

``<out>`` defaults to ``build/export-pr/v<base>/`` and is replaced as a whole on the next export (only if an
earlier export made it). The author defaults to this checkout's ``git config user.name``/``user.email``.
"""

from __future__ import annotations

import re
from pathlib import Path

from tools import bases as bases_mod
from tools import fsutil, gitutil
from tools.common import PatchsetError, add_subcommand, progress, version_key
from tools.generate import upstream_git_version
from tools.patchfile import commit_message, patch_date
from tools.prmd import benchmark_section, pr_markdown
from tools.sources import Sources, add_repo_root_arg, select_bases, sources_from_args

MARKER = ".export-pr"
_AUTHOR_RE = re.compile(r"^\s*([^<>]*?)\s*<([^<>\s]+@[^<>\s]+)>\s*$")


def parse_author(text: str) -> tuple[str, str]:
    m = _AUTHOR_RE.match(text)
    if not m or not m.group(1):
        raise PatchsetError(f"--author {text}", "must be 'Full Name <email@example.com>'")
    return m.group(1), m.group(2)


def default_author(root: Path) -> tuple[str, str]:
    """The checkout's git identity (the person proposing the PRs), else the patch set's own identity."""
    got = [gitutil.git("config", key, cwd=root, env=gitutil.user_env(), check=False).stdout.strip()
           for key in ("user.name", "user.email")]
    return (got[0], got[1]) if all(got) else gitutil.PATCHSET_AUTHOR


def _numstat(repo: Path, a: str, b: str) -> list[tuple[str, str, str, bool]]:
    env = gitutil.isolated_env()
    added = set(gitutil.git("diff", "--name-only", "--diff-filter=A", a, b, cwd=repo, env=env).stdout.split())
    rows = [line.split("\t", 2) for line in gitutil.git("diff", "--numstat", "--no-renames", a, b, cwd=repo, env=env).stdout.splitlines()]
    return [(x, y, path, path in added) for x, y, path in rows]


def export_prs(
    sources: Sources,
    base: str | None = None,
    out: Path | None = None,
    names: list[str] | None = None,
    cache_dir: Path | None = None,
    patches_dir: Path | None = None,
    author: tuple[str, str] | None = None,
) -> Path:
    ps = sources.load()
    base = select_bases(ps, [base])[0] if base else max(ps.bases, key=version_key)
    series = ps.series(base)
    by_name = {p.name: p for p in series}
    for n in names or ():
        if n not in by_name:
            raise PatchsetError(f"--patch {n}", f"no such patch in the {base} series ({', '.join(by_name)})")
    selected = [by_name[n] for n in dict.fromkeys(names)] if names else series
    pdir = (patches_dir or sources.patches_dir) / f"v{base}"
    for p in selected:
        if not (pdir / f"{p.name}.patch").is_file():
            raise PatchsetError(pdir / f"{p.name}.patch", f"missing; run `python -m tools generate --base {base}` first")
    tree = bases_mod.require_base_tree(base, cache_dir)
    author = author or default_author(sources.root)
    out = (out or sources.root / "build" / "export-pr" / f"v{base}").resolve()
    if out.exists() and not (out / MARKER).exists() and (not out.is_dir() or any(out.iterdir())):
        raise PatchsetError(out, "exists and was not made by export-pr; choose another --out or remove it")
    with fsutil.replacing_dir(out) as tmp:
        repo = tmp / "repo"
        progress(f"export-pr v{base}: cloning {tree}")
        gitutil.clone_local(tree, repo, shared=False)
        env = gitutil.isolated_env()
        gitutil.git("remote", "remove", "origin", cwd=repo, env=env)
        pristine = gitutil.rev_parse(repo, env=env)
        git_version = upstream_git_version(repo)
        ienv = gitutil.isolated_env(extra={"GIT_INDEX_FILE": str(tmp / "pr.index")})
        for i, p in enumerate(selected, 1):
            patch_file = (pdir / f"{p.name}.patch").resolve()
            gitutil.git("read-tree", pristine, cwd=repo, env=ienv)
            r = gitutil.git("apply", "--cached", patch_file, cwd=repo, env=ienv, check=False)
            if not r.ok:
                raise PatchsetError(patch_file, f"does not apply alone on pristine torch {base}: {gitutil.apply_failure_text(r.output)}")
            t = gitutil.git("write-tree", cwd=repo, env=ienv).stdout.strip()
            penv = gitutil.isolated_env(date=patch_date(p), author=author)
            commit = gitutil.git("commit-tree", t, "-p", pristine, "-F", "-", cwd=repo, env=penv, input=commit_message(p, base, fork_trailers=False)).stdout.strip()
            gitutil.git("update-ref", f"refs/heads/{p.name}", commit, cwd=repo, env=env)
            d = tmp / p.name
            d.mkdir()
            (d / f"{p.name}.patch").write_bytes(gitutil.format_patch(repo, commit))
            section = benchmark_section(sources.root / "benchmarks" / "README.md", p)
            (d / "PR.md").write_text(pr_markdown(p, base, git_version, _numstat(repo, pristine, commit), section))
            if re.search(r"\bTODO\b", p.body):
                progress(f"warning: {p.name}: PR.md summary is a TODO; fill in the why in patchset.toml before proposing it")
            progress(f"export-pr v{base}: [{i}/{len(selected)}] branch {p.name} ({commit[:12]}), {p.name}/PR.md")
        (tmp / MARKER).write_text(f"exported by python -m tools export-pr from {pdir}\n")
        (tmp / "pr.index").unlink(missing_ok=True)
    return out


def _cmd_export_pr(args) -> int:
    sources = sources_from_args(args)
    author = parse_author(args.author) if args.author else None
    out = export_prs(sources, args.base, Path(args.out) if args.out else None, args.patch, author=author)
    print(out)
    print(f"branches are in {out / 'repo'}: git -C {out / 'repo'} push <your-fork> <patch-name>")
    return 0


def register(subparsers) -> None:
    p = add_subcommand(subparsers, "export-pr", "one upstream PR unit (branch, .patch, PR.md) per patch", __doc__, _cmd_export_pr)
    p.add_argument("--base", metavar="X.Y.Z", help="base to export from (default: the newest base)")
    p.add_argument("--out", metavar="DIR", help="output directory (default: build/export-pr/v<base>/)")
    p.add_argument("--patch", action="append", metavar="NAME", help="only this patch (repeatable)")
    p.add_argument("--author", metavar="'NAME <EMAIL>'", help="author and committer of the PR commits (default: git config user.name/user.email)")
    add_repo_root_arg(p)
