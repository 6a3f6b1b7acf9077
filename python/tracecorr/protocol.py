"""The protocol packages: what each hands the engine's modules, which name none.

A protocol's Python code lives in its subpackage ``tracecorr/<package>/``, named
like its package folder everywhere else (``ProtocolSpec.id`` with ``_`` for
``-``), beside its bindings ``tracecorr._tracecorr.<package>``. Importing
``tracecorr`` imports the subpackage of every protocol compiled into the
extension (:func:`load_packages`), and each registers a :class:`ProtocolPackage`
(:func:`register`). :class:`~tracecorr.Target` and the pytest plugin ask the
package for what only the protocol knows: how a launched process turns it on,
when a process has published it, and what a profiler's side of it is.

A protocol moved out of the engine package keeps its former names working:
``exports`` lists the names an engine module still answers (resolved by the
module's ``__getattr__``, :func:`forwarder`) and ``legacy_modules`` the modules
still importable as ``tracecorr.<name>``.
"""
from __future__ import annotations

import functools
import importlib
import sys
import types
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, List, Mapping, Optional, Tuple

from . import _tracecorr

__all__ = ["ProtocolPackage", "register", "packages", "package", "spec", "load_packages", "forwarder", "exported_names",
           "target_helper"]


@dataclass(frozen=True)
class ProtocolPackage:
    """What one protocol subpackage hands the engine's modules."""

    id: str  # its ProtocolSpec id (tracecorr.protocols())
    module: types.ModuleType  # the subpackage
    # (enabled: Optional[str], socket_dir: Optional[str]) -> the environment variables that turn the
    # protocol on in a launched process: `enabled` its switch (None: leave it unset), `socket_dir` a
    # fresh directory for its sockets (None: none made).
    launch_environment: Callable[..., Dict[str, str]]
    # inspection (the protocol's `tracecorr inspect --json` document) -> None once the process has
    # published what the protocol publishes, else what is still missing, for people.
    not_ready: Callable[[dict], Optional[str]]
    # target -> a profiler's side of the protocol connected to it, as a context manager (the pytest
    # plugin's host_agent fixture).
    profiler: Callable[[Any], Any]
    # Methods a Target of this protocol gains: name -> function(target, ...).
    target_helpers: Mapping[str, Callable[..., Any]] = field(default_factory=dict)
    # Engine module ("tracecorr", "tracecorr.otlp") -> the names it still answers from this package.
    exports: Mapping[str, Tuple[str, ...]] = field(default_factory=dict)
    # "<name>" -> a module of this package still importable as tracecorr.<name>.
    legacy_modules: Mapping[str, types.ModuleType] = field(default_factory=dict)


_PACKAGES: Dict[str, ProtocolPackage] = {}


def register(package: ProtocolPackage) -> None:
    """Called by a protocol subpackage when imported. Its id must be a compiled-in protocol's, and its
    exported names and legacy modules no other package's."""
    if _tracecorr.find_protocol(package.id) is None:
        raise RuntimeError(f"{package.module.__name__}: protocol {package.id!r} is not compiled into "
                           f"{_tracecorr.__file__}")
    if package.id in _PACKAGES:
        if _PACKAGES[package.id] == package:
            return
        raise RuntimeError(f"protocol {package.id!r} registered twice")
    for other in _PACKAGES.values():
        for module_name, names in package.exports.items():
            clash = set(names) & set(other.exports.get(module_name, ()))
            if clash:
                raise RuntimeError(f"{module_name}: {sorted(clash)} exported by both {other.id} and {package.id}")
        clash = set(package.legacy_modules) & set(other.legacy_modules)
        if clash:
            raise RuntimeError(f"tracecorr.{sorted(clash)}: legacy module of both {other.id} and {package.id}")
    _PACKAGES[package.id] = package
    for name, module in package.legacy_modules.items():
        sys.modules[f"{__package__}.{name}"] = module


def packages() -> List[ProtocolPackage]:
    """The registered protocol packages, in the extension's protocol order."""
    order = [p.id for p in _tracecorr.protocols()]
    return sorted(_PACKAGES.values(), key=lambda p: order.index(p.id))


def _choose(kind: str, wanted: Optional[str], available: Dict[str, Any]):
    if wanted is not None:
        if wanted not in available:
            raise ValueError(f"no {kind} {wanted!r} (have: {', '.join(available) or 'none'})")
        return available[wanted]
    if not available:
        raise ValueError(f"no {kind} is available")
    # Several: the first compiled in (TRACECORR_PROTOCOLS' order), so scripts written when there
    # was one protocol keep their meaning; name another with protocol=.
    return next(iter(available.values()))


def package(protocol: Optional[str] = None) -> ProtocolPackage:
    """The registered package of ``protocol`` (an id); None: the first compiled in."""
    return _choose("protocol package", protocol, {p.id: p for p in packages()})


def spec(protocol: Optional[str] = None):
    """The compiled-in ProtocolSpec of ``protocol``; None: the first compiled in."""
    return _choose("protocol", protocol, {p.id: p for p in _tracecorr.protocols()})


def load_packages() -> None:
    """Imports the subpackage of every compiled-in protocol (a protocol may have none)."""
    for compiled in _tracecorr.protocols():
        name = f"{__package__}.{compiled.id.replace('-', '_')}"
        try:
            importlib.import_module(name)
        except ModuleNotFoundError as e:
            if e.name != name:
                raise


def forwarder(module_name: str) -> Callable[[str], Any]:
    """A module ``__getattr__`` answering the names packages export from ``module_name``."""

    def __getattr__(name: str) -> Any:
        for p in packages():
            if name in p.exports.get(module_name, ()):
                return getattr(p.module, name)
            if module_name == __package__ and name in p.legacy_modules:
                return p.legacy_modules[name]
        raise AttributeError(f"module {module_name!r} has no attribute {name!r}")

    return __getattr__


def exported_names(module_name: str) -> List[str]:
    """Every name packages export from ``module_name`` (for its ``__all__``)."""
    names: List[str] = []
    for p in packages():
        names += p.exports.get(module_name, ())
        if module_name == __package__:
            names += p.legacy_modules
    return names


def target_helper(package: ProtocolPackage, target: Any, name: str) -> Callable[..., Any]:
    """``name`` of the package's target helpers, bound to ``target`` (AttributeError when it has none)."""
    helper = package.target_helpers.get(name)
    if helper is None:
        raise AttributeError(f"{type(target).__name__!r} object has no attribute {name!r} "
                             f"(nor a helper of protocol {package.id})")
    return functools.partial(helper, target)
