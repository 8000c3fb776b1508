"""pip under a site-wide constraint file: fetch or install one pinned release (torch's, or another project's:
``pin_env``) whatever a cap says.

Company machines often cap packages for every pip run with a constraint file named in pip's configuration
(``global.constraint`` in ``/etc/pip.conf`` or ``/etc/xdg/pip/pip.conf``, an ``install``/``download`` section, or
``PIP_CONSTRAINT``), e.g. ``torch<=2.14.1``. A per-base venv (and ``tools bases``' wheel cache) exists to hold
exactly one torch release, so such a cap must not stop it, and must not be dropped silently either.

What pip itself offers, checked with pip 23.2 (``pip install --dry-run --no-deps torch==2.15.0`` under
``global.constraint`` = a file with ``torch<=2.14.1``):

* ``--constraint FILE`` on the command line *adds* to the configured files: still ResolutionImpossible;
* ``PIP_CONSTRAINT=`` (empty) is ignored: the configured file still applies;
* ``PIP_CONSTRAINT=FILE`` (or ``/dev/null``) *replaces* the configured value: the pin installs;
* ``--isolated`` / ``PIP_CONFIG_FILE=/dev/null`` drop every setting (index, find-links, certificates) too.

So ``pin_env`` (``torch_pin_env`` for torch) reads the effective setting with ``pip config list`` (the interpreter's
own pip, so every config file and ``PIP_*`` variable counts as pip counts it), copies each constraint file without the
pinned project's lines that exclude the pinned release (nested ``-c``/``-r`` files likewise; a URL is passed on as it
is), and points ``PIP_CONSTRAINT`` at the copies for that one pip run: every other constraint still applies, and the
caller says in one line which cap it overrode and where it came from (``describe``).
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import re
import shlex
import subprocess
import tempfile
from pathlib import Path
from typing import Iterator

PROJECT = "torch"
_NAME_RE = re.compile(r"^\s*([A-Za-z0-9][A-Za-z0-9._-]*)")
_NESTED_RE = re.compile(r"^\s*(-c|--constraint|-r|--requirement)(?:\s*=\s*|\s+)(\S+)\s*$")
_CONFIG_RE = re.compile(r"^(?P<key>[^=\s]+)=(?P<value>.*)$")


@dataclasses.dataclass(frozen=True)
class Cap:
    """A constraint line that excludes the pinned release."""

    line: str  # e.g. 'torch<=2.14.1'
    file: str  # the constraint file it is in
    setting: str  # where pip got the file from: 'global.constraint', 'install.constraint', 'PIP_CONSTRAINT'


def describe(caps: list[Cap], pin: str) -> str:
    """The one line a caller prints when it overrode a cap."""
    what = "; ".join(f"{c.line!r} in {c.file} (pip's {c.setting})" for c in caps)
    return f"pip: {pin} overrides the cap {what} for this run only; every other constraint still applies"


def _normalize(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def _requirement_cls():
    try:
        from packaging.requirements import Requirement
    except ImportError:
        try:
            from pip._vendor.packaging.requirements import Requirement
        except ImportError:
            return None
    return Requirement


def excludes(line: str, version: str) -> bool:
    """Does constraint ``line`` (a requirement on the pinned project) rule out ``version``? Unparsable: assume it does."""
    cls = _requirement_cls()
    if cls is None:
        return True
    try:
        req = cls(line)
    except Exception:  # packaging's InvalidRequirement, whichever copy of packaging it is
        return True
    if req.marker is not None and not req.marker.evaluate():
        return False
    return not req.specifier.contains(version, prereleases=True)


def configured_constraints(python: str, command: str, env: dict[str, str] | None = None) -> tuple[str, list[str]]:
    """(setting, values) of the constraint files pip would use for ``pip <command>`` run by ``python``: from
    ``PIP_CONSTRAINT``, else the ``<command>`` section, else ``global``; ``("", [])`` when there are none or pip
    cannot say (then nothing is overridden and pip reports what it reports)."""
    try:
        r = subprocess.run([python, "-m", "pip", "config", "list"], capture_output=True, text=True, timeout=120,
                           env=env)
    except (OSError, subprocess.SubprocessError):
        return "", []
    if r.returncode:
        return "", []
    found = {}
    for line in r.stdout.splitlines():
        m = _CONFIG_RE.match(line.strip())
        if not m:
            continue
        key, value = m.group("key"), m.group("value")
        with contextlib.suppress(ValueError):
            value = shlex.split(value)[0] if value[:1] in "'\"" else value
        found[key] = value
    for key, setting in ((":env:.constraint", "PIP_CONSTRAINT"), (f"{command}.constraint", f"{command}.constraint"),
                         ("global.constraint", "global.constraint")):
        if key in found:
            return setting, found[key].split()
    return "", []


def _logical_lines(text: str) -> list[str]:
    out, cur = [], ""
    for raw in text.splitlines():
        if raw.endswith("\\"):
            cur += raw[:-1]
            continue
        out.append(cur + raw)
        cur = ""
    if cur:
        out.append(cur)
    return out


def _strip_comment(line: str) -> str:
    return re.sub(r"(^|\s)#.*$", "", line).strip()


def _filter_file(src: str, base_dir: Path, version: str, setting: str, out_dir: Path, caps: list[Cap],
                 depth: int = 0, project: str = PROJECT) -> str:
    """A copy of constraint file ``src`` without the ``project`` lines that exclude ``version`` (recursively for
    nested files); the original name when it is a URL or cannot be read (pip then reads it itself)."""
    if re.match(r"^[a-z][a-z0-9+.-]*://", src, re.I) and not src.lower().startswith("file://"):
        return src
    path = Path(src[len("file://"):] if src.lower().startswith("file://") else src)
    if not path.is_absolute():
        path = base_dir / path
    try:
        text = path.read_text()
    except (OSError, UnicodeDecodeError):
        return src
    if depth > 10:
        return src
    kept = []
    for line in _logical_lines(text):
        bare = _strip_comment(line)
        nested = _NESTED_RE.match(bare)
        if nested:
            copy = _filter_file(nested.group(2), path.parent, version, setting, out_dir, caps, depth + 1, project)
            kept.append(f"{nested.group(1)} {copy}")
            continue
        m = _NAME_RE.match(bare)
        if m and not bare.startswith("-") and _normalize(m.group(1)) == _normalize(project) and excludes(bare, version):
            caps.append(Cap(bare, str(path), setting))
            continue
        kept.append(line)
    fd, name = tempfile.mkstemp(prefix=f"{path.stem}-", suffix=".txt", dir=out_dir)
    with os.fdopen(fd, "w") as f:
        f.write("\n".join(kept) + "\n")
    return name


@contextlib.contextmanager
def pin_env(python: str, command: str, project: str, version: str, env: dict[str, str] | None = None
            ) -> Iterator[tuple[dict[str, str], list[Cap]]]:
    """``with pin_env(python, "download", "torchao", "0.18.0") as (env, caps):`` run ``python -m pip download ...``
    with ``env``. Where a configured constraint file excludes ``project==version``, ``env`` points ``PIP_CONSTRAINT``
    at copies without those lines, and ``caps`` lists them (print ``describe(caps, ...)``). Otherwise ``env`` is the
    environment as it was and ``caps`` is empty. The copies are removed when the block ends."""
    base_env = dict(os.environ if env is None else env)
    setting, files = configured_constraints(python, command, base_env)
    if not files:
        yield base_env, []
        return
    with tempfile.TemporaryDirectory(prefix="patchset-pip-constraints-") as tmp:
        caps: list[Cap] = []
        copies = [_filter_file(f, Path.cwd(), version, setting, Path(tmp), caps, project=project) for f in files]
        if not caps:
            yield base_env, []
            return
        yield {**base_env, "PIP_CONSTRAINT": " ".join(copies)}, caps


def torch_pin_env(python: str, command: str, version: str, env: dict[str, str] | None = None):
    """``pin_env`` for torch: ``with torch_pin_env(python, "install", "2.15.0") as (env, caps): ...``."""
    return pin_env(python, command, PROJECT, version, env)
