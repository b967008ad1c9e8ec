/* riftco kernel prelude: the one place where Metal Shading Language, OpenCL C and CUDA differ.
 *
 * Every kernel body in shaders/ is written once against these macros. The prelude picks
 * its branch from the compilers' predefined macros, so each runtime (and the MSL syntax
 * check run with g++ -D__METAL_VERSION__) compiles the very same source string.
 *
 * The host appends, right after this file (after metal_stdlib, whose templates use T as a
 * parameter name) and before the family body:
 *   #define T <float|double>     the element type of the program (ushort for a float16 /
 *                                bfloat16 program, its bits; float for the half programs
 *                                of a family that loads and stores through half.h's TS)
 *   #define IDX <int|long>       the index type (embedding ids, targets)
 *   #define RADIX_BITS 8 ...     the numbers launch plans and kernels share
 *                                (core/kernel_host/shader_defines.py; shaders never define them)
 * and, before this file, RIFTCO_FP64 when the program uses double.
 * A family file (or a header) may pull in shared helpers with a line #include "name.h"
 * (e.g. rows.h): the host inlines shaders/name.h once per program, since metalcompute
 * compiles a single string with no include path.
 * Helper functions cannot read LID / GROUP_SIZE on Metal (those are kernel parameters):
 * pass them in as arguments.
 *
 * Kernel shape (both runtimes):
 *   KERNEL void name(GLOBAL T* out ARG(0), GLOBAL const T* x ARG(1),
 *                    GLOBAL const int* P ARG(2) THREAD_ARGS) {
 *       ... use GID, LID, GROUP_ID, GROUP_SIZE, NUM_GROUPS, GLOBAL_SIZE ...
 *   }
 * Parameters travel in small buffers (metalcompute has no scalar arguments): integer
 * parameters in an int buffer conventionally named P, float parameters in a T buffer F.
 * Threadgroup arrays are declared at the top of the kernel body with LOCAL; a helper that
 * takes a pointer to one declares the parameter LOCAL_PTR (CUDA's __shared__ cannot
 * qualify a parameter, so LOCAL_PTR is empty there and LOCAL is not).
 * The group size is whatever the runtime picked (Metal: a multiple of 32 up to 1024, not
 * always a power of two): never assume it, never return before a BARRIER() the group
 * still needs, bounds-check every access.
 */
#ifndef RIFTCO_PRELUDE_H
#define RIFTCO_PRELUDE_H

#if defined(__METAL_VERSION__)
#include <metal_stdlib>
using namespace metal;
#define KERNEL kernel
#define GLOBAL device
#define LOCAL threadgroup
#define LOCAL_PTR threadgroup
#define ARG(n) [[buffer(n)]]
#define THREAD_ARGS , uint _gid [[thread_position_in_grid]], \
    uint _lid [[thread_position_in_threadgroup]], \
    uint _group [[threadgroup_position_in_grid]], \
    uint _gsize [[threads_per_threadgroup]], \
    uint _ngroups [[threadgroups_per_grid]]
#define GID ((int)_gid)
#define LID ((int)_lid)
#define GROUP_ID ((int)_group)
#define GROUP_SIZE ((int)_gsize)
#define NUM_GROUPS ((int)_ngroups)
#define GLOBAL_SIZE ((int)(_gsize * _ngroups))
#define BARRIER() threadgroup_barrier(mem_flags::mem_threadgroup)
#define INFINITY_T INFINITY
#define RSQRT(x) rsqrt(x)
#define INLINE inline

#elif defined(__OPENCL_VERSION__)
#if defined(RIFTCO_FP64)
#pragma OPENCL EXTENSION cl_khr_fp64 : enable
#endif
#define KERNEL __kernel
#define GLOBAL __global
#define LOCAL __local
#define LOCAL_PTR __local
#define ARG(n)
#define THREAD_ARGS
#define GID ((int)get_global_id(0))
#define LID ((int)get_local_id(0))
#define GROUP_ID ((int)get_group_id(0))
#define GROUP_SIZE ((int)get_local_size(0))
#define NUM_GROUPS ((int)get_num_groups(0))
#define GLOBAL_SIZE ((int)get_global_size(0))
#define BARRIER() barrier(CLK_LOCAL_MEM_FENCE | CLK_GLOBAL_MEM_FENCE)
#define INFINITY_T INFINITY
#define RSQRT(x) rsqrt(x)
#define INLINE inline

