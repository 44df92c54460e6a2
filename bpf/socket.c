/* SPDX-License-Identifier: Apache-2.0 */
/*
 * zerotrace socket probe: bytes moved on TCP sockets, with the first bytes of
 * payload, plus connect/accept/close of those sockets.
 *
 * Attach points: syscall tracepoints only (no kprobes). Kernel structs are read only
 * for the TCP sequence number, and only by offsets the loader takes from the running
 * kernel's BTF (the ZT_OFF_* flags below): their layouts differ from the headers bcc
 * compiles against.
 *   sys_{enter,exit}_{read,write,readv,writev,recvfrom,sendto,recvmsg,sendmsg}
 *       -> struct zt_sock_data_hdr + payload, for tracked (pid, fd) only
 *   sys_{enter,exit}_{connect,accept,accept4} -> track the fd, zt_sock_conn_event
 *   sys_{enter,exit}_close                    -> untrack, zt_sock_conn_event
 *   sys_{enter,exit}_socket                   -> remember each socket's family, so
 *       accept() on an AF_UNIX listener is not tracked, and which are UDP
 *   sys_{enter,exit}_{sendmmsg,recvmmsg}      -> one data event per message (datagrams)
 *   sock:inet_sock_set_state                  -> ZT_CONN_ESTABLISHED for a non-blocking
 *       connect (see "Non-blocking connects" below; with ZT_HAVE_SET_STATE only)
 *
 * UDP (see "Datagrams" below): a UDP socket is tracked like a connection once it talks to a
 * wanted peer port: at connect() (the glibc resolver connects its socket), or at the first
 * sendto/sendmsg/sendmmsg that names a destination. One data event per datagram.
 * With ZT_CAPTURE_TLS=1 the loader compiles this file followed by tls.c (uprobes
 * on libssl) as one program: tls.c shares these maps and this ring buffer, and
 * bcc rewrites map calls (`m.lookup()`) only in the main text, so tls.c cannot
 * simply be #included.
 *
 * Which fds are sockets: zt_socket_fds, (pid, fd) -> connection info, filled at
 * connect/accept exit and by the collector (the loader writes entries it finds in
 * /proc for connections opened before attach), emptied at close.
 *
 * Compile-time tunables (cflags):
 *   ZT_FILTER_PID       only track this tgid (0 = every process)
 *   ZT_FOLLOW           1 = only track processes in zt_follow: the loader seeds a root
 *                       pid, and every process forked by a followed one joins (so
 *                       `zerotrace run -- CMD` sees CMD's workers and nothing else)
 *   ZT_SELF_PID         never track this tgid (the collector itself)
 *   ZT_FILTER_CGROUP    only track tasks in this cgroup v2 (id; 0 = any) or below it
 *   ZT_FILTER_CGROUP_LEVEL  that cgroup's level (root = 0)
 *   ZT_FILTER_COMM      only track processes whose name starts with this string literal (the
 *                       group leader's comm with ZT_OFF_TASK_GROUP_LEADER/_COMM from BTF,
 *                       else the calling thread's)
 *   ZT_PAYLOAD_MAX      payload bytes captured per call (power of two, 64..32768)
 *   ZT_MAX_IOV          iovecs copied from for readv/writev/recvmsg/sendmsg (32: grpcio
 *                       writes a HEADERS frame with 22)
 *   ZT_RINGBUF_PAGES    ring buffer size in pages (power of two)
 *   ZT_WAKEUP_BYTES     wake the reader once this many bytes were written since the last
 *                       wake-up (it also drains on its own timed polls)
 *   ZT_SHED_AT_BYTES    shed connections while the reader is this many bytes behind (see
 *                       "Shedding" below; default three quarters of the ring)
 *   ZT_RESUME_BELOW_BYTES, ZT_RESUME_AFTER_NS  take a shed connection up again once the
 *                       reader is less than this behind (a quarter of the ring) and its mark
 *                       is this old (10 s; probes/socket.py RESUME_AFTER_S)
 *   ZT_MAX_INFLIGHT     max threads concurrently inside a traced call
 *   ZT_MAX_SOCKETS      max tracked (pid, fd)
 *   ZT_CAPTURE_TLS      1 = include tls.c
 *   ZT_KEEP_CIPHERTEXT  1 = emit TLS sockets' syscall events too (marked, no payload)
 *   ZT_NR_CPUS          possible CPU ids (sizes the payload scratch)
 *   ZT_OFF_*            member offsets from /sys/kernel/btf/vmlinux (probes/socket.py
 *                       TCP_SEQ_MEMBERS); without them events carry no tcp_seq
 * Filters apply where a socket becomes tracked (connect/accept) and at TLS entry;
 * the data path only asks "is (pid, fd) tracked?".
 *
 * Shedding. When the reader falls behind (its CPU budget is too small for the event rate),
 * events must not be lost at random in a full ring: a lost event is half an exchange. So the
 * program knows how far behind the reader is (zt_socket_flow: bytes it offered to the ring,
 * and bytes the reader says it took), and past ZT_SHED_AT_BYTES it sheds whole connections:
 * a connection whose next call comes then is marked shed (zt_sock_info.shed), announced once
 * (ZT_CONN_SHED: the correlator drops the exchange it had in progress and counts it), and
 * nothing more of it is emitted until the reader has caught up; a connection born then is shed
 * from birth. What came before the mark is whole. Counted: ZT_STAT_CONNS_SHED,
 * ZT_STAT_CALLS_SHED. A shed connection is taken up again (ZT_STAT_CONNS_RESUMED) at its first
 * call once the reader is less than ZT_RESUME_BELOW_BYTES behind and the mark is at least
 * ZT_RESUME_AFTER_NS old: long-lived connections (a gateway's keep-alive pool, gRPC channels)
 * would otherwise stay unseen after one burst. The age outlasts the correlator's grace for the
 * SHED record, so the calls after it start a new conversation there, which skips to the next
 * request line: the exchange the resumption cuts into is never reported in part.
 *
 * Datagrams. A UDP socket has no connection, and most UDP traffic (metrics, QUIC, game state)
 * is of no interest here, so one is tracked only when its peer's port is wanted: ZT_DNS_PORT
 * (53, always: DNS timings belong to every trace) or one of ZT_FILTER_PORTS (--port). The peer
 * is the address connect() was given, or the destination of the first send that names one
 * (an unconnected client); from then on the socket is one flow, (pid, fd), until close, and
 * every datagram it sends or receives is one data event, whoever the peer (a DNS message is
 * paired by id and question, not by address). A server's unconnected socket that only
 * receives first is not tracked (its peers are many: future work). No TCP sequence numbers,
 * arrival times or TLS on them. sendmmsg/recvmmsg move several datagrams in one call: the
 * first ZT_MAX_MMSG are emitted, one event each (message i stamped i ns after the call's
 * entry, so each has its own id and their order holds); the rest are counted
 * (ZT_STAT_MMSG_UNCOPIED).
 *
 * Non-blocking connects. connect() on a non-blocking socket (asyncio, httpx async, aiohttp)
 * returns -EINPROGRESS at once: its CONNECT event's time is not the connection's set-up. Where
 * the kernel has sock:inet_sock_set_state and the BTF offsets from an fd to its struct sock
 * (ZT_HAVE_SET_STATE), connect()'s entry notes the socket's sk in zt_connecting (LRU: a
 * bounded map, entries of connects that never finish go first); when that connect returns
 * -EINPROGRESS on a tracked TCP socket, the entry gets the event to send, and the socket's
 * SYN_SENT -> ESTABLISHED change (softirq context: any task, keyed by sk only) sends it:
 * ZT_CONN_ESTABLISHED, start_ns the connect() entry, end_ns the change. Over loopback the change
 * can come before connect()'s exit tracepoint (the SYN-ACK is processed at release_sock, inside
 * connect()): whichever of the two comes second sends it (zt_connecting.done). Any other
 * return of connect(), or SYN_SENT -> CLOSE (refused, timed out), drops the entry unsent.
 *
 * Asyncio task keys. The loader compiles bpf/python_stack.h before this file, and user space
 * puts the CPython processes it sees here into zt_py_procs (probes/socket_python.py). An
 * egress call (a data event written; tls.c: an SSL write) of such a process carries py_task,
 * the thread's task key (python_stack.h zt_python_task), walked at the call's exit in the one
 * shared exit program (zt_data_exit_tail) and in tls.c's one SSL exit program: the frames are
 * the same as at entry (the thread is still in the call), and the walk is compiled and
 * verified twice, not once per syscall. Reads are not keyed: what a task reads is not news
 * about which task it is (a server's request read runs in the loop's callback anyway). A
 * Following (ZT_FOLLOW), each exec of a followed process is queued (zt_execs) so that user space
 * reads the new interpreter at once. A
 * thread the walker did not find sets ZT_SOCK_F_PY_NO_THREAD (user space then tells it
 * where the process's thread states are); a chain longer than ZT_PY_TASK_DEPTH gives 0, counted
 * (ZT_STAT_PY_TOO_DEEP).
 */
#include "zerotrace_events.h"

