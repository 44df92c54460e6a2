/* SPDX-License-Identifier: Apache-2.0 */
/*
 * zerotrace file-I/O probe: one event per completed openat(2), and with ZT_FILE_RW one per
 * read or write on a file descriptor such an open returned.
 *
 * Attach points: syscall tracepoints only (no kprobes needed).
 *   syscalls:sys_enter_openat  -> stash start time, flags and path per thread
 *   syscalls:sys_exit_openat   -> emit struct zt_file_open_event; with ZT_FILE_RW remember
 *                                 (pid, fd) -> path
 *   ZT_FILE_RW only:
 *   syscalls:sys_enter_close   -> forget (pid, fd)
 *   syscalls:sys_{enter,exit}_{read,write,pread64,pwrite64,readv,writev}
 *                              -> on a remembered fd, emit struct zt_file_rw_event
 *
 * Reads and writes are reported per call, but only on fds whose open this probe saw (sockets,
 * pipes, inherited stdio and files opened before attach never reach the ring: one map look-up
 * per call decides), from the wanted processes (ZT_FILTER_PID, ZT_SELF_PID). Not seen: mmap
 * access (safetensors loads by mmap), io_uring, sendfile/splice, O_DIRECT via AIO.
 *
 * Compile-time tunables (pass as cflags, e.g. -DZT_FILTER_PID=1234):
 *   ZT_FILTER_PID      only trace this tgid (0 = every process)
 *   ZT_SELF_PID        never trace this tgid (the collector itself; 0 = off)
 *   ZT_RINGBUF_PAGES   ring buffer size in pages (power of two)
 *   ZT_MAX_INFLIGHT    max threads concurrently inside openat
 *   ZT_USE_PERFBUF     1 = emit via perf buffer (kernels without ringbuf, <5.8)
 *   ZT_FILE_RW         1 = also report reads and writes on opened files
 *   ZT_FOLLOW          1 = only processes in zt_follow: the loader seeds a root pid, and a
 *                      process forked by a followed one joins (as socket.c's ZT_FOLLOW)
 *   ZT_MAX_FILES       max (pid, fd) -> path remembered (LRU: the oldest open goes first)
 *
 * Header search path: the collector passes -I<repo>/bpf.
 */
#include "zerotrace_events.h"

#ifndef ZT_FILTER_PID
#define ZT_FILTER_PID 0
#endif
#ifndef ZT_SELF_PID
#define ZT_SELF_PID 0
#endif
#ifndef ZT_RINGBUF_PAGES
#define ZT_RINGBUF_PAGES 256
#endif
#ifndef ZT_MAX_INFLIGHT
#define ZT_MAX_INFLIGHT 10240
#endif
#ifndef ZT_USE_PERFBUF
#define ZT_USE_PERFBUF 0
#endif
#ifndef ZT_FILE_RW
#define ZT_FILE_RW 0
#endif
#ifndef ZT_FOLLOW
#define ZT_FOLLOW 0
#endif
#ifndef ZT_MAX_FILES
#define ZT_MAX_FILES 16384
#endif

/* Indexes into zt_fileio_stats. Mirrored in probes/fileio.py. */
#define ZT_STAT_LOST          0 /* output buffer full: event dropped */
#define ZT_STAT_INFLIGHT_FULL 1 /* in-flight map full at entry: event dropped */
#define ZT_STAT_NR            2

struct zt_open_start {
	u64 start_ns;
	s32 open_flags;
	u32 _pad;
	char path[ZT_PATH_MAX];
};

BPF_HASH(zt_open_inflight, u32, struct zt_open_start, ZT_MAX_INFLIGHT);
BPF_PERCPU_ARRAY(zt_open_scratch, struct zt_open_start, 1);
BPF_ARRAY(zt_fileio_stats, u64, ZT_STAT_NR);

#if ZT_USE_PERFBUF
BPF_PERF_OUTPUT(zt_fileio_events);
BPF_PERCPU_ARRAY(zt_event_scratch, struct zt_file_open_event, 1);
BPF_PERCPU_ARRAY(zt_rw_scratch, struct zt_file_rw_event, 1);
#else
BPF_RINGBUF_OUTPUT(zt_fileio_events, ZT_RINGBUF_PAGES);
#endif

static __always_inline void zt_stat_inc(int idx)
{
	u64 *v = zt_fileio_stats.lookup(&idx);
	if (v)
		__sync_fetch_and_add(v, 1);
}