#elif defined(__CUDACC_RTC__) || defined(__CUDACC__)
/* CUDA C++ through NVRTC (backends/cuda). Kernels take only pointers (parameters travel
 * in buffers, as on Metal), so the host passes an array of device pointers. Shared memory
 * cannot qualify a parameter: helpers take LOCAL_PTR pointers, which are generic here. */
typedef unsigned int uint;
typedef unsigned long ulong;
typedef unsigned short ushort;
typedef unsigned char uchar;
#ifndef INFINITY
#define INFINITY __int_as_float(0x7f800000)
#endif
#define KERNEL extern "C" __global__
#define GLOBAL
#define LOCAL __shared__ __align__(16) /* lets 4 adjacent reads become one 16-byte load */
#define LOCAL_PTR
#define ARG(n)
#define THREAD_ARGS
/* Global index and size in 64 bits, saturated to INT_MAX: `blockIdx.x * blockDim.x` is
 * 32-bit unsigned arithmetic, so past 2^31 threads (a grid rounded up to whole blocks of
 * 96 or 352 near 2^31 elements) the int cast turns negative and a tail thread passes an
 * `i < n` test with a negative index. Saturated, every such thread reads INT_MAX >= n
 * (kernel_host refuses tensors of 2^31 elements or more: MAX_ELEMENTS). */
#define RS_SAT_INT(x) ((int)((x) > 0x7fffffffULL ? 0x7fffffffULL : (x)))
#define GID RS_SAT_INT((unsigned long long)blockIdx.x * blockDim.x + threadIdx.x)
#define LID ((int)threadIdx.x)
#define GROUP_ID ((int)blockIdx.x)
#define GROUP_SIZE ((int)blockDim.x)
#define NUM_GROUPS ((int)gridDim.x)
#define GLOBAL_SIZE RS_SAT_INT((unsigned long long)blockDim.x * gridDim.x)
#define BARRIER() __syncthreads()
#define INFINITY_T INFINITY
#define RSQRT(x) rsqrt(x)
#define INLINE __device__ inline
/* OpenCL's clamp: fmin(fmax(x, lo), hi) (a NaN x gives lo, as in OpenCL and Metal). */
INLINE float clamp(float x, float lo, float hi) { return fminf(fmaxf(x, lo), hi); }
INLINE double clamp(double x, double lo, double hi) { return fmin(fmax(x, lo), hi); }
INLINE int clamp(int x, int lo, int hi) { return min(max(x, lo), hi); }
INLINE long clamp(long x, long lo, long hi) { return min(max(x, lo), hi); }

#else
#error "riftco prelude: none of __METAL_VERSION__, __OPENCL_VERSION__, __CUDACC_RTC__ is defined"
#endif

