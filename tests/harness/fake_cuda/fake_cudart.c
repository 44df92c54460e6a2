/* SPDX-License-Identifier: Apache-2.0 */
/*
 * A stand-in for the CUDA runtime (libcudart.so.12) and, built with
 * -DZT_FAKE_DRIVER, for the driver (libcuda.so.1), on machines without a GPU.
 *
 * It exports the allocation, free and launch entry points the GPU probe hooks,
 * with the real C signatures (cuda_runtime_api.h / cuda.h, CUDA 12), so the
 * probe reads arguments and results exactly as it would from NVIDIA's libraries.
 * Device addresses come from a bump allocator in a range no host mapping uses,
 * 512-byte aligned like cudaMalloc's; nothing is ever touched there.
 *
 * Built with frame pointers so the probe's user stacks reach the caller.
 */
#include <stddef.h>
#include <stdint.h>

#define ZT_EXPORT __attribute__((visibility("default"), noinline))
#define ZT_ALIGN 512u

/* Distinct ranges for the two twins: an address names its allocator. */
#ifdef ZT_FAKE_DRIVER
static uint64_t next_addr = 0x00007e0000000000ull;
#else
static uint64_t next_addr = 0x00007d0000000000ull;
#endif
static volatile uint64_t launches;

static uint64_t bump(size_t size)
{
	uint64_t addr = next_addr;
	next_addr += (size + ZT_ALIGN - 1) & ~(uint64_t)(ZT_ALIGN - 1);
	if (size == 0)
		next_addr += ZT_ALIGN; /* distinct address even for empty blocks */
	return addr;
}

#ifndef ZT_FAKE_DRIVER
/* ---- runtime API: cudaError_t is an int enum, cudaSuccess = 0 ---- */
typedef int cudaError_t;
typedef void *cudaStream_t;
typedef struct {
	unsigned int x, y, z;
} dim3;

#define cudaSuccess 0
#define cudaErrorInvalidValue 1

/* Exported functions never call each other: each probed entry is hit once per call. */
static inline cudaError_t alloc_into(void **devPtr, size_t size)
{
	if (!devPtr)
		return cudaErrorInvalidValue;
	*devPtr = (void *)(uintptr_t)bump(size);
	return cudaSuccess;
}

#ifdef ZT_FAKE_NESTED
/*
 * Like NVIDIA's runtime, allocate through the driver (linked against libcuda.so.1): the
 * probe must report the outer cudaMalloc only, not the cuMemAlloc_v2 inside it.
 */
extern int cuMemAlloc_v2(unsigned long long *dptr, size_t bytesize);

ZT_EXPORT cudaError_t cudaMalloc(void **devPtr, size_t size)
{
	unsigned long long dptr = 0;
	if (!devPtr || cuMemAlloc_v2(&dptr, size) != 0)
		return cudaErrorInvalidValue;
	*devPtr = (void *)(uintptr_t)dptr;
	return cudaSuccess;
}
#else
ZT_EXPORT cudaError_t cudaMalloc(void **devPtr, size_t size)
{
	return alloc_into(devPtr, size);
}
#endif

ZT_EXPORT cudaError_t cudaMallocAsync(void **devPtr, size_t size, cudaStream_t stream)
{
	(void)stream;
	return alloc_into(devPtr, size);
}

ZT_EXPORT cudaError_t cudaMallocManaged(void **devPtr, size_t size, unsigned int flags)
{
	(void)flags;
	return alloc_into(devPtr, size);
}

ZT_EXPORT cudaError_t cudaFree(void *devPtr)
{
	(void)devPtr; /* NULL is a no-op and succeeds, as in CUDA */
	return cudaSuccess;
}

ZT_EXPORT cudaError_t cudaFreeAsync(void *devPtr, cudaStream_t stream)
{
	(void)devPtr;
	(void)stream;
	return cudaSuccess;
}

ZT_EXPORT cudaError_t cudaLaunchKernel(const void *func, dim3 gridDim, dim3 blockDim,
				       void **args, size_t sharedMem, cudaStream_t stream)
{
	(void)gridDim;
	(void)blockDim;
	(void)args;
	(void)sharedMem;
	(void)stream;
	if (!func)
		return cudaErrorInvalidValue;
	launches++;
	return cudaSuccess;
}

#else
/* ---- driver API: CUresult is an int enum, CUDA_SUCCESS = 0 ---- */
typedef int CUresult;
typedef unsigned long long CUdeviceptr;
typedef void *CUstream;
typedef void *CUfunction;

#define CUDA_SUCCESS 0
#define CUDA_ERROR_INVALID_VALUE 1

static inline CUresult alloc_into(CUdeviceptr *dptr, size_t bytesize)
{
	if (!dptr || bytesize == 0)
		return CUDA_ERROR_INVALID_VALUE;
	*dptr = bump(bytesize);
	return CUDA_SUCCESS;
}

ZT_EXPORT CUresult cuMemAlloc_v2(CUdeviceptr *dptr, size_t bytesize)
{
	return alloc_into(dptr, bytesize);
}

ZT_EXPORT CUresult cuMemAllocAsync(CUdeviceptr *dptr, size_t bytesize, CUstream hStream)
{
	(void)hStream;
	return alloc_into(dptr, bytesize);
}

ZT_EXPORT CUresult cuMemFree_v2(CUdeviceptr dptr)
{
	return dptr ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

ZT_EXPORT CUresult cuMemFreeAsync(CUdeviceptr dptr, CUstream hStream)
{
	(void)hStream;
	return dptr ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

ZT_EXPORT CUresult cuLaunchKernel(CUfunction f, unsigned int gridDimX, unsigned int gridDimY,
				  unsigned int gridDimZ, unsigned int blockDimX,
				  unsigned int blockDimY, unsigned int blockDimZ,
				  unsigned int sharedMemBytes, CUstream hStream, void **kernelParams,
				  void **extra)
{
	(void)gridDimX;
	(void)gridDimY;
	(void)gridDimZ;
	(void)blockDimX;
	(void)blockDimY;
	(void)blockDimZ;
	(void)sharedMemBytes;
	(void)hStream;
	(void)kernelParams;
	(void)extra;
	if (!f)
		return CUDA_ERROR_INVALID_VALUE;
	launches++;
	return CUDA_SUCCESS;
}
#endif