BPF_TABLE("lru_hash", u32, u8, zt_follow, 16384); /* never full: the oldest goes */

static __always_inline int zt_pid_wanted(u32 tgid)
{
	if (ZT_FOLLOW && zt_follow.lookup(&tgid) == NULL)
		return 0;
	if (ZT_FILTER_PID != 0 && tgid != (u32)ZT_FILTER_PID)
		return 0;
	if (ZT_SELF_PID != 0 && tgid == (u32)ZT_SELF_PID)
		return 0;
	return 1;
}

struct zt_file_key {
	u32 pid;
	s32 fd;
};
struct zt_file_path {
	char path[ZT_PATH_MAX];
};
struct zt_rw_start {
	u64 start_ns;
	s32 fd;
	u32 op;
};

#if ZT_FILE_RW
BPF_TABLE("lru_hash", struct zt_file_key, struct zt_file_path, zt_file_fds, ZT_MAX_FILES);
BPF_HASH(zt_rw_inflight, u32, struct zt_rw_start, ZT_MAX_INFLIGHT);

static __always_inline void zt_file_opened(u32 tgid, s64 fd, struct zt_open_start *st)
{
	if (fd < 0)
		return;
	struct zt_file_key key = {.pid = tgid, .fd = (s32)fd};
	/* st is a map value: its path can be the new value without a copy on the stack. */
	zt_file_fds.update(&key, (struct zt_file_path *)st->path);
}

static __always_inline int zt_rw_enter(s64 fd, u32 op)
{
	u64 id = bpf_get_current_pid_tgid();
	u32 tgid = id >> 32;
	u32 tid = (u32)id;
	if (!zt_pid_wanted(tgid))
		return 0;
	struct zt_file_key key = {.pid = tgid, .fd = (s32)fd};
	if (!zt_file_fds.lookup(&key))
		return 0; /* not a file whose open we saw: sockets, pipes, stdio */
	struct zt_rw_start st = {.start_ns = bpf_ktime_get_ns(), .fd = (s32)fd, .op = op};
	if (zt_rw_inflight.update(&tid, &st) != 0)
		zt_stat_inc(ZT_STAT_INFLIGHT_FULL);
	return 0;
}

static __always_inline int zt_rw_exit(void *ctx, s64 ret)
{
	u64 id = bpf_get_current_pid_tgid();
	u32 tgid = id >> 32;
	u32 tid = (u32)id;
	struct zt_rw_start *stp = zt_rw_inflight.lookup(&tid);
	if (!stp)
		return 0;
	struct zt_rw_start st = *stp;
	zt_rw_inflight.delete(&tid);
	u64 end_ns = bpf_ktime_get_ns();
#if ZT_USE_PERFBUF
	int zero = 0;
	struct zt_file_rw_event *ev = zt_rw_scratch.lookup(&zero);
#else
	struct zt_file_rw_event *ev = zt_fileio_events.ringbuf_reserve(sizeof(*ev));
#endif
	if (!ev) {
		zt_stat_inc(ZT_STAT_LOST);
		return 0;
	}
	ev->type = ZT_EVENT_FILE_RW;
	ev->pid = tgid;
	ev->tid = tid;
	ev->fd = st.fd;
	ev->cgroup_id = bpf_get_current_cgroup_id();
	ev->start_ns = st.start_ns;
	ev->end_ns = end_ns;
	ev->ret = ret;
	ev->op = st.op;
	ev->_pad = 0;
	bpf_get_current_comm(ev->comm, sizeof(ev->comm));
	struct zt_file_key key = {.pid = tgid, .fd = st.fd};
	struct zt_file_path *p = zt_file_fds.lookup(&key);
	if (!p || bpf_probe_read_kernel(ev->path, sizeof(ev->path), p->path) != 0)
		ev->path[0] = '\0'; /* closed by another thread meanwhile */
#if ZT_USE_PERFBUF
	if (zt_fileio_events.perf_submit(ctx, ev, sizeof(*ev)) != 0)
		zt_stat_inc(ZT_STAT_LOST);
#else
	zt_fileio_events.ringbuf_submit(ev, 0);
#endif
	return 0;
}

TRACEPOINT_PROBE(syscalls, sys_enter_close)
{
	struct zt_file_key key = {.pid = bpf_get_current_pid_tgid() >> 32, .fd = (s32)args->fd};
	zt_file_fds.delete(&key);
	return 0;
}

