"""``python -m tools export-pr``: one ready-to-propose upstream unit per patch.

For each patch of the base's series (default: the primary base), from the committed
``patches/v<base>/<name>.patch`` (the file ``check`` verified):

    <out>/repo/               a standalone git clone of the pristine base; branch ``<name>`` holds the patch
                              alone on top of the base, as one commit without the fork's trailers
    <out>/<name>/<name>.patch the same commit as a ``git format-patch`` file
    <out>/<name>/PR.md        title, summary (the why), changed files, test plan, measured results

Measured results come from the section of ``benchmarks/README.md`` whose heading names the patch (or its
overlay module); without one, PR.md says there are none yet. ``<out>`` defaults to
``build/export-pr/v<base>/`` and is replaced as a whole on the next export (only if an earlier export made it).
"""

from __future__ import annotations

import argparse
import re
import shutil
import tempfile
from pathlib import Path

from tools import bases as bases_mod
from tools import gitutil
from tools.common import PatchMeta, PatchsetError, progress
from tools.series import Sources, commit_message, patch_date, upstream_git_version

MARKER = ".export-pr"


def heading_key(text: str) -> str:
    """Words only, lower case, joined by '-': 'micro_pipeline_tp slice/cat' and 'Micro-pipeline TP: slice-cat'
    both give 'micro-pipeline-tp-slice-cat'; markdown code ticks and punctuation do not matter."""
    return "-".join(re.findall(r"[a-z0-9]+", text.lower()))


def benchmark_section(readme: Path, patch: PatchMeta) -> str | None:
    """The first section of benchmarks/README.md whose heading names the patch or one of its overlay modules.
    Names match whole words in any spelling (``_``, ``-``, spaces, ``/``): see ``heading_key``."""
    if not readme.is_file():
        return None
    keys = {patch.name, patch.name.removeprefix("inductor-")} | {Path(o).stem for o in patch.overlay}
    keys = {heading_key(k) for k in keys} - {""}
    lines = readme.read_text().splitlines()
    start = level = None
    in_code = False
    for i, line in enumerate(lines):
        if line.startswith("```"):
            in_code = not in_code
        if in_code:
            continue
        m = re.match(r"^(#{1,6})\s+(.*)$", line)
        if not m:
            continue
        if start is None:
            words = f"-{heading_key(m.group(2))}-"
            if any(f"-{k}-" in words for k in keys):
                start, level = i, len(m.group(1))
        elif len(m.group(1)) <= level:
            return "\n".join(lines[start + 1 : i]).strip() or None
    if start is None:
        return None
    return "\n".join(lines[start + 1 :]).strip() or None


def test_commands(patch: PatchMeta) -> list[str]:
    return [f"python {t}" for t in patch.tests if t.endswith(".py")]


def pr_markdown(patch: PatchMeta, base: str, git_version: str, numstat: list[tuple[str, str, str, bool]], results: str | None, bench_readme: Path) -> str:
    out = [f"# {patch.subject}", "", "## Summary", "", patch.body.strip(), "", "## Changes", ""]
    for added, deleted, path, new in numstat:
        out.append(f"- `{path}` ({'new, ' if new else ''}+{added} -{deleted})")
    out += ["", "## Test plan", "", "```"]
    out += test_commands(patch)
    out += ["```", "", "## Measured results", ""]
    if results:
        out += [f"From `{bench_readme.name}` in the patch set's `benchmarks/`:", "", results]
    else:
        out.append("None yet: `benchmarks/README.md` has no section for this patch.")
    out += [
        "",
        "## Notes",
        "",
        f"- Made against torch {base} (upstream commit `{git_version}`); rebase onto `main` before opening the PR.",
        f"- Status in the patch set: `Upstream-Status: {patch.upstream_status}`, category `{patch.category}`.",
        "- Exported by `python -m tools export-pr`; the fork's trailers are not part of this commit.",
        "",
    ]
    return "\n".join(out)


