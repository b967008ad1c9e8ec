"""Compile ``kernels.c`` with cffi (API mode) on first use and cache the extension.

Why at run time and not at install time: the package stays a pure-Python wheel, and a
machine without a C compiler still imports riftco (the backend then reports itself
unavailable with the compiler's own message). The cache directory is keyed by a hash of
the C sources, the declarations, the flags, the cffi version and the Python ABI, so an
edit or an upgrade rebuilds and stale binaries are never loaded. Builds happen in a
temporary directory that is renamed into place, so two processes building at once both
end with a complete extension (the loser of the rename just discards its copy).

``RIFTCO_CACHE_DIR`` overrides the cache root (default ``~/.cache/riftco``).
"""

from __future__ import annotations

import hashlib
import importlib.util
import os
import shutil
import sys
import sysconfig
import tempfile
import threading
from pathlib import Path
from typing import Any

from riftco.kernel_host.cache import cache_root

_HERE = Path(__file__).resolve().parent
SOURCES = (
    "kernels.c",
    "kernels_blas.c",
    "kernels_layout.c",
    "kernels_attention.c",
    "kernels_optim.c",
    "kernels_norm.c",
    "kernels_rms_norm.c",
    "kernels_linear_gelu.c",
    "kernels_tile.c",
    "kernels_half.c",
    "kernels_half_ops.c",
    "kernels_half_matmul.c",
)
#: -fno-math-errno lets sqrt vectorise and -fno-trapping-math lets GCC if-convert the
#: branch-free exp (selects instead of jumps); neither changes a result (Python never
#: unmasks FP traps). No -march (clones instead, see kernels.c), no -ffast-math.
BASE_FLAGS = ["-O3", "-fno-math-errno", "-fno-trapping-math", "-std=gnu11"]
OPENMP_FLAGS = ["-fopenmp"]

