"""Kernels built ahead of time: built once into the cache, loaded later without numba, the GIL
released while they run, and a build that fails recorded so that the caller JIT-compiles."""

from __future__ import annotations

import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from tracekit.core import compiled

pytestmark = pytest.mark.skipif(shutil.which("cc") is None and shutil.which("gcc") is None,
                                reason="no C compiler: kernels are JIT-compiled instead")

KERNEL_SOURCE = '''
def spin(rounds):
    """Busy for ``rounds`` passes of a long integer loop; returns a checksum."""
    total = 0
    for r in range(rounds):
        for k in range(1_000_000):
            total = (total * 31 + k + r) % 1_000_003
    return total


def prepare():
    return spin, "int64(int64)"
'''


def python_spin(rounds: int) -> int:
    total = 0
    for r in range(rounds):
        for k in range(1_000_000):
            total = (total * 31 + k + r) % 1_000_003
    return total


@pytest.fixture(scope="module")
def kernel_source(tmp_path_factory) -> Path:
    source = tmp_path_factory.mktemp("kernels") / "spin_kernel.py"
    source.write_text(KERNEL_SOURCE)
    return source


def definitions(source: Path) -> dict:
    """What the module file ``source`` defines (it is not on the import path)."""
    namespace: dict = {}
    exec(compile(source.read_text(), str(source), "exec"), namespace)
    return namespace


def load_from(source: Path):
    return compiled.load("spin", source, definitions(source)["prepare"])


@pytest.fixture(scope="module")
def spin(kernel_source):
    kernel = load_from(kernel_source)
    assert kernel is not None, (kernel_source.parent / "__pycache__").iterdir()
    return kernel


def test_built_kernel_computes_what_the_python_function_does(spin, kernel_source):
    assert spin(2) == python_spin(2)
    built = list((kernel_source.parent / "__pycache__").glob("spin_*" + compiled.EXTENSION_SUFFIX))
    assert len(built) == 1


def test_a_later_process_loads_it_without_importing_numba(spin, kernel_source):
    code = ("import sys\nfrom pathlib import Path\nfrom tracekit.core import compiled\n"
            f"kernel = compiled.load('spin', Path({str(kernel_source)!r}), None)\n"
            "print(kernel(1), 'numba' in sys.modules)\n")
    output = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                            check=True, cwd=Path(__file__).parents[2]).stdout.split()
    assert output == [str(python_spin(1)), "False"]


def test_the_gil_is_released_while_the_kernel_runs(spin):
    """Another Python thread keeps counting during the call about as fast as while this one
    sleeps (with the GIL held it would get one switch interval, 5 ms, at the start)."""
    counted, running = [0], threading.Event()

    def count():
        running.set()
        while running.is_set():
            counted[0] += 1

    def counts_per_s(wait) -> float:
        before, start = counted[0], time.perf_counter()
        wait()
        return (counted[0] - before) / (time.perf_counter() - start)

    counter = threading.Thread(target=count)
    counter.start()
    running.wait()
    sleeping = counts_per_s(lambda: time.sleep(0.2))
    during_kernel = counts_per_s(lambda: spin(40))  # about 0.2 s of arithmetic
    running.clear()
    counter.join()
    assert during_kernel > 0.3 * sleeping


def test_a_failed_build_is_recorded_and_not_tried_again(tmp_path, caplog):
    source = tmp_path / "broken_kernel.py"
    source.write_text("def broken(x):\n    return undefined_name + x\n")
    attempts = []

    def prepare():
        attempts.append(1)
        return definitions(source)["broken"], "int64(int64)"

    with caplog.at_level("INFO", logger="tracekit.core.compiled"):
        assert compiled.load("broken", source, prepare) is None
        assert compiled.load("broken", source, prepare) is None
    assert attempts == [1]
    # the one build attempt was announced (the CLI prints it: a first run pauses)
    assert [r.getMessage().split(" (")[0] for r in caplog.records] == [
        "building the broken kernel once"]
    markers = list((tmp_path / "__pycache__").glob("broken_*.failed"))
    assert len(markers) == 1 and "undefined_name" in markers[0].read_text()


def test_editing_the_source_builds_a_new_module(tmp_path):
    source = tmp_path / "edited_kernel.py"
    results = []
    for body in ("return x + 1", "return x + 2"):
        source.write_text(f"def edited(x):\n    {body}\n")
        function = definitions(source)["edited"]
        results.append(compiled.load("edited", source, lambda f=function: (f, "int64(int64)"))(40))
    assert results == [41, 42]
    assert len(list((tmp_path / "__pycache__").glob("edited_*" + compiled.EXTENSION_SUFFIX))) == 2
