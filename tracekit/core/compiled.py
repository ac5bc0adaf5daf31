"""C kernels built once by the system's C compiler into shared libraries cached on disk.

The two hot loops (the NCCL COLL line scan, the BOCD recursion) are plain C99 files beside their
Python modules, with no Python C API, loaded with :mod:`ctypes`: loading costs under a
millisecond per process, with nothing imported but ctypes, and a ``ctypes.CDLL`` function
releases the GIL while it runs (the NCCL scan runs on two parse threads).

A kernel's library is built on first use (0.1-0.25 CPU-s) with ``-O2`` for the platform's
generic CPU, so that a cache shared by the nodes of a cluster serves them all, and without
floating-point contraction or fast-math so that it computes what numpy computes. Its name
carries a hash of the C source, the compiler command, the interpreter and the platform, so
editing the kernel or changing either builds a new one. Where it cannot be built (no compiler,
a compiler error) a marker file beside it records the compiler's reason, later processes do
not try again, and :func:`load` returns None: the callers' numpy / polars paths give the same
results.
"""

from __future__ import annotations

import ctypes
import hashlib
import logging
import os
import shlex
import shutil
import subprocess
import sys
import sysconfig
import tempfile
import threading
from collections.abc import Callable
from contextlib import suppress
from pathlib import Path
from typing import Generic, TypeVar

LOG = logging.getLogger(__name__)
"""Says when a kernel is built (once per machine and version)."""

FLAGS = ("-std=c99", "-O2", "-fPIC", "-shared", "-ffp-contract=off")
"""ISO C99 at the optimisation level of distribution packages; no ``-march=native`` (one cache
serves a cluster of different CPUs), no ``-ffast-math`` and no fused multiply-add (which GCC
emits by default where the CPU has it, e.g. on aarch64), so the arithmetic is IEEE's, as numpy's."""

LIBRARY_SUFFIX = ".dll" if sys.platform == "win32" else ".so"

Kernel = TypeVar("Kernel")


class Lazy(Generic[Kernel]):
    """A kernel loaded (or built) on the first call, once: ``Lazy(source, wrap)()`` is
    ``wrap(load(source))``, or None where it cannot be built. Blocks are parsed on several
    threads, and the first ones to arrive must not build it twice: a thread arriving while
    another builds it waits (parsing its block without the kernel was measured slower)."""

    def __init__(self, source: Path, wrap: Callable[[ctypes.CDLL], Kernel]):
        self._source, self._wrap = source, wrap
        self._kernel: Kernel | None = None
        self._tried = False
        self._loading = threading.Lock()

    def __call__(self) -> Kernel | None:
        if not self._tried:
            with self._loading:
                if not self._tried:
                    library = load(self._source)
                    self._kernel = None if library is None else self._wrap(library)
                    self._tried = True
        return self._kernel

    @property
    def loaded(self) -> bool:
        """Whether the kernel is loaded (a worker's warm-up loads it before its first task)."""
        return self._kernel is not None


def load(source: Path) -> ctypes.CDLL | None:
    """The shared library built from the C file ``source``, from the cache, built first when
    there is none; None when it cannot be built or loaded (see the marker file for why)."""
    command = compiler()
    try:
        folder = cache_folder(source)
        name = f"{source.stem}_{_key(source, command)}"
    except OSError:  # no source (an install without the package data), no cache folder
        return None
    path, marker = folder / (name + LIBRARY_SUFFIX), folder / (name + ".failed")
    if marker.exists():
        return None
    try:
        if not path.exists():
            LOG.info("building the %s kernel once (cached in %s for every later run)",
                     source.stem, folder)
            _build(source, command, path)
        return ctypes.CDLL(str(path))
    except (OSError, subprocess.SubprocessError, ValueError) as error:
        with suppress(OSError):
            marker.write_text(f"{error}\n")
        return None


def compiler() -> list[str]:
    """The C compiler command: ``$CC``, else the one the interpreter was built with when this
    machine has it, else ``cc``."""
    if os.environ.get("CC"):
        return shlex.split(os.environ["CC"])
    built_with = shlex.split(sysconfig.get_config_var("CC") or "")
    return built_with if built_with and shutil.which(built_with[0]) else ["cc"]


def cache_folder(source: Path) -> Path:
    """Where the kernels of ``source`` are cached: its ``__pycache__``, or the user's cache
    folder when the package is not writable (a system-wide install)."""
    folder = source.parent / "__pycache__"
    with suppress(OSError):
        folder.mkdir(exist_ok=True)
    if os.access(folder, os.W_OK):
        return folder
    folder = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "tracekit"
    folder.mkdir(parents=True, exist_ok=True)
    return folder


def _key(source: Path, command: list[str]) -> str:
    """16 hex digits of the C source, the compiler command, the interpreter and the platform (a
    cache shared by nodes of different images must not hand one a library built for another's
    C library)."""
    libc = ""
    with suppress(ValueError, OSError, AttributeError):
        libc = os.confstr("CS_GNU_LIBC_VERSION") or ""
    identity = f"{command} {FLAGS} {sys.version} {sysconfig.get_platform()} {libc}".encode()
    return hashlib.sha256(identity + source.read_bytes()).hexdigest()[:16]


def _build(source: Path, command: list[str], path: Path) -> None:
    """Compile in a private folder and move the library into place whole, so that a process
    loading it never sees half a file (two processes building at once each move a complete
    one). Raises with the compiler's first line of complaint."""
    with tempfile.TemporaryDirectory(dir=path.parent, prefix=".build-") as building:
        built = Path(building) / path.name
        try:
            result = subprocess.run([*command, *FLAGS, "-o", str(built), str(source), "-lm"],
                                    capture_output=True, text=True, check=False)
        except OSError as error:
            raise OSError(f"cannot run the C compiler {shlex.join(command)}: "
                          f"{error.strerror}") from error
        if result.returncode != 0:
            lines = (result.stderr or result.stdout).strip().splitlines() or ["no output"]
            complaint = next((line for line in lines if "error:" in line), lines[0])
            raise OSError(f"{shlex.join(command)} failed: {complaint}")
        os.replace(built, path)