_ONE_DTYPE = """
void gelu_{s}({t} *x, {t} *y, int64_t n, int approx);
void gelu_backward_{s}({t} *dy, {t} *x, {t} *dx, int64_t n, int approx);
void softmax_{s}({t} *x, {t} *y, int64_t rows, int64_t cols);
void softmax_backward_{s}({t} *dy, {t} *y, {t} *dx, int64_t rows, int64_t cols);
void layer_norm_{s}({t} *x, {t} *g, {t} *b, {t} *y, {t} *mean, {t} *rstd, int64_t rows,
                    int64_t cols, double eps);
int layer_norm_backward_{s}({t} *dy, {t} *x, {t} *g, {t} *mean, {t} *rstd, {t} *dx, {t} *dg,
                            {t} *db, int64_t rows, int64_t cols);
void add_layer_norm_{s}({t} *x, {t} *r, {t} *g, {t} *b, {t} *s, {t} *y, {t} *mean, {t} *rstd,
                        int64_t rows, int64_t cols, double eps);
int add_layer_norm_backward_{s}({t} *dy, {t} *ds, {t} *s, {t} *g, {t} *mean, {t} *rstd,
                                {t} *dsum, {t} *dg, {t} *db, int64_t rows, int64_t cols);
void rms_norm_{s}({t} *x, {t} *g, {t} *y, {t} *rstd, int64_t rows, int64_t cols, double eps);
int rms_norm_backward_{s}({t} *dy, {t} *x, {t} *g, {t} *rstd, {t} *dx, {t} *dg, int64_t rows,
                          int64_t cols);
void embedding_{s}({t} *table, int64_t *ids, {t} *out, int64_t n, int64_t cols);
int embedding_backward_{s}({t} *dy, int64_t *ids, {t} *out, int64_t n, int64_t V,
                           int64_t cols);
void cross_entropy_{s}({t} *logits, int64_t *t, {t} *loss, {t} *lse, int64_t n, int64_t V);
void cross_entropy_backward_{s}({t} *dloss, int64_t dloss_stride, {t} *logits, int64_t *t,
                                {t} *lse, {t} *dl, int64_t n, int64_t V);
void adam_update_{s}({t} *p, {t} *g, {t} *m, {t} *v, int64_t n, double lr, double b1,
                     double b2, double eps, double wd, double bc1, double bc2);
int adam_update_multi_{s}({t} **p, {t} **g, {t} **m, {t} **v, int64_t *n, int64_t count,
                          double lr, double b1, double b2, double eps, double wd, double bc1,
                          double bc2, {t} *norm, double max_norm, double clip_eps);
int attention_{s}({t} *q, {t} *k, {t} *v, int64_t *st, {t} *out, int64_t *ost, {t} *probs,
                  int64_t B, int64_t H, int64_t T, int64_t D, double scale, int causal);
int attention_backward_{s}({t} *dout, {t} *q, {t} *k, {t} *v, int64_t *st, {t} *probs,
                           {t} *dq, {t} *dk, {t} *dv, int64_t *ost, int64_t B, int64_t H,
                           int64_t T, int64_t D, double scale);
int flash_attention_{s}({t} *q, {t} *k, {t} *v, int64_t *st, {t} *out, int64_t *ost, {t} *lse,
                        int64_t B, int64_t H, int64_t T, int64_t D, double scale, int causal);
void blas_matmul_{s}(void *fn, int ta, int tb, int64_t M, int64_t N, int64_t K, {t} *A,
                     int64_t lda, {t} *B, int64_t ldb, {t} *C, int64_t ldc, {t} *bias);
void blas_matmul_batched_{s}(void *fn, int ta, int tb, int64_t batch, int64_t M, int64_t N,
                             int64_t K, {t} *A, int64_t *aoff, int64_t lda, {t} *B,
                             int64_t *boff, int64_t ldb, {t} *C);
int colsum_{s}({t} *x, int64_t rows, int64_t cols, int64_t ld, {t} *out);
int linear_backward_{s}(void *fn, int64_t M, int64_t N, int64_t K, {t} *X, int64_t ldx,
                         {t} *W, int64_t ldw, {t} *dY, int64_t ldy, {t} *dX, {t} *dW, {t} *db);
void linear_gelu_{s}(void *fn, int ta, int tb, int64_t M, int64_t N, int64_t K, {t} *A,
                     int64_t lda, {t} *B, int64_t ldb, {t} *bias, {t} *H, {t} *Y, int approx);
int linear_gelu_backward_{s}(void *fn, int64_t M, int64_t N, int64_t K, {t} *X, int64_t ldx,
                             {t} *W, int64_t ldw, {t} *dY, int64_t ldy, {t} *H, int64_t ldh,
                             {t} *dH, {t} *dX, {t} *dW, {t} *db, int approx);
void binary_{s}(int op, {t} *a, int64_t sa, {t} *b, int64_t sb, {t} *out, int64_t rows,
                int64_t cols);
void copy_view_{s}({t} *x, int64_t *shape, int64_t *st, {t} *out);
void concat_cols_{s}(int64_t n, {t} **src, int64_t *width, int64_t *ld, {t} *out, int64_t rows,
                     int64_t total);
void split_cols_{s}({t} *x, int64_t ldx, int64_t rows, int64_t n, int64_t *width, {t} **dst);
int flash_attention_backward_{s}({t} *dout, {t} *q, {t} *k, {t} *v, {t} *out, int64_t *st,
                                 {t} *lse, {t} *dq, {t} *dk, {t} *dv, int64_t *ost, int64_t B,
                                 int64_t H, int64_t T, int64_t D, double scale, int causal);
"""
#: float16/bfloat16 storage conversion (kernels_half.c): kind 0 float16, 1 bfloat16.
_HALF = """
int rift_half_f16c(void);
void half_from_f32(float *x, uint16_t *y, int64_t n, int kind, int f16c);
void half_to_f32(uint16_t *x, float *y, int64_t n, int kind, int f16c);
void half_from_f64(double *x, uint16_t *y, int64_t n, int kind, int f16c);
void half_to_f64(uint16_t *x, double *y, int64_t n, int kind, int f16c);
void half_to_half(uint16_t *x, uint16_t *y, int64_t n, int kind, int f16c);
void half_binary(int op, uint16_t *a, int64_t sa, uint16_t *b, int64_t sb, uint16_t *out,
                 int64_t rows, int64_t cols, int kind, int f16c);
int half_softmax(uint16_t *x, uint16_t *y, int64_t rows, int64_t cols, int kind, int f16c);
int half_layer_norm(uint16_t *x, uint16_t *g, uint16_t *b, uint16_t *y, float *mean,
                    float *rstd, int64_t rows, int64_t cols, double eps, int kind, int f16c);
int half_softmax_backward(uint16_t *dy, uint16_t *y, uint16_t *dx, int64_t rows, int64_t cols,
                          int kind, int f16c);
void half_gelu(uint16_t *x, uint16_t *y, int64_t n, int approx, int kind, int f16c);
void half_gelu_backward(uint16_t *dy, uint16_t *x, uint16_t *dx, int64_t n, int approx,
                        int kind, int f16c);
int half_add_layer_norm(uint16_t *x, uint16_t *res, uint16_t *g, uint16_t *b, uint16_t *s,
                        uint16_t *y, float *mean, float *rstd, int64_t rows, int64_t cols,
                        double eps, int kind, int f16c);
int half_ln_backward(uint16_t *dy, uint16_t *x, uint16_t *g, float *mean, float *rstd,
                     uint16_t *ds, uint16_t *dx, uint16_t *dg, uint16_t *db, int64_t rows,
                     int64_t cols, int kind, int f16c);
void half_scalar(int op, uint16_t *x, uint16_t *y, int64_t n, float v, int kind, int f16c);
int half_cross_entropy(uint16_t *logits, int64_t *t, float *loss, float *lse, int64_t n,
                       int64_t V, int kind, int f16c);
int half_cross_entropy_backward(float *dloss, int64_t ds, uint16_t *logits, int64_t *t,
                                float *lse, uint16_t *dl, int64_t n, int64_t V, int kind,
                                int f16c);
int half_linear_backward(void *fn, int64_t M, int64_t N, int64_t K, uint16_t *X, int64_t ldx,
                         uint16_t *W, int64_t ldw, uint16_t *dY, int64_t ldy, uint16_t *H,
                         int64_t ldh, uint16_t *dX, uint16_t *dW, uint16_t *db, float *f,
                         int gelu, int kind, int f16c);
int64_t half_linear_backward_floats(int64_t M, int64_t N, int64_t K, int gelu);
int half_matmul(void *fn, int ta, int tb, int64_t M, int64_t N, int64_t K, uint16_t *A,
                int64_t lda, uint16_t *B, int64_t ldb, uint16_t *C, uint16_t *bias, float *a,
                float *b, uint16_t *Y, int approx, int kind, int f16c);
"""
CDEF = (
    "int rift_num_threads(void);\n"
    + _HALF
    + _ONE_DTYPE.format(s="f32", t="float")
    + _ONE_DTYPE.format(s="f64", t="double")
)


