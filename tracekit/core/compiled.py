"""Numba kernels built once, ahead of time, into extension modules cached on disk.

A kernel that numba JIT-compiles and then loads from its own disk cache still costs every
process about 0.45 s before its first call: importing numba (0.12 s), registering its CPU
target's implementations (0.19 s) and, through numba's BLAS check, importing scipy.linalg
(0.13 s). That is a tenth of a 1 GiB NCCL log's ingest, most of a small one, and it is paid
again by every Dask worker. The same machine code built with ``numba.pycc`` into an extension
module imports in under a millisecond, without numba.

A kernel's module is built on first use (about as long as numba's first JIT compilation), for
the platform's generic CPU so that a cache shared by the nodes of a cluster serves them all,
and with its Python wrapper releasing the GIL as ``nogil=True`` does (the NCCL scan runs on
two parse threads). Its name carries a hash of the kernel's source, numba's version, the
interpreter and the platform, so editing the kernel or upgrading either builds a new one.
Where it cannot be built (no C compiler, a numba without ``pycc``) a marker file beside it
records why, later processes do not try again, and :func:`kernel` JIT-compiles it as before: results
are the same.
"""

from __future__ import annotations

import hashlib
import importlib.machinery
import importlib.metadata
import importlib.util
import logging
import os
import platform
import sys
import sysconfig
import tempfile
from collections.abc import Callable
from contextlib import contextmanager, suppress
from pathlib import Path

LOG = logging.getLogger(__name__)
"""Says when a kernel is built (once per machine and version), which takes tens of seconds."""

EXPORTED_NAME = "kernel"
"""Name of the kernel inside its extension module."""

EXTENSION_SUFFIX = importlib.machinery.EXTENSION_SUFFIXES[0]


def kernel(name: str, source: Path, prepare: Callable[[], tuple[Callable, object]],
           options: dict[str, object] | None = None) -> Callable | None:
    """The kernel from :func:`load`, else compiled by numba's JIT on first call (cached on disk
    beside ``source``, with the same ``options``); None without numba."""
    built = load(name, source, prepare, options)
    if built is not None:
        return built
    try:
        import numba
    except ImportError:  # pragma: no cover - exercised where numba is absent
        return None
    function, _ = prepare()
    return numba.njit(cache=True, nogil=True, **(options or {}))(function)


def load(name: str, source: Path, prepare: Callable[[], tuple[Callable, object]],
         options: dict[str, object] | None = None) -> Callable | None:
    """The kernel ``name`` defined in the module file ``source``, from its cached extension
    module, built first when there is none; None when it cannot be built or loaded.

    ``prepare`` is called only to build: it imports numba, makes the kernel's callees numba
    functions, and returns the kernel's Python function and its numba signature (a string or
    a numba signature object). ``options``: numba compiler flags the kernel is JIT-compiled
    with too (e.g. ``error_model``), so that both builds compute the same."""
    key = _key(source)
    if key is None:
        return None
    folder = cache_folder(source)
    module_name = f"{name}_{key}"
    path = folder / (module_name + EXTENSION_SUFFIX)
    marker = folder / (module_name + ".failed")
    if marker.exists():
        return None
    try:
        if not path.exists():
            LOG.info("building the %s kernel once (tens of seconds; cached in %s for every "
                     "later run)", name, folder)
            function, signature = prepare()
            _build(module_name, folder, function, signature, options or {})
        return getattr(_import(module_name, path), EXPORTED_NAME)
    except Exception as error:  # noqa: BLE001 - any failure means: JIT-compile instead
        with suppress(OSError):
            marker.write_text(f"{type(error).__name__}: {error}\n")
        return None


def cache_folder(source: Path) -> Path:
    """Where the kernels of ``source`` are cached: its ``__pycache__`` as numba does, or the
    user's cache folder when the package is not writable (a system-wide install)."""
    folder = source.parent / "__pycache__"
    with suppress(OSError):
        folder.mkdir(exist_ok=True)
    if os.access(folder, os.W_OK):
        return folder
    folder = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "tracekit"
    folder.mkdir(parents=True, exist_ok=True)
    return folder


def _key(source: Path) -> str | None:
    """16 hex digits of the kernel's source, numba's version, the interpreter and the platform
    (a cache shared by nodes of different images must not hand one a module built for
    another's C library); None without numba (nothing could build the kernel)."""
    try:
        numba_version = importlib.metadata.version("numba")
    except importlib.metadata.PackageNotFoundError:
        return None
    identity = (f"{numba_version} {sys.version} {sysconfig.get_platform()} "
                f"{platform.libc_ver()}").encode()
    return hashlib.sha256(identity + source.read_bytes()).hexdigest()[:16]


def _build(module_name: str, folder: Path, function: Callable, signature: object,
           options: dict[str, object]) -> None:
    """Build the extension module in a private folder and move it into ``folder`` whole, so
    that a process loading it never sees half a file (two processes building at once each
    move a complete one)."""
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # pycc is "pending deprecation", with no replacement yet
        from numba.pycc import CC, compiler
    cc = CC(module_name)
    cc.export(EXPORTED_NAME, signature)(function)
    with tempfile.TemporaryDirectory(dir=folder, prefix=".build-") as building:
        cc.output_dir = building
        with _compiler_flags(compiler, {"release_gil": True, **options}):
            cc.compile()
        os.replace(Path(building) / cc.output_file, folder / (module_name + EXTENSION_SUFFIX))


@contextmanager
def _compiler_flags(compiler, options: dict[str, object]):
    """Build with these numba compiler flags. pycc compiles with numba's defaults, whose Python
    wrapper holds the GIL for the whole call, while the kernels run on several threads at
    once: they are built with ``release_gil`` as ``nogil=True`` would, and with the flags the
    JIT gets (the error model decides what dividing by zero does)."""
    default_flags = compiler.Flags

    class KernelFlags(default_flags):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            for option, value in options.items():
                setattr(self, option, value)

    compiler.Flags = KernelFlags
    try:
        yield
    finally:
        compiler.Flags = default_flags


def _import(module_name: str, path: Path):
    spec = importlib.util.spec_from_file_location(module_name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module