#ifndef ZT_FILTER_PID
#define ZT_FILTER_PID 0
#endif
#ifndef ZT_SELF_PID
#define ZT_SELF_PID 0
#endif
#ifndef ZT_FILTER_CGROUP
#define ZT_FILTER_CGROUP 0
#endif
#ifndef ZT_FILTER_CGROUP_LEVEL
#define ZT_FILTER_CGROUP_LEVEL 0
#endif
#ifndef ZT_PAYLOAD_MAX
#define ZT_PAYLOAD_MAX 16384
#endif
#ifndef ZT_MAX_IOV
#define ZT_MAX_IOV 32
#endif
#ifndef ZT_RINGBUF_PAGES
#define ZT_RINGBUF_PAGES 4096
#endif
#ifndef ZT_WAKEUP_BYTES
#define ZT_WAKEUP_BYTES (ZT_RINGBUF_PAGES * 4096 / 16)
#endif
#ifndef ZT_SHED_AT_BYTES
#define ZT_SHED_AT_BYTES (ZT_RINGBUF_PAGES * 4096ULL / 4 * 3)
#endif
#ifndef ZT_RESUME_BELOW_BYTES
#define ZT_RESUME_BELOW_BYTES (ZT_RINGBUF_PAGES * 4096ULL / 4)
#endif
#ifndef ZT_RESUME_AFTER_NS
#define ZT_RESUME_AFTER_NS 10000000000ULL
#endif
#ifndef ZT_MAX_INFLIGHT
#define ZT_MAX_INFLIGHT 10240
#endif
#ifndef ZT_MAX_SOCKETS
#define ZT_MAX_SOCKETS 65536
#endif
#ifndef ZT_HAVE_SET_STATE
#define ZT_HAVE_SET_STATE 0 /* 1: sock:inet_sock_set_state exists ("Non-blocking connects") */
#endif
#ifndef ZT_MAX_CONNECTING
#define ZT_MAX_CONNECTING 8192 /* non-blocking connects followed at once */
#endif
#ifndef ZT_HAVE_TCP_PROBE
#define ZT_HAVE_TCP_PROBE 0 /* 1: the tcp:tcp_probe tracepoint exists (arrival of unread bytes) */
#endif
#ifndef ZT_CAPTURE_TLS
#define ZT_CAPTURE_TLS 0
#endif
#ifndef ZT_KEEP_CIPHERTEXT
#define ZT_KEEP_CIPHERTEXT 0
#endif
#ifndef ZT_NR_CPUS
#define ZT_NR_CPUS 1024
#endif
#ifndef ZT_DNS_PORT
#define ZT_DNS_PORT 53 /* UDP peers on this port are always tracked ("Datagrams") */
#endif
#ifndef ZT_MAX_MMSG
/* Messages emitted per sendmmsg/recvmmsg: a stub resolver sends A and AAAA in one. */
#define ZT_MAX_MMSG 4
#endif

#if (ZT_PAYLOAD_MAX & (ZT_PAYLOAD_MAX - 1)) != 0 || ZT_PAYLOAD_MAX < 64 || ZT_PAYLOAD_MAX > 32768
#error "ZT_PAYLOAD_MAX must be a power of two between 64 and 32768"
#endif

#define ZT_AF_UNIX  1
#define ZT_AF_INET  2
#define ZT_AF_INET6 10
#define ZT_EINPROGRESS 115
#define ZT_SOCK_STREAM 1
#define ZT_SOCK_DGRAM  2
/* zt_socket_family value of an AF_INET/AF_INET6 SOCK_DGRAM socket: family | this bit. */
#define ZT_FAMILY_DGRAM 0x8000

/* Indexes into zt_socket_stats. Mirrored in probes/socket.py. */
#define ZT_STAT_LOST          0 /* ring buffer full: event dropped */
#define ZT_STAT_INFLIGHT_FULL 1 /* per-thread state map full: call not traced */
#define ZT_STAT_SOCKETS_FULL  2 /* zt_socket_fds full: connection not tracked */
#define ZT_STAT_CONNS_SHED    3 /* connections shed (the reader was behind) */
#define ZT_STAT_CALLS_SHED    4 /* data calls not emitted: their connection was shed */
#define ZT_STAT_TLS_STALE     5 /* an SSL* bound to a socket that is gone: bound again (tls.c) */
#define ZT_STAT_CONNS_RESUMED 6 /* shed connections taken up again (the reader caught up) */
#define ZT_STAT_CIPHERTEXT    7 /* TLS ciphertext calls not emitted (ZT_KEEP_CIPHERTEXT 0) */
#define ZT_STAT_PORT_FILTERED 8 /* connections not tracked: neither port is in ZT_FILTER_PORTS */
#define ZT_STAT_MMSG_UNCOPIED 9 /* sendmmsg/recvmmsg messages past ZT_MAX_MMSG: not emitted */
#define ZT_STAT_PY_TOO_DEEP   10 /* egress calls without a task key: frame chain too long */
#define ZT_STAT_NR            11

/* Indexes into zt_socket_flow. */
#define ZT_FLOW_OFFERED 0 /* bytes written to the ring (this program) */
#define ZT_FLOW_TAKEN   1 /* bytes the reader consumed (written by probes/socket.py) */

/* zt_sock_info.origin */
#define ZT_ORIGIN_CONNECT 1
#define ZT_ORIGIN_ACCEPT  2
#define ZT_ORIGIN_PROC    3 /* written by the collector from /proc */
/* zt_sock_info.tls */
#define ZT_TLS_NO      0
#define ZT_TLS_YES     1 /* a syscall on it ran inside an SSL call */

struct zt_sock_key {
	u32 pid;
	s32 fd;
};

/* Written by the loader too: keep in sync with probes/socket.py (SockInfo). */
struct zt_sock_info {
	u64 conn_start_ns;
	u16 family; /* 0 = unknown (accept on a listener opened before attach) */
	u8 origin;
	u8 tls;
	u8 shed; /* 1: shed (see "Shedding"): its calls are counted, not emitted */
	u8 dgram; /* 1: a UDP socket ("Datagrams"); the loader writes 0 (TCP from /proc) */
	u8 _pad[2];
	u64 shed_ns; /* when it was marked shed */
};

/* One thread inside a traced syscall. */
struct zt_sys_call {
	u64 start_ns;
	u64 buf;     /* data pointer, or struct iovec * for the vector calls */
	u64 vlen;    /* iovec count (vector calls) */
	u64 conn_start_ns;
	s32 fd;
	u16 family;
	u8 op;
	u8 flags;
	u8 addr[28]; /* connect: the user's sockaddr */
	u32 tcp_seq; /* data calls, with ZT_SOCK_F_TCP_SEQ in flags */
	u32 waited_us; /* reads, with ZT_SOCK_F_WAITED in flags */
	u8 mmsg; /* 1: buf is a struct mmsghdr array of vlen entries (sendmmsg, recvmmsg) */
	u8 dgram; /* connect: on a UDP socket */
	u8 _pad[6];
};

struct zt_sock_data_scratch {
	struct zt_sock_data_hdr hdr;
	/*
	 * Twice the capture size: a copy lands at offset (off & (MAX-1)) with a length
	 * <= MAX, which the verifier can bound without knowing off + len <= MAX.
	 */
	u8 payload[2 * ZT_PAYLOAD_MAX];
};

/* Same layout as the user ABI struct iovec (x86-64 / arm64). */
struct zt_iovec {
	u64 base;
	u64 len;
};

BPF_HASH(zt_socket_fds, struct zt_sock_key, struct zt_sock_info, ZT_MAX_SOCKETS);
/* (pid, fd) -> family of a SOCK_STREAM socket() (0 for other types); accept/connect consult it. */
BPF_HASH(zt_socket_family, struct zt_sock_key, u16, ZT_MAX_SOCKETS);
BPF_HASH(zt_socket_inflight, u32, struct zt_sys_call, ZT_MAX_INFLIGHT);
/*
 * One scratch event per CPU, indexed by CPU id: a BPF_PERCPU_ARRAY value may not
 * exceed 32 KiB, and this one is 2*ZT_PAYLOAD_MAX + 80. Tracing programs run with
 * migration disabled, so the slot is ours until the program returns.
 */
BPF_ARRAY(zt_socket_scratch, struct zt_sock_data_scratch, ZT_NR_CPUS);
BPF_PERCPU_ARRAY(zt_socket_call_scratch, struct zt_sys_call, 1);
BPF_ARRAY(zt_socket_stats, u64, ZT_STAT_NR);
BPF_RINGBUF_OUTPUT(zt_socket_events, ZT_RINGBUF_PAGES);
BPF_ARRAY(zt_socket_unwoken, u64, 1); /* bytes written since the reader was last woken */
BPF_ARRAY(zt_socket_flow, u64, 2);

/*
 * A wake-up per event makes the observed thread, inside its syscall, wake the reader: an IPI
 * or a trip through the scheduler on every read and write of the server, which showed in its
 * p99 TTFT. The reader drains on its timed polls anyway (every 50-100 ms), so it is woken
 * only when a sixteenth of the ring has filled since the last time. The count is not atomic
 * across CPUs: a lost add only moves a wake-up a little.
 */
static __always_inline u64 zt_wakeup_flag(u64 size)
{
	int zero = 0;
	u64 *unwoken = zt_socket_unwoken.lookup(&zero);
	if (!unwoken)
		return 0;
	u64 total = *unwoken + size;
	if (total < ZT_WAKEUP_BYTES) {
		*unwoken = total;
		return BPF_RB_NO_WAKEUP;
	}
	*unwoken = 0;
	return BPF_RB_FORCE_WAKEUP;
}

static __always_inline void zt_stat_inc(int idx)
{
	u64 *v = zt_socket_stats.lookup(&idx);
	if (v)
		__sync_fetch_and_add(v, 1);
}

static __always_inline void zt_stat_add(int idx, u64 n)
{
	u64 *v = zt_socket_stats.lookup(&idx);
	if (v)
		__sync_fetch_and_add(v, n);
}

