"""``python -m tools generate``: rebuild ``patches/v<base>/`` from the sources.

For each base: a scratch clone of the pristine tree; for each patch of ``patchset.toml`` (table order) that
lists the base: ``git apply`` its hook diff (no fuzz, offsets ok): ``hooks/<name>/v<base>.diff`` if that override
exists, else the shared ``hooks/<name>/hook.diff``; add its overlay files (``torch_overlay/<path>`` -> ``<path>``) and its test files
that ship on the base (an entry ``{path = ..., bases = [...]}`` ships on those bases only), and commit with a fixed author, the
patch's ``last-update`` as date and a message built from the metadata. Then ``git format-patch`` with
Electron's deterministic flags into ``patches/v<base>/<name>.patch`` and a ``series`` file (which records a
digest of the sources, so that ``install`` refuses a stale series). Everything is built in temp dirs first;
``patches/`` changes only when every base succeeded. The work is index-only (no checkout), so it takes well
under a second per base.
"""

from __future__ import annotations

import argparse
import dataclasses
import re
import tempfile
from pathlib import Path

from tools import bases as bases_mod
from tools import fsutil, gitutil, interrupt, torchao_kernel
from tools.common import PatchMeta, Patchset, PatchsetError, add_subcommand, progress
from tools.patchapply import find_hunk
from tools.patchfile import commit_message, parse_patch, patch_date, split_lines
from tools.seriesfile import series_text
from tools.sources import (OVERRIDE_RE, SHARED_HOOK, Sources, add_repo_root_arg, hook_base, orphan_hook_files, select_bases,
                           shadowed_shared_hooks, sources_digest, sources_from_args, unclaimed_overlay_files)


def upstream_git_version(tree: Path) -> str:
    r = gitutil.git("show", "HEAD:torch/version.py", cwd=tree, check=False)
    m = re.search(r"""^git_version\s*=\s*['"]([0-9a-f]+|Unknown)['"]""", r.stdout, re.M)
    return m.group(1) if m else "unknown"


@dataclasses.dataclass
class Built:
    base: str
    files: dict[str, bytes]  # file name in patches/v<base>/ -> content (series included)
    commits: list[tuple[PatchMeta, str]]


def _add_files(repo: Path, env: dict, patch: PatchMeta, base: str, pairs: list[tuple[Path, str]], owners: dict[str, str]) -> None:
    """Add (source file, tree path) pairs to the scratch index as new files."""
    for src, dest in pairs:
        if not src.is_file():
            kind = "overlay" if dest in patch.overlay else "test"
            raise PatchsetError(src, f"{kind} file of patch {patch.name} (listed in patchset.toml) does not exist")
        if dest in owners:
            raise PatchsetError(src, f"{dest} is also added by patch {owners[dest]}; one file belongs to one patch")
        if gitutil.git("ls-files", "--cached", "--", dest, cwd=repo, env=env).stdout.strip():
            raise PatchsetError(
                src,
                f"{dest} already exists in torch {base} (upstream or added by this patch's hook); overlay and test files "
                "must be new files; change upstream files only through hooks/",
            )
    if not pairs:
        return
    paths = "\n".join(str(s.resolve()) for s, _ in pairs) + "\n"
    shas = gitutil.git("hash-object", "-w", "--no-filters", "--stdin-paths", cwd=repo, env=env, input=paths).stdout.split()
    info = "".join(f"100644 {sha}\t{dest}\n" for sha, (_, dest) in zip(shas, pairs))
    gitutil.git("update-index", "--add", "--index-info", cwd=repo, env=env, input=info)
    for _, dest in pairs:
        owners[dest] = patch.name


def unmatched_hunks(repo: Path, env: dict, hook: Path) -> list[str]:
    """``<file> hunk #k (<@@ line>): <why>`` for each hunk of ``hook`` that has no exact match in the index of
    ``repo``, by ``git apply``'s rules without fuzz (``tools.patchapply.find_hunk``): what to fix, hunk by hunk."""
    try:
        fds = parse_patch(hook).files
    except PatchsetError as e:
        return [e.reason]
    out = []
    for fd in fds:
        r = gitutil.git("show", f":{fd.path}", cwd=repo, env=env, check=False, binary=True)
        if fd.kind == "add":
            if r.ok:
                out.append(f"{fd.path}: the hook adds this file but the tree already has it")
            continue
        if not r.ok:
            out.append(f"{fd.path}: not in this tree")
            continue
        lines = split_lines(r.stdout)
        delta = 0
        for k, h in enumerate(fd.hunks, 1):
            want = (h.old_start - 1 if h.old else h.old_start) + delta
            pos = find_hunk(lines, h, want)
            if pos is not None:
                delta += pos - want
                continue
            if h.old_start <= 1 and find_hunk(lines, dataclasses.replace(h, old_start=2), 0) is not None:
                why = "it starts at line 1, and git applies such a hunk only at the top of the file, which differs"
            else:
                why = "its context and removed lines are not in the file as they are (no fuzz is allowed)"
            out.append(f"{fd.path} hunk #{k} ({h.at or h.header}): {why}")
    return out


