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
 * walked to find a tid, default 64); ZT_PY_TASK_KEYS=1 compiles zt_python_task (the socket probe),
 * with ZT_PY_TASK_DEPTH (frames it looks at, 160) and ZT_PY_NO_THREAD_NS.
 *
 * Asyncio task key (zt_python_task, for bpf/socket.c and bpf/tls.c): the address of the
 * OUTERMOST coroutine frame on the calling thread's frame chain. The frame of a generator or
 * coroutine lives inside that object (3.11+: the _PyInterpreterFrame gi_iframe, owner
 * FRAME_OWNED_BY_GENERATOR; 3.10: the PyFrameObject gi_frame, whose f_gen is set), so for an
 * asyncio task, whose root coroutine the event loop resumes at every step, it is the same
 * address for the task's whole life and differs between tasks alive at once; a finished
 * task's coroutine is freed and a later one may get its address. Coroutine, not generator:
 * the frame's code has CO_COROUTINE, CO_ITERABLE_COROUTINE or CO_ASYNC_GENERATOR in co_flags,
 * so a plain generator (a WSGI app's streaming body) makes no key in a thread. Of the
 * generator-owned frames, the outermost is taken, or the one below it when the outermost is a
 * plain generator (an event loop run from a generator, as a test fixture does); two plain
 * generators above the task root hide it (no key). Outermost, not the first one under a C
 * entry: until CPython specializes an `await` site (3.12+) or always (3.11: PyIter_Send), an
 * awaited coroutine is resumed through C, so shim or entry frames also lie between the
 * coroutines of one task. The whole chain is walked (one user read a frame, four more at the
 * end): a chain longer than ZT_PY_TASK_DEPTH gives no key (ZT_PY_TOO_DEEP), as the root may
 * lie beyond. An event loop run inside a coroutine (nest_asyncio) gives its tasks the outer
 * task's key.
 *
 * Tasks made by tasks. A request's task often hands its calls to tasks of its own
 * (asyncio.wait_for in 3.11, gather, TaskGroup, anyio task groups, redis.asyncio) or to a worker
 * thread (asyncio.to_thread, Starlette's run_in_threadpool for a FastAPI `def` endpoint); their
 * frames are not the request's, so their own key would be another task's. What they share with
 * the request is where their contextvars.Context came from: every Task and every loop callback
 * (Handle) copies the current context when it is made (PyContext_CopyCurrent), and the event
 * loop enters that copy (PyThreadState.context) for each step of the task or run of the
 * callback; asyncio.to_thread and anyio run the worker's function in a copy too. A uretprobe on
 * PyContext_CopyCurrent (zt_py_context_copied) records in zt_py_ctx_task, for a copy made while
 * a task runs, that task's key (its own inherited one first, so a grandchild gets the root);
 * and an egress call whose entered context is recorded carries the recorded key instead of
 * its own. A copy made outside any task (no coroutine frame on the stack: the loop's
 * callbacks, where uvicorn and asyncio.start_server make each request's task) records
 * nothing, so requests stay apart; the callbacks a task schedules (call_soon) carry its key.
 * Not seen: a context made by contextvars.Context() or Context.copy() (not through
 * PyContext_CopyCurrent) whose address a freed recorded one had; loop.run_in_executor, which
 * copies no context.
 */
#ifndef ZEROTRACE_PYTHON_STACK_H
#define ZEROTRACE_PYTHON_STACK_H

#ifndef ZT_PY_MAX_DEPTH
#define ZT_PY_MAX_DEPTH 48
#endif
#ifndef ZT_PY_MAX_THREADS
#define ZT_PY_MAX_THREADS 64
#endif
#ifndef ZT_PY_TASK_KEYS
#define ZT_PY_TASK_KEYS 0
#endif
#ifndef ZT_PY_TASK_DEPTH
#define ZT_PY_TASK_DEPTH 160
#endif

/* tstate_frame points straight at the frame (3.13) rather than at a _PyCFrame. */
#define ZT_PY_NO_CFRAME 0xffffffffu
/* No owner value marks C-stack shim frames (3.10 and 3.11 have none). */
#define ZT_PY_NO_SHIM 0xffffffffu
/* What tstate_native_tid holds (python_procs.TID_*). */
#define ZT_PY_TID_NATIVE 0  /* native_thread_id: the tid in the process's pid namespace */
#define ZT_PY_TID_PTHREAD 1 /* thread_id: pthread_self(), the thread's FS base */
/* co_flags bits of a coroutine's code: CO_COROUTINE | CO_ITERABLE_COROUTINE |
 * CO_ASYNC_GENERATOR (the same in 3.10 to 3.13). */
#define ZT_PY_CO_ASYNC 0x380

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
	/* zt_python_task reads one window of each frame, task_size bytes from task_start: the
	 * frame's `previous` at task_prev in it, and the 8-byte word at task_gen that holds the
	 * field telling a frame a generator or coroutine owns (3.11+: the owner byte is
	 * FRAME_OWNED_BY_GENERATOR, 1; 3.10: PyFrameObject.f_gen is set): shifted left by gen_above
	 * bits and right by gen_below it is the field, which equals gen_value or, gen_value 0, is
	 * not 0. task_size 0: no task keys for this process. */
	u32 task_start;
	u32 task_size;
	u32 task_prev;
	u32 task_gen;
	u32 gen_above;
	u32 gen_below;
	u32 gen_value;
	u32 code_flags;          /* PyCodeObject.co_flags (an int) */
	u32 tstate_context;      /* PyThreadState.context, the entered contextvars.Context; 0:
				  * unknown (no task keys through contexts) */
	u32 reserved;
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
	ZT_PY_TOO_DEEP = 4,  /* zt_python_task: more than ZT_PY_TASK_DEPTH frames, no key */
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

/* The innermost frame of the calling thread, tid, of a process known by *o, into *frame (0:
 * the thread runs no Python now); returns a zt_py_status (ZT_PY_OK when the thread state was
 * found and read). */
static __always_inline int zt_py_innermost(const struct zt_py_offsets *o, u32 tid, u64 *frame,
					   u64 *tstate_out)
{
	*frame = 0;
	*tstate_out = 0;
	u64 ns_tid = tid;
	if (o->tid_match == ZT_PY_TID_PTHREAD) {
		ns_tid = zt_py_thread_self();
		if (!ns_tid)
			return ZT_PY_NO_THREAD;
	} else if (o->pidns_ino) {
		struct bpf_pidns_info ns = {};
		if (bpf_get_ns_current_pid_tgid(o->pidns_dev, o->pidns_ino, &ns, sizeof(ns)))
			return ZT_PY_NO_THREAD;
		ns_tid = ns.pid;
	}
	int fail = 0;
	u64 tstate = zt_py_find_tstate(o, tid, ns_tid, &fail);
	if (!tstate)
		return fail ? ZT_PY_READ_FAIL : ZT_PY_NO_THREAD;
	u64 f = 0;
	if (zt_py_read_ptr(&f, tstate + o->tstate_frame))
		return ZT_PY_READ_FAIL;
	if (o->cframe_current != ZT_PY_NO_CFRAME && f && zt_py_read_ptr(&f, f + o->cframe_current))
		return ZT_PY_READ_FAIL;
	*frame = f;
	*tstate_out = tstate;
	return ZT_PY_OK;
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
	u64 frame = 0, tstate = 0;
	int status = zt_py_innermost(o, tid, &frame, &tstate);
	if (status != ZT_PY_OK) {
		out->status = status;
		return status;
	}
	int fail = 0;
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

#if ZT_PY_TASK_KEYS
#include <uapi/linux/ptrace.h> /* struct pt_regs: zt_py_context_copied */

/* zt_python_task's copy of a frame's window (per CPU: a program keeps its CPU to the end). */
#define ZT_PY_WINDOW 128
struct zt_py_window {
	u8 bytes[ZT_PY_WINDOW];
};
BPF_PERCPU_ARRAY(zt_py_windows, struct zt_py_window, 1);
/* Threads of known CPython processes found without a thread state (pid_tgid -> when, ns): a
 * native thread (grpcio's, librdkafka's, a Rust library's) sends often, and each search
 * walks the interpreter's thread list again (two reads a thread). Searched again after
 * ZT_PY_NO_THREAD_NS: a thread may get a state later (PyGILState_Ensure), or user space may
 * have told where a state past the walker's reach is (python_threads.py). */
#ifndef ZT_PY_NO_THREAD_NS
#define ZT_PY_NO_THREAD_NS 1000000000ULL
#endif
BPF_TABLE("lru_hash", u64, u64, zt_py_no_tstate, 16384);
/* (process, PyContext*) -> the task key of the task that made the context: see "Tasks made by
 * tasks". LRU: contexts are freed without a word to the probe; a live task's entry is touched
 * at each of its egress calls. */
struct zt_py_ctx_key {
	u32 tgid;
	u32 pad;
	u64 ctx;
};
BPF_TABLE("lru_hash", struct zt_py_ctx_key, u64, zt_py_ctx_task, 65536);

/* 1 when x is not 0, else 0, without a branch (x < 2^63: an address, a byte). The asm keeps
 * clang from turning it back into a compare, which BPF can only do with a jump: a jump per
 * frame is a path per frame for the verifier. */
static __always_inline u64 zt_py_nonzero(u64 x)
{
	u64 neg = -x;
	asm volatile("" : "+r"(neg));
	return (x | neg) >> 63;
}

/* Whether *frame's code is a coroutine's (ZT_PY_CO_ASYNC in its co_flags); 0 when not or
 * unreadable. */
static __always_inline int zt_py_async_code(const struct zt_py_offsets *o, u64 frame)
{
	u64 code = 0;
	u32 flags = 0;
	if (!frame || zt_py_read_ptr(&code, frame + o->frame_code) || !code ||
	    bpf_probe_read_user(&flags, sizeof(flags), (const void *)(code + o->code_flags)))
		return 0;
	return (flags & ZT_PY_CO_ASYNC) != 0;
}

/* The asyncio task key of the calling thread, tid, of process tgid into *key (see the header
 * comment; 0: none); returns a zt_py_status.
 *
 * The walk keeps the two outermost generator-owned frames it passed and looks at their code
 * only at the end: the outermost when it is a coroutine's, else the one below it (a plain
 * generator above the task root: an event loop run from a generator, as a test fixture does).
 * A user read costs about 0.1 us here (bpf_probe_read_user, measured in a VM), so each frame
 * is one read of a window holding both fields (at most 72 bytes); and the loop's body has no
 * branch but the ones that end the walk, so the verifier checks one path per frame and a deep
 * limit stays cheap to load. */
static __always_inline int zt_py_task_parts(u32 tgid, u32 tid, u64 *key, u64 *inherited)
{
	*key = 0;
	*inherited = 0;
	struct zt_py_offsets *o = zt_py_procs.lookup(&tgid);
	if (!o || !o->task_size)
		return ZT_PY_NONE;
	int zero = 0;
	struct zt_py_window *w = zt_py_windows.lookup(&zero);
	if (!w)
		return ZT_PY_NONE;
	u64 id = ((u64)tgid << 32) | tid, now = bpf_ktime_get_ns();
	u64 *none_since = zt_py_no_tstate.lookup(&id);
	if (none_since && now - *none_since < ZT_PY_NO_THREAD_NS)
		return ZT_PY_NO_THREAD;
	u64 frame = 0, tstate = 0;
	int status = zt_py_innermost(o, tid, &frame, &tstate);
	if (status == ZT_PY_NO_THREAD)
		zt_py_no_tstate.update(&id, &now);
	else if (none_since)
		zt_py_no_tstate.delete(&id);
	if (status != ZT_PY_OK)
		return status;
	/* The entered context: a task's own, a callback's, or the one a worker thread runs a
	 * function in ("Tasks made by tasks"). */
	struct zt_py_ctx_key ck = {.tgid = tgid};
	if (o->tstate_context && zt_py_read_ptr(&ck.ctx, tstate + o->tstate_context) == 0 && ck.ctx) {
		u64 *parent = zt_py_ctx_task.lookup(&ck);
		if (parent)
			*inherited = *parent;
	}
	/* Masked for the verifier: offsets of 8-byte words inside the window, a size that fits. */
	u64 start = o->task_start, size = o->task_size & (ZT_PY_WINDOW - 1);
	u64 prev_at = o->task_prev & (ZT_PY_WINDOW - 8), gen_at = o->task_gen & (ZT_PY_WINDOW - 8);
	u64 above = o->gen_above & 63, below = o->gen_below & 63;
	u64 value = o->gen_value;
	u64 equal = zt_py_nonzero(value); /* 1: "equals gen_value"; 0: "is not 0" */
	u64 outer = 0, second = 0;
#pragma clang loop unroll(disable)
	for (int i = 0; i < ZT_PY_TASK_DEPTH; i++) {
		if (!frame)
			break;
		if (bpf_probe_read_user(w->bytes, size, (const void *)(frame + start)))
			return ZT_PY_READ_FAIL;
		u64 field = ((*(u64 *)(w->bytes + gen_at) << above) >> below) ^ value;
		u64 gen = zt_py_nonzero(field) ^ equal;
		u64 take = -gen; /* all ones for a generator's frame */
		asm volatile("" : "+r"(take));
		second = (second & ~take) | (outer & take);
		outer = (outer & ~take) | (frame & take);
		frame = *(u64 *)(w->bytes + prev_at);
	}
	if (frame)
		return ZT_PY_TOO_DEEP;
	if (zt_py_async_code(o, outer))
		*key = outer;
	else if (zt_py_async_code(o, second))
		*key = second;
	return ZT_PY_OK;
}

/* The task key of an egress call (see the header comment; 0: none) into *key; returns a
 * zt_py_status. A context made inside a task gives that task's key; else the thread's own
 * outermost coroutine frame. */
static __always_inline int zt_python_task(u32 tgid, u32 tid, u64 *key)
{
	u64 own = 0, inherited = 0;
	int status = zt_py_task_parts(tgid, tid, &own, &inherited);
	*key = inherited ? inherited : own;
	return status;
}

/* uretprobe on PyContext_CopyCurrent (user space attaches it to each interpreter module it
 * finds; see "Tasks made by tasks"): the new context belongs to the task that made it, or
 * to that task's own parent, when a task is running (a coroutine frame on the stack); a copy
 * made outside any task (an event-loop callback, a plain thread) belongs to none, and what the
 * map held for its address, from a freed context, goes. */
int zt_py_context_copied(struct pt_regs *ctx)
{
	u64 copy = PT_REGS_RC(ctx), pid_tgid = bpf_get_current_pid_tgid();
	u32 tgid = pid_tgid >> 32, tid = (u32)pid_tgid;
	if (!copy)
		return 0;
	u64 own = 0, inherited = 0;
	if (zt_py_task_parts(tgid, tid, &own, &inherited) == ZT_PY_NONE)
		return 0;
	struct zt_py_ctx_key ck = {.tgid = tgid, .ctx = copy};
	if (own) {
		u64 parent = inherited ? inherited : own;
		zt_py_ctx_task.update(&ck, &parent);
	} else {
		zt_py_ctx_task.delete(&ck);
	}
	return 0;
}
#endif /* ZT_PY_TASK_KEYS */

#endif /* ZEROTRACE_PYTHON_STACK_H */