static __always_inline void zt_offered(u64 size)
{
	int idx = ZT_FLOW_OFFERED;
	u64 *v = zt_socket_flow.lookup(&idx);
	if (v)
		__sync_fetch_and_add(v, size);
}

/* The reader is at least *bytes* behind; ZT_SHED_AT_BYTES: connections are shed (see
 * "Shedding"). */
static __always_inline int zt_behind_by(u64 bytes)
{
	int offered_idx = ZT_FLOW_OFFERED, taken_idx = ZT_FLOW_TAKEN;
	u64 *offered = zt_socket_flow.lookup(&offered_idx);
	u64 *taken = zt_socket_flow.lookup(&taken_idx);
	if (!offered || !taken)
		return 0;
	u64 o = *offered, t = *taken;
	return o > t && o - t >= bytes;
}

static __always_inline int zt_behind(void)
{
	return zt_behind_by(ZT_SHED_AT_BYTES);
}

/* A shed connection may be taken up again now (see "Shedding"): its mark is old enough and
 * the reader is less than ZT_RESUME_BELOW_BYTES behind. */
static __always_inline int zt_resume(struct zt_sock_info *info)
{
	if (bpf_ktime_get_ns() - info->shed_ns < ZT_RESUME_AFTER_NS)
		return 0;
	if (zt_behind_by(ZT_RESUME_BELOW_BYTES))
		return 0;
	info->shed = 0;
	zt_stat_inc(ZT_STAT_CONNS_RESUMED);
	return 1;
}

#ifndef ZT_FOLLOW
#define ZT_FOLLOW 0
#endif
/* Followed processes (tgid -> 1); filled by the loader and by the fork tracepoint below. */
BPF_TABLE("lru_hash", u32, u8, zt_follow, 16384); /* never full: the oldest goes */

static __always_inline int zt_pid_wanted(u32 tgid)
{
	if (ZT_FILTER_PID != 0 && tgid != (u32)ZT_FILTER_PID)
		return 0;
	if (ZT_FOLLOW && zt_follow.lookup(&tgid) == NULL)
		return 0;
	if (ZT_SELF_PID != 0 && tgid == (u32)ZT_SELF_PID)
		return 0;
	return 1;
}

/* Full filter: pid, cgroup, comm prefix. Used where a socket starts being tracked. */
static __always_inline int zt_task_wanted(u32 tgid)
{
	if (!zt_pid_wanted(tgid))
		return 0;
	/* In the cgroup or below it (a pod's directory holds its containers' cgroups): the
	 * task's ancestor at the filter's level is the filter's cgroup. */
	if (ZT_FILTER_CGROUP != 0 &&
	    bpf_get_current_ancestor_cgroup_id(ZT_FILTER_CGROUP_LEVEL) != (u64)ZT_FILTER_CGROUP)
		return 0;
#ifdef ZT_FILTER_COMM
	{
		const char want[] = ZT_FILTER_COMM;
		char comm[ZT_COMM_LEN] = {};
#if defined(ZT_OFF_TASK_GROUP_LEADER) && defined(ZT_OFF_TASK_COMM)
		/* The process's name (its main thread's, as /proc/PID/comm shows), not the calling
		 * thread's: threads rename themselves (pthread_setname_np). */
		u64 task = bpf_get_current_task(), leader = 0;
		if (bpf_probe_read_kernel(&leader, sizeof(leader),
					  (const void *)(task + ZT_OFF_TASK_GROUP_LEADER)) ||
		    bpf_probe_read_kernel(comm, sizeof(comm), (const void *)(leader + ZT_OFF_TASK_COMM)))
			return 0;
#else
		bpf_get_current_comm(comm, sizeof(comm));
#endif
#pragma unroll
		for (int i = 0; i < ZT_COMM_LEN; i++) {
			if (i >= (int)sizeof(want) - 1)
				break;
			if (comm[i] != want[i])
				return 0;
		}
	}
#endif
	return 1;
}

/* Copy min(len, MAX) bytes of user memory at src to payload[0..]; return the count. */
static __always_inline u32 zt_copy_flat(u8 *payload, u64 src, s64 len)
{
	u32 n = len > ZT_PAYLOAD_MAX ? ZT_PAYLOAD_MAX : (u32)len;
	if (n > ZT_PAYLOAD_MAX) /* bound for the verifier */
		return 0;
	if (bpf_probe_read_user(payload, n, (void *)src) != 0)
		return 0;
	return n;
}

/* Copy the first `len` bytes described by an iovec array, up to MAX. */
static __always_inline u32 zt_copy_iov(u8 *payload, u64 iov_ptr, u64 vlen, s64 total)
{
	u32 off = 0;
	u64 left = total;
#pragma unroll
	for (int i = 0; i < ZT_MAX_IOV; i++) {
		struct zt_iovec iov = {};
		if (i >= vlen || left == 0 || off >= ZT_PAYLOAD_MAX)
			break;
		if (bpf_probe_read_user(&iov, sizeof(iov), (void *)(iov_ptr + i * sizeof(iov))) != 0)
			break;
		u64 n = iov.len < left ? iov.len : left;
		u32 room = ZT_PAYLOAD_MAX - off;
		if (n > room)
			n = room;
		/*
		 * clang drops the mask below when it can prove off < MAX; the empty asm
		 * hides that, so the verifier sees dst offset <= MAX-1 and size <= MAX.
		 */
		u64 dst = off;
		u64 len = n;
		asm volatile("" : "+r"(dst), "+r"(len));
		dst &= ZT_PAYLOAD_MAX - 1;
		if (len > ZT_PAYLOAD_MAX)
			break;
		if (bpf_probe_read_user(payload + dst, len, (void *)iov.base) != 0)
			break;
		off += (u32)n;
		left -= n;
	}
	return off;
}

/*
 * Emit one data event. copy: 0 = no payload, 1 = flat buffer at src, 2 = iovecs at src.
 * Ring buffer output of a variable, verifier-bounded size from per-CPU scratch
 * (reserve would need a constant size: every event would cost 2*MAX bytes).
 */
static __always_inline void zt_emit_data(u32 tgid, u32 tid, s32 fd, u64 start_ns, s64 ret,
					 u64 conn_start_ns, u8 direction, u8 source, u8 op,
					 u8 flags, int copy, u64 src, u64 vlen, u32 tcp_seq,
					 u32 waited_us, u64 py_task)
{
	u32 cpu = bpf_get_smp_processor_id();
	struct zt_sock_data_scratch *ev = zt_socket_scratch.lookup(&cpu);
	if (!ev)
		return;
	ev->hdr.type = ZT_EVENT_SOCK_DATA;
	ev->hdr.pid = tgid;
	ev->hdr.tid = tid;
	ev->hdr.fd = fd;
	ev->hdr.cgroup_id = bpf_get_current_cgroup_id();
	ev->hdr.start_ns = start_ns;
	ev->hdr.end_ns = bpf_ktime_get_ns();
	ev->hdr.ret = ret;
	ev->hdr.conn_start_ns = conn_start_ns;
	ev->hdr.direction = direction;
	ev->hdr.source = source;
	ev->hdr.op = op;
	ev->hdr.flags = flags;
	ev->hdr.tcp_seq = tcp_seq;
	ev->hdr.waited_us = waited_us;
	ev->hdr.py_task = py_task;
	bpf_get_current_comm(ev->hdr.comm, sizeof(ev->hdr.comm));
	u64 n = 0;
	if (copy == 1)
		n = zt_copy_flat(ev->payload, src, ret);
	else if (copy == 2)
		n = zt_copy_iov(ev->payload, src, vlen, ret);
	/* Keep this clamp in a 64-bit register: the verifier needs it, clang thinks not. */
	asm volatile("" : "+r"(n));
	if (n > ZT_PAYLOAD_MAX)
		n = ZT_PAYLOAD_MAX;
	ev->hdr.payload_len = (u32)n;
	u64 size = sizeof(ev->hdr) + n;
	if (zt_socket_events.ringbuf_output(ev, size, zt_wakeup_flag(size)) != 0)
		zt_stat_inc(ZT_STAT_LOST);
	else
		zt_offered(size);
}

/* The task key of an egress call into *key ("Asyncio task keys"); returns the flags it adds. */
static __always_inline u8 zt_py_task_of(u32 tgid, u32 tid, u64 *key)
{
	int status = zt_python_task(tgid, tid, key);
	if (status == ZT_PY_NO_THREAD)
		return ZT_SOCK_F_PY_NO_THREAD;
	if (status == ZT_PY_TOO_DEEP)
		zt_stat_inc(ZT_STAT_PY_TOO_DEEP);
	return 0;
}

/*
 * Called at entry of each data syscall on a tracked socket; binds SSL* -> fd and
 * marks TLS sockets (defined in tls.c when ZT_CAPTURE_TLS=1). Returns extra flags.
 */
static __always_inline u8 zt_tls_on_syscall(u32 tgid, u32 tid, struct zt_sock_key *key,
					    struct zt_sock_info *info, u8 direction, u64 buf,
					    u64 vlen);
/*
 * A read on a TLS socket found bytes that arrived at arrived_ns, the newest of them at
 * newest_ns (0: none were queued, they come during the call; or not known): the wait belongs
 * to the plaintext the next SSL read returns, not to the ciphertext event (tls.c).
 */
static __always_inline void zt_tls_arrived(struct zt_sock_key *key, struct zt_sock_info *info,
					   u64 arrived_ns, u64 newest_ns);
/* A read on a TLS socket returned: what its bytes start with can change whose arrival the
 * plaintext takes (tls.c). */
