"""``python -m tools venv X.Y.Z [...]``: the virtual environment of a base, from ``requirements/base-X.Y.Z.txt``.

Each base's pins live in ``requirements/base-<base>.txt`` (``torch==<base>`` and ``-r ../requirements-dev.txt``):
the file a user would also ``pip install -r`` by hand, and the one ``scripts/dev.sh`` installs through this
command (``.venv`` for the primary base, ``.venv-<base>`` for the others). For each base:

1. create the venv with this Python's ``venv`` module if it has no ``bin/python``;
2. ``<venv>/bin/python -m pip install -q --find-links <cache>/wheels -r requirements/base-<base>.txt`` unless its
   torch already is that release and the requirement files are the ones it was installed from (a digest in
   ``<venv>/.patchset-requirements.sha256``). The find-links are the wheels ``tools bases`` fetched, so the torch
   wheel is not downloaded twice. A site-wide pip constraint that excludes the pinned torch (e.g. ``torch<=2.14.1``
   in pip's ``global.constraint``) is overridden for that one pip run, and a line says which cap, in which file
   (``tools.pipcap``): the venv exists to hold exactly that release;
3. ``<site-packages>/inductor_patchset_repo.pth`` names this repo's root (``link_repo``), so that the venv's
   ``python -m tools`` works from any directory, not only from the repo root;
4. with ``--install``, ``<venv>/bin/python -m tools install --replace`` (the patch set, a no-op when installed).

A base that cannot be made (no network, no such release, pip refused) does not stop the others: its error is
printed when it happens and again at the end, and the exit status is 2. Stdout has one line per base,
``ready <base> <venv>`` or ``failed <base> <reason>``, for scripts (``dev.sh test`` runs the ready ones and reports
the others as not tested).

``--room-for BASE [OTHER ...]`` installs nothing: where BASE's venv is neither made nor fits on its filesystem, it
removes the venvs of the OTHER bases (``.venv-<other>``, in the order given; never BASE's or the primary's ``.venv``)
until it fits, one ``removed <other> <venv>`` line each, then prints ``room <base>`` or ``no-room <base> <why>``.
``dev.sh test`` (``scripts/ctest_by_base.sh``) asks it before each base, so every base is tested one after another
on a disk that cannot hold all their venvs, whatever an earlier run left. Two settings, in GiB:
``TORCH_PATCHSET_VENV_ROOM_GIB`` (what a venv and its test run need, default 8) and ``TORCH_PATCHSET_MIN_FREE_GIB``
(below which an install is refused before anything is written, default 2).
"""

from __future__ import annotations

import hashlib
import math
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

from tools import pipcap
from tools.bases import wheels_dir
from tools.common import PatchsetError, add_subcommand, progress
from tools.sources import Sources, add_repo_root_arg, select_bases, sources_from_args

STAMP = ".patchset-requirements.sha256"
_PIN_RE = re.compile(r"^torch\s*==\s*(\S+)$")
_NESTED_RE = re.compile(r"^(?:-r|--requirement)(?:\s*=\s*|\s+)(\S+)$")


def requirements_file(sources: Sources, base: str) -> Path:
    return sources.root / "requirements" / f"base-{base}.txt"


def requirements_template(base: str) -> str:
    """A new base's ``requirements/base-<base>.txt`` (``port --write`` writes it)."""
    return (f"# Base {base}'s test environment (.venv-{base} of scripts/dev.sh, made by `python -m tools venv {base}`).\n"
            f"# By hand: python -m pip install -r requirements/base-{base}.txt\n"
            "# Where a site-wide pip constraint file caps torch below this release, plain pip stops with ResolutionImpossible;\n"
            "# `tools venv` and `tools bases` override that cap for their own pip run only (and say so). By hand:\n"
            f"# PIP_CONSTRAINT=/dev/null python -m pip install -r requirements/base-{base}.txt (drops every configured constraint).\n"
            f"torch=={base}\n-r ../requirements-dev.txt\n")


