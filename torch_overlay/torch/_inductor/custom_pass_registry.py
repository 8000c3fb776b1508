"""
Composable, named and scoped registration of Inductor custom passes.

Inductor runs user passes at fixed stages, each read from one config field
(``config.post_grad_custom_post_pass`` and friends).  Registration by
assignment does not compose: when two libraries each assign the same field,
the second silently drops the first.  This module adds a registry next to the
config fields:

    from torch._inductor import custom_pass_registry as cpr

    handle = cpr.register_custom_pass(
        "post_grad_custom_post_pass", MyPass(), name="mylib.fuse_foo"
    )
    ...
    handle.remove()                      # or: with cpr.register_custom_pass(...):

Design
------
* **Stages** are named after the config field that feeds them
  (:class:`CustomPassStage`): the five FX graph stages (pre-grad, joint
  pre/post, post-grad pre/post) and the two scheduler stages
  (``_pre_fusion_custom_pass``/``_post_fusion_custom_pass``).  Fields that are
  not passes (``custom_partitioner_fn``, ``_fuse_ddp_communication_passes``,
  the AOTAutograd ``joint_custom_pass``) are out of scope: they select one
  implementation or a list of builtin steps and cannot be chained.

* **Registrations live in a process-global registry, not in config.**  So
  ``config.patch``, ``save_config``/``load_config``, ``get_config_copy`` and
  config pickling see exactly what they saw before (the custom pass fields are
  in ``_save_config_ignore`` upstream and stay there), and a registration made
  inside ``config.patch(...)`` is not undone by leaving the patch.  Scoped
  registration is a context manager: the handle returned by
  :func:`register_custom_pass` removes the pass on ``__exit__``.  Subprocess
  compilation (``fx_compile_mode=subprocess``) ships only the portable config,
  so, exactly like passes assigned to config today, registered passes do not
  run there.

  Why not in config, given that #178048 and #184019 (scoped
  ``custom_pass_context`` APIs) were closed unmerged?  Both reached the same
  conclusion this module does: pass objects are stateful, so they cannot be
  config values, which must pickle, serialize for subprocess compiles and
  feed the cache key.  What differs here is what RFC #153532 asks for: a
  process-global, *named* registry that several libraries share (with
  ordering by name and removal), scoping as an option (the handle), and
  assignment kept working and composing instead of being rejected, so no
  caller has to change for the fix to land.  The cache key takes the passes'
  ``(name, uuid())`` from here, as it took ``uuid()`` from the fields.

* **Run order** for a stage is: the passes assigned to the config field (one
  callable, a list or a tuple, in their order), then the registered passes in
  registration order, adjusted by optional ``before=``/``after=`` names (a
  stable topological sort that keeps registration order except that a pass
  with ``before=`` moves to just before the earliest pass it names, one with
  ``after=`` to just after the latest).  Constraints naming a pass that is
  not registered are ignored (a library can order itself against another one
  that may not be installed);
  a registration that would create a cycle raises ``ValueError`` and changes
  nothing.  Names are unique per stage: registering a taken name raises rather
  than replacing.  The order is deterministic, and :func:`list_custom_passes`
  shows it.

* **Assignment keeps working and composes.**  Assigning a field (one callable
  or a list) still sets the passes that run first at that stage, and never
  removes a registered pass.  Because an assignment next to registrations may
  be a library that has not moved to the registry yet, it is not silent: the
  first compile that sees a field assigned while passes are registered for
  the same stage logs one warning naming both groups and the order they run
  in (once per distinct combination).

* **Cache correctness.**  :func:`custom_pass_cache_details` is what the FX
  graph cache key (and, through ``FxGraphHashDetails``, the AOTAutograd cache
  key) hashes for custom passes: for each stage, in run order, each pass's
  ``(name, uuid())``.  Changing a uuid, adding or removing a pass, or
  reordering passes changes the key.  :func:`custom_pass_cache_bypass_reason`
  is the cacheability check: a pass that is not a ``CustomPassBase`` (a
  ``CustomGraphPass``, ``CustomSchedulerPass``...) or whose ``uuid()`` is
  falsy makes the cache bypass that compile; the first time a given pass
  causes a bypass, one warning names it.  Pre-grad passes take part only when
  they run after the cache lookup (``resolve_pre_grad_pass_timing() != "early"``).
"""

