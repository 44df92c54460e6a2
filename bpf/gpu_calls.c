/* SPDX-License-Identifier: Apache-2.0 */
/*
 * zerotrace GPU calls probe: CUDA runtime and driver allocation, free and launch
 * calls with their calling user stack, and the moment a process opens a CUDA library.
 *
 * Attach points:
 *   uprobe + uretprobe on each API below, attached by the loader (probes/gpu.py) by
 *   symbol to every libcudart / libcuda file seen, inode-wide (pid -1): once a file
 *   is attached, every process that maps it is probed.
 *       entry  -> per-thread state (arguments, start time, user stack id)
 *       return -> struct zt_gpu_call_event with the result, and for allocations the
 *                 device address the API wrote through its first argument
 *   tracepoints syscalls:sys_{enter,exit}_{openat,openat2}
 *       -> struct zt_gpu_lib_event when a process opens, read-only, a file named
 *          libcudart* or libcuda.*, and that process is stopped (see "late loading").
 *
 * Late loading: dlopen() returns and the program may call cudaMalloc microseconds
 * later, before user space could attach. So at the exit of an openat() that returned a
 * CUDA library fd, the process gets SIGSTOP (bpf_send_signal: it takes effect before
 * the thread returns to user space, so the library is not mapped yet); the loader
 * attaches uprobes to the opened file, marks the path known (zt_gpu_known) and sends
 * SIGCONT. Cost: a pause of a few ms, once per library path and cgroup (not per process:
 * the uprobes are inode-wide, and a known path is never stopped for again). The cgroup is
 * part of the key because the same path names another file in a container's mount
 * namespace, and the cgroup id is what a BPF program can tell a container by without
 * reading kernel structs. Caveats: a
 * parent waiting with WUNTRACED sees the stop; if the collector dies between stop and
 * continue, its stop guard (probes/stop_guard.py, a child process that outlives it)
 * continues the process at once.
 *
 * Python frames: the loader compiles bpf/python_stack.h followed by this file (bcc rewrites
 * map calls only in its main text, so the header is not #included); at entry the calling
 * thread's CPython frames are walked (zt_python_stack, for processes the loader put in
 * zt_py_procs) and travel with the call to its return event.
 *
 * Nesting: a runtime call may enter the driver (cudaMalloc -> cuMemAlloc_v2 inside
 * NVIDIA's libcudart). Only the outermost call on a thread is reported: an entry that
 * finds a fresh in-flight call on its thread is skipped, and each return function
 * checks the in-flight state is its own API before reporting.
 *
 * Launches also take a uretprobe (cost: a second uprobe hit, about 3 us) for the
 * result and for the nesting rule above. No GPU-side time is measured here (that needs
 * CUPTI); launches are counted per calling stack.
 *
 * Compile-time tunables (cflags):
 *   ZT_FILTER_PID    only this tgid (0 = every process)
 *   ZT_FOLLOW        1 = only processes in zt_gpu_follow and what they fork
 *   ZT_SELF_PID      never this tgid (the collector: it reads the libraries' ELF)
 *   ZT_STOP_ON_OPEN  1 = SIGSTOP a process opening an unknown CUDA library (default)
 *   ZT_RINGBUF_PAGES ring buffer size in pages (power of two)
 *   ZT_MAX_INFLIGHT  threads concurrently inside a traced call
 *   ZT_STACKS        entries of the user stack table
 *   ZT_NEST_NS       an in-flight call older than this is stale (missed return), not an outer call
 *   ZT_PY_MAX_DEPTH  Python frames kept per call (python_stack.h)
 */
#include <uapi/linux/ptrace.h>

#ifndef ZT_FILTER_PID
#define ZT_FILTER_PID 0
#endif
#ifndef ZT_FOLLOW
#define ZT_FOLLOW 0
#endif
#ifndef ZT_SELF_PID
#define ZT_SELF_PID 0
#endif
#ifndef ZT_STOP_ON_OPEN
#define ZT_STOP_ON_OPEN 1
#endif
#ifndef ZT_RINGBUF_PAGES
#define ZT_RINGBUF_PAGES 256
#endif
#ifndef ZT_MAX_INFLIGHT
#define ZT_MAX_INFLIGHT 4096 /* each holds a Python stack (~800 bytes): 3 MiB preallocated */
#endif
#ifndef ZT_STACKS
#define ZT_STACKS 16384
#endif
#ifndef ZT_NEST_NS
#define ZT_NEST_NS 5000000000ull /* 5 s: no allocation blocks that long, a missed return can */
#endif