def hook_failure(hook: Path, patch: PatchMeta, base: str, ps: Patchset, sources: Sources, repo: Path, env: dict,
                 git_output: str, before: list[str]) -> str:
    """Why ``hook`` did not apply to the index of ``repo`` (pristine ``base`` + the patches ``before``), hunk by
    hunk, and what to do: remake it, give the base an override (a shared hook), or move hunks apart."""
    detail = "; ".join(unmatched_hunks(repo, env, hook)) or gitutil.apply_failure_text(git_output)
    after = f" after {', '.join(before)}" if before else ""
    alone = None
    if before:  # does it apply alone? then only the hunks of earlier patches are in its way
        alone_env = {**env, "GIT_INDEX_FILE": str(repo / ".git" / "alone.index")}
        gitutil.git("read-tree", "HEAD", cwd=repo, env=alone_env)
        alone = gitutil.git("apply", "--cached", "--check", hook.resolve(), cwd=repo, env=alone_env, check=False).ok
    spacing = "keep hunks 3+ lines away from other patches' hunks"
    if alone:
        return f"applies to pristine torch {base} alone but not{after}: {detail}; its hunks and theirs are too close: {spacing}"
    if hook != sources.override_hook(patch, base):  # the shared hook, or a neighbour's override it inherits
        m = OVERRIDE_RE.fullmatch(hook.name)
        made_on = m.group(1) if m else hook_base(ps, patch)
        what = (f"the shared hook (made against {made_on})" if not m else
                f"the override of {made_on}, which torch {base} inherits (an override serves the bases beyond it, "
                f"away from {hook_base(ps, patch)}),")
        if base == made_on:
            fix = f"remake it against pristine torch {base}, the base the shared hook is made against (CONTRIBUTING.md)"
        else:
            fix = (f"if torch {base} needs other context or other lines, give it an override "
                   f"{sources.rel(sources.override_hook(patch, base))} made against pristine torch {base} (CONTRIBUTING.md)")
        return f"{what} does not apply to pristine torch {base}{after}: {detail}; {fix}; {spacing}"
    return f"does not apply to pristine torch {base}{after}: {detail}; remake it against the pristine tree (see CONTRIBUTING.md) and {spacing}"


def build_series_commits(base: str, ps: Patchset, sources: Sources, base_tree: Path, workdir: Path, *, warn=progress) -> Built:
    """Build the commits of ``base``'s series in a scratch clone at ``workdir/repo`` (index only)."""
    repo = workdir / "repo"
    gitutil.clone_local(base_tree, repo, checkout=False)
    env = gitutil.isolated_env()
    gitutil.git("read-tree", "HEAD", cwd=repo, env=env)
    parent = gitutil.rev_parse(repo, env=env)
    series = ps.series(base)
    commits = []
    owners: dict[str, str] = {}
    for i, patch in enumerate(series):
        diff = sources.hook_diff(patch, base, ps)
        if diff is not None and not patch.hooks:
            raise PatchsetError(diff, f"{patch.name} is declared without hooks (hooks = false in patchset.toml) "
                                      "but has this hook diff: delete it or drop hooks = false")
        if diff is not None:
            r = gitutil.git("apply", "--cached", "--whitespace=nowarn", "-p1", diff.resolve(), cwd=repo, env=env, check=False)
            if not r.ok:
                raise PatchsetError(diff, hook_failure(diff, patch, base, ps, sources, repo, env, r.output, [p.name for p in series[:i]]))
        elif patch.hooks:
            warn(f"warning: {sources.rel(sources.hooks_dir / patch.name)}/: no hook diff for {patch.name} on {base} (neither "
                 f"{SHARED_HOOK} nor {sources.override_hook(patch, base).name} nor an override it inherits); the patch only "
                 "adds its new files")
        pairs = [(sources.overlay_file(o), o) for o in patch.overlay_on(base)] + [(sources.test_file(t), t) for t in patch.tests_on(base)]
        _add_files(repo, env, patch, base, pairs, owners)
        tree = gitutil.git("write-tree", cwd=repo, env=env).stdout.strip()
        penv = gitutil.isolated_env(date=patch_date(patch))
        commit = gitutil.git("commit-tree", tree, "-p", parent, "-F", "-", cwd=repo, env=penv, input=commit_message(patch, base)).stdout.strip()
        commits.append((patch, commit))
        parent = commit
    files = {f"{patch.name}.patch": gitutil.format_patch(repo, commit) for patch, commit in commits}
    text = series_text(base, [p.name for p, _ in commits], upstream_git_version(base_tree), sources_digest(ps, sources, base))
    files["series"] = text.encode()
    return Built(base, files, commits)