static __always_inline void zt_tls_read_done(u32 tgid, s32 fd, u64 buf, u64 vlen);
#if !ZT_CAPTURE_TLS
static __always_inline u8 zt_tls_on_syscall(u32 tgid, u32 tid, struct zt_sock_key *key,
					    struct zt_sock_info *info, u8 direction, u64 buf,
					    u64 vlen)
{
	return 0;
}
static __always_inline void zt_tls_arrived(struct zt_sock_key *key, struct zt_sock_info *info,
					   u64 arrived_ns, u64 newest_ns)
{
}
static __always_inline void zt_tls_read_done(u32 tgid, s32 fd, u64 buf, u64 vlen)
{
}
#endif

/* ---- TCP sequence numbers ---------------------------------------------------- */

#ifdef ZT_OFF_TCP_WRITE_SEQ
static __always_inline int zt_read_ptr(u64 *out, u64 base, u64 offset)
{
	return base && bpf_probe_read_kernel(out, sizeof(*out), (void *)(base + offset)) == 0 &&
	       *out;
}

#if ZT_HAVE_TCP_PROBE
/*
 * When the oldest unread bytes of a socket arrived (CLOCK_MONOTONIC ns; 0: none unread, or
 * not known), by socket (struct sock *). tcp_mstamp says when the socket's last segment came
 * or went: a server that sends anything between a request's arrival and its read (a TLS 1.3
 * session ticket after the handshake, an ACK) moves it past the arrival, and the request's
 * wait comes out short. tcp:tcp_probe sees each segment as it comes, before it is queued: one
 * that brings data to an empty receive queue starts the unread bytes. Only sockets a data
 * call registered are followed (an entry of 0), so the host's other traffic costs one lookup
 * a segment; LRU, as nothing says when a socket is freed. The newest bytes' arrival is kept
 * too: behind a TLS handshake's tail, a request's own (tls.c, zt_tls_read_done).
 */
struct zt_unread {
	u64 since;  /* when the oldest unread bytes arrived; 0: none known */
	u64 newest; /* when the last segment with new bytes arrived */
	u32 seq;    /* the oldest unread bytes' first sequence number */
	u32 _pad;
};
BPF_TABLE("lru_hash", u64, struct zt_unread, zt_tcp_unread, ZT_MAX_SOCKETS);

TRACEPOINT_PROBE(tcp, tcp_probe)
{
	if (!args->data_len)
		return 0;
	u64 sk = (u64)args->skaddr;
	struct zt_unread *u = zt_tcp_unread.lookup(&sk);
	if (!u)
		return 0; /* not followed */
	u32 copied = 0, rcv_nxt = 0, seq = 0, end_seq = 0;
	u64 cb = (u64)args->skbaddr + ZT_OFF_SKB_CB;
	if (bpf_probe_read_kernel(&copied, sizeof(copied), (void *)(sk + ZT_OFF_TCP_COPIED_SEQ)) ||
	    bpf_probe_read_kernel(&rcv_nxt, sizeof(rcv_nxt), (void *)(sk + ZT_OFF_TCP_RCV_NXT)) ||
	    bpf_probe_read_kernel(&seq, sizeof(seq), (void *)(cb + ZT_OFF_TCP_CB_SEQ)) ||
	    bpf_probe_read_kernel(&end_seq, sizeof(end_seq), (void *)(cb + ZT_OFF_TCP_CB_END_SEQ)))
		return 0;
	/* Only a segment with the next bytes brings any: a repeat of bytes already received (a
	 * retransmission, a tail loss probe) or one past a hole adds nothing readable now. */
	if ((s32)(seq - rcv_nxt) > 0 || (s32)(end_seq - rcv_nxt) <= 0)
		return 0;
	u64 now = bpf_ktime_get_ns();
	u->newest = now;
	/* Older unread bytes are waiting; an arrival whose bytes were read already (by a read
	 * that was waiting on the empty socket when they came) is stale, not older. */
	if (u->since && (s32)(copied - u->seq) <= 0)
		return 0;
	if (copied != rcv_nxt)
		return 0; /* unread bytes from before it was followed: their time is not known */
	u->seq = rcv_nxt;
	u->since = now;
	return 0;
}

/* A data call on sk: follow it from now on; a read that finds bytes queued takes their
 * arrival (when it is known, and not older than the connection) and the bytes with it, and
 * says when the newest of them came. */
static __always_inline void zt_tcp_unread_take(u64 sk, u8 direction, int queued, u32 read_seq,
					       u64 conn_start_ns, u64 *arrived_ns, u64 *newest_ns)
{
	struct zt_unread zero = {};
	struct zt_unread *u = zt_tcp_unread.lookup_or_try_init(&sk, &zero);
	if (!u || direction != ZT_DIR_INGRESS)
		return;
	/* Only the arrival of the bytes this read starts at: not that of bytes a read took
	 * already (see tcp_probe above). */
	if (queued && u->since && u->seq == read_seq && u->since >= conn_start_ns &&
	    u->since < *arrived_ns)
		*arrived_ns = u->since;
	if (queued && u->newest >= conn_start_ns)
		*newest_ns = u->newest;
	u->since = 0;
}
#else
static __always_inline void zt_tcp_unread_take(u64 sk, u8 direction, int queued, u32 read_seq,
					       u64 conn_start_ns, u64 *arrived_ns, u64 *newest_ns)
{
}
#endif

/*
 * The sequence number of the next byte this call moves: tcp_sock.write_seq for a send
 * (the first byte it queues), tcp_sock.copied_seq for a receive (the first byte it
 * returns), read at syscall entry through current->files->fdt->fd[fd]->private_data->sk.
 * A concurrent call on the same socket from another thread can move them first: rare,
 * and the sequence number is then off, not the bytes. 0 when any link is missing or the
 * fd is not a socket (its socket->file does not point back at the file).
 */
/* The TCP sequence number of the call's first byte; for a read whose bytes are already
 * queued (rcv_nxt past copied_seq) also when they arrived (ns of CLOCK_MONOTONIC), from
 * which the caller knows how long they waited: the start of the unread bytes where
 * tcp:tcp_probe followed the socket, else its tcp_mstamp (its most recent segment, sent or
 * received; us). A read entered on an empty socket (a blocking server waiting for the next
 * request) gets no arrival: its bytes come during the call, and its end is their time. */
/* The struct sock behind this task's socket fd, into *sk; 0 when it cannot be read. */
static __always_inline int zt_sk_of_fd(s32 fd, u64 *sk)
{
	u64 task = bpf_get_current_task();
	u64 files = 0, fdt = 0, fds = 0, file = 0, sock = 0, back = 0;
	u32 max_fds = 0;
	return fd >= 0 && zt_read_ptr(&files, task, ZT_OFF_TASK_FILES) &&
	       zt_read_ptr(&fdt, files, ZT_OFF_FILES_FDT) &&
	       !bpf_probe_read_kernel(&max_fds, sizeof(max_fds), (void *)(fdt + ZT_OFF_FDT_MAX_FDS)) &&
	       (u32)fd < max_fds && zt_read_ptr(&fds, fdt, ZT_OFF_FDT_FD) &&
	       zt_read_ptr(&file, fds, (u64)fd * 8) &&
	       zt_read_ptr(&sock, file, ZT_OFF_FILE_PRIVATE_DATA) &&
	       zt_read_ptr(&back, sock, ZT_OFF_SOCKET_FILE) && back == file &&
	       zt_read_ptr(sk, sock, ZT_OFF_SOCKET_SK);
}

/* A connection's two addresses into a conn event (struct zt_sock_conn_event: local, peer), as
 * struct sockaddr_in / sockaddr_in6 from the sock_common of the socket at fd; both stay zeroed
 * (family 0) where the kernel lacks the offsets or a read fails. */
#if defined(ZT_OFF_TCP_WRITE_SEQ) && defined(ZT_OFF_SKC_DADDR)
#define ZT_AF_INET  2
#define ZT_AF_INET6 10
static __always_inline void zt_sock_addrs(s32 fd, u8 *local, u8 *peer)
{
	u64 sk = 0;
	u16 family = 0, lport = 0, rport_be = 0;
	if (!zt_sk_of_fd(fd, &sk) ||
	    bpf_probe_read_kernel(&family, sizeof(family), (void *)(sk + ZT_OFF_SKC_FAMILY)) ||
	    bpf_probe_read_kernel(&lport, sizeof(lport), (void *)(sk + ZT_OFF_SKC_NUM)) ||
	    bpf_probe_read_kernel(&rport_be, sizeof(rport_be), (void *)(sk + ZT_OFF_SKC_DPORT)))
		return;
	if (family == ZT_AF_INET) {
		if (bpf_probe_read_kernel(local + 4, 4, (void *)(sk + ZT_OFF_SKC_RCV_SADDR)) ||
		    bpf_probe_read_kernel(peer + 4, 4, (void *)(sk + ZT_OFF_SKC_DADDR)))
			return;
	} else if (family == ZT_AF_INET6) {
		if (bpf_probe_read_kernel(local + 8, 16, (void *)(sk + ZT_OFF_SKC_V6_RCV_SADDR)) ||
		    bpf_probe_read_kernel(peer + 8, 16, (void *)(sk + ZT_OFF_SKC_V6_DADDR)))
			return;
	} else {
		return;
	}
	local[2] = lport >> 8; /* network order, as in a sockaddr */
	local[3] = lport & 0xff;
	__builtin_memcpy(peer + 2, &rport_be, 2);
	local[0] = peer[0] = family & 0xff; /* the family last: set only when all was read */
	local[1] = peer[1] = family >> 8;
}
#endif