def _lines(req: Path) -> list[tuple[int, str]]:
    try:
        text = req.read_text()
    except OSError as e:
        raise PatchsetError(req, f"cannot read the base's requirements: {e.strerror or e}") from e
    return [(i, re.sub(r"(^|\s)#.*$", "", line).strip()) for i, line in enumerate(text.splitlines(), 1)]


def torch_pin(req: Path, base: str) -> str:
    """The one ``torch==<base>[+local]`` line of a base's requirements file; anything else is an error naming it."""
    pins = [(i, line) for i, line in _lines(req) if re.match(r"^torch\b(?![-_.\w])", line)]
    if len(pins) != 1:
        raise PatchsetError(req, f"must pin torch exactly once (torch=={base}); found {len(pins)} torch line(s)")
    i, line = pins[0]
    m = _PIN_RE.match(line)
    if not m or m.group(1).partition("+")[0] != base:
        raise PatchsetError(f"{req}:{i}", f"{line!r} is not torch=={base} (the base this file is named after)")
    return m.group(1)


def requirement_files(req: Path) -> list[Path]:
    """``req`` and the files it includes with ``-r`` (recursively), for the stamp."""
    out, todo = [], [req]
    while todo:
        f = todo.pop(0)
        if f in out:
            continue
        out.append(f)
        for _, line in _lines(f):
            m = _NESTED_RE.match(line)
            if m:
                todo.append((f.parent / m.group(1)).resolve())
    return out


def requirements_digest(req: Path) -> str:
    h = hashlib.sha256()
    for f in requirement_files(req):
        h.update(f.name.encode() + b"\0" + f.read_bytes() + b"\0")
    return h.hexdigest()


def venv_python(venv: Path) -> Path:
    return venv / "bin" / "python"


def installed_torch(venv: Path) -> str | None:
    """The torch version pip recorded in the venv (its dist-info METADATA), without running Python."""
    for meta in sorted(venv.glob("lib/python*/site-packages/torch-*.dist-info/METADATA")):
        for line in meta.read_text(errors="replace").splitlines():
            if line.lower().startswith("version:"):
                return line.split(":", 1)[1].strip()
            if not line.strip():
                break
    return None


def _last_error(stderr: str) -> str:
    lines = [l.strip() for l in stderr.splitlines() if l.strip()]
    errors = [l for l in lines if l.startswith("ERROR:")]
    return (errors[-1] if errors else lines[-1] if lines else "no output").removeprefix("ERROR: ")


def _gib_setting(name: str, default: int) -> int:
    raw = os.environ.get(name)
    if raw is None:
        return default
    try:
        gib = float(raw)
    except ValueError:
        raise PatchsetError(name, f"{raw!r} is not a number of GiB") from None
    if not math.isfinite(gib) or gib < 0:
        raise PatchsetError(name, f"{raw!r} is not a finite, non-negative number of GiB")
    return int(gib * 2**30)


# torch's CPU build takes about 1.2 GB in a venv; PyPI's CUDA build about 5 GB. Below the first figure no install can
# succeed; pip would fail minutes in, half-written. TORCH_PATCHSET_MIN_FREE_GIB overrides it (the tests' fake wheels
# are a few KB; a disk known to be roomier or tighter than the check assumes).
MIN_FREE_BYTES = 2 * 2**30
MIN_FREE_ENV = "TORCH_PATCHSET_MIN_FREE_GIB"


def _free_bytes(venv: Path) -> int:
    """Free space on the filesystem ``venv`` is (or will be) on."""
    return shutil.disk_usage(next(p for p in (venv, *venv.parents) if p.exists())).free


def check_free_space(venv: Path, base: str) -> None:
    """Refuse, before anything is written, to install torch where its filesystem cannot hold even the CPU build."""
    free, need = _free_bytes(venv), _gib_setting(MIN_FREE_ENV, MIN_FREE_BYTES)
    if free < need:
        raise PatchsetError(venv, f"{free / 2**30:.1f} GiB free on its filesystem; torch {base} needs at least "
                                  f"{need / 2**30:g} GiB there (about 1.2 GB as a CPU build, 5 GB as PyPI's "
                                  f"CUDA build): free some space and run again ({MIN_FREE_ENV} sets this limit)")