class BuildError(RuntimeError):
    """The extension could not be built or loaded; the message says why (compiler output)."""


def _sources() -> dict[str, str]:
    return {name: (_HERE / name).read_text() for name in SOURCES}


def build_key(flags: list[str]) -> str:
    import cffi

    h = hashlib.sha256()
    for name, text in sorted(_sources().items()):
        h.update(name.encode() + b"\0" + text.encode() + b"\0")
    h.update(CDEF.encode())
    h.update(" ".join(flags).encode())
    h.update(cffi.__version__.encode())
    h.update((sysconfig.get_config_var("EXT_SUFFIX") or "").encode())
    h.update((sysconfig.get_config_var("CC") or "").encode())
    return h.hexdigest()[:20]


class _CapturedOutput:
    """Redirect the process's fds 1 and 2 to a file: the compiler runs as a child process,
    so Python-level redirection would miss its diagnostics."""

    def __enter__(self) -> _CapturedOutput:
        self.file = tempfile.TemporaryFile(mode="w+b")
        sys.stdout.flush()
        sys.stderr.flush()
        self.saved = [os.dup(1), os.dup(2)]
        os.dup2(self.file.fileno(), 1)
        os.dup2(self.file.fileno(), 2)
        return self

    def __exit__(self, *exc: Any) -> None:
        sys.stdout.flush()
        sys.stderr.flush()
        os.dup2(self.saved[0], 1)
        os.dup2(self.saved[1], 2)
        for fd in self.saved:
            os.close(fd)
        self.file.seek(0)
        self.text = self.file.read().decode(errors="replace")
        self.file.close()


