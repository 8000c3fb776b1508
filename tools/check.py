"""``python -m tools check``: prove ``patches/`` valid and in sync with its sources (what CI runs).

Per base: (1) series <-> files one to one, no duplicates, trailing newlines; (2) headers (subject prefix, the
required trailers, a Yocto-style ``Upstream-Status`` regex); (3) ``git am`` of the committed series on a fresh
clone of the pristine tree, and each patch alone on the pristine tree; (4) each patch's hook alone on the
pristine tree (a shared ``hook.diff`` that no longer applies to a base is named with the base, file and hunk,
and an override is suggested), then regenerate and byte-compare. Every problem is reported with its file;
exit status 1 if there is any. Each patch's results section and headline table must be headings of
benchmarks/README.md, and every hunk of its upstream-tests diff have a reason.
Warnings do not fail it: a TODO left in a patch body, an upstream test change without a stored hunk, and an
override that earns no place (the hook its bases would use without it gives the same files on each of them: ``redundant_overrides``).
"""

from __future__ import annotations

import dataclasses
import difflib
import re
import sys
import tempfile
from pathlib import Path

from tools import bases as bases_mod
from tools.baseenv import requirements_file, torch_pin
from tools import gitutil, torchao_kernel
from tools.common import Patchset, PatchsetError, add_subcommand, progress
from tools.generate import add_base_arg, build_series_commits, hook_failure, read_dir
from tools.hookimports import dangling_imports
from tools.patchfile import (AFFECTS_RE, CATEGORIES, DATE_RE, SUBJECT_PREFIX, TRAILERS, UPSTREAM_STATUS_FORMS,
                             UPSTREAM_STATUS_RE, ZERO_FROM_LINE, parse_header)
from tools.seriesfile import series_entries
from tools.sources import (FIX_COMMAND, SHARED_HOOK, Sources, orphan_hook_files, select_bases, shadowed_shared_hooks,
                           sources_from_args, unclaimed_overlay_files)


@dataclasses.dataclass
class Problem:
    where: str
    reason: str

    def __str__(self) -> str:
        return f"{self.where}: {self.reason}"


def check_files(base: str, ps: Patchset, pdir: Path) -> list[Problem]:
    """(1) series <-> files one to one."""
    series = pdir / "series"
    for missing in (pdir, series):
        if not missing.exists():
            return [Problem(str(missing), f"missing; run `{FIX_COMMAND} --base {base}`")]
    probs = []
    entries = series_entries(series)
    seen: dict[str, int] = {}
    for lineno, name in entries:
        where = f"{series}:{lineno}"
        if "/" in name or not name.endswith(".patch"):
            probs.append(Problem(where, f"{name!r} is not a '<name>.patch' file name"))
        elif name in seen:
            probs.append(Problem(where, f"{name} is listed twice (first on line {seen[name]})"))
        elif not (pdir / name).is_file():
            probs.append(Problem(where, f"{name} is listed but {pdir / name} does not exist"))
        seen.setdefault(name, lineno)
    for f in sorted(pdir.iterdir()):
        if f.name != "series" and f.suffix != ".patch":
            probs.append(Problem(str(f), "unexpected file in a generated series directory"))
        elif f.name != "series" and f.name not in seen:
            probs.append(Problem(str(f), "not listed in series"))
    for f in [series, *sorted(pdir.glob("*.patch"))]:
        data = f.read_bytes()
        if not data.endswith(b"\n"):
            probs.append(Problem(str(f), "does not end with a newline"))
        if b"\r\n" in data:
            probs.append(Problem(str(f), "has CRLF line endings"))
    expected = [f"{p.name}.patch" for p in ps.series(base)]
    listed = [n for _, n in entries]
    if listed != expected and not probs:
        probs.append(Problem(str(series), f"lists {listed}, patchset.toml gives {expected} for {base}; run `{FIX_COMMAND} --base {base}`"))
    return probs


def _version_tuple(v: str) -> tuple[int, ...]:
    t = tuple(int(x) for x in re.findall(r"\d+", v)[:3])
    return t + (0,) * (3 - len(t))


