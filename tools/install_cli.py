"""The ``install``, ``uninstall`` and ``status`` subcommands: argument parsing, and ``status``'s report of what
is in this environment's torch (stock, an ``install`` of ours, or a patched wheel that pip installed)."""

from __future__ import annotations

import argparse
import contextlib
from pathlib import Path

from tools.common import PATCHES_DIR, PATCHSET_TOML, PatchsetError, add_subcommand, base_of_version, load_patchset
from tools.distinfo import TorchDist, find_site_packages, stock_pip_hint
from tools.fsutil import sha256_file
from tools.install import install, uninstall
from tools.journal import STATE_DIR, State, lock, recover, verify_manifest
from tools.seriesfile import load_series, series_digest
from tools.sources import fresh_series_dir


def _checkout_note(name: str, version: str, digest: str | None, base: str, patches_dir: Path, metadata: Path,
                   how: str) -> None:
    """One line when this checkout's patch set differs from the one in torch."""
    with contextlib.suppress(PatchsetError):
        ps = load_patchset(metadata)
        mine = series_digest(load_series(fresh_series_dir(patches_dir, base, metadata)))
        if ps.version != version:
            print(f"note: this checkout has {ps.name} {ps.version}; {how} to switch")
        elif digest and mine != digest:
            print(f"note: this checkout's series for v{base} ({mine[:12]}) differs from the one in torch "
                  f"({digest[:12]}) under the same version {version}; {how} to switch")


def _series_paths(dist: TorchDist, patches_dir: Path, metadata: Path) -> list[str]:
    """The torch/ files this checkout's series for the torch's base touches (none when that cannot be told)."""
    with contextlib.suppress(PatchsetError):
        base = base_of_version(dist.version, load_patchset(metadata), where=dist.metadata_path)
        series = load_series(fresh_series_dir(patches_dir, base, metadata))
        return sorted({fd.path for p in series for fd in p.files if fd.path.startswith("torch/")})
    return []


def not_stock(dist: TorchDist, extra: list[str] = ()) -> tuple[list[str], list[str]]:
    """(files that differ from torch's RECORD, .py files that RECORD does not list) among torch/_inductor/ and
    ``extra`` (what the series touches): enough to tell a hand-edited torch from a stock one without hashing
    the whole 1-5 GB install. Our own state dir is not looked at (its name is not importable)."""
    site = dist.site
    changed = []
    for rel, (h, _) in sorted(dist.record.items()):
        if h and (rel.startswith("torch/_inductor/") and rel.endswith(".py") or rel in extra):
            if sha256_file(site / rel) != h:
                changed.append(rel)
    unlisted = []
    ind = site / "torch" / "_inductor"
    for p in sorted(ind.rglob("*.py")) if ind.is_dir() else ():
        rel = p.relative_to(site).as_posix()
        if rel not in dist.record and "__pycache__" not in p.parts and not rel.startswith(STATE_DIR + "/"):
            unlisted.append(rel)
    unlisted += [rel for rel in extra if rel not in dist.record and (site / rel).exists() and rel not in unlisted]
    return changed, unlisted


