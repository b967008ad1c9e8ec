"""cffi build script (API mode): compiles kernels.c into ``riftco_cffi_example._kernels``.

Run by setuptools at install time through ``cffi_modules`` in setup.py; it can also be
run by hand (``python riftco_cffi_example/_build.py``) to build in place while developing.
"""

from __future__ import annotations

import os
import sys

from cffi import FFI

HERE = os.path.dirname(os.path.abspath(__file__))

CDEF = """
void *rc_alloc(int64_t nbytes);
void rc_free(void *p);
int64_t rc_allocated_bytes(void);
int64_t rc_peak_bytes(void);
void rc_copy_strided(const uint32_t *src, uint32_t *dst, int ndim, const int64_t *shape,
                     const int64_t *strides, int64_t offset);
void rc_copy_block(const uint32_t *src, int64_t src_w, int64_t src_col, uint32_t *dst,
                   int64_t dst_w, int64_t dst_col, int64_t rows, int64_t width);
void rc_fill_f32(float *x, int64_t n, float v);
void rc_fill_i32(int32_t *x, int64_t n, int32_t v);
void rc_unary(int op, const float *x, float *y, int64_t n);
void rc_binary(int op, const float *a, const float *b, float *y, int64_t n);
void rc_scalar(int op, const float *x, float v, float *y, int64_t n);
void rc_where(const float *c, const float *a, const float *b, float *y, int64_t n);
void rc_compare(int op, const float *a, const float *b, float *y, int64_t n);
void rc_cast_f32_i32(const float *x, int32_t *y, int64_t n);
void rc_cast_i32_f32(const int32_t *x, float *y, int64_t n);
void rc_reduce(int is_max, const float *x, float *y, int ndim, const int64_t *shape,
               const int64_t *out_strides, int64_t out_n);
void rc_argmax(const float *x, int32_t *y, int64_t rows, int64_t cols);
void rc_matmul(const float *a, const float *b, float *c, int64_t batch, int64_t m, int64_t k,
               int64_t n, int ta, int tb);
void rc_softmax(const float *x, float *y, int64_t rows, int64_t cols);
void rc_layer_norm(const float *x, const float *g, const float *b, float eps, float *y,
                   float *mean, float *rstd, int64_t rows, int64_t cols);
"""

ffibuilder = FFI()
ffibuilder.cdef(CDEF)
with open(os.path.join(HERE, "kernels.c"), encoding="utf-8") as fh:
    ffibuilder.set_source(
        "riftco_cffi_example._kernels",
        fh.read(),
        extra_compile_args=["-O2", "-std=c99"] if sys.platform != "win32" else [],
        libraries=["m"] if sys.platform != "win32" else [],
    )

if __name__ == "__main__":
    ffibuilder.compile(tmpdir=os.path.dirname(HERE), verbose=True)
