"""PyCUDA plumbing: the probe, the CUDA context, kernel modules, device arrays.

The only module (with its package) that imports pycuda, and only inside functions, so importing
it needs no pycuda, driver or GPU.

Kernel loading (`load_module`): for each cuda/<name>.cu, in this order
1. a prebuilt `<name>.fatbin` next to the sources (`python -m pyllama.backend.cuda.build`
   writes sm_80 + sm_90 SASS and compute_90 PTX there) when it is newer than the sources and the
   driver accepts it;
2. a fatbin for this device's compute capability cached in `$LLAMA_CACHE/cuda/` (default
   ~/.cache/pyllama/cuda), keyed by a hash of the sources and the nvcc flags;
3. otherwise nvcc builds that cached fatbin now (a few seconds per file), so first use needs
   nvcc on PATH (or $NVCC) unless step 1 applies.
"""
from __future__ import annotations

import atexit
import hashlib
import os
import shutil
import subprocess
import threading

import numpy as np

from ...errors import BackendError

KERNEL_FILES = ("matmul", "ops", "attention")
NVCC_FLAGS = ("-std=c++17", "-O3")
STAGING_BYTES = 16 << 20        # pinned ring for host -> device copies of activations/indices


def probe():
    """pycuda.driver, initialised, with at least one device; else BackendError."""
    try:
        import pycuda.driver as drv
    except ImportError as e:
        raise BackendError(f"CUDA not available: pycuda cannot be imported ({e})") from e
    try:
        drv.init()
        if drv.Device.count() == 0:
            raise BackendError("CUDA not available: no CUDA device")
    except drv.Error as e:
        raise BackendError(f"CUDA not available: {e}") from e
    return drv


def kernel_dir() -> str:
    """Where the .cu/.cuh files are: the installed pyllama._cuda package, else the checkout."""
    try:
        import pyllama._cuda as pkg
        return os.path.dirname(pkg.__file__)
    except ImportError:
        root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(
            os.path.abspath(__file__)))))
        return os.path.join(root, "cuda")


def _sources(kdir: str, name: str) -> list[str]:
    cuh = sorted(f for f in os.listdir(kdir) if f.endswith(".cuh"))
    return [os.path.join(kdir, name + ".cu")] + [os.path.join(kdir, f) for f in cuh]


def _nvcc() -> str:
    nvcc = os.environ.get("NVCC") or shutil.which("nvcc")
    if not nvcc:
        raise BackendError("CUDA kernels are not built and nvcc is not on PATH (set NVCC, or "
                           "run `python -m pyllama.backend.cuda.build` where nvcc exists)")
    return nvcc


def compile_fatbin(name: str, out: str, gencode: list[str], kdir: str | None = None) -> str:
    """nvcc -fatbin cuda/<name>.cu -> out (written atomically)."""
    kdir = kdir or kernel_dir()
    tmp = f"{out}.{os.getpid()}.tmp"
    cmd = [_nvcc(), "-fatbin", *NVCC_FLAGS, f"-I{kdir}", *gencode, "-o", tmp,
           os.path.join(kdir, name + ".cu")]
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        raise BackendError(f"nvcc failed for {name}.cu:\n{r.stderr[-4000:]}")
    os.replace(tmp, out)
    return out


def _cache_dir() -> str:
    base = os.environ.get("LLAMA_CACHE") or os.path.join(os.path.expanduser("~"), ".cache",
                                                         "pyllama")
    d = os.path.join(base, "cuda")
    os.makedirs(d, exist_ok=True)
    return d


def _cached_fatbin(name: str, cc: str, kdir: str) -> str:
    h = hashlib.sha256(" ".join(NVCC_FLAGS).encode())
    for p in _sources(kdir, name):
        with open(p, "rb") as f:
            h.update(f.read())
    path = os.path.join(_cache_dir(), f"{name}-{h.hexdigest()[:16]}-sm_{cc}.fatbin")
    if not os.path.exists(path):
        compile_fatbin(name, path, ["-gencode", f"arch=compute_{cc},code=[sm_{cc},compute_{cc}]"],
                       kdir)
    return path


def load_module(drv, name: str, cc: str):
    """The pycuda Module of cuda/<name>.cu for compute capability cc ('90')."""
    kdir = kernel_dir()
    pre = os.path.join(kdir, name + ".fatbin")
    if os.path.exists(pre) and os.path.getmtime(pre) >= max(
            os.path.getmtime(p) for p in _sources(kdir, name)):
        try:
            return drv.module_from_file(pre)
        except drv.Error:
            pass                                  # no code for this device: build one
    try:
        return drv.module_from_file(_cached_fatbin(name, cc, kdir))
    except drv.Error as e:
        raise BackendError(f"cannot load CUDA kernels {name}: {e}") from e