# What one more base's venv needs before it is made: PyPI's CUDA build of torch with its nvidia-* wheels (5.6-5.7 GB
# in a venv of 2.14.1 or 2.15.0) and room for that base's test run (Inductor's caches, pytest's tmp).
ROOM_BYTES = 8 * 2**30
ROOM_ENV = "TORCH_PATCHSET_VENV_ROOM_GIB"


def _is_release(have: str | None, base: str) -> bool:
    """``have`` (an installed torch version, or None) is the base's release, whatever its local label."""
    return have is not None and have.partition("+")[0] == base


def is_made(venv: Path, base: str) -> bool:
    """``venv`` holds the base's torch (it may still be reinstalled when its requirement files changed)."""
    return _is_release(installed_torch(venv), base)


def room_for(venv: Path, base: str) -> str | None:
    """None when the base's venv is made or fits on its filesystem; otherwise why not (free space against need)."""
    if is_made(venv, base):
        return None
    free, need = _free_bytes(venv), _gib_setting(ROOM_ENV, ROOM_BYTES)
    if free >= need:
        return None
    return (f"{free / 2**30:.1f} GiB free where {venv} goes, {need / 2**30:g} GiB needed for it and its test run "
            f"({ROOM_ENV} sets this)")


def make_room(root: Path, base: str, others: list[str], primary: str) -> tuple[list[tuple[str, Path]], str | None]:
    """Remove ``.venv-<other>`` (in order; never ``base``'s or the primary base's) until ``base``'s venv fits.
    Returns what was removed and, where it still does not fit, why (``room_for``)."""
    removed: list[tuple[str, Path]] = []
    why = room_for(root / f".venv-{base}", base)
    for other in others:
        if why is None:
            break
        venv = root / f".venv-{other}"
        if other in (base, primary) or not venv.exists():
            continue
        shutil.rmtree(venv)
        removed.append((other, venv))
        why = room_for(root / f".venv-{base}", base)
    return removed, why


def ensure_venv(base: str, venv: Path, sources: Sources, *, cache_dir: Path | None = None,
                install_patchset: bool = False) -> Path:
    """Make ``venv`` hold ``torch==<base>`` and the dev requirements from ``requirements/base-<base>.txt``."""
    req = requirements_file(sources, base)
    pin = torch_pin(req, base)
    py = venv_python(venv)
    have = installed_torch(venv)
    digest = requirements_digest(req)
    stamp = venv / STAMP
    old = stamp.read_text().strip() if stamp.is_file() else None
    install = not _is_release(have, base) or old != digest
    if install:
        check_free_space(venv, base)
    if not py.exists():
        progress(f"v{base}: creating {venv}")
        r = subprocess.run([sys.executable, "-m", "venv", str(venv)], capture_output=True, text=True)
        if r.returncode:
            raise PatchsetError(venv, f"`{sys.executable} -m venv` failed: {_last_error(r.stderr + r.stdout)}")
    if install:
        why = "no torch" if have is None else f"torch {have}" if not _is_release(have, base) \
            else "its requirement files changed"
        rel = req.relative_to(sources.root) if req.is_relative_to(sources.root) else req
        progress(f"v{base}: pip install -r {rel} into {venv} ({why}; where pip resolves torch to PyPI's CUDA "
                 "build, about 2.5 GB of nvidia-* wheels come with it the first time, 5 GB on disk, a few minutes)")
        wheels = wheels_dir(cache_dir)
        cmd = [str(py), "-m", "pip", "install", "-q", *(["--find-links", str(wheels)] if wheels.is_dir() else []),
               "-r", str(req)]
        with pipcap.torch_pin_env(str(py), "install", pin) as (env, caps):
            if caps:
                progress(pipcap.describe(caps, f"torch=={pin}"))
            # in the caller's cwd, where a relative constraint path of pip's configuration points
            r = subprocess.run(cmd, stdout=sys.stderr, stderr=subprocess.PIPE, text=True, env=env)
        sys.stderr.write(r.stderr)
        if r.returncode:
            raise PatchsetError(req, f"pip install failed (exit {r.returncode}): {_last_error(r.stderr)}; "
                                f"torch {base} is not installed in {venv}")
        have = installed_torch(venv)
        if not _is_release(have, base):
            raise PatchsetError(req, f"pip install succeeded but {venv} has torch {have}, not {base}")
        stamp.write_text(digest + "\n")
    else:
        progress(f"v{base}: {venv} has torch {have} and the requirements it was made from")
    link_repo(venv, sources.root)
    if install_patchset:
        r = subprocess.run([str(py), "-m", "tools", "install", "--replace"], cwd=sources.root,
                           stdout=sys.stderr, stderr=subprocess.PIPE, text=True)
        sys.stderr.write(r.stderr)
        if r.returncode:
            raise PatchsetError(venv, f"`tools install --replace` failed: {_last_error(r.stderr)}")
    return venv


