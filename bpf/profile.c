/* SPDX-License-Identifier: Apache-2.0 */
/*
 * zerotrace: CPU profiler. On-CPU samples from a software CPU-clock perf event (attached by
 * services/collector/zerotrace_collector/probes/profile.py, 97 Hz by default) and
 * off-CPU time from sched:sched_switch. Each event carries the kernel stack, the native user
 * stack and, for CPython processes, the Python frames (bpf/python_stack.h).
 *
 * Stacks are copied into the event with bpf_get_stack() rather than kept in a BPF_STACK_TRACE
 * map by id: an off-CPU stack is taken at switch-out and read by user space only after the
 * switch-in, possibly seconds later; a stack-id map would need user space to delete ids it
 * has used (racing with stored ids) or to let the map fill up. A copy has no lifecycle.
 *
 * Compiled after bpf/python_stack.h (the loader puts that text first; see there why it is not
 * #include'd). Decoder: services/collector/zerotrace_collector/probes/profile_decode.py.
 *
 * Tunables (-D, set by the loader):
 *   ZT_SELF_PID        collector pid, never profiled
 *   ZT_FOLLOW          1 = only processes in zt_follow (seeded by the loader, children join)
 *   ZT_OFFCPU          1 = record off-CPU time
 *   ZT_OFFCPU_MIN_NS   shortest blocked time reported (shorter switches cost no event)
 *   ZT_OFFCPU_THREADS  threads off CPU at once that can be recorded (LRU beyond)
 *   ZT_STACK_DEPTH     kernel and user frames kept each (a power of two)
 *   ZT_RINGBUF_PAGES   ring buffer size in pages
 *   ZT_WAKEUP_EVERY    wake the reader once per this many events (it also wakes on its poll
 *                      timeout), not once per event
 */
#include <uapi/linux/bpf_perf_event.h>
#include <linux/sched.h>

#define ZT_EVENT_ON_CPU 16
#define ZT_EVENT_OFF_CPU 17

#ifndef ZT_STACK_DEPTH
#define ZT_STACK_DEPTH 32
#endif

/*
 *   offset size field
 *        0    4 type          ZT_EVENT_ON_CPU or ZT_EVENT_OFF_CPU
 *        4    4 pid           tgid
 *        8    4 tid
 *       12    4 kernel_bytes  bytes of kstack filled (bpf_get_stack's result, < 0 = error)
 *       16    4 user_bytes    bytes of ustack filled
 *       20    4 reserved
 *       24    8 ts_ns         sample time, or switch-out time (CLOCK_MONOTONIC)
 *       32    8 weight        1 sample, or ns blocked
 *       40   16 comm
 *       56    8*ZT_STACK_DEPTH kstack, leaf first
 *        .    8*ZT_STACK_DEPTH ustack, leaf first
 *        .    struct zt_py_stack
 */
struct zt_profile_event {
	u32 type;
	u32 pid;
	u32 tid;
	s32 kernel_bytes;
	s32 user_bytes;
	u32 reserved;
	u64 ts_ns;
	u64 weight;
	char comm[16];
	u64 kstack[ZT_STACK_DEPTH];
	u64 ustack[ZT_STACK_DEPTH];
	struct zt_py_stack py;
};

#ifndef ZT_WAKEUP_EVERY
#define ZT_WAKEUP_EVERY 64
#endif

#define ZT_STAT_LOST 0        /* ring buffer full */
#define ZT_STAT_OFFCPU_FULL 1 /* zt_offcpu_start full: a switch-out went unrecorded */
#define ZT_STAT_EMITTED 2     /* events output (drives the batched wake-ups) */

BPF_RINGBUF_OUTPUT(zt_profile_events, ZT_RINGBUF_PAGES);
BPF_ARRAY(zt_profile_stats, u64, 3);
BPF_PERCPU_ARRAY(zt_profile_scratch, struct zt_profile_event, 1);
/* tid -> the event being built for a thread that is off CPU (switch-out time and stacks). LRU:
 * a thread that exits never switches in again, and its entry must not stay forever. */
BPF_TABLE("lru_hash", u32, struct zt_profile_event, zt_offcpu_start, ZT_OFFCPU_THREADS);
/* Followed processes (tgid -> 1), when ZT_FOLLOW. */
BPF_TABLE("lru_hash", u32, u8, zt_follow, 16384); /* never full: the oldest goes */

static __always_inline void zt_count(u32 index)
{
	u64 *n = zt_profile_stats.lookup(&index);
	if (n)
		__sync_fetch_and_add(n, 1);
}

/* A wake-up per sample costs the reader a trip through epoll and the Python callback loop for
 * one event, which was most of the profiler's CPU at 97 Hz; one per ZT_WAKEUP_EVERY events
 * keeps the buffer from filling between the reader's timed polls. The count is not atomic
 * across CPUs: a lost increment only moves a wake-up by one event. */
