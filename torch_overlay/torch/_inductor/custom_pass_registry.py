"""
Composable, named and scoped registration of Inductor custom passes.

Each stage that runs user passes reads one config field
(``config.post_grad_custom_post_pass`` and friends), so when two libraries
assign the same field the second silently drops the first.  Passes registered
here run next to the assigned ones::

    from torch._inductor import custom_pass_registry as cpr

    handle = cpr.register_custom_pass(
        "post_grad_custom_post_pass", MyPass(), name="mylib.fuse_foo"
    )
    handle.remove()  # or: with cpr.register_custom_pass(...): ...

* A stage is named after its config field (:class:`CustomPassStage`).  Fields
  that select one implementation or list builtin steps
  (``custom_partitioner_fn``, ``_fuse_ddp_communication_passes``) are not
  stages.
* Registrations are process-global, not config: pass objects are stateful,
  while config values must pickle and feed the cache key.  So
  ``config.patch``, ``save_config``/``load_config`` and ``get_config_copy``
  are unaffected, and, as for assigned passes, a subprocess compile
  (``fx_compile_mode=subprocess``) does not run the post-grad and scheduler
  stages' passes: there a compile with such a pass bypasses the FX graph
  cache.
* Run order: the assigned passes (one callable, a list or a tuple), then the
  registered ones in registration order, moved by ``before=``/``after=``
  names (names that are not registered are ignored; cycles and duplicate
  names raise).  A field assigned while passes are registered for its stage
  (the way to migrate) is logged at DEBUG.
* Cache: :func:`custom_pass_cache_details` is what the FX graph (and so the
  AOTAutograd) cache key hashes, each pass's ``(name, uuid())`` in run order;
  :func:`custom_pass_cache_bypass_reason` bypasses the cache for a pass that
  is not a ``CustomPassBase`` (``CustomGraphPass``, ``CustomSchedulerPass``,
  ...) or whose ``uuid()`` is None: one warning per registered pass, an INFO
  line for an assigned one (assignment bypassed silently before).  One helper,
  ``_custom_pass_uuid`` (``_custom_pass_has_uuid``), decides this for the
  check, the key and ``codecache.resolve_pre_grad_pass_timing``, and
  ``_custom_pass_name`` names passes for all of them.  Each calls ``uuid()``
  (for a pre-grad pass, resolving its timing does too), so ``uuid()`` should
  be cheap; ``get_hash_for_files`` caches per set of files.
"""

from __future__ import annotations

import dataclasses
import enum
import itertools
import logging
import threading
from collections.abc import Iterable, Mapping
from typing import Any, TYPE_CHECKING
from typing_extensions import Self

from torch._dynamo.utils import counters

from . import config, custom_graph_pass


if TYPE_CHECKING:
    from collections.abc import Callable, Sequence


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
    """Stages that run custom passes, named after their config field."""

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
    source: str  # "config" (assigned to the field) or "registry"
    custom_pass: Callable[..., Any]
    uuid: Any  # None: the pass cannot be part of a cache key


class CustomPassHandle:
    """Removes its pass (idempotent); as a context manager, on exit.

    A scope must cover every compile it is meant for, the backward's too: that
    compiles lazily, at the first ``.backward()``, from the registrations of
    that moment (as ``config.patch`` does), while the AOTAutograd cache key
    was made at the forward's.  The registry is process-global: a scope in one
    thread is seen by compiles in the others."""

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

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.remove()

    def __repr__(self) -> str:
        return f"CustomPassHandle(stage={self.stage.value!r}, name={self.name!r})"


_lock = threading.RLock()
_registry: dict[CustomPassStage, list[_Registration]] = {}
_seq = itertools.count()
_warned_missing_uuid: set[tuple[str, str]] = set()


def _reset_for_tests() -> None:
    """A fresh registry: no registrations, no memory of given warnings."""
    with _lock:
        _registry.clear()
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


