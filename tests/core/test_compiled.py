"""C kernels built on first use: built once into the cache, loaded later by a process that
cannot import numba, the GIL released while they run, a build that fails recorded with the
compiler's reason, and an edited source built anew."""

from __future__ import annotations

import ctypes
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from tracekit.core import compiled

pytestmark = pytest.mark.skipif(shutil.which(compiled.compiler()[0]) is None,
                                reason="no C compiler: the numpy and polars paths run instead")

SPIN_SOURCE = """
#include <stdint.h>

/* Busy for `rounds` passes of a long integer loop; returns a checksum. */
int64_t spin(int64_t rounds)
{
    int64_t total = 0;
    for (int64_t r = 0; r < rounds; r++)
        for (int64_t k = 0; k < 1000000; k++)
            total = (total * 31 + k + r) % 1000003;
    return total;
}
"""


def python_spin(rounds: int) -> int:
    total = 0
    for r in range(rounds):
        for k in range(1_000_000):
            total = (total * 31 + k + r) % 1_000_003
    return total


def function(library: ctypes.CDLL, name: str):
    found = getattr(library, name)
    found.argtypes, found.restype = [ctypes.c_int64], ctypes.c_int64
    return found


@pytest.fixture(scope="module")
def spin_source(tmp_path_factory) -> Path:
    source = tmp_path_factory.mktemp("kernels") / "spin_kernel.c"
    source.write_text(SPIN_SOURCE)
    return source


@pytest.fixture(scope="module")
def spin(spin_source):
    library = compiled.load(spin_source)
    assert library is not None, list((spin_source.parent / "__pycache__").iterdir())
    return function(library, "spin")


def built(folder: Path, stem: str) -> list[Path]:
    return list((folder / "__pycache__").glob(f"{stem}_*{compiled.LIBRARY_SUFFIX}"))


def test_built_kernel_computes_what_the_python_function_does(spin, spin_source):
    assert spin(2) == python_spin(2)
    assert len(built(spin_source.parent, "spin_kernel")) == 1


def test_a_later_process_loads_it_without_building_or_numba(spin, spin_source):
    library = built(spin_source.parent, "spin_kernel")[0]
    modified = library.stat().st_mtime_ns
    code = ("import ctypes, sys\nsys.modules['numba'] = None  # importing numba fails\n"
            "from pathlib import Path\nfrom tracekit.core import compiled\n"
            f"spin = compiled.load(Path({str(spin_source)!r})).spin\n"
            "spin.argtypes, spin.restype = [ctypes.c_int64], ctypes.c_int64\n"
            "print(spin(1))\n")
    output = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                            check=True, cwd=Path(__file__).parents[2]).stdout.split()
    assert output == [str(python_spin(1))]
    assert library.stat().st_mtime_ns == modified
    assert len(built(spin_source.parent, "spin_kernel")) == 1


def counted_during(kernel) -> int:
    """How many times another Python thread counts while ``kernel`` runs (about 0.2 s): 0
    exactly when the call holds the GIL, more when it releases it, however loaded the machine.
    The counter hands the GIL back after every count (``sleep(0)``), so this thread gets it
    back at once; under a switch interval of 10 s it cannot take the GIL from a call that
    holds it."""
    counted, running = [0], threading.Event()

    def count():
        running.set()
        while running.is_set():
            counted[0] += 1
            time.sleep(0)

    interval = sys.getswitchinterval()
    sys.setswitchinterval(10.0)
    counter = threading.Thread(target=count)
    try:
        counter.start()
        running.wait()
        before = counted[0]
        kernel()
        return counted[0] - before
    finally:
        running.clear()
        counter.join()
        sys.setswitchinterval(interval)


def test_the_gil_is_released_while_the_kernel_runs(spin):
    assert counted_during(lambda: spin(40)) > 0


def test_a_kernel_holding_the_gil_would_be_seen(spin, spin_source):
    """The control: the same function called through ``ctypes.PyDLL``, which keeps the GIL."""
    library = ctypes.PyDLL(str(built(spin_source.parent, "spin_kernel")[0]))
    assert counted_during(lambda: function(library, "spin")(40)) == 0


def test_a_missing_compiler_is_recorded_and_not_tried_again(tmp_path, monkeypatch, caplog):
    source = tmp_path / "spin_kernel.c"
    source.write_text(SPIN_SOURCE)
    monkeypatch.setenv("CC", "/nonexistent/cc")
    with caplog.at_level("INFO", logger="tracekit.core.compiled"):
        assert compiled.load(source) is None
        assert compiled.load(source) is None
    # the one build attempt was announced (the CLI prints it: a first run pauses)
    assert [r.getMessage().split(" (")[0] for r in caplog.records] == [
        "building the spin_kernel kernel once"]
    markers = list((tmp_path / "__pycache__").glob("spin_kernel_*.failed"))
    assert [marker.read_text() for marker in markers] == [
        "cannot run the C compiler /nonexistent/cc: No such file or directory\n"]
    monkeypatch.delenv("CC")
    assert function(compiled.load(source), "spin")(1) == python_spin(1)  # another key


def test_a_compiler_error_is_recorded_in_one_line(tmp_path):
    source = tmp_path / "broken_kernel.c"
    source.write_text("int broken(int x) { return undefined_name + x; }\n")
    assert compiled.load(source) is None
    (marker,) = (tmp_path / "__pycache__").glob("broken_kernel_*.failed")
    reason = marker.read_text()
    assert reason.count("\n") == 1 and "error:" in reason and "undefined_name" in reason
    assert not built(tmp_path, "broken_kernel")
    assert not list((tmp_path / "__pycache__").glob(".build-*"))  # its build folder is gone


def test_editing_the_source_builds_a_new_library(tmp_path):
    source = tmp_path / "edited_kernel.c"
    results = []
    for body in ("return x + 1;", "return x + 2;"):
        source.write_text(f"#include <stdint.h>\nint64_t edited(int64_t x) {{ {body} }}\n")
        results.append(function(compiled.load(source), "edited")(40))
    assert results == [41, 42]
    assert len(built(tmp_path, "edited_kernel")) == 2


def test_a_missing_source_is_no_kernel(tmp_path):
    assert compiled.load(tmp_path / "absent_kernel.c") is None


def test_lazy_loads_once_for_threads_arriving_together(tmp_path, monkeypatch):
    source = tmp_path / "spin_kernel.c"
    source.write_text(SPIN_SOURCE)
    loads, barrier, got = [], threading.Barrier(4), []
    real_load = compiled.load
    monkeypatch.setattr(compiled, "load", lambda path: loads.append(path) or real_load(path))
    kernel = compiled.Lazy(source, lambda library: function(library, "spin"))

    def first_use():
        barrier.wait()
        got.append(kernel()(1))

    threads = [threading.Thread(target=first_use) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert (got, loads) == ([python_spin(1)] * 4, [source])
    assert compiled.Lazy(tmp_path / "absent_kernel.c", lambda library: 1)() is None