def _compile(flags: list[str], module: str, final: Path) -> None:
    import cffi

    final.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=".build-", dir=final.parent))
    try:
        for name, text in _sources().items():
            (tmp / name).write_text(text)
        ffi = cffi.FFI()
        ffi.cdef(CDEF)
        ffi.set_source(
            module,
            '#include "kernels.c"\n',
            include_dirs=[str(tmp)],
            extra_compile_args=flags,
            extra_link_args=[f for f in flags if f == "-fopenmp"] + ["-lm"],
        )
        with _CapturedOutput() as out:
            try:
                ffi.compile(tmpdir=str(tmp), verbose=False)
                ok = True
            except Exception as exc:  # distutils/setuptools raise several kinds
                ok = False
                err = f"{type(exc).__name__}: {exc}"
        if not ok:
            tail = "\n".join(out.text.strip().splitlines()[-25:])
            raise BuildError(f"compiling the native kernels failed ({err})\n{tail}".strip())
        try:
            os.rename(tmp, final)
        except OSError:
            if not final.exists():  # not a lost race: a real failure
                raise
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)


def _load(module: str, final: Path) -> Any:
    suffix = sysconfig.get_config_var("EXT_SUFFIX") or ".so"
    path = next(iter(sorted(final.glob(module + "*" + suffix))), None)
    if path is None:
        raise BuildError(f"no compiled extension {module}{suffix} in {final}")
    spec = importlib.util.spec_from_file_location(module, path)
    if spec is None or spec.loader is None:
        raise BuildError(f"cannot load {path}")
    # libgomp reads its settings once, when it loads. Its default is to spin a few ms after
    # every parallel region: on a 2-core VM with one other busy process that took a small
    # training step from 39 to 90 ms (our main thread lost its core to our own spinning
    # worker); on a quiet machine spinning is ~10% faster (waking a sleeping thread costs
    # 30-60 us there). Sleep, unless the user chose a policy (OMP_WAIT_POLICY or
    # GOMP_SPINCOUNT); the variable is restored so child processes see no change.
    # NOTE: libgomp.so.1 is shared by the whole process: a library that loads it after us
    # (PyTorch's CPU wheel does) inherits the sleeping policy (its small GPT step: 21 ->
    # 32 ms); bench/train_step.py runs each contender in its own process for that reason.
    policy_set = "OMP_WAIT_POLICY" in os.environ or "GOMP_SPINCOUNT" in os.environ
    if not policy_set:
        os.environ["OMP_WAIT_POLICY"] = "PASSIVE"
    try:  # module_from_spec is what dlopens the extension (and with it libgomp)
        mod = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(mod)
    finally:
        if not policy_set:
            os.environ.pop("OMP_WAIT_POLICY", None)
    return mod


def build(flags: list[str]) -> Any:
    """The compiled module (``.lib``, ``.ffi``) for ``flags``, building it when not cached."""
    key = build_key(flags)
    module = f"_riftco_native_{key}"
    if module in sys.modules:
        return sys.modules[module]
    final = cache_root() / "native" / key
    if not final.exists():
        _compile(flags, module, final)
    mod = _load(module, final)
    sys.modules[module] = mod
    return mod


_lock = threading.Lock()
_state: dict[str, Any] = {}


def load() -> Any:
    """Build or load once per process: OpenMP first, then (e.g. a compiler without OpenMP)
    single-threaded. Raises :class:`BuildError` with every attempt's reason."""
    with _lock:
        if "module" in _state:
            return _state["module"]
        if "error" in _state:
            raise BuildError(_state["error"])
        reasons = []
        try:
            import cffi  # noqa: F401
        except ImportError as exc:
            _state["error"] = f"cffi is not installed ({exc}); pip install cffi"
            raise BuildError(_state["error"]) from None
        for flags in (BASE_FLAGS + OPENMP_FLAGS, BASE_FLAGS):
            try:
                _state["module"] = build(flags)
                _state["flags"] = flags
                return _state["module"]
            except Exception as exc:  # never let a probe raise anything but BuildError
                reasons.append(f"[{' '.join(flags)}] {exc}")
        _state["error"] = "\n".join(reasons)
        raise BuildError(_state["error"])


def build_flags() -> list[str]:
    """Flags of the loaded build (empty before :func:`load` succeeded)."""
    return list(_state.get("flags", []))