def _custom_pass_name(custom_pass: object) -> str:
    """A pass's name in messages, the listing and the cache key, and the
    default registration name: its module and qualified name (its class's for
    an instance).  codecache imports this one for its messages too."""
    obj = custom_pass if hasattr(custom_pass, "__qualname__") else type(custom_pass)
    module = getattr(obj, "__module__", None)
    qualname = getattr(obj, "__qualname__", None) or repr(obj)
    return f"{module}.{qualname}" if module else qualname


def _custom_pass_uuid(custom_pass: object, name: str | None = None) -> Any:
    """The ``uuid()`` the cache key includes, or None when the pass cannot be
    part of a key: it is not a ``CustomPassBase`` (whose ``uuid()`` the cache
    trusts) or its ``uuid()`` is None.  A ``uuid()`` that raises is reported
    with the pass's ``name``."""
    if not isinstance(custom_pass, custom_graph_pass.CustomPassBase):
        return None
    try:
        return custom_pass.uuid()
    except Exception as e:
        name = name or _custom_pass_name(custom_pass)
        raise RuntimeError(f"uuid() of custom pass {name} raised {e!r}") from e


def _custom_pass_has_uuid(custom_pass: object) -> bool:
    """Whether the FX graph cache can include ``custom_pass`` in its key: the
    one test for the cache check, the key and resolve_pre_grad_pass_timing."""
    return _custom_pass_uuid(custom_pass) is not None


def _names(arg: str, value: str | Iterable[str] | None) -> tuple[str, ...]:
    """``before=``/``after=`` as a tuple of pass names; anything else raises,
    naming ``arg``."""
    if value is None:
        return ()
    names = (value,) if isinstance(value, str) else value
    if isinstance(names, Iterable) and not isinstance(names, Mapping):
        names = tuple(names)
        if all(isinstance(n, str) and n for n in names):
            return names
    raise TypeError(
        f"{arg}= takes a pass name or an iterable of pass names (non-empty "
        f"strings), got {value!r}"
    )


def _assigned(stage: CustomPassStage) -> tuple[Callable[..., Any], ...]:
    return custom_graph_pass.get_custom_graph_passes(getattr(config, stage.value, None))


def _ordered(entries: Sequence[_Registration]) -> list[_Registration]:
    """A stable topological sort: registration order, except that a pass with
    ``before=`` moves just before the earliest pass it names and one with
    ``after=`` just after the latest.  Raises on a cycle."""
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
    """Add ``custom_pass`` to ``stage`` (a :class:`CustomPassStage` or its
    config field name), called like a pass assigned to that field.

    ``name`` (default: module and qualified name) is unique per stage;
    ``before``/``after`` name passes of the stage this one runs before/after.
    The FX graph cache serves a compile only when every pass is a
    ``CustomPassBase`` (in practice ``CustomGraphPass``, or
    ``CustomSchedulerPass`` for scheduler stages) whose ``uuid()`` is not None.
    """
    resolved = _as_stage(stage)
    if isinstance(custom_pass, type) and issubclass(
        custom_pass, custom_graph_pass.CustomPassBase
    ):
        raise TypeError(
            f"custom pass {custom_pass.__qualname__} is a class; register an "
            "instance of it"
        )
    if not callable(custom_pass):
        raise TypeError(f"custom pass must be callable, got {type(custom_pass)}")
    if name is not None and not (isinstance(name, str) and name):
        raise TypeError(f"name= must be a non-empty string, got {name!r}")
    pass_name = name if name is not None else _custom_pass_name(custom_pass)
    before_names, after_names = _names("before", before), _names("after", after)
    with _lock:
        entries = list(_registry.get(resolved, ()))
        if any(e.name == pass_name for e in entries):
            raise ValueError(
                f"a custom pass named {pass_name!r} is already registered for "
                f"{resolved.value}; remove it through its handle first or pass "
                "a different name="
            )
        registration = _Registration(
            resolved, pass_name, custom_pass, before_names, after_names, next(_seq)
        )
        _ordered([*entries, registration])  # refuse cycles before committing
        _registry[resolved] = [*entries, registration]
    log.debug("registered custom pass %s for %s", pass_name, resolved.value)
    return CustomPassHandle(resolved, pass_name, registration.seq)