#define ZT_COMM_LEN 16
#define ZT_PATH_MAX 256
#define ZT_SIGSTOP 19
#define ZT_O_ACCMODE 3
#define ZT_O_RDONLY 0

/* Type tags: chosen apart from zerotrace_events.h's 1..3 (this probe has its own buffer). */
#define ZT_EVENT_GPU_CALL 0x10
#define ZT_EVENT_GPU_LIB  0x11

/* API ids: mirrored in probes/gpu_decode.py (GPU_APIS). Driver APIs are >= ZT_API_CU_FIRST. */
#define ZT_API_CUDA_MALLOC         1
#define ZT_API_CUDA_FREE           2
#define ZT_API_CUDA_MALLOC_ASYNC   3
#define ZT_API_CUDA_FREE_ASYNC     4
#define ZT_API_CUDA_MALLOC_MANAGED 5
#define ZT_API_CUDA_LAUNCH_KERNEL  6
#define ZT_API_CU_MEM_ALLOC        7
#define ZT_API_CU_MEM_FREE         8
#define ZT_API_CU_MEM_ALLOC_ASYNC  9
#define ZT_API_CU_MEM_FREE_ASYNC   10
#define ZT_API_CU_LAUNCH_KERNEL    11

/* How an API's arguments are read. */
#define ZT_KIND_ALLOC  1 /* arg1: pointer the address is written through, arg2: size */
#define ZT_KIND_FREE   2 /* arg1: the address freed */
#define ZT_KIND_LAUNCH 3 /* nothing read */

/* Indexes into zt_gpu_stats. Mirrored in probes/gpu.py. */
#define ZT_STAT_LOST          0 /* ring buffer full: event dropped */
#define ZT_STAT_INFLIGHT_FULL 1 /* zt_gpu_inflight full: call not traced */
#define ZT_STAT_NESTED        2 /* call made inside another traced call: not reported */
#define ZT_STAT_STOPS         3 /* processes stopped at a CUDA library open */
#define ZT_STAT_NR            4

/*
 * One traced call, at its return.
 *
 *   offset size field
 *        0    4 type      ZT_EVENT_GPU_CALL
 *        4    4 pid       tgid
 *        8    4 tid
 *       12    4 api       ZT_API_*
 *       16    8 start_ns  entry (CLOCK_MONOTONIC)
 *       24    8 end_ns    return (CLOCK_MONOTONIC)
 *       32    8 address   allocated (read at return) or freed address; 0 for launches
 *       40    8 size      bytes asked for; 0 otherwise
 *       48    8 result    the API's return value (cudaError_t / CUresult), sign-extended
 *       56    4 stack_id  user stack in zt_gpu_stacks, or -errno when it was not taken
 *       60    4 _pad
 *       64   16 comm
 *       80    8 caller    return address at entry ([rsp]): the immediate caller, which a
 *                         frame-pointer walk from a function's first instruction skips
 *                         (rbp still frames the caller, so the walk's next address is the
 *                         caller's own return address)
 *       88      py       struct zt_py_stack (python_stack.h): status, depth, truncated,
 *                        reserved (u32 each), code[ZT_PY_MAX_DEPTH], instr[ZT_PY_MAX_DEPTH]
 *   104 + 16 * ZT_PY_MAX_DEPTH total
 */
struct zt_gpu_call_event {
	u32 type;
	u32 pid;
	u32 tid;
	u32 api;
	u64 start_ns;
	u64 end_ns;
	u64 address;
	u64 size;
	s64 result;
	s32 stack_id;
	u32 _pad;
	char comm[ZT_COMM_LEN];
	u64 caller;
	struct zt_py_stack py;
};
_Static_assert(__builtin_offsetof(struct zt_gpu_call_event, py) == 88,
	       "update probes/gpu_decode.py");
_Static_assert(sizeof(struct zt_gpu_call_event) == 104 + 16 * ZT_PY_MAX_DEPTH,
	       "update probes/gpu_decode.py");

/*
 * A process opened a file named like a CUDA library.
 *
 *   offset size field
 *        0    4 type     ZT_EVENT_GPU_LIB
 *        4    4 pid
 *        8    4 tid
 *       12    4 fd       what openat returned (the file is readable at /proc/pid/fd/fd)
 *       16    4 stopped  1 when SIGSTOP was sent: the loader must SIGCONT the process
 *       20    4 _pad
 *       24    8 ts_ns    openat's return (CLOCK_MONOTONIC): where the pause starts
 *       32    8 cgroup_id the opener's cgroup v2 id (half of the zt_gpu_known key)
 *       40  256 path     as the program passed it (may be relative), NUL-terminated
 *      296               total
 */