REPO_PTH = "inductor_patchset_repo.pth"


def link_repo(venv: Path, root: Path) -> Path | None:
    """Put ``root`` on the venv's ``sys.path`` (a ``.pth`` file in its site-packages): ``python -m tools`` then
    finds this repo's ``tools`` package from any directory. Returns the .pth (None: no site-packages yet)."""
    sites = sorted(venv.glob("lib/python*/site-packages"))
    if not sites:
        return None
    pth = sites[0] / REPO_PTH
    text = f"{root.resolve()}\n"
    if not pth.is_file() or pth.read_text() != text:
        pth.write_text(text)
    return pth


def _cmd_venv(args) -> int:
    sources = sources_from_args(args)
    ps = sources.load()
    bases = select_bases(ps, args.base, flag="base")
    if args.dir and len(bases) != 1:
        raise PatchsetError(f"--dir {args.dir}", "names the venv of one base; give exactly one base with it")
    if args.room_for:
        if args.dir or args.install:
            raise PatchsetError("--room-for", "makes room in the repo's .venv-<base> folders; give it without --dir "
                                              "or --install")
        (base,) = select_bases(ps, [args.room_for], flag="--room-for")
        removed, why = make_room(sources.root, base, bases if args.base else [], ps.primary_base)
        for other, venv in removed:
            print(f"removed {other} {venv}", flush=True)
        print(f"room {base}" if why is None else f"no-room {base} {why}", flush=True)
        return 0
    failed = []
    for b in bases:
        venv = Path(args.dir).resolve() if args.dir else sources.root / f".venv-{b}"
        try:
            ensure_venv(b, venv, sources, install_patchset=args.install)
        except PatchsetError as e:
            print(f"error: {e}", file=sys.stderr, flush=True)
            print(f"failed {b} {e}", flush=True)
            failed.append((b, str(e)))
            continue
        print(f"ready {b} {venv}", flush=True)
    for b, why in failed:
        print(f"error: base {b} has no venv (not tested): {why}", file=sys.stderr)
    return 2 if failed else 0


def register(subparsers) -> None:
    p = add_subcommand(subparsers, "venv", "make each base's venv from requirements/base-<base>.txt (whatever a pip cap says)",
                       __doc__, _cmd_venv)
    p.add_argument("base", nargs="*", metavar="X.Y.Z", help="bases (default: every base in patchset.toml)")
    p.add_argument("--dir", help="the venv's directory (one base only; default: .venv-<base> in the repo)")
    p.add_argument("--install", action="store_true", help="then install the patch set into it (tools install --replace)")
    p.add_argument("--room-for", metavar="BASE",
                   help="install nothing: remove the venvs of the bases given (in order) until BASE's venv fits on "
                        "its disk; print `removed <base> <venv>` per venv, then `room BASE` or `no-room BASE <why>`")
    add_repo_root_arg(p)
