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
 * Processes are also announced, on a ring of their own that wakes the reader at once
 * (zt_profile_news): when one is first seen (its first sample or switch-out), and, once
 * seen, at exec and when it maps executable code from a file (a library, libpython of a
 * shared build). The reader reads
 * its maps, ELF symbols and Python layout then, while the process is surely alive, not when
 * its samples come to be named: a program that exits right after its samples, or on a node
 * so busy that samples wait, is still named in full.
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
 *   ZT_NEWS_MAPPINGS   1 = announce new executable mappings (needs the syscalls tracepoints)
 *   ZT_THIN_EVERY      while the reader is behind, keep one on-CPU sample in this many (a power
 *                      of two), with that weight
 *
 * Shedding. A reader that falls behind (its CPU budget too small) must not lose samples at
 * random in a full ring. The program knows how far behind it is (zt_profile_flow: bytes
 * offered to the ring, and bytes the reader says it took). Past half the ring it lowers the
 * rate: one on-CPU sample in ZT_THIN_EVERY per CPU is kept, weighing that many (totals stay
 * right, the resolution drops), and off-CPU waits shorter than 16 x ZT_OFFCPU_MIN_NS are
 * dropped; past three quarters it keeps nothing new. Both are counted, apart: a sample left
 * out while thinning is in its kept neighbour's weight (ZT_STAT_THINNED), one left out past
 * three quarters is in no weight (ZT_STAT_SHED), so the kept weights plus the shed count are
 * the samples taken. The rate is back as soon as the reader has caught up.
 */
#include <uapi/linux/bpf_perf_event.h>
#include <linux/sched.h>

#define ZT_EVENT_ON_CPU 16
#define ZT_EVENT_OFF_CPU 17
#define ZT_EVENT_PROCESS_NEWS 18

/* Why a process is announced (struct zt_process_news.reason). */
#define ZT_NEWS_FIRST_SEEN 1
#define ZT_NEWS_EXEC 2
#define ZT_NEWS_EXEC_MAPPING 3
#define ZT_PROT_EXEC 4 /* PROT_EXEC of mman.h */

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

/*
 *   offset size field
 *        0    4 type    ZT_EVENT_PROCESS_NEWS
 *        4    4 pid     tgid
 *        8    4 reason  ZT_NEWS_*
 *       12    4 reserved
 */
struct zt_process_news {
	u32 type;
	u32 pid;
	u32 reason;
	u32 reserved;
};

#ifndef ZT_WAKEUP_EVERY
#define ZT_WAKEUP_EVERY 64
#endif

#define ZT_STAT_LOST 0        /* ring buffer full */
#define ZT_STAT_OFFCPU_FULL 1 /* zt_offcpu_start full: a switch-out went unrecorded */
#define ZT_STAT_EMITTED 2     /* events output (drives the batched wake-ups) */
#define ZT_STAT_NEWS_LOST 3   /* news ring full: a process announced late (at its samples) */
#define ZT_STAT_SHED 4        /* samples not kept and in no weight: the reader was far behind */
#define ZT_STAT_THINNED 5     /* samples not kept but in a kept sample's weight ("Shedding") */

#ifndef ZT_THIN_EVERY
#define ZT_THIN_EVERY 4
#endif
#define ZT_RING_BYTES (ZT_RINGBUF_PAGES * 4096ULL)
#define ZT_FLOW_OFFERED 0
#define ZT_FLOW_TAKEN 1

BPF_RINGBUF_OUTPUT(zt_profile_events, ZT_RINGBUF_PAGES);
BPF_RINGBUF_OUTPUT(zt_profile_news, 16);
BPF_ARRAY(zt_profile_stats, u64, 6);
BPF_ARRAY(zt_profile_flow, u64, 2);       /* bytes offered, bytes the reader took */
BPF_PERCPU_ARRAY(zt_profile_thin, u64, 1); /* on-CPU samples seen while thinning */
/* Processes announced (tgid -> 1); the leader's exit takes its entry out. LRU: an entry of a
 * process whose exit went unseen must not stay forever (it is then announced again). */
BPF_TABLE("lru_hash", u32, u8, zt_seen, 16384);
/* Threads inside an mmap of executable code (tid -> 1), from its entry to its return: the
 * mapping exists only once the call returns, which is when it is announced. */
BPF_TABLE("lru_hash", u32, u8, zt_mapping_exec, 4096);
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

/* How far behind the reader is: 0 keeping up, 1 past half the ring, 2 past three quarters. */
static __always_inline int zt_behind(void)
{
	int offered_idx = ZT_FLOW_OFFERED, taken_idx = ZT_FLOW_TAKEN;
	u64 *offered = zt_profile_flow.lookup(&offered_idx);
	u64 *taken = zt_profile_flow.lookup(&taken_idx);
	if (!offered || !taken || *offered <= *taken)
		return 0;
	u64 queued = *offered - *taken;
	if (queued >= ZT_RING_BYTES / 4 * 3)
		return 2;
	return queued >= ZT_RING_BYTES / 2;
}

static __always_inline int zt_output(struct zt_profile_event *e)
{
	if (zt_profile_events.ringbuf_output(e, sizeof(*e), zt_wakeup_flag()) != 0)
		return -1;
	int idx = ZT_FLOW_OFFERED;
	u64 *offered = zt_profile_flow.lookup(&idx);
	if (offered)
		__sync_fetch_and_add(offered, sizeof(*e));
	return 0;
}