struct zt_gpu_lib_event {
	u32 type;
	u32 pid;
	u32 tid;
	s32 fd;
	u32 stopped;
	u32 _pad;
	u64 ts_ns;
	u64 cgroup_id;
	char path[ZT_PATH_MAX];
};
_Static_assert(sizeof(struct zt_gpu_lib_event) == 296, "update probes/gpu_decode.py");

/* zt_gpu_known's key; written by the loader too (probes/gpu.py, _mark_known). */
struct zt_gpu_path {
	u64 cgroup_id;
	char p[ZT_PATH_MAX];
};

struct zt_gpu_inflight {
	u64 start_ns;
	u64 arg;  /* ZT_KIND_ALLOC: the out pointer; ZT_KIND_FREE: the address */
	u64 size;
	u32 api;
	s32 stack_id;
	u64 caller;
	struct zt_py_stack py; /* taken at entry: at return the frames may have moved on */
};

BPF_RINGBUF_OUTPUT(zt_gpu_events, ZT_RINGBUF_PAGES);
BPF_ARRAY(zt_gpu_stats, u64, ZT_STAT_NR);
BPF_STACK_TRACE(zt_gpu_stacks, ZT_STACKS);
BPF_HASH(zt_gpu_inflight, u32, struct zt_gpu_inflight, ZT_MAX_INFLIGHT);
/* Entry state is built here: it is larger than the 512-byte BPF stack. */
BPF_PERCPU_ARRAY(zt_gpu_scratch, struct zt_gpu_inflight, 1);
/* tid -> user filename pointer of a read-only openat in progress */
BPF_HASH(zt_gpu_opening, u32, u64, ZT_MAX_INFLIGHT);
/* (cgroup, library path as programs spell it) already attached: opening it stops nobody. */
BPF_TABLE("lru_hash", struct zt_gpu_path, u8, zt_gpu_known, 1024); /* evicted: one more stop */
BPF_TABLE("lru_hash", u32, u8, zt_gpu_follow, 16384); /* never full: the oldest goes */

static __always_inline void zt_gpu_stat_inc(u32 idx)
{
	u64 *v = zt_gpu_stats.lookup(&idx);
	if (v)
		__sync_fetch_and_add(v, 1);
}

static __always_inline int zt_gpu_wanted(u32 tgid)
{
	if (ZT_FILTER_PID != 0 && tgid != (u32)ZT_FILTER_PID)
		return 0;
	if (ZT_SELF_PID != 0 && tgid == (u32)ZT_SELF_PID)
		return 0;
	if (ZT_FOLLOW && zt_gpu_follow.lookup(&tgid) == NULL)
		return 0;
	return 1;
}

/* ---- API calls ---- */

static __always_inline int zt_gpu_enter(struct pt_regs *ctx, u32 api, u32 kind)
{
	u64 id = bpf_get_current_pid_tgid();
	u32 tid = (u32)id;
	if (!zt_gpu_wanted(id >> 32))
		return 0;
	u64 now = bpf_ktime_get_ns();
	struct zt_gpu_inflight *outer = zt_gpu_inflight.lookup(&tid);
	if (outer && now - outer->start_ns < ZT_NEST_NS) {
		zt_gpu_stat_inc(ZT_STAT_NESTED);
		return 0;
	}
	u32 zero = 0;
	struct zt_gpu_inflight *c = zt_gpu_scratch.lookup(&zero);
	if (!c)
		return 0;
	c->start_ns = now;
	c->api = api;
	c->arg = 0;
	c->size = 0;
	if (kind == ZT_KIND_ALLOC) {
		c->arg = PT_REGS_PARM1(ctx);
		c->size = PT_REGS_PARM2(ctx);
	} else if (kind == ZT_KIND_FREE) {
		c->arg = PT_REGS_PARM1(ctx);
	}
	/* At entry the registers are the caller's: the stack unwinds from here. */
	c->stack_id = zt_gpu_stacks.get_stackid(ctx, BPF_F_USER_STACK);
	c->caller = 0;
	bpf_probe_read_user(&c->caller, sizeof(c->caller), (void *)PT_REGS_SP(ctx));
	zt_python_stack(id >> 32, tid, &c->py);
	if (zt_gpu_inflight.update(&tid, c) != 0)
		zt_gpu_stat_inc(ZT_STAT_INFLIGHT_FULL);
	return 0;
}