def export_prs(
    sources: Sources,
    base: str | None = None,
    out: Path | None = None,
    names: list[str] | None = None,
    cache_dir: Path | None = None,
    patches_dir: Path | None = None,
) -> Path:
    ps = sources.load()
    base = base or ps.primary_base
    if base not in ps.bases:
        raise PatchsetError(f"--base {base}", f"not a base of this patch set ({', '.join(ps.bases)})")
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
    out = (out or sources.root / "build" / "export-pr" / f"v{base}").resolve()
    if out.exists() and not (out / MARKER).exists() and (not out.is_dir() or any(out.iterdir())):
        raise PatchsetError(out, "exists and was not made by export-pr; choose another --out or remove it")
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.tmp-", dir=out.parent))
    tmp.chmod(0o755)
    try:
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
                file, reason = gitutil.explain_apply_failure(r.output)
                raise PatchsetError(patch_file, f"does not apply alone on pristine torch {base}: {reason}" + (f" [{file}]" if file else ""))
            t = gitutil.git("write-tree", cwd=repo, env=ienv).stdout.strip()
            penv = gitutil.isolated_env(date=patch_date(p))
            commit = gitutil.git("commit-tree", t, "-p", pristine, "-F", "-", cwd=repo, env=penv, input=commit_message(p, base, fork_trailers=False)).stdout.strip()
            gitutil.git("update-ref", f"refs/heads/{p.name}", commit, cwd=repo, env=env)
            d = tmp / p.name
            d.mkdir()
            fp = gitutil.git("format-patch", *gitutil.FORMAT_PATCH_FLAGS, "--stdout", "-1", commit, cwd=repo, env=env, binary=True).stdout
            (d / f"{p.name}.patch").write_bytes(fp)
            numstat = []
            added_files = set(gitutil.git("diff", "--name-only", "--diff-filter=A", pristine, commit, cwd=repo, env=env).stdout.split())
            for line in gitutil.git("diff", "--numstat", "--no-renames", pristine, commit, cwd=repo, env=env).stdout.splitlines():
                a, dl, path = line.split("\t", 2)
                numstat.append((a, dl, path, path in added_files))
            readme = sources.root / "benchmarks" / "README.md"
            (d / "PR.md").write_text(pr_markdown(p, base, git_version, numstat, benchmark_section(readme, p), readme))
            if re.search(r"\bTODO\b", p.body):
                progress(f"warning: {p.name}: PR.md summary is a TODO; fill in the why in patchset.toml before proposing it")
            progress(f"export-pr v{base}: [{i}/{len(selected)}] branch {p.name} ({commit[:12]}), {p.name}/PR.md")
        (tmp / MARKER).write_text(f"exported by python -m tools export-pr from {pdir}\n")
        (tmp / "pr.index").unlink(missing_ok=True)
        old = None
        if out.exists():
            old = out.with_name(f".{out.name}.old-{tmp.name.rsplit('-', 1)[-1]}")
            out.rename(old)
        tmp.rename(out)
        if old:
            shutil.rmtree(old, ignore_errors=True)
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)
    return out


def _cmd_export_pr(args) -> int:
    sources = Sources(Path(args.repo_root).resolve()) if args.repo_root else Sources()
    out = export_prs(sources, args.base, Path(args.out) if args.out else None, args.patch)
    print(out)
    print(f"branches are in {out / 'repo'}: git -C {out / 'repo'} push <your-fork> <patch-name>")
    return 0


def register(subparsers) -> None:
    p = subparsers.add_parser(
        "export-pr",
        help="one upstream PR unit (branch, .patch, PR.md) per patch",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--base", metavar="X.Y.Z", help="base to export from (default: the primary base)")
    p.add_argument("--out", metavar="DIR", help="output directory (default: build/export-pr/v<base>/)")
    p.add_argument("--patch", action="append", metavar="NAME", help="only this patch (repeatable)")
    p.add_argument("--repo-root", help=argparse.SUPPRESS)
    p.set_defaults(func=_cmd_export_pr)