#define ZT_RW_PROBES(call, op)                                  \
	TRACEPOINT_PROBE(syscalls, sys_enter_##call)            \
	{                                                       \
		return zt_rw_enter((s64)args->fd, op);           \
	}                                                       \
	TRACEPOINT_PROBE(syscalls, sys_exit_##call)             \
	{                                                       \
		return zt_rw_exit(args, (s64)args->ret);         \
	}

ZT_RW_PROBES(read, ZT_FILE_OP_READ)
ZT_RW_PROBES(write, ZT_FILE_OP_WRITE)
ZT_RW_PROBES(pread64, ZT_FILE_OP_READ)
ZT_RW_PROBES(pwrite64, ZT_FILE_OP_WRITE)
ZT_RW_PROBES(readv, ZT_FILE_OP_READ)
ZT_RW_PROBES(writev, ZT_FILE_OP_WRITE)
#else
static __always_inline void zt_file_opened(u32 tgid, s64 fd, struct zt_open_start *st)
{
}
#endif

TRACEPOINT_PROBE(syscalls, sys_enter_openat)
{
	u64 id = bpf_get_current_pid_tgid();
	u32 tgid = id >> 32;
	u32 tid = (u32)id;
	int zero = 0;

	if (!zt_pid_wanted(tgid))
		return 0;

	struct zt_open_start *st = zt_open_scratch.lookup(&zero);
	if (!st)
		return 0;
	st->start_ns = bpf_ktime_get_ns();
	st->open_flags = (s32)args->flags;
	st->_pad = 0;
	if (bpf_probe_read_user_str(st->path, sizeof(st->path), args->filename) < 0)
		st->path[0] = '\0';

	if (zt_open_inflight.update(&tid, st) != 0)
		zt_stat_inc(ZT_STAT_INFLIGHT_FULL);
	return 0;
}

TRACEPOINT_PROBE(syscalls, sys_exit_openat)
{
	u64 id = bpf_get_current_pid_tgid();
	u32 tgid = id >> 32;
	u32 tid = (u32)id;
	u64 end_ns = bpf_ktime_get_ns();

	if (!zt_pid_wanted(tgid))
		return 0;

	struct zt_open_start *st = zt_open_inflight.lookup(&tid);
	if (!st)
		return 0; /* entry happened before attach, or was dropped */

#if ZT_USE_PERFBUF
	int zero = 0;
	struct zt_file_open_event *ev = zt_event_scratch.lookup(&zero);
#else
	struct zt_file_open_event *ev =
		zt_fileio_events.ringbuf_reserve(sizeof(struct zt_file_open_event));
#endif
	if (!ev) {
		zt_stat_inc(ZT_STAT_LOST);
		zt_open_inflight.delete(&tid);
		return 0;
	}

	ev->type = ZT_EVENT_FILE_OPEN;
	ev->pid = tgid;
	ev->tid = tid;
	ev->open_flags = st->open_flags;
	ev->cgroup_id = bpf_get_current_cgroup_id();
	ev->start_ns = st->start_ns;
	ev->end_ns = end_ns;
	ev->ret = (s64)args->ret;
	bpf_get_current_comm(ev->comm, sizeof(ev->comm));
	bpf_probe_read_kernel(ev->path, sizeof(ev->path), st->path);

	zt_file_opened(tgid, ev->ret, st);
	zt_open_inflight.delete(&tid);

#if ZT_USE_PERFBUF
	if (zt_fileio_events.perf_submit(args, ev, sizeof(*ev)) != 0)
		zt_stat_inc(ZT_STAT_LOST);
#else
	zt_fileio_events.ringbuf_submit(ev, 0);
#endif
	return 0;
}

/* A process forked by a followed process is followed too (socket.c has the same pair). */
#if ZT_FOLLOW
TRACEPOINT_PROBE(sched, sched_process_fork)
{
	u32 parent = bpf_get_current_pid_tgid() >> 32;
	if (zt_follow.lookup(&parent) == NULL)
		return 0;
	u32 child = args->child_pid;
	u8 one = 1;
	zt_follow.update(&child, &one);
	return 0;
}

TRACEPOINT_PROBE(sched, sched_process_exit)
{
	u32 tid = (u32)bpf_get_current_pid_tgid();
	zt_follow.delete(&tid);
	return 0;
}
#endif