static __always_inline int zt_gpu_return(struct pt_regs *ctx, u32 api, u32 kind)
{
	u64 id = bpf_get_current_pid_tgid();
	u32 tid = (u32)id;
	struct zt_gpu_inflight *c = zt_gpu_inflight.lookup(&tid);
	if (!c || c->api != api)
		return 0; /* not traced, or the return of a nested call */
	struct zt_gpu_call_event *ev = zt_gpu_events.ringbuf_reserve(sizeof(*ev));
	if (!ev) {
		zt_gpu_stat_inc(ZT_STAT_LOST);
		zt_gpu_inflight.delete(&tid);
		return 0;
	}
	ev->type = ZT_EVENT_GPU_CALL;
	ev->pid = id >> 32;
	ev->tid = tid;
	ev->api = api;
	ev->start_ns = c->start_ns;
	ev->end_ns = bpf_ktime_get_ns();
	/* cudaError_t and CUresult are C ints: sign-extend from 32 bits. */
	ev->result = (s64)(s32)PT_REGS_RC(ctx);
	ev->address = 0;
	ev->size = 0;
	if (kind == ZT_KIND_ALLOC) {
		ev->size = c->size;
		u64 addr = 0;
		if (ev->result == 0 && c->arg)
			bpf_probe_read_user(&addr, sizeof(addr), (void *)c->arg);
		ev->address = addr;
	} else if (kind == ZT_KIND_FREE) {
		ev->address = c->arg;
	}
	ev->stack_id = c->stack_id;
	ev->_pad = 0;
	ev->caller = c->caller;
	bpf_probe_read_kernel(&ev->py, sizeof(ev->py), &c->py);
	zt_gpu_inflight.delete(&tid);
	bpf_get_current_comm(ev->comm, sizeof(ev->comm));
	zt_gpu_events.ringbuf_submit(ev, 0);
	return 0;
}

/* One entry and one return function per API: the loader attaches them by these names. */
#define ZT_GPU_API(name, api, kind)                                \
	int zt_gpu_enter_##name(struct pt_regs *ctx)               \
	{                                                          \
		return zt_gpu_enter(ctx, api, kind);               \
	}                                                          \
	int zt_gpu_return_##name(struct pt_regs *ctx)              \
	{                                                          \
		return zt_gpu_return(ctx, api, kind);              \
	}

ZT_GPU_API(cudaMalloc, ZT_API_CUDA_MALLOC, ZT_KIND_ALLOC)
ZT_GPU_API(cudaFree, ZT_API_CUDA_FREE, ZT_KIND_FREE)
ZT_GPU_API(cudaMallocAsync, ZT_API_CUDA_MALLOC_ASYNC, ZT_KIND_ALLOC)
ZT_GPU_API(cudaFreeAsync, ZT_API_CUDA_FREE_ASYNC, ZT_KIND_FREE)
ZT_GPU_API(cudaMallocManaged, ZT_API_CUDA_MALLOC_MANAGED, ZT_KIND_ALLOC)
ZT_GPU_API(cudaLaunchKernel, ZT_API_CUDA_LAUNCH_KERNEL, ZT_KIND_LAUNCH)
ZT_GPU_API(cuMemAlloc_v2, ZT_API_CU_MEM_ALLOC, ZT_KIND_ALLOC)
ZT_GPU_API(cuMemFree_v2, ZT_API_CU_MEM_FREE, ZT_KIND_FREE)
ZT_GPU_API(cuMemAllocAsync, ZT_API_CU_MEM_ALLOC_ASYNC, ZT_KIND_ALLOC)
ZT_GPU_API(cuMemFreeAsync, ZT_API_CU_MEM_FREE_ASYNC, ZT_KIND_FREE)
ZT_GPU_API(cuLaunchKernel, ZT_API_CU_LAUNCH_KERNEL, ZT_KIND_LAUNCH)

/* ---- late loading: opens of CUDA libraries ---- */

/*
 * Only read-only opens can be a loader mapping a library: a compiler or installer writing
 * a file named libcuda* (O_WRONLY/O_RDWR) must not be stopped.
 */
static __always_inline int zt_gpu_open_enter(u64 filename, u64 flags)
{
	u64 id = bpf_get_current_pid_tgid();
	u32 tid = (u32)id;
	if (!zt_gpu_wanted(id >> 32) || (flags & ZT_O_ACCMODE) != ZT_O_RDONLY)
		return 0;
	zt_gpu_opening.update(&tid, &filename);
	return 0;
}

/* A path with slack after it, so the name check may read 9 bytes past any offset. */
struct zt_gpu_name {
	struct zt_gpu_path path;
	char slack[16];
};