#if defined(ZT_FILTER_PORTS) && defined(ZT_OFF_SKC_NUM)
/* --port in the kernel: whether the socket at fd has a wanted port, local or remote (read from
 * its sock_common once, when connect or accept returns: both are set by then, the local one
 * by connect's autobind). A connection on other ports is never tracked, so nothing of it is
 * emitted, and no SSL* is ever bound to it (tls.c): its TLS calls are never placed either. */
static __always_inline int zt_ports_wanted(s32 fd)
{
	u64 sk = 0;
	u16 local = 0, remote_be = 0;
	if (!zt_sk_of_fd(fd, &sk) ||
	    bpf_probe_read_kernel(&local, sizeof(local), (void *)(sk + ZT_OFF_SKC_NUM)) ||
	    bpf_probe_read_kernel(&remote_be, sizeof(remote_be), (void *)(sk + ZT_OFF_SKC_DPORT)))
		return 1; /* cannot tell here: user space judges by /proc */
	u16 remote = bpf_ntohs(remote_be);
	const u16 wanted[] = {ZT_FILTER_PORTS};
#pragma unroll
	for (int i = 0; i < (int)(sizeof(wanted) / sizeof(wanted[0])); i++) {
		if (wanted[i] == local || wanted[i] == remote)
			return 1;
	}
	return 0;
}
#endif

static __always_inline int zt_tcp_seq(s32 fd, u8 direction, u64 conn_start_ns, u32 *seq,
				      u64 *arrived_ns, u64 *newest_ns)
{
	u64 sk = 0;
	if (!zt_sk_of_fd(fd, &sk))
		return 0;
	u64 off = direction == ZT_DIR_EGRESS ? ZT_OFF_TCP_WRITE_SEQ : ZT_OFF_TCP_COPIED_SEQ;
	if (bpf_probe_read_kernel(seq, sizeof(*seq), (void *)(sk + off)) != 0)
		return 0;
	u32 rcv_nxt = 0;
	u64 mstamp_us = 0;
	int queued = direction == ZT_DIR_INGRESS &&
		     bpf_probe_read_kernel(&rcv_nxt, sizeof(rcv_nxt),
					   (void *)(sk + ZT_OFF_TCP_RCV_NXT)) == 0 &&
		     rcv_nxt != *seq;
	if (queued &&
	    bpf_probe_read_kernel(&mstamp_us, sizeof(mstamp_us), (void *)(sk + ZT_OFF_TCP_MSTAMP)) == 0)
		*arrived_ns = mstamp_us * 1000;
	zt_tcp_unread_take(sk, direction, queued, *seq, conn_start_ns, arrived_ns, newest_ns);
	return 1;
}
#else
static __always_inline int zt_tcp_seq(s32 fd, u8 direction, u64 conn_start_ns, u32 *seq,
				      u64 *arrived_ns, u64 *newest_ns)
{
	return 0;
}
#endif

#if !(defined(ZT_FILTER_PORTS) && defined(ZT_OFF_SKC_NUM) && defined(ZT_OFF_TCP_WRITE_SEQ))
static __always_inline int zt_ports_wanted(s32 fd)
{
	return 1; /* no port filter, or no offsets: user space filters by /proc */
}
#endif

#if !(defined(ZT_OFF_TCP_WRITE_SEQ) && defined(ZT_OFF_SKC_DADDR))
static __always_inline void zt_sock_addrs(s32 fd, u8 *local, u8 *peer)
{
	/* no offsets: user space reads the addresses from /proc */
}
#endif

/* ---- data syscalls ---------------------------------------------------------- */

static __always_inline void zt_emit_conn(u32 tgid, u32 tid, struct zt_sys_call *st, s64 ret,
					 u32 kind, u64 conn_start_ns, u16 family);
static __always_inline void zt_dgram_first(s64 fd, u64 uptr, int is_msg);

/* A call on a connection that is (or now becomes) shed: counted, not emitted; the mark is
 * announced once, so the correlator drops the exchange it had in progress. */
static __always_inline void zt_shed(u32 tgid, u32 tid, struct zt_sock_key *key,
				    struct zt_sock_info *info)
{
	zt_stat_inc(ZT_STAT_CALLS_SHED);
	if (info->shed)
		return;
	info->shed = 1;
	info->shed_ns = bpf_ktime_get_ns();
	zt_stat_inc(ZT_STAT_CONNS_SHED);
	int zero = 0;
	struct zt_sys_call *st = zt_socket_call_scratch.lookup(&zero);
	if (!st)
		return;
	__builtin_memset(st, 0, sizeof(*st));
	st->start_ns = bpf_ktime_get_ns();
	st->fd = key->fd;
	st->dgram = info->dgram;
	zt_emit_conn(tgid, tid, st, 0, ZT_CONN_SHED, info->conn_start_ns, info->family);
}

static __always_inline int zt_data_enter(s64 fd, u64 buf, u64 vlen, u8 op, u8 direction,
					 u8 mmsg)
{
	u64 id = bpf_get_current_pid_tgid();
	u32 tgid = id >> 32;
	u32 tid = (u32)id;
	struct zt_sock_key key = {.pid = tgid, .fd = (s32)fd};
	struct zt_sock_info *info = zt_socket_fds.lookup(&key);
	if (!info)
		return 0;
	if (!zt_pid_wanted(tgid)) /* /proc-seeded entries of a filtered pid */
		return 0;
	if ((info->shed && !zt_resume(info)) || zt_behind()) {
		zt_shed(tgid, tid, &key, info);
		return 0;
	}

	int zero = 0;
	struct zt_sys_call *c = zt_socket_call_scratch.lookup(&zero);
	if (!c)
		return 0;
	c->start_ns = bpf_ktime_get_ns();
	c->buf = buf;
	c->vlen = vlen;
	c->conn_start_ns = info->conn_start_ns;
	c->fd = (s32)fd;
	c->family = info->family;
	c->op = op;
	c->mmsg = mmsg;
	c->dgram = info->dgram;
	c->tcp_seq = 0;
	c->waited_us = 0;
	if (info->dgram) { /* no TLS, no TCP state ("Datagrams") */
		c->flags = 0;
		if (zt_socket_inflight.update(&tid, c) != 0)
			zt_stat_inc(ZT_STAT_INFLIGHT_FULL);
		return 0;
	}
	c->flags = zt_tls_on_syscall(tgid, tid, &key, info, direction, buf, vlen);
	if (info->tls)
		c->flags |= ZT_SOCK_F_CIPHERTEXT;
	u64 arrived_ns = 0, newest_ns = 0, now = c->start_ns;
	if (zt_tcp_seq((s32)fd, direction, info->conn_start_ns, &c->tcp_seq, &arrived_ns,
		       &newest_ns))
		c->flags |= ZT_SOCK_F_TCP_SEQ;
	/* Bytes that came in before the call began; an hour and more is not a wait but a stamp
	 * of something else. On a TLS socket the syscall's bytes are not the plaintext's: the
	 * arrival is kept for the SSL read that decrypts them. */
	int waited = arrived_ns && arrived_ns <= now && now - arrived_ns < 3600000000000ULL;
	if (info->tls) {
		if (direction == ZT_DIR_INGRESS)
			zt_tls_arrived(&key, info, waited ? arrived_ns : 0,
				       waited && newest_ns <= now ? newest_ns : 0);
	} else if (waited) {
		c->waited_us = (u32)((now - arrived_ns) / 1000);
		c->flags |= ZT_SOCK_F_WAITED;
	}
	if (zt_socket_inflight.update(&tid, c) != 0)
		zt_stat_inc(ZT_STAT_INFLIGHT_FULL);
	return 0;
}

/*
 * sendmmsg/recvmmsg returned *count* messages: one data event for each of the first
 * ZT_MAX_MMSG ("Datagrams"). struct mmsghdr (user ABI, 64-bit): struct user_msghdr (56
 * bytes: msg_iov at 16, msg_iovlen at 24), then msg_len (the bytes that message moved), 8-byte
 * aligned: 64 bytes.
 */
static __always_inline void zt_emit_mmsg(u32 tgid, u32 tid, struct zt_sys_call *st, s64 count,
					 u8 direction, u64 py_task)
{
	u8 flags = st->flags & ~(ZT_SOCK_F_TCP_SEQ | ZT_SOCK_F_WAITED);
#pragma unroll
	for (int i = 0; i < ZT_MAX_MMSG; i++) {
		if (i >= count)
			break;
		u64 hdr = st->buf + (u64)i * 64;
		u64 iov[2] = {};
		u32 len = 0;
		if (bpf_probe_read_user(iov, sizeof(iov), (void *)(hdr + 16)) != 0 ||
		    bpf_probe_read_user(&len, sizeof(len), (void *)(hdr + 56)) != 0)
			break;
		if (len == 0)
			continue; /* an empty datagram: no bytes moved */
		zt_emit_data(tgid, tid, st->fd, st->start_ns + i, len, st->conn_start_ns, direction,
			     ZT_SRC_SYSCALL, st->op, flags, (flags & ZT_SOCK_F_CIPHERTEXT) ? 0 : 2,
			     iov[0], iov[1], 0, 0, py_task);
	}
	if (count > ZT_MAX_MMSG)
		zt_stat_add(ZT_STAT_MMSG_UNCOPIED, count - ZT_MAX_MMSG);
}

/*
 * The exit of a data call, run as its own program (`zt_data_exit_tail`) that the ten exit
 * tracepoints reach by a tail call. Inlined into each of them, as it once was, clang compiled
 * it ten times and the verifier checked it ten times (about 0.35 s of CPU each): most of the
 * probe's start-up. Direction and kind come from the call's op, saved at its entry: odd ops
 * read, even ones write; READV, WRITEV, RECVMSG and SENDMSG carry an iovec array.
 */