def status(site: Path, patches_dir: Path = PATCHES_DIR, metadata: Path = PATCHSET_TOML) -> int:
    st = State(site)
    with lock(site):
        if recover(st):
            print("an interrupted transaction was found and rolled back")
        dist = TorchDist(site)
        print(f"torch {dist.version} at {site}")
        m = st.manifest()
        if m is None:
            w = dist.wheel_patchset()
            if w is None:
                touched = _series_paths(dist, patches_dir, metadata)
                changed, unlisted = not_stock(dist, touched)
                if not changed and not unlisted:
                    print("patch set: not installed (stock torch: its torch/_inductor/ files match torch's RECORD)")
                    return 0
                print("patch set: not installed, but this torch is NOT stock:")
                if changed:
                    print(f"  {len(changed)} file(s) differ from torch's RECORD (edited by hand?): {', '.join(changed)}")
                if unlisted:
                    print(f"  {len(unlisted)} file(s) not in torch's RECORD (left by someone?): {', '.join(unlisted)}")
                blocking = [f for f in changed + unlisted if f in touched]
                if blocking:
                    print(f"`install` refuses these, which the series patches or adds: {', '.join(blocking)}; to get "
                          f"stock torch: {stock_pip_hint(dist.version)}")
                else:
                    print(f"the series touches none of them, so `install` is not stopped by them; to get stock torch: "
                          f"{stock_pip_hint(dist.version)}")
                return 1
            print(f"patch set: {w['name']} {w['version']} on base v{w['base']}, built into a patched wheel "
                  f"(`python -m tools wheel`) that pip installed; `install`/`uninstall` do not manage it")
            for name, _ in w["series"]:
                print(f"  {name}")
            bad = [rel for rel, (h, _) in dist.record.items() if rel.startswith("torch/_inductor/") and h
                   and rel.endswith(".py") and sha256_file(site / rel) != h]
            print("DRIFT: these files no longer match torch's RECORD: " + ", ".join(bad) if bad
                  else "torch/_inductor/ files match torch's RECORD")
            print(f"to get stock torch: {stock_pip_hint(dist.version)}; to update: build a new wheel with "
                  "`python -m tools wheel` and pip install it")
            _checkout_note(w["name"], w["version"], w["series_sha256"], w["base"], patches_dir, metadata,
                           "build and pip install a new wheel")
            return 1 if bad else 0
        state = m.get("series_state", {"state": "unknown", "detail": "not recorded (installed by an older tools)"})
        mod = " (MODIFIED series)" if state["state"] == "modified" else ""
        print(f"patch set: {m['patchset']['name']} {m['patchset']['version']}{mod} on base v{m['base']}, "
              f"installed {m['installed_at']} (manifest {st.manifest_path})")
        print(f"series: {m['series_sha256'][:12]}, {state['detail']}")
        for s in m["series"]:
            print(f"  {s['name']}")
        n_mod = sum(e["action"] == "modified" for e in m["files"])
        print(f"files: {len(m['files'])} ({n_mod} modified, {len(m['files']) - n_mod} added)")
        rc = 0
        if m["torch_version"] != dist.version:
            print(f"STALE: installed onto torch {m['torch_version']} but torch is now {dist.version}; "
                  "run `python -m tools uninstall` then `install`")
            rc = 1
        bad = verify_manifest(st, m, allow_stock=False)
        before = {e["path"]: e["sha256_before"] for e in m["files"] if e["sha256_before"] is not None}
        if bad and all(p in before and sha256_file(site / p) == before[p] for p in bad):
            # every file that differs is exactly torch's own again: torch was reinstalled over the install
            added = [e["path"] for e in m["files"] if e["sha256_before"] is None and (site / e["path"]).exists()]
            print(f"STOCK AGAIN: {', '.join(bad)} {'is' if len(bad) == 1 else 'are'} torch's own files again (torch "
                  f"was reinstalled over the install, e.g. `pip install --force-reinstall torch`); left of the "
                  f"install: {len(added)} added file(s) and its state in {st.dir}. `python -m tools uninstall` "
                  "removes them (then `install` patches torch again)")
            rc = 1
        elif bad:
            print("DRIFT: these files no longer match the manifest: " + ", ".join(bad))
            rc = 1
        else:
            print("all files match the manifest")
        _checkout_note(m["patchset"]["name"], m["patchset"]["version"], m["series_sha256"], m["base"], patches_dir,
                       metadata, "`install --replace`")
        return rc


INSTALL_DESCRIPTION = """\
Apply this checkout's series (patches/v<base>/, chosen by torch's version) to the torch of this Python
environment: only the series' torch/ parts, strictly (exact context, no fuzz), as one transaction.

Every file to modify must match its sha256 in torch's RECORD (all mismatches are listed at once) and every file
to add must not exist; otherwise nothing changes. State (manifest, backups) lives in
site-packages/torch/_inductor/.patchset/. Re-running with the same series does nothing; another version or
series needs --replace. A series that differs from the committed one is installed, and marked MODIFIED.
A torch pip-installed from a patched wheel (`python -m tools wheel`) is recognised and left alone."""

UNINSTALL_DESCRIPTION = """\
Undo `install`: every modified file back byte for byte (mode and mtime too, and the bytecode caches that existed
before), every added file and directory removed. A file changed since install is refused unless --force.
A torch pip-installed from a patched wheel is not an install of ours: reinstall the stock torch with pip."""

STATUS_DESCRIPTION = """\
What is in this environment's torch: stock, a patch set installed by `install` (version, series, whether it was
MODIFIED, whether every file still matches the manifest), or a patched wheel installed by pip.
Exit status 1 when files drifted or torch changed under the install (STALE)."""


def register(subparsers) -> None:
    def site_arg(p):
        p.add_argument("--site-packages", type=Path, default=None,
                       help="operate on this site-packages dir instead of the one holding this Python's torch")

    def common(p):
        site_arg(p)
        p.add_argument("--patches", type=Path, default=PATCHES_DIR, help="generated patches dir (default: %(default)s)")
        p.add_argument("--metadata", type=Path, default=PATCHSET_TOML, help=argparse.SUPPRESS)

    def site_of(args) -> Path:
        return args.site_packages.resolve() if args.site_packages else find_site_packages()

    raw = argparse.RawDescriptionHelpFormatter
    p = add_subcommand(subparsers, "install", "apply the series' torch/ parts to this environment's torch", INSTALL_DESCRIPTION,
                       lambda a: install(site_of(a), a.patches, a.metadata, a.replace, a.dry_run))
    common(p)
    p.set_defaults(atomic=True)  # tools.interrupt: SIGINT/SIGTERM leave torch as it was
    p.add_argument("--replace", action="store_true", help="uninstall a different installed patch set first")
    p.add_argument("--dry-run", action="store_true", help="verify and list the changes; write nothing")

    # uninstall reads only the manifest and backups it left in torch: no --patches
    p = add_subcommand(subparsers, "uninstall", "restore this environment's torch byte for byte", UNINSTALL_DESCRIPTION,
                       lambda a: uninstall(site_of(a), a.force))
    site_arg(p)
    p.set_defaults(atomic=True)
    p.add_argument("--force", action="store_true", help="restore files even if they changed since install")

    p = add_subcommand(subparsers, "status", "show what is installed in this environment's torch (or stock)", STATUS_DESCRIPTION,
                       lambda a: status(site_of(a), a.patches, a.metadata))
    common(p)
