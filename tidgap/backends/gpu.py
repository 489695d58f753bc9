"""Is a GPU usable here, and if not, why: CuPy missing, no device, driver too old."""

from __future__ import annotations

import importlib

INSTALL_HINT = "pip install cupy-cuda12x or cupy-cuda13x, for your CUDA major"


def gpu_unusable_reason() -> str | None:
    """``None`` when CuPy imports and sees a CUDA device; else one line saying why not."""
    try:
        cupy = importlib.import_module("cupy")
    except ImportError:
        return f"CuPy is not installed ({INSTALL_HINT})"
    except Exception as error:  # a broken CUDA install can fail in many ways on import
        return f"CuPy failed to import: {error}"
    runtime = cupy.cuda.runtime
    try:
        count = runtime.getDeviceCount()
    except runtime.CUDARuntimeError as error:
        text = str(error)
        if "InsufficientDriver" in text:
            driver = runtime.driverGetVersion()
            if driver == 0:
                return "no NVIDIA driver found"
            return (
                f"the NVIDIA driver is too old for this CuPy (built for CUDA "
                f"{_version(runtime.runtimeGetVersion())}, the driver supports "
                f"{_version(driver)})"
            )
        if "NoDevice" in text:
            return "no CUDA device found"
        return f"CUDA is not usable: {text}"
    if count == 0:
        return "no CUDA device found"
    return None


def _version(encoded: int) -> str:
    """CUDA's ``1000 * major + 10 * minor`` as ``major.minor``."""
    return f"{encoded // 1000}.{encoded % 1000 // 10}"


def resident_threads() -> int | None:
    """The most threads the current CUDA device holds at once (per multiprocessor, times
    its multiprocessors), or ``None`` where CuPy cannot say."""
    try:
        cupy = importlib.import_module("cupy")
        attributes = cupy.cuda.Device().attributes
        return int(attributes["MaxThreadsPerMultiProcessor"]) * int(
            attributes["MultiProcessorCount"]
        )
    except Exception:  # no CuPy, no device, or a stand-in without those attributes
        return None


def device_free_memory() -> int | None:
    """Free bytes on the current CUDA device, or ``None`` where CuPy cannot say."""
    try:
        cupy = importlib.import_module("cupy")
        return int(cupy.cuda.runtime.memGetInfo()[0])
    except Exception:  # no CuPy, no device, or a stand-in without memGetInfo
        return None
