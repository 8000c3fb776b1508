"""``install`` / ``uninstall``: the series' ``torch/`` parts onto the current environment's torch, as one
transaction (``tools.journal``), and back.

Everything is verified and computed first (``plan_install``: the RECORD sha256 of every touched file, the strict
apply of the series, absent targets for added files, and a series that is not older than its sources); only then
does ``tools.journal.commit_install`` write. ``install`` also adds ``torch/_inductor/_patchset_info.py``
(``tools.distinfo``), which puts the patch set's identity into Inductor's cache keys.
"""

from __future__ import annotations

import datetime
import os
import sys
from pathlib import Path

from tools.common import PATCHES_DIR, PATCHSET_TOML, PatchsetError, base_of_version, load_patchset, progress
from tools.distinfo import INFO_MODULE, TorchDist, info_module_source, stock_pip_hint
from tools.fsutil import sha256_bytes, sha256_file
from tools import interrupt
from tools.journal import (MANIFEST_FORMAT, State, clear_state, commit_install, commit_uninstall, lock, pycs_of,
                           recover, snapshot_installed, verify_manifest)
from tools.patchapply import apply_series
from tools.seriesfile import load_series, series_digest, series_state
from tools.sources import fresh_series_dir


def plan_install(dist: TorchDist, patches_dir: Path, metadata: Path, dry_run: bool = False) -> dict:
    """Verify and compute everything; touch nothing. Returns the manifest-to-be plus the new contents."""
    ps = load_patchset(metadata)
    base = base_of_version(dist.version, ps, where=dist.metadata_path)
    sdir = fresh_series_dir(patches_dir, base, metadata)
    patches = load_series(sdir)
    state, detail = series_state(sdir)
    progress(f"torch {dist.version} -> base {base}; series {sdir} ({len(patches)} patches, {detail})")
    if state == "modified":
        progress(f"warning: {sdir}: the series {detail}; `python -m tools check` has not vouched for it. "
                 + (f"`install` without --dry-run would install it as {ps.name} {ps.version} with series_state "
                    "'modified' (see `status`)" if dry_run else
                    f"Installing it as {ps.name} {ps.version} with series_state 'modified' (see `status`)"))
    site = dist.site

    def verify(rel: str) -> tuple[bytes | None, str | None]:
        p = site / rel
        rec = dist.record.get(rel)
        if not p.exists():
            if rec is not None:
                return None, "listed in torch's RECORD but missing: the torch install is damaged"
            return None, None
        if rec is None or rec[0] is None:
            return None, "exists but is not part of torch's RECORD (not ours to overwrite)"
        data = p.read_bytes()
        if sha256_bytes(data) != rec[0]:
            return None, "not pristine: its sha256 differs from torch's RECORD (modified after pip installed torch)"
        return data, None

    progress("verifying touched files against RECORD and applying the series (strict, no fuzz)")
    touched = sorted({fd.path for p in patches for fd in p.files if fd.path.startswith("torch/")} | {INFO_MODULE})
    found, problems = {}, []
    for rel in touched:
        data, why = verify(rel)
        if why:
            problems.append((site / rel, why))
        found[rel] = data
    if problems:
        raise PatchsetError(problems[0][0], problems[0][1] if len(problems) == 1 else
                            f"{problems[0][1]}; and {len(problems) - 1} more:\n" +
                            "\n".join(f"  {p}: {why}" for p, why in problems[1:]))
    changes = apply_series(patches, found.__getitem__, prefix="torch/")
    info_bytes = info_module_source(ps.name, ps.version, base, patches, "install", state)
    if INFO_MODULE in changes:
        raise PatchsetError(INFO_MODULE, "the series must not touch this generated file")
    changes[INFO_MODULE] = (None, info_bytes)
    files, created_dirs = [], []
    for rel in sorted(changes):
        before, after = changes[rel]
        if after is None:
            raise PatchsetError(rel, "the series deletes this file; install does not support deletions")
        files.append(
            {
                "path": rel,
                "action": "added" if before is None else "modified",
                "sha256_before": None if before is None else sha256_bytes(before),
                "sha256_after": sha256_bytes(after),
                **({"generated": True} if rel == INFO_MODULE else {}),
                **({"pyc_before": [{"path": p.relative_to(site).as_posix(), "sha256": sha256_file(p)}
                                   for p in pycs_of(site, rel)]} if before is not None else {}),
            }
        )
        # directories we would have to create
        parent = (site / rel).parent
        missing = []
        while not parent.exists():
            missing.append(parent.relative_to(site).as_posix())
            parent = parent.parent
        for m in missing:
            if m not in created_dirs:
                created_dirs.append(m)
    manifest = {
        "format": MANIFEST_FORMAT,
        "patchset": {"name": ps.name, "version": ps.version},
        "base": base,
        "torch_version": dist.version,
        "dist_info": dist.dist_info.name,
        "series_dir": str(sdir),
        "series": [{"name": p.name, "sha256": p.sha256} for p in patches],
        "series_sha256": series_digest(patches),
        "series_state": {"state": state, "detail": detail},
        "installed_at": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "python": sys.executable,
        "files": files,
        "created_dirs": created_dirs,
    }
    return {"manifest": manifest, "contents": {rel: after for rel, (_, after) in changes.items()},
            "before": {rel: b for rel, (b, _) in changes.items()}}