/* ---- Fast-math safety: bit-pattern tests, finite sentinels, status flags, precise math ----
 *
 * Metal compiles with fast math by default: the compiler may assume no NaN or infinity
 * reaches any float operation, so `x != x`, `isnan(x)` and `x == -INFINITY` may fold to a
 * constant (PoCL folds `x != x` to false under -cl-fast-relaxed-math; see
 * tests/kernels/test_kernel_specials.py). Kernels therefore never branch on a float
 * comparison with a special value. Instead:
 *   - NaN and infinity are recognised by their bit patterns (RIFTCO_ISNAN & co.: exponent
 *     all ones, mantissa non-zero / zero), which no float optimisation can fold;
 *   - running maxima start from a finite sentinel (RIFTCO_LOWEST, the lowest finite value)
 *     or from a real element of the row, and "this row had a usable value" is an explicit
 *     flag or count, never "max is still -inf";
 *   - special results (NaN, +-inf, -0) are bit patterns (RIFTCO_NAN, RIFTCO_INF, ...),
 *     selected by those flags, never produced by arithmetic the compiler may rewrite;
 *   - a value's bit tests come before any float comparison of it, on every path: after
 *     a fast-math `v > w` the compiler may assume v is not NaN, even in a later bit test;
 *   - exp of a difference is taken of a clamped argument (RIFTCO_EXP_FLOOR: exp of it is
 *     exactly 0 in T), so no -inf ever reaches exp (rs_exp in specials.h, which also
 *     holds the T-typed helpers built on these macros).
 * The T-generic names dispatch on the element type by token pasting (T is defined after
 * this file, which is fine: macros expand where they are used).
 *
 * Precise math, per kernel family. Metal's fast variants of exp/log/tanh/pow/sqrt trade
 * accuracy for speed (their error grows with |x|); every riftco family is memory-bound, so
 * the precise variants cost little, and every family is compared element-wise with a
 * float64 reference at a few ulp. PRECISE_* are `metal::precise::` on Metal and the plain
 * builtins elsewhere (OpenCL and CUDA builtins are precise unless built with fast math).
 *   elementwise: exp, log, sqrt, tanh, pow    - the primitives themselves, checked per ulp
 *   gelu:        exp                          - erf series / continued fraction and the
 *                                               logistic tails need relative accuracy
 *   softmax, cross_entropy, attention, flash_attention(_cpu): exp, log
 *                                             - lse feeds the loss (lse - logit cancels for
 *                                               confident rows) and the backward rebuilds
 *                                               probabilities from it
 *   layer_norm, adam: sqrt                    - rstd scales every output and gradient
 * No family uses `#pragma METAL fp math_mode(safe)`: it needs MSL 3.2 (macOS 15), and a
 * kernel that is only right under it would still be wrong on older Macs; the kernels are
 * fast-math safe by construction instead, which CI checks with OpenCL's fast-math flags.
 *
 * Device status word (index-taking kernels: embedding, embedding_backward, cross_entropy,
 * cross_entropy_backward): a kernel that meets an out-of-range id clamps it (never reads
 * or writes out of bounds) and records it in a small int buffer declared
 * `GLOBAL STATUS_T* status`, through RIFTCO_STATUS_OR/MIN/MAX (integer atomics; the host
 * reads it at the next sync point; layout in status.h).
 */
