"""``python -m tools bases``: fetch each base's torch wheel and build its pristine git tree.

A pristine base ``CACHE_DIR/bases/v<base>/`` is a git repo holding exactly one commit: every
``torch/**/*.py`` of that version's wheel (these are the source tree's files at the release tag), committed
with a fixed identity and date, so the same wheel always gives the same commit id. It is what hook diffs
are made against and what ``generate``/``check``/``export-pr`` clone.

Decision on ``test/``: the tree tracks no ``test/`` placeholder. Git does not track empty directories and
our patches create ``test/inductor/...`` themselves, exactly as ``git am`` would in a real checkout (where
``test/`` is full of upstream files no patch touches). An empty ``test/`` directory is left in the work
tree for people who browse it; it is not part of the commit.

A stamp (``.git/torch-patchset.json``) records the wheel's name, size, mtime and sha256 and the commit built
from it. A second run re-hashes nothing unless the wheel changed on disk, so it costs one ``git status``.
A base tree with local edits is never replaced without ``--force``.
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
import zipfile
from pathlib import Path, PurePosixPath

from tools import fsutil, gitutil, pipcap
from tools.common import CACHE_DIR, PatchsetError, add_subcommand, progress
from tools.fsutil import sha256_file
from tools.sources import select_bases, sources_from_args

STAMP_NAME = "torch-patchset.json"
STAMP_FORMAT = 2  # bump when the tree-building recipe changes: trees are rebuilt
DEFAULT_BRANCH = "main"


def bases_dir(cache_dir: Path | None = None) -> Path:
    return (cache_dir or CACHE_DIR) / "bases"


def wheels_dir(cache_dir: Path | None = None) -> Path:
    return (cache_dir or CACHE_DIR) / "wheels"


def base_tree(base: str, cache_dir: Path | None = None) -> Path:
    return bases_dir(cache_dir) / f"v{base}"


def require_base_tree(base: str, cache_dir: Path | None = None) -> Path:
    """The pristine tree for ``base``, or a PatchsetError saying how to build it."""
    tree = base_tree(base, cache_dir)
    if not (tree / ".git").exists() or gitutil.rev_parse(tree) is None:
        raise PatchsetError(tree, f"no pristine tree for torch {base}; build it with `python -m tools bases --base {base}`")
    return tree


def find_wheel(base: str, wdir: Path, project: str = "torch") -> Path | None:
    """A cached wheel of exactly this version (``torch-2.13.0-...`` or ``torch-2.13.0+cpu-...``; ``project``'s
    likewise)."""
    name = re.sub(r"[-_.]+", "_", project)
    found = sorted(p for p in wdir.glob(f"{name}-{base}[-+]*.whl") if p.is_file())
    return found[0] if found else None


def download_wheel(project: str, version: str, wdir: Path) -> Path:
    """``pip download --no-deps --only-binary=:all: <project>==<version>`` into ``wdir``: the one place the tools
    download a wheel. A site-wide pip constraint that excludes the release is overridden for that one download, and
    said so (``tools.pipcap``)."""
    wdir.mkdir(parents=True, exist_ok=True)
    pin = f"{project}=={version}"
    cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:", pin, "-d", str(wdir)]
    with pipcap.pin_env(sys.executable, "download", project, version) as (env, caps):
        if caps:
            progress(pipcap.describe(caps, pin))
        # pip's own progress bar goes to the terminal; our stdout stays clean for machine-readable output.
        proc = subprocess.run(cmd, stdout=sys.stderr, stderr=sys.stderr, env=env)
    if proc.returncode != 0:
        raise PatchsetError(pin, f"`{' '.join(cmd)}` failed with exit code {proc.returncode} (see pip's output above)")
    wheel = find_wheel(version, wdir, project)
    if not wheel:
        raise PatchsetError(wdir, f"pip reported success but no {project}-{version} wheel is there")
    return wheel


def fetch_wheel(base: str, wdir: Path) -> Path:
    """The cached wheel of ``base``, else ``pip download --no-deps torch==<base>`` into ``wdir``
    (``download_wheel``)."""
    wheel = find_wheel(base, wdir)
    if wheel:
        progress(f"v{base}: wheel {wheel.name} (cached)")
        return wheel
    progress(f"v{base}: downloading torch=={base} into {wdir} (pip download; CUDA builds are ~530 MB)")
    return download_wheel("torch", base, wdir)


def released_versions(python: str = sys.executable) -> list[str] | None:
    """torch's releases as the configured package index (and find-links) list them, newest first
    (``pip index versions torch``); None when pip cannot say (offline, no such project, an old pip)."""
    try:
        r = subprocess.run([python, "-m", "pip", "index", "versions", "torch"], capture_output=True, text=True,
                           timeout=300)
    except (OSError, subprocess.SubprocessError):
        return None
    m = re.search(r"^Available versions: (.+)$", r.stdout, re.M) if r.returncode == 0 else None
    return [v.strip() for v in m.group(1).split(",") if v.strip()] if m else None


def read_stamp(tree: Path) -> dict | None:
    try:
        return json.loads((tree / ".git" / STAMP_NAME).read_text())
    except (OSError, ValueError):
        return None


def wheel_identity(wheel: Path, stamp: dict | None) -> dict:
    """Name, size, mtime and sha256 of the wheel; the hash is reused from the stamp when size and mtime match."""
    st = wheel.stat()
    ident = {"wheel": wheel.name, "size": st.st_size, "mtime_ns": st.st_mtime_ns}
    if stamp and all(stamp.get(k) == v for k, v in ident.items()) and stamp.get("sha256"):
        ident["sha256"] = stamp["sha256"]
    else:
        progress(f"hashing {wheel.name}")
        ident["sha256"] = sha256_file(wheel)
    return ident


_VERSION_PY_RE = re.compile(r"""^__version__\s*=\s*['"]([^'"]+)['"]""", re.M)


def _python_members(zf: zipfile.ZipFile, wheel: Path) -> list[zipfile.ZipInfo]:
    members = []
    for info in zf.infolist():
        name = info.filename
        if info.is_dir() or not name.startswith("torch/") or not name.endswith(".py"):
            continue
        p = PurePosixPath(name)
        if p.is_absolute() or ".." in p.parts or "\\" in name:
            raise PatchsetError(wheel, f"refusing unsafe member path {name!r}")
        members.append(info)
    if not members:
        raise PatchsetError(wheel, "has no torch/**/*.py files; is it a torch wheel?")
    return sorted(members, key=lambda i: i.filename)


def build_tree(wheel: Path, dest: Path, base: str, ident: dict | None = None) -> str:
    """Extract ``wheel``'s torch/**/*.py into a fresh git repo and swap it in at ``dest``. Returns the commit.
    Nothing at ``dest`` changes unless the whole build succeeded."""
    ident = ident or wheel_identity(wheel, None)
    with fsutil.replacing_dir(dest) as tmp:
        try:
            zf = zipfile.ZipFile(wheel)
        except (OSError, zipfile.BadZipFile) as e:
            raise PatchsetError(wheel, f"not a readable wheel: {e}") from e
        with zf:
            members = _python_members(zf, wheel)
            version_py = next((m for m in members if m.filename == "torch/version.py"), None)
            if version_py is None:
                raise PatchsetError(wheel, "has no torch/version.py")
            m = _VERSION_PY_RE.search(zf.read(version_py).decode("utf-8", "replace"))
            if not m or not re.match(rf"{re.escape(base)}($|[+a-z])", m.group(1)):
                raise PatchsetError(wheel, f"torch/version.py says {m.group(1) if m else '?'!r}, expected torch {base}")
            total = len(members)
            progress(f"v{base}: extracting {total} torch/**/*.py files from {wheel.name}")
            step = max(1, total // 4)
            for i, info in enumerate(members, 1):
                target = tmp / info.filename
                target.parent.mkdir(parents=True, exist_ok=True)
                target.write_bytes(zf.read(info))
                if i % step == 0 and total - i >= step // 2 or i == total:
                    progress(f"v{base}: extracted {i}/{total}")
        (tmp / "test").mkdir(exist_ok=True)  # not tracked; see module docstring
        env = gitutil.isolated_env(date=gitutil.PRISTINE_DATE, author=gitutil.PRISTINE_AUTHOR)
        gitutil.git("init", "--quiet", "-b", DEFAULT_BRANCH, ".", cwd=tmp, env=env)
        gitutil.git("add", "--all", "torch", cwd=tmp, env=env)
        msg = f"pristine torch v{base} python sources\n\nWheel: {ident['wheel']}\nWheel-Sha256: {ident['sha256']}\n"
        gitutil.git("commit", "--quiet", "--no-verify", "-F", "-", cwd=tmp, env=env, input=msg)
        commit = gitutil.rev_parse(tmp, env=env)
        stamp = {"format": STAMP_FORMAT, "base": base, **ident, "commit": commit}
        (tmp / ".git" / STAMP_NAME).write_text(json.dumps(stamp, indent=1, sort_keys=True) + "\n")
    return commit


def ensure_base(base: str, cache_dir: Path | None = None, *, force: bool = False, fetch: bool = True) -> Path:
    """Make ``bases/v<base>`` exist and match its wheel. Cheap when already up to date."""
    wdir = wheels_dir(cache_dir)
    tree = base_tree(base, cache_dir)
    wheel = fetch_wheel(base, wdir) if fetch else find_wheel(base, wdir)
    if wheel is None:
        raise PatchsetError(wdir, f"no torch-{base} wheel cached")
    stamp = read_stamp(tree) if tree.exists() else None
    ident = wheel_identity(wheel, stamp)
    if tree.exists() and not force:
        if (tree / ".git").exists():
            dirty = gitutil.status_porcelain(tree)
            if dirty:
                raise PatchsetError(
                    tree,
                    "pristine tree has local changes (" + ", ".join(l[3:] for l in dirty[:5]) + (" ..." if len(dirty) > 5 else "") + "); "
                    "make hook diffs in a clone of it, not in the cache. Rebuild with --force (discards those changes)",
                )
            head = gitutil.rev_parse(tree)
            if stamp and stamp.get("format") == STAMP_FORMAT and stamp.get("sha256") == ident["sha256"] and stamp.get("commit") == head:
                progress(f"v{base}: up to date ({tree}, {head[:12]}, wheel sha256 {ident['sha256'][:12]})")
                return tree
            if stamp and stamp.get("format") == STAMP_FORMAT and stamp.get("commit") not in (None, head):
                raise PatchsetError(tree, f"HEAD {head and head[:12]} is not the commit this tool built ({stamp['commit'][:12]}); rebuild with --force")
            why = "no stamp (built by hand?)" if not stamp else "built by an older recipe" if stamp.get("format") != STAMP_FORMAT else "wheel changed"
            progress(f"v{base}: {why}; rebuilding")
        elif any(tree.iterdir()):
            raise PatchsetError(tree, "exists but is not a git repo; move it away or rebuild with --force")
    commit = build_tree(wheel, tree, base, ident)
    progress(f"v{base}: built {tree} at {commit[:12]}")
    return tree


def _cmd_bases(args: argparse.Namespace) -> int:
    """Every selected base, each on its own: one that cannot be fetched or built (no network, no such release) is
    reported when it fails and again at the end, the others are still made, and the exit status is 2."""
    ps = sources_from_args(args).load()
    selected = select_bases(ps, args.base)
    failed = []
    for b in selected:
        try:
            tree = ensure_base(b, force=args.force)
        except PatchsetError as e:
            print(f"error: {e}", file=sys.stderr, flush=True)
            failed.append((b, e))
            continue
        print(tree, flush=True)
    for b, e in failed:
        print(f"error: base {b} has no pristine tree (`check` cannot check it): {e}", file=sys.stderr)
    return 2 if failed else 0


def register(subparsers) -> None:
    p = add_subcommand(subparsers, "bases", "fetch torch wheels and build the pristine base trees", __doc__, _cmd_bases)
    p.add_argument("--base", action="append", metavar="X.Y.Z", help="only this base (repeatable); default: all bases")
    p.add_argument("--force", action="store_true", help="rebuild even if up to date or locally modified")
    p.add_argument("--repo-root", help=argparse.SUPPRESS)  # tests: a fake patch-set repo