def install(site: Path, patches_dir: Path = PATCHES_DIR, metadata: Path = PATCHSET_TOML,
            replace: bool = False, dry_run: bool = False) -> int:
    st = State(site)
    with lock(site):
        recover(st)
        dist = TorchDist(site)
        cur = st.manifest()
        w = dist.wheel_patchset() if cur is None else None
        if w is not None:
            ps = load_patchset(metadata)
            base = base_of_version(dist.version, ps, where=dist.metadata_path)
            digest = series_digest(load_series(fresh_series_dir(patches_dir, base, metadata)))
            if w["version"] == ps.version and w["series_sha256"] == digest:
                print(f"{dist.describe_wheel_patchset(w)}; it already has this checkout's series; nothing to do")
                return 0
            raise PatchsetError(site / INFO_MODULE, f"{dist.describe_wheel_patchset(w)}, and it differs from this "
                                f"checkout's {ps.name} {ps.version} (series {digest[:12]}). `install` only patches a "
                                f"stock torch: run {stock_pip_hint(dist.version)} first, or build a new patched "
                                "wheel with `python -m tools wheel` and pip install that")
        if cur is not None:
            ps = load_patchset(metadata)
            base = base_of_version(dist.version, ps, where=dist.metadata_path)
            new_digest = series_digest(load_series(fresh_series_dir(patches_dir, base, metadata)))
            same = (cur["patchset"]["version"] == ps.version and cur["series_sha256"] == new_digest
                    and cur["torch_version"] == dist.version)
            bad = verify_manifest(st, cur, allow_stock=False)
            if same and not bad:
                print(f"{ps.name} {ps.version} is already installed on torch {dist.version}; nothing to do")
                return 0
            what = (f"{cur['patchset']['name']} {cur['patchset']['version']} (series {cur['series_sha256'][:12]}) "
                    f"on torch {cur['torch_version']}")
            if not replace:
                hint = f"; files changed since: {', '.join(bad)}" if bad else ""
                raise PatchsetError(st.manifest_path, f"{what} is installed{hint}. Run `python -m tools uninstall` "
                                    f"first, or `install --replace`")
            if dry_run:
                print(f"would uninstall {what} first")
                return 0
            if bad := verify_manifest(st, cur, allow_stock=True):
                raise PatchsetError(st.site / bad[0], f"changed since install (neither patched nor stock): "
                                    f"{', '.join(bad)}; `python -m tools uninstall --force` first, then `install`")
            _check_writable(site, cur)
            progress(f"--replace: uninstalling {what} first")
            # one transaction: the old one out, the new one in; on any failure or a signal, the old one back
            with interrupt.deferred():
                old = snapshot_installed(st, cur)
                try:
                    commit_uninstall(st, cur, final=False)
                    plan = plan_install(TorchDist(site), patches_dir, metadata)
                    _check_writable(site, plan["manifest"])
                    commit_install(st, plan)
                except BaseException:
                    recover(st, quiet=True)  # stock (the new one out, or the old one's uninstall completed)
                    if st.manifest() is None:
                        old.restore()
                    raise
            _installed(plan["manifest"], site)
            return 0
        plan = plan_install(dist, patches_dir, metadata, dry_run)
        m = plan["manifest"]
        _check_writable(site, m)
        if dry_run:
            for e in m["files"]:
                print(f"would {'add' if e['action'] == 'added' else 'modify'} {e['path']}")
            print(f"dry run: nothing was installed into {site}")
            return 0
        commit_install(st, plan)
        _installed(m, site)
        return 0


def _check_writable(site: Path, m: dict) -> None:
    for d in {(site / e["path"]).parent for e in m["files"]} | {site / "torch/_inductor"}:
        while not d.exists():
            d = d.parent
        if not os.access(d, os.W_OK):
            raise PatchsetError(d, f"not writable by this user; run install as the owner of {site}")


def _installed(m: dict, site: Path) -> None:
    mod = " from a MODIFIED series (see `status`)" if m["series_state"]["state"] == "modified" else ""
    print(f"installed {m['patchset']['name']} {m['patchset']['version']} (base {m['base']}, "
          f"{len(m['series'])} patches, {len(m['files'])} files){mod} into {site}")


def _uninstall_locked(st: State, force: bool) -> int:
    m = st.manifest()
    if m is None:
        if st.dir.exists():
            clear_state(st)
        try:
            dist = TorchDist(st.site)
        except PatchsetError:
            dist = None
        if dist is not None and (w := dist.wheel_patchset()) is not None:
            raise PatchsetError(st.site / INFO_MODULE, f"{dist.describe_wheel_patchset(w)}. `uninstall` only "
                                f"undoes `install`; to get stock torch: {stock_pip_hint(dist.version)}")
        print(f"no patch set installed in {st.site} (stock torch); nothing to do")
        return 0
    bad = verify_manifest(st, m, allow_stock=True)
    if bad and not force:
        raise PatchsetError(st.site / bad[0], f"changed since install (neither patched nor stock); refusing to "
                            f"overwrite {len(bad)} file(s): {', '.join(bad)}. `uninstall --force` restores them anyway")
    progress(f"uninstalling {m['patchset']['name']} {m['patchset']['version']} ({len(m['files'])} files)")
    with interrupt.deferred():
        old = snapshot_installed(st, m)
        try:
            commit_uninstall(st, m)
        except interrupt.Interrupted:  # undo: the uninstall completed, then the patch set back as it was
            recover(st, quiet=True)
            old.restore()
            raise
    print(f"uninstalled {m['patchset']['name']} {m['patchset']['version']}; torch in {st.site} is stock")
    return 0


def uninstall(site: Path, force: bool = False) -> int:
    st = State(site)
    with lock(site):
        if recover(st):
            print("an interrupted transaction was rolled back; torch is stock")
            return 0
        return _uninstall_locked(st, force)