from __future__ import annotations

import dataclasses
import enum
import itertools
import logging
import threading
from collections.abc import Callable, Iterable, Sequence
from typing import Any

from torch._dynamo.utils import counters

from . import config, custom_graph_pass


log = logging.getLogger(__name__)

__all__ = [
    "CustomPassHandle",
    "CustomPassInfo",
    "CustomPassStage",
    "custom_pass_cache_bypass_reason",
    "custom_pass_cache_details",
    "get_custom_passes",
    "list_custom_passes",
    "register_custom_pass",
]


class CustomPassStage(str, enum.Enum):
    """Stages that run custom passes, in the order a compile reaches them.

    Each value is the name of the config field that feeds the stage."""

    PRE_GRAD = "pre_grad_custom_pass"
    JOINT_PRE = "joint_custom_pre_pass"
    JOINT_POST = "joint_custom_post_pass"
    POST_GRAD_PRE = "post_grad_custom_pre_pass"
    POST_GRAD_POST = "post_grad_custom_post_pass"
    PRE_FUSION = "_pre_fusion_custom_pass"
    POST_FUSION = "_post_fusion_custom_pass"


@dataclasses.dataclass(frozen=True)
class _Registration:
    stage: CustomPassStage
    name: str
    custom_pass: Callable[..., Any]
    before: tuple[str, ...]
    after: tuple[str, ...]
    seq: int


@dataclasses.dataclass(frozen=True)
class CustomPassInfo:
    """One pass as it will run at a stage (see :func:`list_custom_passes`)."""

    name: str
    # "config" when assigned to the stage's config field, "registry" otherwise.
    source: str
    custom_pass: Callable[..., Any]
    # None when the pass cannot be part of a cache key (no usable uuid()).
    uuid: Any


class CustomPassHandle:
    """Returned by :func:`register_custom_pass`.

    ``remove()`` unregisters the pass (idempotent); used as a context manager
    the registration lasts until the ``with`` block exits."""

    def __init__(self, stage: CustomPassStage, name: str, seq: int) -> None:
        self.stage = stage
        self.name = name
        self._seq = seq

    def remove(self) -> None:
        with _lock:
            entries = _registry.get(self.stage, [])
            _registry[self.stage] = [e for e in entries if e.seq != self._seq]

    @property
    def active(self) -> bool:
        with _lock:
            return any(e.seq == self._seq for e in _registry.get(self.stage, ()))

    def __enter__(self) -> CustomPassHandle:
        return self

    def __exit__(self, *exc: object) -> None:
        self.remove()

    def __repr__(self) -> str:
        return f"CustomPassHandle(stage={self.stage.value!r}, name={self.name!r})"


_lock = threading.RLock()
_registry: dict[CustomPassStage, list[_Registration]] = {}
_seq = itertools.count()
_warned_composition: set[tuple[str, tuple[str, ...], tuple[str, ...]]] = set()
_warned_missing_uuid: set[tuple[str, str]] = set()


def _reset_for_tests() -> None:
    """Drop every registration and forget which warnings were given, so a test
    (or a re-run in the same process) starts from a fresh registry."""
    with _lock:
        _registry.clear()
        _warned_composition.clear()
        _warned_missing_uuid.clear()


def _as_stage(stage: CustomPassStage | str) -> CustomPassStage:
    try:
        resolved = CustomPassStage(stage)
    except ValueError:
        raise ValueError(
            f"unknown custom pass stage {stage!r}; expected one of "
            f"{[s.value for s in CustomPassStage]}"
        ) from None
    return resolved


def _default_name(custom_pass: Callable[..., Any]) -> str:
    obj = custom_pass if hasattr(custom_pass, "__qualname__") else type(custom_pass)
    module = getattr(obj, "__module__", None)
    qualname = getattr(obj, "__qualname__", None) or repr(obj)
    return f"{module}.{qualname}" if module else qualname


