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

MAX_PICKLE_BYTES = 512 * 1024 * 1024
"""Larger files are refused before unpickling (a Flight Recorder dump is a few MB)."""

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


def loads(data: bytes, path: str) -> object:
    """The plain-data object pickled in ``data``; InputError naming ``path`` otherwise."""
    if len(data) > MAX_PICKLE_BYTES:
        raise InputError(f"pickle larger than {MAX_PICKLE_BYTES} bytes; refusing to load it", path)
    try:
        return _RestrictedUnpickler(io.BytesIO(data)).load()
    except pickle.UnpicklingError as error:
        raise InputError(f"unsafe or corrupt pickle: {error}", path) from None
    except (EOFError, ValueError, TypeError, AttributeError, IndexError, KeyError,
            MemoryError, RecursionError) as error:
        raise InputError(f"corrupt pickle ({type(error).__name__}: {error})", path) from None
