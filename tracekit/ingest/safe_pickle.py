"""Load an untrusted pickle that should hold only plain data.

A Flight Recorder dump is a pickle written by another machine: ``pickle.load`` on it would run
whatever callable the file names. This unpickler admits containers and scalars only (dict,
list, tuple, str, bytes, int, float, bool, None) and refuses every global lookup, so a file
that tries to call ``os.system`` is an error, never an execution.
"""

from __future__ import annotations

import io
import pickle

from tracekit.core.errors import InputError
from tracekit.ingest.limits import Limits, check_nesting, too_large

ALLOWED_GLOBALS = frozenset({("builtins", "set"), ("builtins", "frozenset"),
                             ("_codecs", "encode")})
"""The only callables plain data needs: sets, and ``_codecs.encode``, which protocol 2 uses
to rebuild ``bytes``. None of them can reach the file system or run code."""


class _RestrictedUnpickler(pickle.Unpickler):
    def find_class(self, module: str, name: str):
        if (module, name) in ALLOWED_GLOBALS:
            return super().find_class(module, name)
        raise pickle.UnpicklingError(f"refusing to load {module}.{name}: only plain data "
                                     "(containers and scalars) is allowed")


def loads(data: bytes, path: str, limits: Limits | None = None) -> object:
    """The plain-data object pickled in ``data``; InputError naming ``path`` otherwise. The
    unpickler is a stack machine (no recursion); the object is then checked for depth and
    shared references (:func:`~tracekit.ingest.limits.check_nesting`) before anyone walks it."""
    limits = limits or Limits()
    if len(data) > limits.max_whole_file_bytes:
        raise InputError(too_large("pickle", limits.max_whole_file_bytes,
                                   "max_whole_file_bytes"), path)
    try:
        value = _RestrictedUnpickler(io.BytesIO(data)).load()
    except pickle.UnpicklingError as error:
        raise InputError(f"unsafe or corrupt pickle: {error}", path) from None
    except (EOFError, ValueError, TypeError, AttributeError, IndexError, KeyError,
            LookupError, MemoryError, RecursionError, OverflowError) as error:
        raise InputError(f"corrupt pickle ({type(error).__name__}: {error})", path) from None
    check_nesting(value, len(data), limits, path)
    return value