def _names(value: str | Iterable[str] | None) -> tuple[str, ...]:
    if value is None:
        return ()
    if isinstance(value, str):
        return (value,)
    return tuple(value)


def _assigned(stage: CustomPassStage) -> tuple[Callable[..., Any], ...]:
    value = getattr(config, stage.value, None)
    if value is None:
        return ()
    if isinstance(value, (list, tuple)):
        return tuple(value)
    return (value,)


def _ordered(entries: Sequence[_Registration]) -> list[_Registration]:
    """Registration order, adjusted by before/after; raises on a cycle.

    A stable topological sort: among the passes whose constraints are met, the
    one with the smallest placement key runs next.  The key keeps registration
    order, except that a pass with ``before=`` sits just before the earliest
    pass it names and a pass with ``after=`` just after the latest one."""
    by_name = {e.name: e for e in entries}
    # edges[a] = names that must run after a
    edges: dict[str, set[str]] = {e.name: set() for e in entries}
    placement: dict[str, tuple[int, int, int]] = {}
    for e in entries:
        before = [n for n in e.before if n in by_name and n != e.name]
        after = [n for n in e.after if n in by_name and n != e.name]
        edges[e.name].update(before)
        for other in after:
            edges[other].add(e.name)
        if before:
            placement[e.name] = (min(by_name[n].seq for n in before), -1, e.seq)
        elif after:
            placement[e.name] = (max(by_name[n].seq for n in after), 1, e.seq)
        else:
            placement[e.name] = (e.seq, 0, e.seq)
    indegree = dict.fromkeys(by_name, 0)
    for targets in edges.values():
        for target in targets:
            indegree[target] += 1
    ready = [n for n, d in indegree.items() if d == 0]
    order: list[_Registration] = []
    while ready:
        ready.sort(key=placement.__getitem__)
        current = ready.pop(0)
        order.append(by_name[current])
        for target in edges[current]:
            indegree[target] -= 1
            if indegree[target] == 0:
                ready.append(target)
    if len(order) != len(entries):
        stuck = sorted(n for n, d in indegree.items() if d > 0)
        raise ValueError(f"before/after constraints form a cycle among {stuck}")
    return order


def register_custom_pass(
    stage: CustomPassStage | str,
    custom_pass: Callable[..., Any],
    *,
    name: str | None = None,
    before: str | Iterable[str] | None = None,
    after: str | Iterable[str] | None = None,
) -> CustomPassHandle:
    """Add ``custom_pass`` to ``stage``, after the passes already there.

    ``stage`` is a :class:`CustomPassStage` or its config field name, e.g.
    ``"post_grad_custom_post_pass"``.  The pass is called like a pass assigned
    to that field.  ``name`` (default: the pass's module and qualified name)
    must be unique within the stage; ``before``/``after`` name passes of the
    same stage this one must run before/after.  For FX graph cache hits the
    pass must be a ``CustomGraphPass`` (``CustomSchedulerPass`` for the
    scheduler stages) whose ``uuid()`` identifies its implementation.
    """
    resolved = _as_stage(stage)
    if not callable(custom_pass):
        raise TypeError(f"custom pass must be callable, got {type(custom_pass)}")
    pass_name = name if name is not None else _default_name(custom_pass)
    with _lock:
        entries = list(_registry.get(resolved, ()))
        if any(e.name == pass_name for e in entries):
            raise ValueError(
                f"a custom pass named {pass_name!r} is already registered for "
                f"{resolved.value}; remove it through its handle first or pass "
                "a different name="
            )
        registration = _Registration(
            resolved, pass_name, custom_pass, _names(before), _names(after), next(_seq)
        )
        _ordered([*entries, registration])  # refuse cycles before committing
        _registry[resolved] = [*entries, registration]
    log.debug("registered custom pass %s for %s", pass_name, resolved.value)
    return CustomPassHandle(resolved, pass_name, registration.seq)


def _registered(stage: CustomPassStage) -> list[_Registration]:
    with _lock:
        return _ordered(_registry.get(stage, ()))