def affects_includes(spec: str, base: str) -> bool:
    b = _version_tuple(base)
    ops = {"==": b.__eq__, ">=": b.__ge__, "<=": b.__le__, "<": b.__lt__, ">": b.__gt__}
    for clause in spec.removeprefix("torch").split(","):
        m = re.match(r"(==|>=|<=|<|>)(.+)", clause)
        if not m or not ops[m.group(1)](_version_tuple(m.group(2))):
            return False
    return True


def _trailer_problem(k: str, v: str, base: str) -> str | None:
    if k == "Upstream-Status" and not UPSTREAM_STATUS_RE.match(v):
        return f"malformed 'Upstream-Status: {v}' (want {UPSTREAM_STATUS_FORMS})"
    if k == "Category" and v not in CATEGORIES:
        return f"Category: {v!r} is not one of {', '.join(CATEGORIES)}"
    if k == "Affects" and not (AFFECTS_RE.match(v) and affects_includes(v, base)):
        return f"Affects: {v!r} is not a torch version spec that includes {base}"
    if k == "Last-Update" and not DATE_RE.match(v):
        return f"Last-Update: {v!r} is not YYYY-MM-DD"
    if k in ("Overlay", "Test") and v != "none" and (v.startswith("/") or ".." in v.split("/")):
        return f"{k}: {v!r} is not a tree-relative path"
    return None


def check_headers(base: str, pdir: Path, *, warn=progress, warned: set | None = None) -> list[Problem]:
    """(2) headers of every listed patch. ``warned`` dedupes warnings across bases."""
    warned = set() if warned is None else warned
    probs = []
    if not (pdir / "series").is_file():
        return probs
    for _, name in series_entries(pdir / "series"):
        f = pdir / name
        if not f.is_file():
            continue
        w = str(f)
        h = parse_header(f.read_bytes())
        if h.first_line != ZERO_FROM_LINE:
            probs.append(Problem(w, f"first line is not {ZERO_FROM_LINE!r} (exported without --zero-commit?)"))
        if not h.subject.startswith(SUBJECT_PREFIX):
            probs.append(Problem(w, f"subject {h.subject!r} does not start with {SUBJECT_PREFIX!r}"))
        if not h.body:
            probs.append(Problem(w, "commit message has no body saying why the patch exists"))
        elif re.search(r"\bTODO\b", h.body) and name not in warned:
            warned.add(name)
            warn(f"warning: {name}: the body (why the patch exists) still has a TODO (patchset.toml)")
        keys = [k for k, _ in h.trailers]
        for key, (required, repeatable) in TRAILERS.items():
            n = keys.count(key)
            if required and n == 0:
                probs.append(Problem(w, f"missing trailer {key}:"))
            elif n > 1 and not repeatable:
                probs.append(Problem(w, f"trailer {key}: appears {n} times"))
        probs += [Problem(w, why) for k, v in h.trailers if (why := _trailer_problem(k, v, base))]
    return probs


def check_apply(base: str, pdir: Path, base_tree: Path, workdir: Path) -> list[Problem]:
    """(3) git am of the series on a fresh clone of the pristine tree; each patch alone on the pristine tree."""
    probs = []
    names = [n for _, n in series_entries(pdir / "series") if (pdir / n).is_file()]
    repo = workdir / "am"
    gitutil.clone_local(base_tree, repo)
    env = gitutil.isolated_env()
    pristine = gitutil.rev_parse(repo, env=env)
    for i, name in enumerate(names, 1):
        progress(f"check v{base}: git am {i}/{len(names)} {name}")
        r = gitutil.git("am", "--no-3way", "--keep-non-patch", "--quiet", (pdir / name).resolve(), cwd=repo, env=env, check=False)
        if not r.ok:
            after = f" after {', '.join(names[: i - 1])}" if i > 1 else ""
            probs.append(Problem(str(pdir / name), f"git am fails on pristine torch {base}{after}: {gitutil.apply_failure_text(r.output)}"))
            gitutil.git("am", "--abort", cwd=repo, env=env, check=False)
            break
    alone_env = gitutil.isolated_env(extra={"GIT_INDEX_FILE": str(workdir / "alone.index")})
    for name in names:
        gitutil.git("read-tree", pristine, cwd=repo, env=alone_env)
        r = gitutil.git("apply", "--cached", "--check", (pdir / name).resolve(), cwd=repo, env=alone_env, check=False)
        if not r.ok:
            why = gitutil.apply_failure_text(r.output)
            probs.append(Problem(str(pdir / name), f"does not apply alone on pristine torch {base} (not independently revertible): {why}"))
    return probs


