"""The BOCD recursion in C (``bocd_kernel.c``): the same arithmetic as
:class:`tracekit.detect.bocd.RunLengthPosterior` and :class:`~tracekit.detect.bocd.BocdRun`,
one loop over run lengths per point instead of a dozen numpy calls.

Per point the vectorised numpy recursion pays ~20 numpy calls of fixed overhead whatever the
number of surviving run lengths (~30), which caps one series near 15-20k points/s. Compiled,
the same recursion costs what its arithmetic costs. It is built once by the system's C compiler
into a cached library (:mod:`tracekit.core.compiled`); where there is no compiler
:func:`compiled` returns None and the numpy recursion runs, giving the same change points
(tested on every labeled series).

Online and offline both call the kernel (one point or a whole block), so they run the very
same machine code and agree bit for bit.
"""

from __future__ import annotations

import ctypes
from functools import partial
from pathlib import Path

import numpy as np

from tracekit.core import compiled as compiled_kernels


def _bind(library: ctypes.CDLL) -> partial:
    function = library.bocd_steps
    function.argtypes = [ctypes.c_void_p, ctypes.c_int64, ctypes.c_int64,
                         *[ctypes.c_void_p] * 4, ctypes.c_int64, *[ctypes.c_void_p] * 7]
    function.restype = ctypes.c_int
    return partial(BoundSteps, function)


compiled = compiled_kernels.Lazy(Path(__file__).with_suffix(".c"), _bind)
"""``compiled()`` is ``bind(log_prob, mu, beta, n, last_start, prior, rates, limits)``, which
makes a :class:`BoundSteps` for one run's arrays; None where the C kernel cannot be built."""


class BoundSteps:
    """The C recursion bound to one run's arrays, updated in place with the layout of
    ``RunLengthPosterior`` (columns in decreasing run length): ``prior`` = (mu0, kappa0,
    alpha0, beta0); ``rates`` = (log hazard, log(1 - hazard), log prune, threshold);
    ``limits`` = (max run lengths, short run). Their addresses are taken once: taking a numpy
    array's costs ~1.5 us, and the online detectors step one point per call."""

    DTYPES = (np.float64, np.float64, np.float64, np.int64, np.int64, np.float64, np.float64,
              np.int64)

    def __init__(self, function, log_prob, mu, beta, n, last_start, prior, rates, limits):
        arrays = (log_prob, mu, beta, n, last_start, prior, rates, limits)
        for array, dtype in zip(arrays, self.DTYPES, strict=True):
            if array.dtype != dtype or not array.flags.c_contiguous:
                order = "" if array.flags.c_contiguous else " out of C order"
                raise ValueError(f"the BOCD kernel takes C-ordered {np.dtype(dtype)} arrays, "
                                 f"not a {array.dtype} one{order}")
        self._function, self._arrays = function, arrays  # the arrays outlive their addresses
        self._rows, self._capacity = log_prob.shape
        self._state = np.zeros(2, np.int64)
        self._addresses = [array.ctypes.data for array in (*arrays, self._state)]

    def __call__(self, z: np.ndarray, size: int, t: int, constants: np.ndarray,
                 starts: np.ndarray) -> tuple[int, int]:
        """Absorb ``z[:, i]`` for every i; write each alarm's change start into
        ``starts[:, i]`` (-1 for none); return the new (size, t). ``constants`` (float64) has
        an entry for every run length the block reaches."""
        log_prob, mu, beta, n, last_start, prior, rates, limits, state = self._addresses
        z = np.ascontiguousarray(z, np.float64)
        if z.shape != (self._rows, starts.shape[1]) or starts.shape != z.shape \
                or starts.dtype != np.int64 or constants.dtype != np.float64 \
                or not (starts.flags.c_contiguous and constants.flags.c_contiguous):
            raise ValueError("the BOCD kernel takes z and starts of one shape, rows x points")
        self._state[0], self._state[1] = size, t
        if self._function(z.ctypes.data, z.shape[0], z.shape[1], log_prob, mu, beta, n,
                          self._capacity, state, last_start,
                          constants.ctypes.data, prior, rates, limits, starts.ctypes.data) != 0:
            raise MemoryError("the BOCD kernel could not allocate its work arrays")
        return int(self._state[0]), int(self._state[1])