def _warn_if_composed(
    stage: CustomPassStage,
    assigned: Sequence[Callable[..., Any]],
    registered: Sequence[_Registration],
) -> None:
    if not assigned or not registered:
        return
    key = (
        stage.value,
        tuple(_default_name(p) for p in assigned),
        tuple(e.name for e in registered),
    )
    if key in _warned_composition:
        return
    _warned_composition.add(key)
    log.warning(
        "config.%s is assigned (%s) while custom passes are registered for the "
        "same stage (%s); running all of them, assigned passes first. Use "
        "torch._inductor.custom_pass_registry.register_custom_pass() so passes "
        "compose by name.",
        stage.value,
        ", ".join(key[1]),
        ", ".join(key[2]),
    )


def get_custom_passes(stage: CustomPassStage | str) -> tuple[Callable[..., Any], ...]:
    """The passes to run at ``stage``, in order: what the hooks iterate."""
    resolved = _as_stage(stage)
    assigned = _assigned(resolved)
    registered = _registered(resolved)
    _warn_if_composed(resolved, assigned, registered)
    return (*assigned, *(e.custom_pass for e in registered))


def _uuid(custom_pass: Callable[..., Any]) -> Any:
    # The cache key trusts uuid() only from the custom pass classes.
    if not isinstance(custom_pass, custom_graph_pass.CustomPassBase):
        return None
    return custom_pass.uuid() or None


def list_custom_passes(
    stage: CustomPassStage | str | None = None,
) -> dict[str, list[CustomPassInfo]]:
    """What runs where: ``{stage: [CustomPassInfo, ...]}`` in run order.

    Only stages with at least one pass are listed (or just ``stage``)."""
    stages = [_as_stage(stage)] if stage is not None else list(CustomPassStage)
    listing: dict[str, list[CustomPassInfo]] = {}
    for s in stages:
        infos = [
            CustomPassInfo(_default_name(p), "config", p, _uuid(p))
            for p in _assigned(s)
        ] + [
            CustomPassInfo(e.name, "registry", e.custom_pass, _uuid(e.custom_pass))
            for e in _registered(s)
        ]
        if infos or stage is not None:
            listing[s.value] = infos
    return listing


def _cache_stages(include_pre_grad: bool) -> list[CustomPassStage]:
    return [
        s
        for s in CustomPassStage
        if include_pre_grad or s is not CustomPassStage.PRE_GRAD
    ]


def custom_pass_cache_bypass_reason(include_pre_grad: bool) -> str | None:
    """Why the FX graph cache cannot serve this compile, or None.

    ``include_pre_grad``: whether pre-grad passes run after the cache lookup.
    Each bypass bumps ``counters["inductor"]["custom_pass_cache_bypass"]``; the
    first one a given pass causes logs one warning naming it."""
    for stage in _cache_stages(include_pre_grad):
        for info in list_custom_passes(stage)[stage.value]:
            if info.uuid is not None:
                continue
            counters["inductor"]["custom_pass_cache_bypass"] += 1
            key = (stage.value, info.name)
            if key not in _warned_missing_uuid:
                _warned_missing_uuid.add(key)
                log.warning(
                    "custom pass %s at %s has no uuid(); the FX graph cache is "
                    "bypassed for graphs compiled with it. Make it a "
                    "CustomGraphPass (CustomSchedulerPass for scheduler stages) "
                    "whose uuid() identifies its implementation.",
                    info.name,
                    stage.value,
                )
            return f"custom pass {info.name} at {stage.value} has no uuid()"
    return None


def custom_pass_cache_details(
    include_pre_grad: bool,
) -> tuple[tuple[str, tuple[tuple[str, Any], ...]], ...]:
    """What the cache key hashes: per stage, each pass's (name, uuid) in run order.

    Only meaningful after :func:`custom_pass_cache_bypass_reason` returned None."""
    return tuple(
        (
            stage.value,
            tuple(
                (info.name, info.uuid)
                for info in list_custom_passes(stage)[stage.value]
            ),
        )
        for stage in _cache_stages(include_pre_grad)
    )