def check_hooks(base: str, ps: Patchset, sources: Sources, base_tree: Path, workdir: Path) -> list[Problem]:
    """(4a) each patch's hook (its override, else the hook it inherits) alone on the pristine index: a failure names
    the hook file, the base, and each hunk that does not match."""
    probs = []
    repo = workdir / "hooks"
    gitutil.clone_local(base_tree, repo, checkout=False)
    env = gitutil.isolated_env()
    for patch in ps.series(base):
        hook = sources.hook_diff(patch, base, ps)
        if hook is None:
            continue
        gitutil.git("read-tree", "HEAD", cwd=repo, env=env)
        r = gitutil.git("apply", "--cached", "--whitespace=nowarn", hook.resolve(), cwd=repo, env=env, check=False)
        if not r.ok:
            gitutil.git("read-tree", "HEAD", cwd=repo, env=env)
            probs.append(Problem(str(hook), hook_failure(hook, patch, base, ps, sources, repo, env, r.output, [])))
    return probs


def check_hook_imports(base: str, ps: Patchset, sources: Sources, base_tree: Path) -> list[Problem]:
    """(4b) every torch module a hook of the base imports exists there: upstream, or shipped by its series
    (``tools.hookimports``)."""
    hooks = {p.name: h for p in ps.series(base) if (h := sources.hook_diff(p, base, ps)) is not None}
    return [Problem(str(sources.rel(h)), why) for h, why in dangling_imports(base, ps, hooks, base_tree)]


def _tree_with(repo: Path, hook: Path) -> str | None:
    env = gitutil.isolated_env()
    gitutil.git("read-tree", "HEAD", cwd=repo, env=env)
    r = gitutil.git("apply", "--cached", "--whitespace=nowarn", hook.resolve(), cwd=repo, env=env, check=False)
    return gitutil.git("write-tree", cwd=repo, env=env).stdout.strip() if r.ok else None


def redundant_overrides(ps: Patchset, sources: Sources, trees: dict[str, Path], workdir: Path) -> list[tuple[Path, str]]:
    """Overrides that earn no place: removing ``hooks/<p>/v<B>.diff`` leaves every base that uses it (B, and the bases
    beyond B that inherit it) with a hook (the shared one, or a neighbouring base's override) that gives the same
    files on its pristine tree, so the generated patches would be byte for byte the same (their ``sources-sha256``
    aside). Judged only where the pristine trees of all those bases are in ``trees``."""
    out = []
    repos: dict[str, Path] = {}

    def repo(base: str) -> Path:
        if base not in repos:
            repos[base] = workdir / f"redundant-v{base}"
            gitutil.clone_local(trees[base], repos[base], checkout=False)
        return repos[base]

    for patch in ps.patches:
        for b in patch.bases:
            own = sources.override_hook(patch, b)
            if not own.is_file():
                continue
            users = sources.hook_users(patch, own, ps)
            if not users or any(u not in trees for u in users):
                continue
            alts = {u: sources.inherited_hook(patch, u, ps, skip=own) for u in users}
            if any(a is None for a in alts.values()):
                continue
            if all(_tree_with(repo(u), own) == _tree_with(repo(u), alts[u]) is not None for u in users):
                said = "; ".join(f"on {u} as {sources.rel(a)}" for u, a in alts.items())
                out.append((own, f"gives the same files as the hook its base(s) would use without it ({said}): "
                                 "the patches it makes are byte for byte what they would be without it; delete it"))
    return out


def _text_diff(a: bytes, b: bytes, a_name: str, b_name: str, limit: int = 200) -> str:
    lines = list(difflib.unified_diff(a.decode("utf-8", "replace").splitlines(True), b.decode("utf-8", "replace").splitlines(True), a_name, b_name))
    if len(lines) > limit:
        lines = lines[:limit] + [f"... ({len(lines) - limit} more diff lines)\n"]
    return "".join(lines)


