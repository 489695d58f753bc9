"""A stand-in for CuPy that runs tidgap's CUDA kernels on the CPU, for tests without a GPU.

Arrays are NumPy arrays of a subclass that :func:`tidgap.backends.xp.namespace` takes for
CuPy's, so code written over ``xp`` runs its CuPy path with this module as ``xp``; every
attribute not defined here is NumPy's, except that ufuncs refuse ``accumulate`` as CuPy 14
does (seen on an H200: ``cupy_maximum.accumulate is not supported yet``); ``RawModule``
compiles the very text NVRTC would get with g++ (``__global__`` dropped, one thread of
one block, which a grid-stride kernel turns into the whole loop) and calls it through
ctypes with the launcher's own arguments. So the launchers' argument order and types, the
kernel sources and the GPU code paths of the search run here; CuPy's own behaviour does not.
"""

from __future__ import annotations

import atexit
import ctypes
import hashlib
import shutil
import subprocess
import tempfile
import types
from pathlib import Path
from typing import Any

import numpy as np

PRELUDE = r"""
struct tidgap_fake_dim3 { unsigned int x, y, z; };
static const tidgap_fake_dim3 blockIdx = {0, 0, 0}, threadIdx = {0, 0, 0};
static const tidgap_fake_dim3 blockDim = {1, 1, 1}, gridDim = {1, 1, 1};
#define __global__
"""
_BUILD = Path(tempfile.mkdtemp(prefix="fake_cupy_"))
atexit.register(shutil.rmtree, _BUILD, ignore_errors=True)


def _argument(value: Any) -> Any:
    """A kernel argument as ctypes sees it: arrays by address, scalars by their C type."""
    if isinstance(value, np.ndarray):
        assert value.flags.c_contiguous, "kernel arguments must be contiguous"
        return ctypes.c_void_p(value.ctypes.data)
    converters = {np.int32: ctypes.c_int, np.int64: ctypes.c_longlong, np.float64: ctypes.c_double}
    if type(value) not in converters:
        raise TypeError(f"kernel argument of type {type(value).__name__}: pass a NumPy scalar")
    return converters[type(value)](value)


#: Dynamic shared memory a launch may ask for without raising the kernel's limit (bytes).
DEFAULT_SHARED_BYTES = 48 * 1024
#: The most a kernel's limit may be raised to (an H200's, bytes).
SHARED_BYTES_OPTIN = 227 * 1024


class RawKernel:
    """A compiled kernel: ``kernel(grid, block, args, shared_mem=0)`` runs it once,
    serially; like CUDA, it refuses ``shared_mem`` over 48 KiB unless
    ``max_dynamic_shared_size_bytes`` was raised to it first."""

    def __init__(self, function: Any):
        self.function = function
        self.max_dynamic_shared_size_bytes = DEFAULT_SHARED_BYTES

    def __call__(
        self, grid: tuple[int, ...], block: tuple[int, ...], args: tuple, shared_mem: int = 0
    ) -> None:
        assert grid[0] >= 1 and block[0] >= 1
        limit = min(self.max_dynamic_shared_size_bytes, SHARED_BYTES_OPTIN)
        assert 0 <= shared_mem <= limit, f"{shared_mem} bytes of shared memory over {limit}"
        self.function(*[_argument(value) for value in args])


class RawModule:
    """Compiles ``code`` with g++ (options ``-D``/``-std`` passed through) on first use."""

    def __init__(self, code: str, options: tuple[str, ...] = ()):
        source = PRELUDE + code
        digest = hashlib.sha1((source + repr(options)).encode()).hexdigest()[:16]
        library = _BUILD / f"{digest}.so"
        if not library.exists():
            cpp = _BUILD / f"{digest}.cpp"
            cpp.write_text(source)
            subprocess.run(
                ["g++", "-O1", "-shared", "-fPIC", *options, str(cpp), "-o", str(library)],
                check=True,
            )
        self.library = ctypes.CDLL(str(library))

    def get_function(self, name: str) -> RawKernel:
        function = getattr(self.library, name)
        function.restype = None
        return RawKernel(function)


class ndarray(np.ndarray):  # noqa: N801 (CuPy's name)
    """A NumPy array under CuPy's module name, with CuPy's ``get``."""

    def get(self) -> np.ndarray:
        return np.asarray(self).copy()


ndarray.__module__ = "cupy"


class Ufunc:
    """A NumPy ufunc whose results are :class:`ndarray` and which, like CuPy's, has no
    ``accumulate``."""

    def __init__(self, ufunc: np.ufunc):
        self.ufunc = ufunc

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return _device(self.ufunc(*args, **kwargs))

    def accumulate(self, *args: Any, **kwargs: Any) -> Any:
        raise NotImplementedError(f"`cupy_{self.ufunc.__name__}.accumulate` is not supported yet")

    def __getattr__(self, name: str) -> Any:
        return getattr(self.ufunc, name)


def _device(value: Any) -> Any:
    """``value`` with its NumPy arrays (also in a tuple) viewed as :class:`ndarray`."""
    if isinstance(value, tuple):
        return tuple(_device(item) for item in value)
    if type(value) is np.ndarray:
        return value.view(ndarray)
    return value


def _numpy_attribute(name: str) -> Any:
    """NumPy's ``name``: ufuncs wrapped in :class:`Ufunc`, functions returning
    :class:`ndarray`, anything else as it is."""
    value = getattr(np, name)
    if isinstance(value, np.ufunc):
        return Ufunc(value)
    if callable(value) and not isinstance(value, type):
        return lambda *args, **kwargs: _device(value(*args, **kwargs))
    return value


def module() -> types.ModuleType:
    """A fresh fake ``cupy`` module (put it in ``sys.modules["cupy"]``)."""
    fake = types.ModuleType("cupy")
    fake.RawModule = RawModule
    fake.RawKernel = RawKernel
    fake.ndarray = ndarray
    fake.cuda = types.SimpleNamespace(
        runtime=types.SimpleNamespace(
            CUDARuntimeError=RuntimeError,
            getDeviceCount=lambda: 1,
            runtimeGetVersion=lambda: 13000,
            driverGetVersion=lambda: 13000,
        ),
        Device=lambda *_: types.SimpleNamespace(
            synchronize=lambda: None,
            attributes={"MaxSharedMemoryPerBlockOptin": SHARED_BYTES_OPTIN},
        ),
    )
    fake.__getattr__ = _numpy_attribute
    return fake