static __always_inline int zt_data_exit(s64 ret)
{
	u64 id = bpf_get_current_pid_tgid();
	u32 tgid = id >> 32;
	u32 tid = (u32)id;
	struct zt_sys_call *c = zt_socket_inflight.lookup(&tid);
	if (!c)
		return 0;
	struct zt_sys_call st = {};
	bpf_probe_read_kernel(&st, sizeof(st), c);
	zt_socket_inflight.delete(&tid);
	if (st.op < ZT_OP_READ || st.op > ZT_OP_SENDMSG)
		return 0; /* a connect/accept/close/socket state whose exit was not seen */
	if (ret <= 0)
		return 0; /* EAGAIN, error, or EOF: no bytes moved */
	u8 direction = (st.op & 1) ? ZT_DIR_INGRESS : ZT_DIR_EGRESS;
	int vector = ((st.op - 1) >> 1) & 1; /* ops 3, 4, 7, 8 */
	u64 py_task = 0;
	if (direction == ZT_DIR_EGRESS && (ZT_KEEP_CIPHERTEXT || !(st.flags & ZT_SOCK_F_CIPHERTEXT)))
		st.flags |= zt_py_task_of(tgid, tid, &py_task);
	if (st.mmsg) {
		zt_emit_mmsg(tgid, tid, &st, ret, direction, py_task);
		return 0;
	}
	if ((st.flags & ZT_SOCK_F_CIPHERTEXT) && direction == ZT_DIR_INGRESS)
		zt_tls_read_done(tgid, st.fd, st.buf, st.vlen);
	/* Its plaintext comes from the SSL uprobes; the ciphertext event would only be thrown
	 * away by the reader, after costing a ring record and a decode. */
	if ((st.flags & ZT_SOCK_F_CIPHERTEXT) && !ZT_KEEP_CIPHERTEXT) {
		zt_stat_inc(ZT_STAT_CIPHERTEXT);
		return 0;
	}
	int copy = (st.flags & ZT_SOCK_F_CIPHERTEXT) ? 0 : (vector ? 2 : 1);
	zt_emit_data(tgid, tid, st.fd, st.start_ns, ret, st.conn_start_ns, direction,
		     ZT_SRC_SYSCALL, st.op, st.flags, copy, st.buf, st.vlen, st.tcp_seq,
		     st.waited_us, py_task);
	return 0;
}

BPF_PROG_ARRAY(zt_data_exit_prog, 1); /* [0]: zt_data_exit_tail, put there by the reader */

static __always_inline int zt_data_exit_call(void *ctx)
{
	zt_data_exit_prog.call(ctx, 0);
	/* Reached only when the tail call did not happen: during start-up, between the
	 * tracepoints' attach and the reader's filling of the array. The call is not traced. */
	u32 tid = (u32)bpf_get_current_pid_tgid();
	zt_socket_inflight.delete(&tid);
	return 0;
}

/* struct user_msghdr (user ABI): msg_iov at offset 16, msg_iovlen at 24. */
static __always_inline int zt_msg_enter(s64 fd, u64 msg, u8 op, u8 direction)
{
	u64 iov[2] = {};
	if (bpf_probe_read_user(iov, sizeof(iov), (void *)(msg + 16)) != 0)
		return 0;
	return zt_data_enter(fd, iov[0], iov[1], op, direction, 0);
}

TRACEPOINT_PROBE(syscalls, sys_enter_read)
{
	return zt_data_enter(args->fd, (u64)args->buf, 0, ZT_OP_READ, ZT_DIR_INGRESS, 0);
}
TRACEPOINT_PROBE(syscalls, sys_exit_read) { return zt_data_exit_call(args); }

TRACEPOINT_PROBE(syscalls, sys_enter_write)
{
	return zt_data_enter(args->fd, (u64)args->buf, 0, ZT_OP_WRITE, ZT_DIR_EGRESS, 0);
}
TRACEPOINT_PROBE(syscalls, sys_exit_write) { return zt_data_exit_call(args); }

TRACEPOINT_PROBE(syscalls, sys_enter_readv)
{
	return zt_data_enter(args->fd, (u64)args->vec, args->vlen, ZT_OP_READV, ZT_DIR_INGRESS, 0);
}
TRACEPOINT_PROBE(syscalls, sys_exit_readv) { return zt_data_exit_call(args); }

TRACEPOINT_PROBE(syscalls, sys_enter_writev)
{
	return zt_data_enter(args->fd, (u64)args->vec, args->vlen, ZT_OP_WRITEV, ZT_DIR_EGRESS, 0);
}
TRACEPOINT_PROBE(syscalls, sys_exit_writev) { return zt_data_exit_call(args); }

TRACEPOINT_PROBE(syscalls, sys_enter_recvfrom)
{
	return zt_data_enter(args->fd, (u64)args->ubuf, 0, ZT_OP_RECVFROM, ZT_DIR_INGRESS, 0);
}
TRACEPOINT_PROBE(syscalls, sys_exit_recvfrom) { return zt_data_exit_call(args); }

TRACEPOINT_PROBE(syscalls, sys_enter_sendto)
{
	zt_dgram_first(args->fd, (u64)args->addr, 0);
	return zt_data_enter(args->fd, (u64)args->buff, 0, ZT_OP_SENDTO, ZT_DIR_EGRESS, 0);
}
TRACEPOINT_PROBE(syscalls, sys_exit_sendto) { return zt_data_exit_call(args); }

TRACEPOINT_PROBE(syscalls, sys_enter_recvmsg)
{
	return zt_msg_enter(args->fd, (u64)args->msg, ZT_OP_RECVMSG, ZT_DIR_INGRESS);
}
TRACEPOINT_PROBE(syscalls, sys_exit_recvmsg) { return zt_data_exit_call(args); }

TRACEPOINT_PROBE(syscalls, sys_enter_sendmsg)
{
	zt_dgram_first(args->fd, (u64)args->msg, 1);
	return zt_msg_enter(args->fd, (u64)args->msg, ZT_OP_SENDMSG, ZT_DIR_EGRESS);
}
TRACEPOINT_PROBE(syscalls, sys_exit_sendmsg) { return zt_data_exit_call(args); }

/* Several datagrams in one call (the glibc resolver sends A and AAAA so): "Datagrams". */
TRACEPOINT_PROBE(syscalls, sys_enter_sendmmsg)
{
	zt_dgram_first(args->fd, (u64)args->mmsg, 1);
	return zt_data_enter(args->fd, (u64)args->mmsg, args->vlen, ZT_OP_SENDMSG, ZT_DIR_EGRESS,
			     1);
}
TRACEPOINT_PROBE(syscalls, sys_exit_sendmmsg) { return zt_data_exit_call(args); }

TRACEPOINT_PROBE(syscalls, sys_enter_recvmmsg)
{
	return zt_data_enter(args->fd, (u64)args->mmsg, args->vlen, ZT_OP_RECVMSG, ZT_DIR_INGRESS,
			     1);
}
TRACEPOINT_PROBE(syscalls, sys_exit_recvmmsg) { return zt_data_exit_call(args); }

/* Every sys_exit_* tracepoint has the same layout: 8 bytes of common fields, int
 * __syscall_nr at 8, long ret at 16 (the "format" file of each sys_exit event). */
struct zt_sys_exit_args {
	u64 common;
	s64 syscall_nr;
	s64 ret;
};

int zt_data_exit_tail(struct zt_sys_exit_args *args)
{
	return zt_data_exit(args->ret);
}

/* ---- connection lifecycle --------------------------------------------------- */

static __always_inline void zt_emit_conn(u32 tgid, u32 tid, struct zt_sys_call *st, s64 ret,
					 u32 kind, u64 conn_start_ns, u16 family)
{
	struct zt_sock_conn_event *ev = zt_socket_events.ringbuf_reserve(sizeof(*ev));
	if (!ev) {
		zt_stat_inc(ZT_STAT_LOST);
		return;
	}
	zt_offered(sizeof(*ev));
	ev->type = ZT_EVENT_SOCK_CONN;
	ev->pid = tgid;
	ev->tid = tid;
	ev->fd = kind == ZT_CONN_ACCEPT ? (s32)ret : st->fd;
	ev->cgroup_id = bpf_get_current_cgroup_id();
	ev->start_ns = st->start_ns;
	ev->end_ns = bpf_ktime_get_ns();
	ev->ret = ret;
	ev->conn_start_ns = conn_start_ns;
	ev->kind = kind;
	ev->family = family;
	ev->dgram = st->dgram;
	bpf_get_current_comm(ev->comm, sizeof(ev->comm));
	__builtin_memcpy(ev->addr, st->addr, sizeof(ev->addr));
	__builtin_memset(ev->_pad2, 0, sizeof(ev->_pad2));
	__builtin_memset(ev->local, 0, sizeof(ev->local));
	__builtin_memset(ev->peer, 0, sizeof(ev->peer));
	if (!st->dgram && (kind == ZT_CONN_CONNECT || kind == ZT_CONN_ACCEPT))
		zt_sock_addrs(ev->fd, ev->local, ev->peer);
	zt_socket_events.ringbuf_submit(ev, zt_wakeup_flag(sizeof(*ev)));
}