static __always_inline u64 zt_wakeup_flag(void)
{
	u32 index = ZT_STAT_EMITTED;
	u64 *n = zt_profile_stats.lookup(&index);
	if (!n)
		return 0;
	u64 count = *n;
	*n = count + 1;
	return count % ZT_WAKEUP_EVERY == 0 ? BPF_RB_FORCE_WAKEUP : BPF_RB_NO_WAKEUP;
}

static __always_inline int zt_wanted(u32 tgid, u32 tid)
{
	if (tid == 0 || tgid == ZT_SELF_PID) /* idle task; ourselves */
		return 0;
	if (ZT_FOLLOW && zt_follow.lookup(&tgid) == NULL)
		return 0;
	return 1;
}

/* Fill everything but type, weight and ts from the current task (must be the profiled one). */
static __always_inline struct zt_profile_event *zt_fill(void *ctx, u32 tgid, u32 tid)
{
	u32 zero = 0;
	struct zt_profile_event *e = zt_profile_scratch.lookup(&zero);
	if (!e)
		return NULL;
	e->pid = tgid;
	e->tid = tid;
	e->reserved = 0;
	bpf_get_current_comm(&e->comm, sizeof(e->comm));
	e->kernel_bytes = bpf_get_stack(ctx, e->kstack, sizeof(e->kstack), 0);
	e->user_bytes = bpf_get_stack(ctx, e->ustack, sizeof(e->ustack), BPF_F_USER_STACK);
	zt_python_stack(tgid, tid, &e->py);
	return e;
}

int zt_profile_on_cpu(struct bpf_perf_event_data *ctx)
{
	u64 id = bpf_get_current_pid_tgid();
	u32 tgid = id >> 32, tid = (u32)id;
	if (!zt_wanted(tgid, tid))
		return 0;
	struct zt_profile_event *e = zt_fill(ctx, tgid, tid);
	if (!e)
		return 0;
	e->type = ZT_EVENT_ON_CPU;
	e->ts_ns = bpf_ktime_get_ns();
	e->weight = 1;
	if (zt_profile_events.ringbuf_output(e, sizeof(*e), zt_wakeup_flag()) != 0)
		zt_count(ZT_STAT_LOST);
	return 0;
}

#if ZT_OFFCPU
/* At switch-out the outgoing task is still current, so its stacks and its user memory are
 * readable; at switch-in the incoming one is not yet current, so only the time is taken. */
TRACEPOINT_PROBE(sched, sched_switch)
{
	u64 now = bpf_ktime_get_ns();
	u64 id = bpf_get_current_pid_tgid();
	u32 tgid = id >> 32, prev = (u32)id;
	if (prev == (u32)args->prev_pid && zt_wanted(tgid, prev)) {
		struct zt_profile_event *e = zt_fill(args, tgid, prev);
		if (e) {
			e->type = ZT_EVENT_OFF_CPU;
			e->ts_ns = now;
			e->weight = 0;
			if (zt_offcpu_start.update(&prev, e) != 0)
				zt_count(ZT_STAT_OFFCPU_FULL);
		}
	}
	u32 next = (u32)args->next_pid;
	if (next == 0)
		return 0;
	struct zt_profile_event *start = zt_offcpu_start.lookup(&next);
	if (!start)
		return 0;
	u64 blocked = now - start->ts_ns;
	if (blocked >= ZT_OFFCPU_MIN_NS) {
		start->weight = blocked;
		if (zt_profile_events.ringbuf_output(start, sizeof(*start), zt_wakeup_flag()) != 0)
			zt_count(ZT_STAT_LOST);
	}
	zt_offcpu_start.delete(&next);
	return 0;
}
#endif

#if ZT_FOLLOW
/* A process forked by a followed process is followed too. The parent is the forking task's
 * process (args->parent_pid is the forking thread's tid, which is not in the map when a thread
 * forks); child_pid is the child's tgid for a fork, a tid for a new thread (an extra entry). */
TRACEPOINT_PROBE(sched, sched_process_fork)
{
	u32 parent = bpf_get_current_pid_tgid() >> 32;
	if (zt_follow.lookup(&parent) == NULL)
		return 0;
	u32 child = (u32)args->child_pid;
	u8 one = 1;
	zt_follow.update(&child, &one);
	return 0;
}

/* A followed task that ends leaves the map (its id may be reused by an unrelated process); for
 * a thread the entry is its own tid, for the process's last leader its tgid. */
TRACEPOINT_PROBE(sched, sched_process_exit)
{
	u32 tid = (u32)bpf_get_current_pid_tgid();
	zt_follow.delete(&tid);
	return 0;
}
#endif