/* The weight an on-CPU sample is kept with now: 1, ZT_THIN_EVERY, or 0 (left out, counted). */
static __always_inline u64 zt_on_cpu_weight(void)
{
	int behind = zt_behind();
	if (behind == 0)
		return 1;
	if (behind == 2) {
		zt_count(ZT_STAT_SHED);
		return 0;
	}
	u32 zero = 0;
	u64 *seen = zt_profile_thin.lookup(&zero);
	u64 n = seen ? (*seen)++ : 0;
	if (n % ZT_THIN_EVERY != 0) {
		zt_count(ZT_STAT_THINNED);
		return 0;
	}
	return ZT_THIN_EVERY;
}

static __always_inline int zt_wanted(u32 tgid, u32 tid)
{
	if (tid == 0 || tgid == ZT_SELF_PID) /* idle task; ourselves */
		return 0;
	if (ZT_FOLLOW && zt_follow.lookup(&tgid) == NULL)
		return 0;
	return 1;
}

static __always_inline int zt_announce(u32 tgid, u32 reason)
{
	struct zt_process_news news = {ZT_EVENT_PROCESS_NEWS, tgid, reason, 0};
	if (zt_profile_news.ringbuf_output(&news, sizeof(news), BPF_RB_FORCE_WAKEUP) == 0)
		return 0;
	zt_count(ZT_STAT_NEWS_LOST);
	return -1;
}

/* Announce a process at its first sample or switch-out (once until its leader exits). */
static __always_inline void zt_first_seen(u32 tgid)
{
	if (zt_seen.lookup(&tgid) != NULL)
		return;
	u8 one = 1;
	zt_seen.update(&tgid, &one);
	if (zt_announce(tgid, ZT_NEWS_FIRST_SEEN) != 0)
		zt_seen.delete(&tgid); /* announced at its next sample instead */
}

/* Fill everything but type, weight and ts from the current task (must be the profiled one). */
static __always_inline struct zt_profile_event *zt_fill(void *ctx, u32 tgid, u32 tid)
{
	u32 zero = 0;
	struct zt_profile_event *e = zt_profile_scratch.lookup(&zero);
	if (!e)
		return NULL;
	zt_first_seen(tgid);
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
	u64 weight = zt_on_cpu_weight();
	if (weight == 0) {
		zt_first_seen(tgid); /* a process first seen while shedding is still announced */
		return 0;
	}
	struct zt_profile_event *e = zt_fill(ctx, tgid, tid);
	if (!e)
		return 0;
	e->type = ZT_EVENT_ON_CPU;
	e->ts_ns = bpf_ktime_get_ns();
	e->weight = weight;
	if (zt_output(e) != 0)
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
		int behind = zt_behind();
		if (behind == 2 || (behind == 1 && blocked < 16 * ZT_OFFCPU_MIN_NS)) {
			zt_count(ZT_STAT_SHED);
		} else {
			start->weight = blocked;
			if (zt_output(start) != 0)
				zt_count(ZT_STAT_LOST);
		}
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

#endif

/* A task that ends: a followed one leaves zt_follow (its id may be reused by an unrelated
 * process; for a thread the entry is its own tid, for the process's last leader its tgid),
 * and a process whose leader ends is announced afresh if its pid comes back. */
TRACEPOINT_PROBE(sched, sched_process_exit)
{
	u64 id = bpf_get_current_pid_tgid();
	u32 tgid = id >> 32, tid = (u32)id;
#if ZT_FOLLOW
	zt_follow.delete(&tid);
#endif
	if (tid == tgid)
		zt_seen.delete(&tgid);
	return 0;
}

/* Another program in the same process: its symbols and interpreter are all new. */
TRACEPOINT_PROBE(sched, sched_process_exec)
{
	u64 id = bpf_get_current_pid_tgid();
	u32 tgid = id >> 32, tid = (u32)id;
	if (!zt_wanted(tgid, tid))
		return 0;
	/* Only a process already announced: a new one (fork, then exec) is announced at its
	 * first sample, so a node's many short commands that are never sampled cost nothing. */
	if (zt_seen.lookup(&tgid) == NULL)
		return 0;
	zt_announce(tgid, ZT_NEWS_EXEC);
	return 0;
}

#if ZT_NEWS_MAPPINGS
TRACEPOINT_PROBE(syscalls, sys_enter_mmap)
{
	/* Code from a file (a library loaded late, an extension module) of a process already
	 * announced; an anonymous executable mapping (a JIT's) has no symbols to read. */
	if (!(args->prot & ZT_PROT_EXEC) || (s64)args->fd < 0)
		return 0;
	u64 id = bpf_get_current_pid_tgid();
	u32 tgid = id >> 32, tid = (u32)id;
	if (!zt_wanted(tgid, tid) || zt_seen.lookup(&tgid) == NULL)
		return 0;
	u8 one = 1;
	zt_mapping_exec.update(&tid, &one);
	return 0;
}

TRACEPOINT_PROBE(syscalls, sys_exit_mmap)
{
	u64 id = bpf_get_current_pid_tgid();
	u32 tid = (u32)id;
	if (zt_mapping_exec.lookup(&tid) == NULL)
		return 0;
	zt_mapping_exec.delete(&tid);
	if (args->ret >= 0 || args->ret < -4095) /* an address, not an errno */
		zt_announce(id >> 32, ZT_NEWS_EXEC_MAPPING);
	return 0;
}
#endif
