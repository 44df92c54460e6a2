/* SPDX-License-Identifier: Apache-2.0 */
/*
 * zerotrace file-I/O probe: one event per completed openat(2).
 *
 * Attach points: syscall tracepoints only (no kprobes needed).
 *   syscalls:sys_enter_openat  -> stash start time, flags and path per thread
 *   syscalls:sys_exit_openat   -> emit struct zt_file_open_event
 *
 * Compile-time tunables (pass as cflags, e.g. -DZT_FILTER_PID=1234):
 *   ZT_FILTER_PID      only trace this tgid (0 = every process)
 *   ZT_SELF_PID        never trace this tgid (the collector itself; 0 = off)
 *   ZT_RINGBUF_PAGES   ring buffer size in pages (power of two)
 *   ZT_MAX_INFLIGHT    max threads concurrently inside openat
 *   ZT_USE_PERFBUF     1 = emit via perf buffer (kernels without ringbuf, <5.8)
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
#else
BPF_RINGBUF_OUTPUT(zt_fileio_events, ZT_RINGBUF_PAGES);
#endif

static __always_inline void zt_stat_inc(int idx)
{
	u64 *v = zt_fileio_stats.lookup(&idx);
	if (v)
		__sync_fetch_and_add(v, 1);
}

static __always_inline int zt_pid_wanted(u32 tgid)
{
	if (ZT_FILTER_PID != 0 && tgid != (u32)ZT_FILTER_PID)
		return 0;
	if (ZT_SELF_PID != 0 && tgid == (u32)ZT_SELF_PID)
		return 0;
	return 1;
}

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

	zt_open_inflight.delete(&tid);

#if ZT_USE_PERFBUF
	if (zt_fileio_events.perf_submit(args, ev, sizeof(*ev)) != 0)
		zt_stat_inc(ZT_STAT_LOST);
#else
	zt_fileio_events.ringbuf_submit(ev, 0);
#endif
	return 0;
}