/* 0: tracked; 1: tracked but shed from birth (nothing of it is emitted); -1: not tracked. */
static __always_inline int zt_track(u32 tgid, s32 fd, u16 family, u8 origin, u64 now, u8 dgram)
{
	/* A datagram socket's peer port was judged by the caller (zt_dgram_port_wanted). */
	if (!dgram && !zt_ports_wanted(fd)) {
		zt_stat_inc(ZT_STAT_PORT_FILTERED);
		return -1;
	}
	struct zt_sock_key key = {.pid = tgid, .fd = fd};
	struct zt_sock_info info = {
		.conn_start_ns = now, .family = family, .origin = origin, .dgram = dgram};
	info.shed = zt_behind();
	info.shed_ns = now;
	if (zt_socket_fds.update(&key, &info) != 0) {
		zt_stat_inc(ZT_STAT_SOCKETS_FULL);
		return -1;
	}
	if (info.shed)
		zt_stat_inc(ZT_STAT_CONNS_SHED);
	return info.shed;
}

/* The port of a struct sockaddr_in or sockaddr_in6 (network order at offset 2 of both). */
static __always_inline u16 zt_sockaddr_port(const u8 *addr)
{
	return ((u16)addr[2] << 8) | addr[3];
}

/* "Datagrams": is a UDP peer on *port* wanted? ZT_DNS_PORT always, and the --port ports
 * (ZT_DGRAM_PORTS: the loader passes them even where the kernel has no offsets for
 * ZT_FILTER_PORTS, as no socket struct is read here). */
static __always_inline int zt_dgram_port_wanted(u16 port)
{
	if (port == ZT_DNS_PORT)
		return 1;
#ifdef ZT_DGRAM_PORTS
	const u16 wanted[] = {ZT_DGRAM_PORTS};
#pragma unroll
	for (int i = 0; i < (int)(sizeof(wanted) / sizeof(wanted[0])); i++) {
		if (wanted[i] == port)
			return 1;
	}
#endif
	return 0;
}

/*
 * A send on an untracked UDP socket that names its destination (sendto's address; for
 * sendmsg/sendmmsg, *is_msg* = 1, the msg_name of the (first) struct user_msghdr at uptr):
 * an unconnected client's first datagram. Tracked, with a CONNECT event carrying that
 * destination, when its port is wanted ("Datagrams"). The map lookups come before any read
 * of user memory: this runs on every send of every process.
 */
static __always_inline void zt_dgram_first(s64 fd, u64 uptr, int is_msg)
{
	if (!uptr)
		return;
	u64 id = bpf_get_current_pid_tgid();
	u32 tgid = id >> 32;
	struct zt_sock_key key = {.pid = tgid, .fd = (s32)fd};
	u16 *known = zt_socket_family.lookup(&key);
	if (!known || !(*known & ZT_FAMILY_DGRAM) || zt_socket_fds.lookup(&key))
		return;
	if (!zt_task_wanted(tgid))
		return;
	u64 uaddr = uptr;
	if (is_msg && (bpf_probe_read_user(&uaddr, sizeof(uaddr), (void *)uptr) != 0 || !uaddr))
		return; /* msg_name (offset 0): NULL on a connected socket */
	int zero = 0;
	struct zt_sys_call *c = zt_socket_call_scratch.lookup(&zero);
	if (!c)
		return;
	__builtin_memset(c, 0, sizeof(*c));
	if (bpf_probe_read_user(c->addr, sizeof(c->addr), (void *)uaddr) != 0)
		return;
	u16 family = c->addr[0] | ((u16)c->addr[1] << 8);
	if (family != ZT_AF_INET && family != ZT_AF_INET6)
		return;
	if (!zt_dgram_port_wanted(zt_sockaddr_port(c->addr)))
		return;
	u64 now = bpf_ktime_get_ns();
	c->start_ns = now;
	c->fd = (s32)fd;
	c->family = family;
	c->dgram = 1;
	if (zt_track(tgid, (s32)fd, family, ZT_ORIGIN_CONNECT, now, 1) == 0)
		zt_emit_conn(tgid, (u32)id, c, 0, ZT_CONN_CONNECT, now, family);
}

/* The op of an in-flight state that is not a data call's (those are ZT_OP_*, 1..12): each
 * exit reads only a state its own kind of call stored (zt_conn_exit_state). */
#define ZT_CALL_CONNECT 0xfc
#define ZT_CALL_ACCEPT  0xfd
#define ZT_CALL_CLOSE   0xfe
#define ZT_CALL_SOCKET  0xff

/* Enter of connect/accept: remember fd (and connect's sockaddr) per thread. */
static __always_inline int zt_conn_enter(s64 fd, u64 uaddr, u16 family, u8 call, u8 dgram)
{
	u64 id = bpf_get_current_pid_tgid();
	u32 tid = (u32)id;
	int zero = 0;
	struct zt_sys_call *c = zt_socket_call_scratch.lookup(&zero);
	if (!c)
		return 0;
	__builtin_memset(c, 0, sizeof(*c));
	c->op = call;
	c->start_ns = bpf_ktime_get_ns();
	c->fd = (s32)fd;
	c->family = family;
	c->dgram = dgram;
	if (uaddr)
		bpf_probe_read_user(c->addr, sizeof(c->addr), (void *)uaddr);
	if (zt_socket_inflight.update(&tid, c) != 0)
		zt_stat_inc(ZT_STAT_INFLIGHT_FULL);
	return 0;
}

/* The thread's in-flight state, taken out of the map, if the call it was stored for is of
 * the kind *op* names (ZT_CALL_CONNECT, _ACCEPT, _CLOSE, _SOCKET). A state
 * whose exit was never seen (its exit tracepoint attached a moment after its entry one, or
 * a data call's entry that stored it) must not be read as another call's: it once made a
 * data event with op 0xff out of a socket() state. */
static __always_inline struct zt_sys_call *zt_conn_exit_state(u32 tid, struct zt_sys_call *st,
							      u8 op)
{
	struct zt_sys_call *c = zt_socket_inflight.lookup(&tid);
	if (!c)
		return 0;
	bpf_probe_read_kernel(st, sizeof(*st), c);
	zt_socket_inflight.delete(&tid);
	return st->op == op ? st : 0;
}

/* ---- non-blocking connects ("Non-blocking connects") ----------------------------- */

#if ZT_HAVE_SET_STATE && defined(ZT_OFF_TCP_WRITE_SEQ)
#define ZT_TCP_ESTABLISHED 1
#define ZT_TCP_SYN_SENT    2
#define ZT_IPPROTO_TCP     6

struct zt_connecting {
	struct zt_sock_conn_event ev; /* filled at connect()'s exit (-EINPROGRESS) */
	u64 established_ns;           /* set at SYN_SENT -> ESTABLISHED */
	u64 done;                     /* sides seen (exit, established): the second sends */
};
BPF_TABLE("lru_hash", u64, struct zt_connecting, zt_connecting, ZT_MAX_CONNECTING);

/* connect() entry on a TCP socket: its sk, noted (0 when it cannot be read). */
static __always_inline u64 zt_connecting_begin(s64 fd)
{
	u64 sk = 0;
	if (!zt_sk_of_fd((s32)fd, &sk))
		return 0;
	struct zt_connecting fresh = {};
	zt_connecting.update(&sk, &fresh);
	return sk;
}

static __always_inline void zt_connecting_send(u64 sk, struct zt_connecting *e)
{
	struct zt_sock_conn_event *ev = zt_socket_events.ringbuf_reserve(sizeof(*ev));
	if (!ev) {
		zt_stat_inc(ZT_STAT_LOST);
		zt_connecting.delete(&sk);
		return;
	}
	zt_offered(sizeof(*ev));
	__builtin_memcpy(ev, &e->ev, sizeof(*ev));
	ev->end_ns = e->established_ns;
	zt_connecting.delete(&sk);
	zt_socket_events.ringbuf_submit(ev, zt_wakeup_flag(sizeof(*ev)));
}

/* connect()'s exit: *tracked* when it returned -EINPROGRESS and the socket is tracked now;
 * else the entry goes. */
static __always_inline void zt_connecting_exit(u32 tgid, u32 tid, struct zt_sys_call *st,
					       s64 ret, int tracked)
{
	u64 sk = st->buf;
	if (!sk)
		return;
	struct zt_connecting *e = zt_connecting.lookup(&sk);
	if (!e)
		return;
	if (!tracked || ret != -ZT_EINPROGRESS) {
		zt_connecting.delete(&sk);
		return;
	}
	e->ev.type = ZT_EVENT_SOCK_CONN;
	e->ev.pid = tgid;
	e->ev.tid = tid;
	e->ev.fd = st->fd;
	e->ev.cgroup_id = bpf_get_current_cgroup_id();
	e->ev.start_ns = st->start_ns;
	e->ev.ret = ret;
	e->ev.conn_start_ns = st->start_ns;
	e->ev.kind = ZT_CONN_ESTABLISHED;
	e->ev.family = st->family;
	e->ev.dgram = 0;
	bpf_get_current_comm(e->ev.comm, sizeof(e->ev.comm));
	__builtin_memcpy(e->ev.addr, st->addr, sizeof(e->ev.addr));
	zt_sock_addrs(st->fd, e->ev.local, e->ev.peer);
	if (__sync_fetch_and_add(&e->done, 1) == 1)
		zt_connecting_send(sk, e); /* established already (loopback) */
}