#if defined(__METAL_VERSION__)
#define RIFTCO_F32_BITS(x) as_type<uint>(x)
#define RIFTCO_F32_FROM_BITS(u) as_type<float>((uint)(u))
#define STATUS_T atomic_int
#define RIFTCO_STATUS_OR(p, v) atomic_fetch_or_explicit((p), (v), memory_order_relaxed)
#define RIFTCO_STATUS_MIN(p, v) atomic_fetch_min_explicit((p), (v), memory_order_relaxed)
#define RIFTCO_STATUS_MAX(p, v) atomic_fetch_max_explicit((p), (v), memory_order_relaxed)
#define PRECISE_EXP(x) precise::exp(x)
#define PRECISE_LOG(x) precise::log(x)
#define PRECISE_SQRT(x) precise::sqrt(x)
#define PRECISE_TANH(x) precise::tanh(x)
#define PRECISE_POW(x, y) precise::pow(x, y)
#elif defined(__OPENCL_VERSION__)
#define RIFTCO_F32_BITS(x) as_uint(x)
#define RIFTCO_F32_FROM_BITS(u) as_float((uint)(u))
#if defined(RIFTCO_FP64)
#define RIFTCO_F64_BITS(x) as_ulong(x)
#define RIFTCO_F64_FROM_BITS(u) as_double((ulong)(u))
#endif
#define STATUS_T volatile int
#define RIFTCO_STATUS_OR(p, v) atomic_or((p), (v))
#define RIFTCO_STATUS_MIN(p, v) atomic_min((p), (v))
#define RIFTCO_STATUS_MAX(p, v) atomic_max((p), (v))
#define PRECISE_EXP(x) exp(x)
#define PRECISE_LOG(x) log(x)
#define PRECISE_SQRT(x) sqrt(x)
#define PRECISE_TANH(x) tanh(x)
#define PRECISE_POW(x, y) pow(x, y)
#else /* CUDA (NVRTC): the branch above has already rejected anything else */
#define RIFTCO_FP64 1
#define RIFTCO_F32_BITS(x) __float_as_uint(x)
#define RIFTCO_F32_FROM_BITS(u) __uint_as_float((uint)(u))
#define RIFTCO_F64_BITS(x) ((ulong)__double_as_longlong(x))
#define RIFTCO_F64_FROM_BITS(u) __longlong_as_double((long long)(u))
#define STATUS_T int
#define RIFTCO_STATUS_OR(p, v) atomicOr((p), (v))
#define RIFTCO_STATUS_MIN(p, v) atomicMin((p), (v))
#define RIFTCO_STATUS_MAX(p, v) atomicMax((p), (v))
#define PRECISE_EXP(x) exp(x)
#define PRECISE_LOG(x) log(x)
#define PRECISE_SQRT(x) sqrt(x)
#define PRECISE_TANH(x) tanh(x)
#define PRECISE_POW(x, y) pow(x, y)
#endif

#define RIFTCO_CAT_(a, b) a##b
#define RIFTCO_CAT(a, b) RIFTCO_CAT_(a, b)

/* Class tests on bit patterns, per element type (float always; double with RIFTCO_FP64). */
INLINE int riftco_isnan_float(float x) { return (RIFTCO_F32_BITS(x) & 0x7fffffffu) > 0x7f800000u; }
INLINE int riftco_isinf_float(float x) { return (RIFTCO_F32_BITS(x) & 0x7fffffffu) == 0x7f800000u; }
INLINE int riftco_isfinite_float(float x) { return (RIFTCO_F32_BITS(x) & 0x7f800000u) != 0x7f800000u; }
INLINE int riftco_isposinf_float(float x) { return RIFTCO_F32_BITS(x) == 0x7f800000u; }
INLINE int riftco_isneginf_float(float x) { return RIFTCO_F32_BITS(x) == 0xff800000u; }
INLINE int riftco_iszero_float(float x) { return (RIFTCO_F32_BITS(x) & 0x7fffffffu) == 0u; }
INLINE int riftco_signbit_float(float x) { return (int)(RIFTCO_F32_BITS(x) >> 31); }
INLINE int riftco_exponent_float(float x) { return (int)((RIFTCO_F32_BITS(x) >> 23) & 0xffu); }
#define RIFTCO_EXP_BIAS_float 127
#define RIFTCO_NAN_float RIFTCO_F32_FROM_BITS(0x7fc00000u)
#define RIFTCO_INF_float RIFTCO_F32_FROM_BITS(0x7f800000u)
#define RIFTCO_NEGINF_float RIFTCO_F32_FROM_BITS(0xff800000u)
#define RIFTCO_NEGZERO_float RIFTCO_F32_FROM_BITS(0x80000000u)
#define RIFTCO_LOWEST_float (-3.40282346638528859812e+38f)
#define RIFTCO_EXP_FLOOR_float (-120.0f)
#if defined(RIFTCO_FP64)
INLINE int riftco_isnan_double(double x) {
    return (RIFTCO_F64_BITS(x) & 0x7fffffffffffffffUL) > 0x7ff0000000000000UL;
}
INLINE int riftco_isinf_double(double x) {
    return (RIFTCO_F64_BITS(x) & 0x7fffffffffffffffUL) == 0x7ff0000000000000UL;
}
INLINE int riftco_isfinite_double(double x) {
    return (RIFTCO_F64_BITS(x) & 0x7ff0000000000000UL) != 0x7ff0000000000000UL;
}
INLINE int riftco_isposinf_double(double x) { return RIFTCO_F64_BITS(x) == 0x7ff0000000000000UL; }
INLINE int riftco_isneginf_double(double x) { return RIFTCO_F64_BITS(x) == 0xfff0000000000000UL; }
INLINE int riftco_iszero_double(double x) {
    return (RIFTCO_F64_BITS(x) & 0x7fffffffffffffffUL) == 0UL;
}
INLINE int riftco_signbit_double(double x) { return (int)(RIFTCO_F64_BITS(x) >> 63); }
INLINE int riftco_exponent_double(double x) {
    return (int)((RIFTCO_F64_BITS(x) >> 52) & 0x7ffUL);
}
#define RIFTCO_EXP_BIAS_double 1023
#define RIFTCO_NAN_double RIFTCO_F64_FROM_BITS(0x7ff8000000000000UL)
#define RIFTCO_INF_double RIFTCO_F64_FROM_BITS(0x7ff0000000000000UL)
#define RIFTCO_NEGINF_double RIFTCO_F64_FROM_BITS(0xfff0000000000000UL)
#define RIFTCO_NEGZERO_double RIFTCO_F64_FROM_BITS(0x8000000000000000UL)
#define RIFTCO_LOWEST_double (-1.79769313486231570815e+308)
#define RIFTCO_EXP_FLOOR_double (-800.0)
#endif