def check_regenerate(base: str, pdir: Path, expected: dict[str, bytes]) -> tuple[list[Problem], str]:
    """(4) the committed files equal a fresh generation, byte for byte."""
    probs, diffs = [], []
    have = read_dir(pdir)
    for name in sorted(set(have) | set(expected)):
        a, b = have.get(name), expected.get(name)
        if a == b:
            continue
        if a is None:
            probs.append(Problem(str(pdir / name), "missing (generate would write it)"))
        elif b is None:
            probs.append(Problem(str(pdir / name), "generate would not produce this file"))
        else:
            probs.append(Problem(str(pdir / name), "differs from what generate produces (edited by hand, or sources changed without regenerating)"))
        diffs.append(_text_diff(a or b"", b or b"", f"a/{pdir.name}/{name}", f"b/{pdir.name}/{name}"))
    return probs, "".join(diffs)


def check_requirements(ps: Patchset, sources: Sources) -> list[Problem]:
    """Every base has ``requirements/base-<base>.txt`` pinning exactly its torch (what ``tools venv`` and dev.sh install),
    and no such file is left for a base that is gone."""
    probs = []
    for b in ps.bases:
        req = requirements_file(sources, b)
        if not req.is_file():
            probs.append(Problem(str(req), f"missing: base {b}'s pins (torch=={b} and -r ../requirements-dev.txt), "
                                           f"which `python -m tools venv {b}` and scripts/dev.sh install"))
            continue
        try:
            torch_pin(req, b)
        except PatchsetError as e:
            probs.append(Problem(e.where, e.reason))
    req_dir = sources.root / "requirements"
    for f in sorted(req_dir.glob("base-*.txt")) if req_dir.is_dir() else ():
        if f.name[len("base-"):-len(".txt")] not in ps.bases:
            probs.append(Problem(str(f), f"no base {f.name[5:-4]} in patchset.toml; delete this file"))
    return probs


def check_overlay_claimed(ps: Patchset, sources: Sources) -> list[Problem]:
    probs = [Problem(str(f), "is in torch_overlay/ but no [[patch]] in patchset.toml lists it under overlay") for f in unclaimed_overlay_files(ps, sources)]
    probs += [Problem(str(f), f"is never used: {why}") for f, why in orphan_hook_files(ps, sources)]
    probs += [Problem(str(f), why) for f, why in shadowed_shared_hooks(ps, sources)]
    return probs


def check_map_and_upstream(ps: Patchset, sources: Sources, *, warn=progress) -> list[Problem]:
    """A patch's results section and headline table are headings of benchmarks/README.md (where there is one);
    its upstream-tests diff parses and every hunk in it has a reason (``[[patch.upstream.test-change]]``); a change
    without a stored hunk is a warning. (That the map's files exist is test_docs' job: a copy of the sources
    alone, as in tools/tests, has no examples/ or benchmarks/.)"""
    from tools.export_pr import upstream_test_files, upstream_tests_diff
    from tools.prmd import named_section

    probs = []
    readme = sources.root / "benchmarks" / "README.md"
    where = str(sources.patchset_toml)
    for p in ps.patches:
        headings = [("results", p.results)] + ([("[patch.upstream] headline", p.upstream.headline)] if p.upstream else [])
        for what, heading in headings:
            if heading and readme.is_file() and named_section(readme, heading) is None:
                probs.append(Problem(str(readme), f"no heading {heading!r} ({what} of {p.name})"))
        names = {n.name for n in ps.patches}
        for dep in p.upstream.depends_on if p.upstream else ():
            if dep not in names:
                probs.append(Problem(f"{where} [[patch]] {p.name!r}", f"depends-on {dep!r}: no such patch"))
        try:
            stored = upstream_test_files(sources, p)
        except PatchsetError as e:
            probs.append(Problem(e.where, e.reason))
            continue
        explained = {c.file for c in p.upstream.test_changes} if p.upstream else set()
        for f in stored:
            if f not in explained:
                probs.append(Problem(str(upstream_tests_diff(sources, p)),
                                     f"changes {f} but no [[patch.upstream.test-change]] of {p.name} says why"))
        for f in sorted(explained - set(stored)):
            warn(f"warning: {p.name}: no hunk stored for its change to {f} "
                 f"({sources.rel(upstream_tests_diff(sources, p))}); export-pr cannot include it")
    return probs


