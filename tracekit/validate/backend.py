"""PyTorch, imported lazily, and the device the checks run on.

PyTorch is the optional ``gpu`` extra: the rest of tracekit must import and run without it, so
every validator asks :func:`require_torch` at call time and a missing install becomes one line
that says how to fix it.
"""

from __future__ import annotations

import importlib
import platform
import socket
from dataclasses import dataclass
from types import ModuleType

from tracekit.core.errors import TracekitError

INSTALL_HINT = (
    "the validators need PyTorch, the optional `gpu` extra: install it with "
    "`pip install 'tracekit[gpu]'` (on a machine without a GPU, the CPU build is enough: "
    "`pip install torch==2.13.0`)"
)


def require_torch() -> ModuleType:
    """``torch``, or a TracekitError saying how to install it."""
    try:
        return importlib.import_module("torch")
    except ImportError:
        raise TracekitError(INSTALL_HINT) from None


def local_host() -> str:
    """This machine's short host name, as the ingest readers normalise host names."""
    return socket.gethostname().split(".")[0].lower()


@dataclass(frozen=True)
class DeviceInfo:
    """What a check ran on, for the report: device model, driver and runtime versions."""

    kind: str
    name: str
    driver: str
    runtime: str
    model_class: str
    """Devices of one class may be compared: same model, SM count and maximum SM clock."""

    def describe(self) -> str:
        return f"{self.name} ({self.kind}; driver {self.driver}; {self.runtime})"


def device_info(device: str) -> DeviceInfo:
    """Describe ``device`` (``cpu`` or ``cuda:N``) for the report."""
    torch = require_torch()
    if device.startswith("cuda"):
        properties = torch.cuda.get_device_properties(device)
        model_class = (f"{properties.name}, {properties.multi_processor_count} SMs, "
                       f"max {_max_sm_clock_mhz(torch.device(device).index or 0)} MHz")
        return DeviceInfo("cuda", properties.name, _nvidia_driver(),
                          f"torch {torch.__version__}, CUDA {torch.version.cuda}, "
                          f"compute capability {properties.major}.{properties.minor}",
                          model_class)
    name = platform.processor() or platform.machine()
    return DeviceInfo("cpu", name, "-",
                      f"torch {torch.__version__}, {torch.get_num_threads()} threads", name)


def _max_sm_clock_mhz(index: int) -> str:
    """The GPU's maximum SM clock through NVML (a static property of the SKU and its
    configuration, unlike the current clock, which a throttled GPU lowers), else 'unknown'."""
    try:
        pynvml = importlib.import_module("pynvml")
        pynvml.nvmlInit()
        handle = pynvml.nvmlDeviceGetHandleByIndex(index)
        return str(pynvml.nvmlDeviceGetMaxClockInfo(handle, pynvml.NVML_CLOCK_SM))
    except Exception:  # NVML is optional: the model and SM count still separate classes
        return "unknown"


def _nvidia_driver() -> str:
    """The NVIDIA driver version through NVML when available, else 'unknown'."""
    try:
        pynvml = importlib.import_module("pynvml")
        pynvml.nvmlInit()
        version = pynvml.nvmlSystemGetDriverVersion()
        return version.decode() if isinstance(version, bytes) else version
    except Exception:  # NVML is optional: any failure falls back to /proc
        return _driver_from_proc()


def _driver_from_proc() -> str:
    try:
        with open("/proc/driver/nvidia/version") as handle:
            first = handle.readline()
    except OSError:
        return "unknown"
    words = first.split()
    return next((w for w in words if w[:1].isdigit() and "." in w), "unknown")
