/* riftco kernel prelude: the one place where Metal Shading Language, OpenCL C and CUDA differ.
 *
 * Every kernel body in shaders/ is written once against these macros. The prelude picks
 * its branch from the compilers' predefined macros, so each runtime (and the MSL syntax
 * check run with g++ -D__METAL_VERSION__) compiles the very same source string.
 *
 * The host appends, right after this file (after metal_stdlib, whose templates use T as a
 * parameter name) and before the family body:
 *   #define T <float|double>     the element type of the program
 *   #define IDX <int|long>       the index type (embedding ids, targets)
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
#define GID ((int)(blockIdx.x * blockDim.x + threadIdx.x))
#define LID ((int)threadIdx.x)
#define GROUP_ID ((int)blockIdx.x)
#define GROUP_SIZE ((int)blockDim.x)
#define NUM_GROUPS ((int)gridDim.x)
#define GLOBAL_SIZE ((int)(blockDim.x * gridDim.x))
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

/* Ask the compiler to unroll the next loop fully (constant trip count): lets per-thread
 * register tiles (matmul_panel) live in registers and vectorise; a hint, never a must. */
#define UNROLL _Pragma("unroll")

#endif /* RIFTCO_PRELUDE_H */