def _check_tree(base: str, ps: Patchset, sources: Sources, pdir: Path, tree: Path, out) -> list[Problem]:
    """(3) and (4), in a temp dir."""
    found = []
    with tempfile.TemporaryDirectory(prefix=f"patchset-check-v{base}-") as tmp:
        if (pdir / "series").is_file():
            progress(f"check v{base}: [3/4] git am on the pristine tree, and each patch alone")
            found += check_apply(base, pdir, tree, Path(tmp))
        progress(f"check v{base}: [4/4] each hook alone on the pristine tree, then regenerate and compare")
        bad_hooks = check_hooks(base, ps, sources, tree, Path(tmp)) + check_hook_imports(base, ps, sources, tree)
        if bad_hooks:
            return found + bad_hooks  # regenerating would only fail on the same hooks
        gen_dir = Path(tmp) / "gen"
        gen_dir.mkdir()
        try:
            gen = build_series_commits(base, ps, sources, tree, gen_dir, warn=lambda m: None)
        except PatchsetError as e:
            return found + [Problem(e.where, f"cannot regenerate: {e.reason}")]
    if not pdir.is_dir():
        return found  # (1) already said the whole directory is missing
    probs, diff = check_regenerate(base, pdir, gen.files)
    if diff:
        print(f"--- drift in patches/v{base} (committed vs regenerated):", file=out)
        print(diff, file=out, end="" if diff.endswith("\n") else "\n")
        print(f"fix: {FIX_COMMAND} --base {base}", file=out)
    return found + probs


def check(sources: Sources, selected: list[str] | None = None, cache_dir: Path | None = None, *, out=sys.stdout,
          warn=progress) -> list[Problem]:
    ps = sources.load()
    selected = select_bases(ps, selected)
    problems: list[Problem] = []
    for d in sorted(sources.patches_dir.glob("v*")) if sources.patches_dir.is_dir() else ():
        if d.is_dir() and d.name[1:] not in ps.bases:
            problems.append(Problem(str(d), f"no base {d.name[1:]} in patchset.toml; delete this directory"))
    problems += check_overlay_claimed(ps, sources)
    problems += check_requirements(ps, sources)
    problems += check_map_and_upstream(ps, sources, warn=warn)
    problems += [Problem(where, why) for where, why in torchao_kernel.port_problems(sources.root)]
    warned: set = set()
    for base in selected:
        pdir = sources.patches_dir / f"v{base}"
        progress(f"check v{base}: [1/4] series and files")
        found = check_files(base, ps, pdir)
        progress(f"check v{base}: [2/4] headers")
        found += check_headers(base, pdir, warn=warn, warned=warned)
        try:
            tree = bases_mod.require_base_tree(base, cache_dir)
        except PatchsetError as e:
            found.append(Problem(e.where, e.reason))
        else:
            found += _check_tree(base, ps, sources, pdir, tree, out)
        progress(f"check v{base}: {'ok' if not found else f'{len(found)} problem(s)'}")
        problems += found
    trees = {b: bases_mod.base_tree(b, cache_dir) for b in selected if bases_mod.base_tree(b, cache_dir).joinpath(".git").exists()}
    with tempfile.TemporaryDirectory(prefix="patchset-check-overrides-") as tmp:
        for f, why in redundant_overrides(ps, sources, trees, Path(tmp)):
            warn(f"warning: {sources.rel(f)}: {why}")
    return problems


def _cmd_check(args) -> int:
    warnings: list[str] = []

    def warn(msg: str) -> None:
        progress(msg)
        warnings.append(msg)

    problems = check(sources_from_args(args), args.base, warn=warn)
    if problems:
        print(f"check failed: {len(problems)} problem(s)", file=sys.stderr)
        for p in problems:
            print(f"  {p}", file=sys.stderr)
        if any("differs from" in p.reason or "generate would" in p.reason for p in problems):
            print(f"to bring patches/ in sync with the sources: {FIX_COMMAND}", file=sys.stderr)
        return 1
    print("check: ok" + (f", with {len(warnings)} warning(s):" if warnings else ""))
    for w in warnings:
        print(f"  {w.removeprefix('warning: ')}")
    return 0


def register(subparsers) -> None:
    c = add_subcommand(subparsers, "check", "prove patches/ is valid, applies on every base and is in sync with its sources", __doc__, _cmd_check)
    add_base_arg(c)