TRACEPOINT_PROBE(sock, inet_sock_set_state)
{
	if (args->protocol != ZT_IPPROTO_TCP || args->oldstate != ZT_TCP_SYN_SENT)
		return 0;
	u64 sk = (u64)args->skaddr;
	struct zt_connecting *e = zt_connecting.lookup(&sk);
	if (!e)
		return 0;
	if (args->newstate != ZT_TCP_ESTABLISHED) {
		zt_connecting.delete(&sk); /* refused, timed out, reset */
		return 0;
	}
	e->established_ns = bpf_ktime_get_ns();
	if (__sync_fetch_and_add(&e->done, 1) == 1)
		zt_connecting_send(sk, e); /* connect() returned already */
	return 0;
}
#else
static __always_inline u64 zt_connecting_begin(s64 fd)
{
	return 0;
}
static __always_inline void zt_connecting_exit(u32 tgid, u32 tid, struct zt_sys_call *st,
					       s64 ret, int tracked)
{
}
#endif

TRACEPOINT_PROBE(syscalls, sys_enter_connect)
{
	u32 tgid = bpf_get_current_pid_tgid() >> 32;
	u16 family = 0;
	if (!zt_task_wanted(tgid))
		return 0;
	if (bpf_probe_read_user(&family, sizeof(family), (void *)args->uservaddr) != 0)
		return 0;
	if (family != ZT_AF_INET && family != ZT_AF_INET6)
		return 0;
	struct zt_sock_key key = {.pid = tgid, .fd = (s32)args->fd};
	u16 *known = zt_socket_family.lookup(&key);
	if (known && *known == 0)
		return 0; /* not TCP nor UDP */
	/* A UDP socket connect()ing (the glibc resolver does): "Datagrams". */
	u8 dgram = known && (*known & ZT_FAMILY_DGRAM);
	zt_conn_enter(args->fd, (u64)args->uservaddr, family, ZT_CALL_CONNECT, dgram);
	if (dgram)
		return 0;
	/* Noted after the call's state (zt_conn_enter takes the scratch); kept in its buf. */
	u64 sk = zt_connecting_begin(args->fd);
	u32 tid = (u32)bpf_get_current_pid_tgid();
	struct zt_sys_call *c = zt_socket_inflight.lookup(&tid);
	if (sk && c && c->op == ZT_CALL_CONNECT)
		c->buf = sk;
	return 0;
}

TRACEPOINT_PROBE(syscalls, sys_exit_connect)
{
	u64 id = bpf_get_current_pid_tgid();
	u32 tgid = id >> 32;
	u32 tid = (u32)id;
	struct zt_sys_call st;
	if (!zt_conn_exit_state(tid, &st, ZT_CALL_CONNECT))
		return 0;
	s64 ret = args->ret;
	/* Non-blocking connects (asyncio, httpx, uvloop) return -EINPROGRESS: track them. */
	if ((ret != 0 && ret != -ZT_EINPROGRESS) ||
	    (st.dgram && !zt_dgram_port_wanted(zt_sockaddr_port(st.addr)))) {
		zt_connecting_exit(tgid, tid, &st, ret, 0);
		return 0;
	}
	u64 now = st.start_ns;
	int tracked = zt_track(tgid, st.fd, st.family, ZT_ORIGIN_CONNECT, now, st.dgram) == 0;
	if (tracked)
		zt_emit_conn(tgid, tid, &st, ret, ZT_CONN_CONNECT, now, st.family);
	/* After the CONNECT: the ESTABLISHED it may send follows it in the ring. */
	zt_connecting_exit(tgid, tid, &st, ret, tracked);
	return 0;
}

static __always_inline int zt_accept_enter(s64 fd)
{
	u32 tgid = bpf_get_current_pid_tgid() >> 32;
	if (!zt_task_wanted(tgid))
		return 0;
	struct zt_sock_key key = {.pid = tgid, .fd = (s32)fd};
	u16 *fam = zt_socket_family.lookup(&key);
	u16 family = fam ? *fam : 0;
	if (fam && family != ZT_AF_INET && family != ZT_AF_INET6)
		return 0; /* AF_UNIX and friends (0: not a stream socket) */
	/* The peer address pointer is often NULL (uvloop): addresses come from /proc. */
	return zt_conn_enter(fd, 0, family, ZT_CALL_ACCEPT, 0);
}

static __always_inline int zt_accept_exit(s64 ret)
{
	u64 id = bpf_get_current_pid_tgid();
	u32 tgid = id >> 32;
	u32 tid = (u32)id;
	struct zt_sys_call st;
	if (!zt_conn_exit_state(tid, &st, ZT_CALL_ACCEPT))
		return 0;
	if (ret < 0)
		return 0;
	u64 now = st.start_ns;
	if (zt_track(tgid, (s32)ret, st.family, ZT_ORIGIN_ACCEPT, now, 0) == 0)
		zt_emit_conn(tgid, tid, &st, ret, ZT_CONN_ACCEPT, now, st.family);
	return 0;
}

TRACEPOINT_PROBE(syscalls, sys_enter_accept) { return zt_accept_enter(args->fd); }
TRACEPOINT_PROBE(syscalls, sys_exit_accept) { return zt_accept_exit(args->ret); }
TRACEPOINT_PROBE(syscalls, sys_enter_accept4) { return zt_accept_enter(args->fd); }
TRACEPOINT_PROBE(syscalls, sys_exit_accept4) { return zt_accept_exit(args->ret); }

TRACEPOINT_PROBE(syscalls, sys_enter_close)
{
	u64 id = bpf_get_current_pid_tgid();
	u32 tgid = id >> 32;
	struct zt_sock_key key = {.pid = tgid, .fd = (s32)args->fd};
	zt_socket_family.delete(&key);
	struct zt_sock_info *info = zt_socket_fds.lookup(&key);
	if (!info)
		return 0;
	if (info->shed) { /* its end is not news: it was announced shed, or never at all */
		zt_socket_fds.delete(&key);
		return 0;
	}
	int zero = 0;
	struct zt_sys_call *c = zt_socket_call_scratch.lookup(&zero);
	if (!c)
		return 0;
	__builtin_memset(c, 0, sizeof(*c));
	c->op = ZT_CALL_CLOSE;
	c->start_ns = bpf_ktime_get_ns();
	c->fd = key.fd;
	c->family = info->family;
	c->dgram = info->dgram;
	c->conn_start_ns = info->conn_start_ns;
	/* Untrack now: once close() starts, the fd number may be reused by another thread. */
	zt_socket_fds.delete(&key);
	u32 tid = (u32)id;
	if (zt_socket_inflight.update(&tid, c) != 0)
		zt_stat_inc(ZT_STAT_INFLIGHT_FULL);
	return 0;
}

TRACEPOINT_PROBE(syscalls, sys_exit_close)
{
	u64 id = bpf_get_current_pid_tgid();
	u32 tgid = id >> 32;
	u32 tid = (u32)id;
	struct zt_sys_call st;
	if (!zt_conn_exit_state(tid, &st, ZT_CALL_CLOSE))
		return 0;
	zt_emit_conn(tgid, tid, &st, args->ret, ZT_CONN_CLOSE, st.conn_start_ns, st.family);
	return 0;
}

/* socket(): remember the family, so accept() knows an AF_UNIX listener. */
TRACEPOINT_PROBE(syscalls, sys_enter_socket)
{
	u64 id = bpf_get_current_pid_tgid();
	u32 tgid = id >> 32;
	u32 tid = (u32)id;
	if (!zt_task_wanted(tgid))
		return 0;
	int zero = 0;
	struct zt_sys_call *c = zt_socket_call_scratch.lookup(&zero);
	if (!c)
		return 0;
	__builtin_memset(c, 0, sizeof(*c));
	/* TCP-capable sockets keep their family, UDP ones theirs with ZT_FAMILY_DGRAM; 0 = "known,
	 * not interesting" (raw, netlink, AF_UNIX datagrams, ...). */
	int type = args->type & 0xf;
	u16 family = (u16)args->family;
	int inet = family == ZT_AF_INET || family == ZT_AF_INET6;
	c->family = type == ZT_SOCK_STREAM ? family
		    : type == ZT_SOCK_DGRAM && inet ? family | ZT_FAMILY_DGRAM
						   : 0;
	c->op = ZT_CALL_SOCKET; /* marks "inside socket()" */
	if (zt_socket_inflight.update(&tid, c) != 0)
		zt_stat_inc(ZT_STAT_INFLIGHT_FULL);
	return 0;
}

TRACEPOINT_PROBE(syscalls, sys_exit_socket)
{
	u64 id = bpf_get_current_pid_tgid();
	u32 tgid = id >> 32;
	u32 tid = (u32)id;
	struct zt_sys_call st;
	if (!zt_conn_exit_state(tid, &st, ZT_CALL_SOCKET))
		return 0;
	if (args->ret < 0)
		return 0;
	struct zt_sock_key key = {.pid = tgid, .fd = (s32)args->ret};
	u16 family = st.family;
	zt_socket_family.update(&key, &family);
	return 0;
}

/* A process forked by a followed process is followed too. The tracepoint runs in the parent;
 * child_pid is the new task's id, which is the child's tgid for a fork (for a new thread it is
 * a tid, and the extra entry is never looked up). Only compiled when following. */
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

/* A followed process that execs is queued for user space, which reads its interpreter from
 * /proc then, not when its first connection's events come out of a ring that may be seconds
 * behind on a busy node ("Asyncio task keys"): a just-started server's first requests get task
 * keys. Full: the newest is not queued (user space also learns a process from its events). */
BPF_QUEUE(zt_execs, u32, 1024);
TRACEPOINT_PROBE(sched, sched_process_exec)
{
	u32 tgid = bpf_get_current_pid_tgid() >> 32;
	if (zt_follow.lookup(&tgid) == NULL)
		return 0;
	zt_execs.push(&tgid, 0);
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
