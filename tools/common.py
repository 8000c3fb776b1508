"""Paths, the patch metadata in patchset.toml, errors and progress output shared by every subcommand."""

from __future__ import annotations

import argparse
import dataclasses
import os
import re
import sys
import tomllib
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
PATCHSET_TOML = REPO_ROOT / "patchset.toml"
PATCHES_DIR = REPO_ROOT / "patches"
OVERLAY_DIR = REPO_ROOT / "torch_overlay"
CACHE_DIR = Path(os.environ.get("TORCH_PATCHSET_CACHE", Path.home() / ".cache" / "torch-patchset"))


class PatchsetError(Exception):
    """A user-facing failure. Always names the file (or thing) at fault and the reason."""

    def __init__(self, where: str | os.PathLike, reason: str):
        self.where = str(where)
        self.reason = reason
        super().__init__(f"{self.where}: {reason}")


def add_subcommand(subparsers, name: str, help: str, description: str | None, func) -> argparse.ArgumentParser:
    """``python -m tools <name>``: ``description`` (a module docstring) is shown as written by ``--help``."""
    p = subparsers.add_parser(name, help=help, description=description, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.set_defaults(func=func)
    return p


def progress(msg: str) -> None:
    print(f"[patchset] {msg}", file=sys.stderr, flush=True)


@dataclasses.dataclass(frozen=True)
class PatchMeta:
    name: str
    subject: str
    category: str
    upstream_status: str
    bases: tuple[str, ...]
    overlay: tuple[str, ...]
    tests: tuple[str, ...]
    last_update: str
    body: str
    # optional, for the Tested-On: trailer: e.g. ["2.13.0+cpu", "2.11.0+cu130 (H100)"]
    tested_on: tuple[str, ...] = ()


@dataclasses.dataclass(frozen=True)
class Patchset:
    name: str
    version: str
    primary_base: str
    bases: tuple[str, ...]
    patches: tuple[PatchMeta, ...]

    def series(self, base: str) -> list[PatchMeta]:
        return [p for p in self.patches if base in p.bases]


def load_patchset(path: Path = PATCHSET_TOML) -> Patchset:
    try:
        data = tomllib.loads(path.read_text())
    except (OSError, tomllib.TOMLDecodeError) as e:
        raise PatchsetError(path, f"cannot read patch metadata: {e}") from e
    top = data.get("patchset", {})
    patches = []
    for i, p in enumerate(data.get("patch", [])):
        try:
            patches.append(
                PatchMeta(
                    name=p["name"],
                    subject=p["subject"],
                    category=p["category"],
                    upstream_status=p["upstream-status"],
                    bases=tuple(p["bases"]),
                    overlay=tuple(p.get("overlay", ())),
                    tests=tuple(p.get("tests", ())),
                    last_update=p["last-update"],
                    body=p["body"].strip(),
                    tested_on=tuple(p.get("tested-on", ())),
                )
            )
        except KeyError as e:
            raise PatchsetError(path, f"[[patch]] #{i + 1} lacks field {e}") from e
    return Patchset(
        name=top["name"],
        version=top["version"],
        primary_base=top["primary-base"],
        bases=tuple(top["bases"]),
        patches=tuple(patches),
    )


def version_key(v: str) -> tuple[int, int, int]:
    """'2.14.1' -> (2, 14, 1), for ordering bases."""
    a, b, c = (int(x) for x in v.split("."))
    return a, b, c


_VERSION_RE = re.compile(r"^(\d+\.\d+\.\d+)")


def base_of_version(version: str, patchset: Patchset | None = None, where: str | os.PathLike | None = None) -> str:
    """'2.11.0+cu130' -> '2.11.0'; raises PatchsetError for a version the patch set has no series for.
    ``where``: the file the version was read from (named in the error)."""
    m = _VERSION_RE.match(version)
    patchset = patchset or load_patchset()
    if not m or m.group(1) not in patchset.bases:
        raise PatchsetError(
            where or f"torch {version}",
            f"unsupported torch version {version}: this patch set has series for {', '.join(patchset.bases)}",
        )
    return m.group(1)