/* The same, for the program's element type T. */
#define RIFTCO_ISNAN(x) RIFTCO_CAT(riftco_isnan_, T)(x)
#define RIFTCO_ISINF(x) RIFTCO_CAT(riftco_isinf_, T)(x)
#define RIFTCO_ISFINITE(x) RIFTCO_CAT(riftco_isfinite_, T)(x)
#define RIFTCO_ISPOSINF(x) RIFTCO_CAT(riftco_isposinf_, T)(x)
#define RIFTCO_ISNEGINF(x) RIFTCO_CAT(riftco_isneginf_, T)(x)
#define RIFTCO_ISZERO(x) RIFTCO_CAT(riftco_iszero_, T)(x)
#define RIFTCO_SIGNBIT(x) RIFTCO_CAT(riftco_signbit_, T)(x)
/* The biased exponent field (0 for zero and subnormals) and its bias. */
#define RIFTCO_EXPONENT(x) RIFTCO_CAT(riftco_exponent_, T)(x)
#define RIFTCO_EXP_BIAS RIFTCO_CAT(RIFTCO_EXP_BIAS_, T)
#define RIFTCO_NAN RIFTCO_CAT(RIFTCO_NAN_, T)
#define RIFTCO_INF RIFTCO_CAT(RIFTCO_INF_, T)
#define RIFTCO_NEGINF RIFTCO_CAT(RIFTCO_NEGINF_, T)
#define RIFTCO_NEGZERO RIFTCO_CAT(RIFTCO_NEGZERO_, T)
#define RIFTCO_LOWEST RIFTCO_CAT(RIFTCO_LOWEST_, T)
#define RIFTCO_EXP_FLOOR RIFTCO_CAT(RIFTCO_EXP_FLOOR_, T)

/* Element offset of matrix (or head) `bi` of a batch that splits into (outer, inner) index
 * pairs, inner = bi % inner_count: each index has its own stride, plus a base offset. The
 * matmul kernels' batches and the flash kernels' (batch, head) rows are addressed by it. */
INLINE long riftco_batch_offset(int bi, int inner_count, int s_outer, int s_inner, int off) {
    return (long)(bi / inner_count) * s_outer + (long)(bi % inner_count) * s_inner + off;
}

/* Ask the compiler to unroll the next loop fully (constant trip count): lets per-thread
 * register tiles (matmul_panel) live in registers and vectorise; a hint, never a must. */
#define UNROLL _Pragma("unroll")

#endif /* RIFTCO_PRELUDE_H */
