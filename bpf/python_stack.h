/* SPDX-License-Identifier: Apache-2.0 */
/*
 * zerotrace: walk the CPython frames of the current thread from BPF.
 *
 * Self-contained on purpose: bpf/profile.c and bpf/gpu_calls.c both use it. It is NOT
 * #include'd: the loader compiles this text followed by the program's own file, because bcc
 * rewrites map accesses (zt_py_procs.lookup()) only in its main text, never in an included
 * file (an included map call compiles to an indirect call the verifier rejects). Needs only
 * what bcc puts before every program (u32/u64, BPF_HASH, the helpers, struct bpf_pidns_info).
 *
 * What it needs per process (filled by services/collector/zerotrace_collector/python_procs.py):
 * the address of _PyRuntime and the struct offsets of that CPython version (3.10 to 3.13).
 *
 * How: _PyRuntime.interpreters.head -> PyInterpreterState.threads.head -> PyThreadState list,
 * matched on native_thread_id (the tid as the process sees it: in a container, the one in its
 * own pid namespace, see pidns_* below); 3.10 has no native_thread_id, only thread_id =
 * pthread_self(), which glibc makes the thread's FS base: that one is read from the task
 * (thread.fsbase, offset from the kernel's BTF as -DZT_OFF_TASK_FSBASE; without it 3.10
 * threads are not found). The match does not depend on the GIL: a thread
 * in time.sleep() released it but its thread state and its frame chain stay as they were, so
 * this works at a perf sample, at sched_switch and in a uprobe alike. From the thread state:
 * the innermost _PyInterpreterFrame (3.11/3.12: tstate->cframe->current_frame; 3.13:
 * tstate->current_frame; 3.10: the PyFrameObject tstate->frame), then ->previous (f_back) up
 * to ZT_PY_MAX_DEPTH frames, leaf first, keeping (code object address, instruction pointer;
 * 3.10: f_lasti). Names and lines are resolved in user space.
 *
 * Tunables (-D): ZT_PY_MAX_DEPTH (frames kept, default 48), ZT_PY_MAX_THREADS (thread states
 * walked to find a tid, default 64).
 */
#ifndef ZEROTRACE_PYTHON_STACK_H
#define ZEROTRACE_PYTHON_STACK_H

#ifndef ZT_PY_MAX_DEPTH
#define ZT_PY_MAX_DEPTH 48
#endif
#ifndef ZT_PY_MAX_THREADS
#define ZT_PY_MAX_THREADS 64
#endif

/* tstate_frame points straight at the frame (3.13) rather than at a _PyCFrame. */
#define ZT_PY_NO_CFRAME 0xffffffffu
/* No owner value marks C-stack shim frames (3.10 and 3.11 have none). */
#define ZT_PY_NO_SHIM 0xffffffffu
/* What tstate_native_tid holds (python_procs.TID_*). */
#define ZT_PY_TID_NATIVE 0  /* native_thread_id: the tid in the process's pid namespace */
#define ZT_PY_TID_PTHREAD 1 /* thread_id: pthread_self(), the thread's FS base */

/* Mirrors python_procs.PyOffsets.pack(); 8-byte aligned, no implicit padding. */
struct zt_py_offsets {
	u64 runtime_addr;        /* address of _PyRuntime in the process */
	u32 runtime_interp_head; /* _PyRuntimeState.interpreters.head */
	u32 interp_threads_head; /* PyInterpreterState.threads.head */
	u32 tstate_next;         /* PyThreadState.next */
	u32 tstate_native_tid;   /* PyThreadState.native_thread_id (3.10: .thread_id) */
	u32 tstate_frame;        /* PyThreadState.cframe (3.11/3.12), .current_frame (3.13),
				  * .frame (3.10) */
	u32 cframe_current;      /* _PyCFrame.current_frame, or ZT_PY_NO_CFRAME */
	u32 frame_code;          /* _PyInterpreterFrame.f_code / f_executable */
	u32 frame_previous;      /* _PyInterpreterFrame.previous */
	u32 frame_instr;         /* _PyInterpreterFrame.prev_instr / instr_ptr */
	u32 frame_owner;         /* _PyInterpreterFrame.owner (a char) */
	u32 owner_shim;          /* owner value of shim frames to skip, or ZT_PY_NO_SHIM */
	u32 tid_match;           /* ZT_PY_TID_NATIVE or ZT_PY_TID_PTHREAD */
	/* The process's pid namespace (kernel dev_t encoding, inode), or 0s for the initial one.
	 * CPython stores gettid() as seen inside the process's own namespace, so in a container
	 * the thread is matched by its tid there, not by the kernel-wide one. */
	u64 pidns_dev;
	u64 pidns_ino;
};

/* Outcome of a walk, reported with every stack so user space can count failures. */
enum zt_py_status {
	ZT_PY_NONE = 0,      /* not a known CPython process */
	ZT_PY_OK = 1,        /* frames found (depth may be 0: the thread runs no Python now) */
	/* no thread state for this tid: not a Python thread, past MAX_THREADS, or (3.10) FS base
	 * unknown */
	ZT_PY_NO_THREAD = 2,
	ZT_PY_READ_FAIL = 3, /* a user read failed (process exiting, page not present) */
};

struct zt_py_stack {
	u32 status;
	u32 depth;      /* slots filled, leaf first; a slot with code 0 is a shim frame */
	u32 truncated;  /* 1 when more than ZT_PY_MAX_DEPTH frames were there */
	u32 reserved;
	u64 code[ZT_PY_MAX_DEPTH];
	u64 instr[ZT_PY_MAX_DEPTH];
};