/*
 * 1 when the basename of the path starts with "libcudart" or "libcuda.".
 *
 * Written for the verifier: the loop has a constant trip count (the bytes after the NUL
 * are zero, so no early exit is needed), and the last '/' is tracked without a branch
 * (a mask hidden from clang by an empty asm): a branch per byte forks the verifier's
 * state at every possible slash and exceeds its 1M-instruction budget, and a loop
 * bounded by the string length is one clang turns into a count it cannot bound.
 */
static __always_inline int zt_gpu_is_cuda_name(struct zt_gpu_name *name)
{
	u32 base = 0;
	for (u32 i = 0; i < ZT_PATH_MAX; i++) {
		u32 diff = (u8)name->path.p[i] ^ (u8)'/';
		u32 mask = 0 - ((diff - 1) >> 31); /* all ones when the byte is '/' */
		asm volatile("" : "+r"(mask));
		base = (base & ~mask) | ((i + 1) & mask);
	}
	base &= ZT_PATH_MAX - 1;
	char *b = &name->path.p[base];
	if (b[0] != 'l' || b[1] != 'i' || b[2] != 'b' || b[3] != 'c' || b[4] != 'u' ||
	    b[5] != 'd' || b[6] != 'a')
		return 0;
	return b[7] == '.' || (b[7] == 'r' && b[8] == 't');
}

static __always_inline int zt_gpu_open_exit(long ret)
{
	u64 id = bpf_get_current_pid_tgid();
	u32 tid = (u32)id;
	u64 *fp = zt_gpu_opening.lookup(&tid);
	if (!fp)
		return 0;
	u64 filename = *fp;
	zt_gpu_opening.delete(&tid);
	if (ret < 0)
		return 0;
	struct zt_gpu_name name = {};
	if (bpf_probe_read_user_str(name.path.p, sizeof(name.path.p), (void *)filename) <= 0)
		return 0;
	name.path.cgroup_id = bpf_get_current_cgroup_id();
	if (!zt_gpu_is_cuda_name(&name) || zt_gpu_known.lookup(&name.path))
		return 0;
	struct zt_gpu_lib_event *ev = zt_gpu_events.ringbuf_reserve(sizeof(*ev));
	if (!ev) {
		/* Without the event nobody would resume the process: do not stop it. */
		zt_gpu_stat_inc(ZT_STAT_LOST);
		return 0;
	}
	ev->type = ZT_EVENT_GPU_LIB;
	ev->pid = id >> 32;
	ev->tid = tid;
	ev->fd = (s32)ret;
	ev->stopped = 0;
	ev->_pad = 0;
	ev->ts_ns = bpf_ktime_get_ns();
	ev->cgroup_id = name.path.cgroup_id;
	__builtin_memcpy(ev->path, name.path.p, sizeof(ev->path));
	if (ZT_STOP_ON_OPEN && bpf_send_signal(ZT_SIGSTOP) == 0) {
		ev->stopped = 1;
		zt_gpu_stat_inc(ZT_STAT_STOPS);
	}
	zt_gpu_events.ringbuf_submit(ev, 0);
	return 0;
}

TRACEPOINT_PROBE(syscalls, sys_enter_openat)
{
	return zt_gpu_open_enter((u64)args->filename, (u64)args->flags);
}

TRACEPOINT_PROBE(syscalls, sys_exit_openat)
{
	return zt_gpu_open_exit(args->ret);
}

TRACEPOINT_PROBE(syscalls, sys_enter_openat2)
{
	u64 flags = 0; /* struct open_how starts with u64 flags */
	if (bpf_probe_read_user(&flags, sizeof(flags), (void *)args->how) != 0)
		return 0;
	return zt_gpu_open_enter((u64)args->filename, flags);
}

TRACEPOINT_PROBE(syscalls, sys_exit_openat2)
{
	return zt_gpu_open_exit(args->ret);
}

#if ZT_FOLLOW
TRACEPOINT_PROBE(sched, sched_process_fork)
{
	u32 parent = bpf_get_current_pid_tgid() >> 32;
	if (zt_gpu_follow.lookup(&parent) == NULL)
		return 0;
	u32 child = args->child_pid;
	u8 one = 1;
	zt_gpu_follow.update(&child, &one);
	return 0;
}

/* A followed task that ends leaves the map (its id may be reused by an unrelated process); for
 * a thread the entry is its own tid, for the process's last leader its tgid. */
TRACEPOINT_PROBE(sched, sched_process_exit)
{
	u32 tid = (u32)bpf_get_current_pid_tgid();
	zt_gpu_follow.delete(&tid);
	return 0;
}
#endif