def generate_base(base: str, ps: Patchset, sources: Sources, cache_dir: Path | None = None, *, warn=progress) -> dict[str, bytes]:
    tree = bases_mod.require_base_tree(base, cache_dir)
    with tempfile.TemporaryDirectory(prefix=f"patchset-gen-v{base}-") as tmp:
        return build_series_commits(base, ps, sources, tree, Path(tmp), warn=warn).files


def write_generated(patches_dir: Path, outputs: dict[str, dict[str, bytes]]) -> None:
    """Replace ``patches_dir/v<base>/`` for each base in ``outputs``: every base staged fully, then swapped in."""
    staged = {}

    def settle() -> None:  # also at the command's end, should an interrupt cut the finally below short
        for base, d in staged.items():
            fsutil.settle_swap(d, patches_dir / f"v{base}")

    interrupt.on_interrupt(settle)
    try:
        for base, files in outputs.items():
            staged[base] = d = fsutil.staged_dir(patches_dir / f"v{base}")
            for name, data in sorted(files.items()):
                (d / name).write_bytes(data)
        for base, d in staged.items():
            fsutil.swap_in(d, patches_dir / f"v{base}")
    except OSError as e:
        raise PatchsetError(e.filename or patches_dir, f"cannot write the generated series: {e.strerror or e}") from e
    finally:
        settle()
        interrupt.done(settle)


def read_dir(d: Path) -> dict[str, bytes]:
    return {f.name: f.read_bytes() for f in d.iterdir() if f.is_file()} if d.is_dir() else {}


def generate(sources: Sources, selected: list[str] | None = None, cache_dir: Path | None = None, *, warn=progress) -> dict[str, dict[str, bytes]]:
    ps = sources.load()
    selected = select_bases(ps, selected)
    for f in unclaimed_overlay_files(ps, sources):
        warn(f"warning: {f}: in torch_overlay/ but listed by no patch; it is not shipped")
    for f, why in orphan_hook_files(ps, sources):
        warn(f"warning: {f}: never used: {why}")
    for f, why in shadowed_shared_hooks(ps, sources):
        warn(f"warning: {f}: {why}")
    outputs = {}
    for base in selected:
        progress(f"generate v{base}: {len(ps.series(base))} patches")
        outputs[base] = generate_base(base, ps, sources, cache_dir, warn=warn)
    changes = {}
    for base, files in outputs.items():
        have = read_dir(sources.patches_dir / f"v{base}")
        changes[base] = sorted(n for n in set(have) | set(files) if have.get(n) != files.get(n))
    write_generated(sources.patches_dir, outputs)
    if torchao_kernel.has_kernel(sources.root):
        port = "changed" if torchao_kernel.write_port(sources.root) else "unchanged"
        progress(f"generate: wrote {torchao_kernel.PORT} and {torchao_kernel.MAIN_PORT} from csrc/da8w4/ ({port})")
    for base in selected:
        what = f"changed: {', '.join(changes[base])}" if changes[base] else "unchanged"
        progress(f"generate v{base}: wrote {sources.patches_dir / f'v{base}'} ({what})")
    return outputs


def _cmd_generate(args) -> int:
    generate(sources_from_args(args), args.base)
    return 0


def add_base_arg(p: argparse.ArgumentParser) -> None:
    p.add_argument("--base", action="append", metavar="X.Y.Z", help="only this base (repeatable); default: every base in patchset.toml")
    add_repo_root_arg(p)


def register(subparsers) -> None:
    g = add_subcommand(subparsers, "generate", "regenerate patches/v<base>/ from patchset.toml, hooks/, torch_overlay/, test/", __doc__, _cmd_generate)
    add_base_arg(g)