BPF_TABLE("lru_hash", u32, struct zt_py_offsets, zt_py_procs, 4096); /* never full */
/* tid -> PyThreadState*, checked against the thread's id (native_thread_id, 3.10: thread_id) on
 * every use since thread states
 * are freed and reused when threads end; LRU so entries of ended threads age out. */
BPF_TABLE("lru_hash", u32, u64, zt_py_tstates, 16384);

static __always_inline int zt_py_read_ptr(u64 *dst, u64 addr)
{
	return bpf_probe_read_user(dst, sizeof(*dst), (const void *)addr);
}

/* pthread_self() of the current thread: its FS base as the kernel keeps it. glibc and musl set
 * it once per thread (clone's CLONE_SETTLS), so the saved value is the live one; a program that
 * rewrote it with WRFSBASE would be matched by its old value until its next switch-out.
 * 0 = unknown. */
static __always_inline u64 zt_py_thread_self(void)
{
	u64 fsbase = 0;
#ifdef ZT_OFF_TASK_FSBASE
	u64 task = bpf_get_current_task();
	if (bpf_probe_read_kernel(&fsbase, sizeof(fsbase), (const void *)(task + ZT_OFF_TASK_FSBASE)))
		return 0;
#endif
	return fsbase;
}

/* tid: the kernel-wide thread id (the cache key); ns_tid: the value CPython keeps for the same
 * thread at tstate_native_tid (its tid in the process's namespace, or pthread_self()). */
static __always_inline u64 zt_py_find_tstate(const struct zt_py_offsets *o, u32 tid, u64 ns_tid,
					     int *fail)
{
	u64 tstate = 0, native = 0;
	u64 *cached = zt_py_tstates.lookup(&tid);
	if (cached) {
		if (zt_py_read_ptr(&native, *cached + o->tstate_native_tid) == 0 && native == ns_tid)
			return *cached;
		zt_py_tstates.delete(&tid);
	}
	u64 interp = 0;
	if (zt_py_read_ptr(&interp, o->runtime_addr + o->runtime_interp_head) || interp == 0) {
		*fail = 1;
		return 0;
	}
	if (zt_py_read_ptr(&tstate, interp + o->interp_threads_head)) {
		*fail = 1;
		return 0;
	}
	for (int i = 0; i < ZT_PY_MAX_THREADS && tstate; i++) {
		if (zt_py_read_ptr(&native, tstate + o->tstate_native_tid)) {
			*fail = 1;
			return 0;
		}
		if (native == ns_tid) {
			zt_py_tstates.update(&tid, &tstate);
			return tstate;
		}
		if (zt_py_read_ptr(&tstate, tstate + o->tstate_next)) {
			*fail = 1;
			return 0;
		}
	}
	return 0;
}

/* Fill *out for thread tid of process tgid; returns out->status. Call it on the thread itself
 * (bpf_probe_read_user reads the current task's memory). */
static __always_inline int zt_python_stack(u32 tgid, u32 tid, struct zt_py_stack *out)
{
	out->depth = 0;
	out->truncated = 0;
	out->status = ZT_PY_NONE;
	struct zt_py_offsets *o = zt_py_procs.lookup(&tgid);
	if (!o)
		return ZT_PY_NONE;
	u64 ns_tid = tid;
	if (o->tid_match == ZT_PY_TID_PTHREAD) {
		ns_tid = zt_py_thread_self();
		if (!ns_tid) {
			out->status = ZT_PY_NO_THREAD;
			return out->status;
		}
	} else if (o->pidns_ino) {
		struct bpf_pidns_info ns = {};
		if (bpf_get_ns_current_pid_tgid(o->pidns_dev, o->pidns_ino, &ns, sizeof(ns))) {
			out->status = ZT_PY_NO_THREAD;
			return out->status;
		}
		ns_tid = ns.pid;
	}
	int fail = 0;
	u64 tstate = zt_py_find_tstate(o, tid, ns_tid, &fail);
	if (!tstate) {
		out->status = fail ? ZT_PY_READ_FAIL : ZT_PY_NO_THREAD;
		return out->status;
	}
	u64 frame = 0;
	if (zt_py_read_ptr(&frame, tstate + o->tstate_frame))
		fail = 1;
	else if (o->cframe_current != ZT_PY_NO_CFRAME && frame &&
		 zt_py_read_ptr(&frame, frame + o->cframe_current))
		fail = 1;
	/* Shim frames (C calling into Python, 3.12+) keep their slot with code 0, which user space
	 * drops: a second counter for "slots used" next to the loop counter multiplies the states
	 * the verifier must explore past its limit at this depth. */
	u32 depth = 0;
	for (int i = 0; i < ZT_PY_MAX_DEPTH; i++) {
		if (!frame || fail)
			break;
		u64 code = 0, instr = 0;
		u8 owner = 0;
		if (zt_py_read_ptr(&code, frame + o->frame_code) ||
		    zt_py_read_ptr(&instr, frame + o->frame_instr) ||
		    bpf_probe_read_user(&owner, 1, (const void *)(frame + o->frame_owner))) {
			fail = 1;
			break;
		}
		if (o->owner_shim != ZT_PY_NO_SHIM && owner == o->owner_shim)
			code = 0;
		out->code[i] = code;
		out->instr[i] = instr;
		depth = i + 1;
		if (zt_py_read_ptr(&frame, frame + o->frame_previous))
			fail = 1;
	}
	out->truncated = frame && !fail && depth == ZT_PY_MAX_DEPTH;
	/* On a failed read the frames read so far are kept (leaf side, still true) and the
	 * status says the root side is missing. */
	out->depth = depth;
	out->status = fail ? ZT_PY_READ_FAIL : ZT_PY_OK;
	return out->status;
}

#endif /* ZEROTRACE_PYTHON_STACK_H */