class _ThreadContext:
    """Marks the context as pushed on one thread; pops it when that thread's locals die (at
    thread exit: PyCUDA aborts the process if a thread ends with a context on its stack)."""

    def __init__(self, ctx):
        self.ctx, self.active = ctx, True

    def release(self) -> None:
        if self.active:
            self.active = False
            try:
                self.ctx.pop()
            except Exception:  # noqa: BLE001 - best effort at thread/process exit
                pass

    def __del__(self):
        self.release()


class Device:
    """One CUDA context (made on the calling thread), one stream, a memory pool, the kernels.

    A thread that uses the context has it pushed once and popped when the thread ends; the main
    thread pops it at exit (as pycuda.autoinit does). PyCUDA aborts the process when a thread
    or the interpreter ends with a context still pushed.
    """

    def __init__(self, ordinal: int = 0):
        drv = probe()
        self.drv = drv
        try:
            self.dev = drv.Device(ordinal)
            self.ctx = self.dev.make_context()
        except drv.Error as e:
            raise BackendError(f"CUDA not available: {e}") from e
        self._tls = threading.local()
        self._tls.pushed = _ThreadContext(self.ctx)
        try:
            self._start()
        except BaseException:
            self._tls.pushed.release()
            raise
        atexit.register(self._at_exit)

    def _start(self) -> None:
        from pycuda.tools import DeviceMemoryPool
        self.cc = "%d%d" % self.dev.compute_capability()
        self.name = self.dev.name()
        self.stream = self.drv.Stream()
        self.pool = DeviceMemoryPool()
        self.funcs: dict[str, object] = {}
        self.modules = {n: load_module(self.drv, n, self.cc) for n in KERNEL_FILES}
        self._ring = self.drv.pagelocked_empty(STAGING_BYTES, np.uint8)
        self._ring_off = 0

    def _at_exit(self) -> None:
        pushed = getattr(self._tls, "pushed", None)
        if pushed is None or not pushed.active:
            return
        try:
            self.stream.synchronize()
            self.pool.stop_holding()
        except self.drv.Error:
            pass
        pushed.release()

    def activate(self) -> None:
        """Make the context current on this thread (the engine thread may differ from the
        loading thread; a CUDA context may be current on several threads)."""
        if getattr(self._tls, "pushed", None) is None:
            self.ctx.push()
            self._tls.pushed = _ThreadContext(self.ctx)

    def func(self, module: str, name: str, argtypes: str):
        """A prepared kernel (argtypes in struct letters: P pointer, i int32, q int64, f f32)."""
        f = self.funcs.get(name)
        if f is None:
            f = self.modules[module].get_function(name)
            f.prepare(argtypes)
            self.funcs[name] = f
        return f

    def launch(self, module: str, name: str, argtypes: str, grid, block, *args) -> None:
        self.func(module, name, argtypes).prepared_async_call(grid, block, self.stream, *args)

    # -- memory --------------------------------------------------------------------------------
    def alloc(self, nbytes: int, persistent: bool = False):
        """Device memory: persistent (weights, KV) or from the pool (activations, scratch:
        after the first step every size is served from memory already held)."""
        self.activate()
        n = max(int(nbytes), 256)
        return self.drv.mem_alloc(n) if persistent else self.pool.allocate(n)

    def synchronize(self) -> None:
        self.stream.synchronize()

    def copy_in(self, dst: int, a: np.ndarray) -> None:
        """Queue dst <- a (C-contiguous) on the stream. Small arrays go through a pinned ring, so
        the copy is truly asynchronous (from pageable memory the driver may wait for the
        stream); the ring is reused only after a stream synchronisation."""
        n = a.nbytes
        if n > STAGING_BYTES // 4:
            self.drv.memcpy_htod_async(dst, a, self.stream)
            return
        off = -(-self._ring_off // 256) * 256
        if off + n > STAGING_BYTES:
            self.stream.synchronize()           # every earlier copy out of the ring is done
            off = 0
        view = self._ring[off:off + n]
        view[:] = a.reshape(-1).view(np.uint8)
        self._ring_off = off + n
        self.drv.memcpy_htod_async(dst, view, self.stream)


_DEVICES: dict[int, Device] = {}
_DEVICES_LOCK = threading.Lock()


def get_device(ordinal: int = 0) -> Device:
    """The process's one Device (CUDA context, stream, pool, kernels) for a GPU: every
    CudaBackend (every loaded model) shares it, so their arrays and kernels live in the same
    context whichever was made last."""
    with _DEVICES_LOCK:
        dev = _DEVICES.get(ordinal)
        if dev is None:
            dev = _DEVICES[ordinal] = Device(ordinal)
    dev.activate()
    return dev


class DevArray:
    """A C-contiguous device array: address, shape, dtype and the allocation that owns it.

    Enough of the numpy surface for the code that moves activations and KV rows around:
    `.shape/.dtype/.size/.ndim/.itemsize/.nbytes`, `reshape`, `np.asarray(a)` (download; the
    one synchronisation point), row slices as views, `a[...] = 0`, row-slice assignment.
    Other indexing goes through the host (K-shift and state I/O only).
    """

    __array_priority__ = 100

    def __init__(self, dev: Device, ptr: int, shape, dtype, owner):
        self.dev, self.ptr, self.owner = dev, int(ptr), owner
        self.shape = tuple(int(s) for s in shape)
        self.dtype = np.dtype(dtype)

    @classmethod
    def empty(cls, dev: Device, shape, dtype=np.float32, persistent: bool = False):
        shape = tuple(int(s) for s in shape)
        nbytes = int(np.prod(shape, dtype=np.int64)) * np.dtype(dtype).itemsize
        mem = dev.alloc(nbytes, persistent)
        return cls(dev, int(mem), shape, dtype, mem)

    @classmethod
    def upload(cls, dev: Device, a: np.ndarray, persistent: bool = False):
        """Copy a host array in (queued; `a` may be a temporary: it is staged at once)."""
        a = np.ascontiguousarray(a)
        out = cls.empty(dev, a.shape, a.dtype, persistent)
        if a.nbytes:
            dev.copy_in(out.ptr, a)
        return out

    # -- numpy-like surface ----------------------------------------------------------------------
    @property
    def size(self) -> int:
        return int(np.prod(self.shape, dtype=np.int64))

    @property
    def ndim(self) -> int:
        return len(self.shape)

    @property
    def itemsize(self) -> int:
        return self.dtype.itemsize

    @property
    def nbytes(self) -> int:
        return self.size * self.itemsize

    def __len__(self) -> int:
        return self.shape[0]

    def __repr__(self) -> str:
        return f"DevArray(shape={self.shape}, dtype={self.dtype})"

    def reshape(self, *shape) -> "DevArray":
        if len(shape) == 1 and isinstance(shape[0], (tuple, list)):
            shape = tuple(shape[0])
        shape = _resolve_shape(shape, self.size)
        return DevArray(self.dev, self.ptr, shape, self.dtype, self.owner)

    def get(self) -> np.ndarray:
        out = np.empty(self.shape, dtype=self.dtype)
        if out.nbytes:
            self.dev.activate()
            self.dev.drv.memcpy_dtoh_async(out, self.ptr, self.dev.stream)
            self.dev.synchronize()
        return out

    def __array__(self, dtype=None, copy=None):
        a = self.get()
        return a if dtype is None else a.astype(dtype, copy=False)

    def astype(self, dtype) -> np.ndarray:
        return self.get().astype(dtype)

    def _row_view(self, key):
        """A view for a[i:j] (step 1) or a[...]; None for any other key."""
        if key is Ellipsis:
            return self
        if isinstance(key, slice) and key.step in (None, 1) and self.ndim >= 1:
            start, stop, _ = key.indices(self.shape[0])
            stop = max(stop, start)
            row = self.nbytes // max(self.shape[0], 1)
            return DevArray(self.dev, self.ptr + start * row, (stop - start, *self.shape[1:]),
                            self.dtype, self.owner)
        return None

    def __getitem__(self, key):
        v = self._row_view(key)
        return v if v is not None else self.get()[key]

    def __setitem__(self, key, value) -> None:
        drv, st = self.dev.drv, self.dev.stream
        self.dev.activate()
        v = self._row_view(key)
        if v is None:                                 # general index: through the host
            host = self.get()
            host[key] = np.asarray(value)
            self.dev.copy_in(self.ptr, host)
            return
        if np.isscalar(value) and value == 0:
            if v.nbytes:
                drv.memset_d8_async(v.ptr, 0, v.nbytes, st)
        elif isinstance(value, DevArray):
            if value.dtype != v.dtype or value.size != v.size:
                raise BackendError(f"DevArray assignment: {value!r} into {v!r}")
            if v.nbytes:
                drv.memcpy_dtod_async(v.ptr, value.ptr, v.nbytes, st)
        else:
            a = np.ascontiguousarray(np.broadcast_to(np.asarray(value, dtype=v.dtype), v.shape))
            if a.nbytes:
                self.dev.copy_in(v.ptr, a)


def _resolve_shape(shape, size: int) -> tuple[int, ...]:
    shape = [int(s) for s in shape]
    if shape.count(-1) > 1:
        raise ValueError("can only specify one unknown dimension")
    if -1 in shape:
        known = int(np.prod([s for s in shape if s != -1], dtype=np.int64))
        shape[shape.index(-1)] = size // known if known else 0
    if int(np.prod(shape, dtype=np.int64)) != size:
        raise ValueError(f"cannot reshape array of size {size} into shape {tuple(shape)}")
    return tuple(shape)