def _registered(stage: CustomPassStage) -> list[_Registration]:
    with _lock:
        return _ordered(_registry.get(stage, ()))


def get_custom_passes(stage: CustomPassStage | str) -> tuple[Callable[..., Any], ...]:
    """The passes to run at ``stage``, in order: what the hooks iterate."""
    resolved = _as_stage(stage)
    assigned = _assigned(resolved)
    registered = _registered(resolved)
    if assigned and registered:
        log.debug(
            "config.%s is assigned (%s) and custom passes are registered for "
            "the same stage (%s): running all of them, assigned passes first",
            resolved.value,
            ", ".join(_custom_pass_name(p) for p in assigned),
            ", ".join(e.name for e in registered),
        )
    return (*assigned, *(e.custom_pass for e in registered))


def list_custom_passes(
    stage: CustomPassStage | str | None = None,
) -> dict[str, list[CustomPassInfo]]:
    """``{stage: [CustomPassInfo, ...]}`` in run order, for the stages with a
    pass (or just ``stage``)."""
    stages = [_as_stage(stage)] if stage is not None else list(CustomPassStage)
    listing: dict[str, list[CustomPassInfo]] = {}
    for s in stages:
        infos = [
            CustomPassInfo(_custom_pass_name(p), "config", p, _custom_pass_uuid(p))
            for p in _assigned(s)
        ] + [
            CustomPassInfo(
                e.name,
                "registry",
                e.custom_pass,
                _custom_pass_uuid(e.custom_pass, e.name),
            )
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


# Stages that run inside the compile a subprocess compile hands to its worker.
_SUBPROCESS_SKIPPED = (
    CustomPassStage.POST_GRAD_PRE,
    CustomPassStage.POST_GRAD_POST,
    CustomPassStage.PRE_FUSION,
    CustomPassStage.POST_FUSION,
)
_CacheInfos = tuple[tuple[CustomPassStage, tuple[CustomPassInfo, ...]], ...]


def _cache_infos(include_pre_grad: bool) -> _CacheInfos:
    return tuple(
        (stage, tuple(list_custom_passes(stage)[stage.value]))
        for stage in _cache_stages(include_pre_grad)
    )


def custom_pass_cache_bypass_reason(include_pre_grad: bool) -> str | None:
    """Why the FX graph cache cannot serve this compile, or None.
    ``include_pre_grad``: pre-grad passes run after the cache lookup."""
    from . import compile_fx

    infos = _cache_infos(include_pre_grad)
    if compile_fx.fx_compile_mode == compile_fx.FxCompileMode.SUBPROCESS:
        # the compile subprocess runs no post-grad or scheduler pass, registered
        # or assigned: an entry keyed with one would later serve a graph
        # compiled without it
        for stage, stage_infos in infos:
            if stage in _SUBPROCESS_SKIPPED and stage_infos:
                counters["inductor"]["custom_pass_cache_bypass"] += 1
                return (
                    f"custom pass {stage_infos[0].name} at {stage.value}: a "
                    "subprocess compile does not run it"
                )
    for stage, stage_infos in infos:
        for info in stage_infos:
            if info.uuid is not None:
                continue
            counters["inductor"]["custom_pass_cache_bypass"] += 1
            key = (stage.value, info.name)
            with _lock:
                first = key not in _warned_missing_uuid
                _warned_missing_uuid.add(key)
            if first:
                # A registered pass (new API) is warned about; an assigned one
                # bypassed the cache silently before, so it is only logged.
                (log.warning if info.source == "registry" else log.info)(
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
    """Per stage, each pass's (name, uuid) in run order: the cache key's part."""
    return tuple(
        (stage.value, tuple((info.name, info.uuid) for info in stage_infos))
        for stage, stage_infos in _cache_infos(include_pre_grad)
    )
