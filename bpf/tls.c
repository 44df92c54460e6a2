/* SPDX-License-Identifier: Apache-2.0 */
/*
 * zerotrace TLS plaintext probe: uprobes on libssl (OpenSSL 1.1/3.x ABI).
 *
 * Not a standalone program: with ZT_CAPTURE_TLS=1 the loader compiles socket.c
 * followed by this file as one text (shared maps and ring buffer; see socket.c).
 *
 * Attach points (the loader attaches them by symbol on the libssl path):
 *   SSL_read, SSL_write, SSL_read_ex, SSL_write_ex  uprobe + uretprobe
 *       -> struct zt_sock_data_hdr with source ZT_SRC_TLS and the plaintext
 *   SSL_do_handshake                                uprobe + uretprobe
 *       -> marks the handshake's syscalls as this SSL*'s socket, and when a handshake
 *          succeeds (returns 1), a struct zt_sock_conn_event of kind ZT_CONN_TLS_HANDSHAKE:
 *          start_ns the SSL*'s first SSL_do_handshake entry (a non-blocking or memory-BIO
 *          peer calls it again after each WANT_READ), end_ns that return. CPython's ssl,
 *          and OpenSSL's own SSL_connect/SSL_accept, go through SSL_do_handshake.
 *
 * SSL* -> fd, without reading struct ssl_st (its layout is private to OpenSSL):
 *   1. socket BIO (blocking Python ssl, requests, httpx sync): the read()/write()
 *      a thread makes while inside an SSL call is on that SSL*'s fd. zt_tls_on_syscall
 *      (called from socket.c's syscall entry) binds SSL* -> fd and marks the socket
 *      TLS: from then on its syscall events are counted, not emitted (with
 *      ZT_KEEP_CIPHERTEXT, emitted with ZT_SOCK_F_CIPHERTEXT and no payload).
 *   2. memory BIO (asyncio's SSLProtocol, anyio: httpx async, AsyncOpenAI): no
 *      syscall happens inside the SSL call. After SSL_do_handshake/SSL_write* with no
 *      fd seen, the thread's next egress syscall on a tracked socket within
 *      ZT_TLS_PENDING_NS whose bytes start with the record the call makes (a handshake
 *      record after SSL_do_handshake, application data after SSL_write) is taken as the
 *      SSL*'s socket (asyncio flushes the encrypted bytes right away); events then carry
 *      ZT_SOCK_F_FD_GUESSED. The record type matters: a server's first SSL_do_handshake
 *      runs before the ClientHello is read and writes nothing, and the next egress of its
 *      thread is then another connection's response.
 *      Limit: a server's first inbound record (ClientHello) precedes any binding and
 *      is reported as unmarked syscall data.
 * Statically linked TLS (grpcio's BoringSSL, Go, rustls, Envoy) is not seen here.
 */
#include <uapi/linux/ptrace.h>

#ifndef ZT_TLS_PENDING_NS
#define ZT_TLS_PENDING_NS 50000000 /* 50 ms: asyncio flushes within the same callback */
#endif

struct zt_ssl_call {
	u64 ssl;
	u64 buf;
	u64 out_len; /* _ex variants: size_t *written / *readbytes */
	u64 start_ns;
	u64 conn_start_ns;
	s32 fd; /* fd of a syscall made inside the call, or -1 */
	u8 op;
	u8 direction;
	u8 handshake;
	u8 _pad;
};

struct zt_ssl_key {
	u32 pid;
	u32 _pad;
	u64 ssl;
};

struct zt_ssl_bind {
	u64 conn_start_ns;
	s32 fd;
	u32 guessed;
};

/* TLS record content types (RFC 8446 section 5.1): what an SSL call's bytes start with. */
#define ZT_TLS_RECORD_HANDSHAKE 0x16
#define ZT_TLS_RECORD_DATA      0x17

struct zt_ssl_pending {
	u64 ssl;
	u64 ts;
	u8 record; /* the content type its bytes start with */
	u8 _pad[7];
};

BPF_HASH(zt_tls_calls, u32, struct zt_ssl_call, ZT_MAX_INFLIGHT);
BPF_HASH(zt_tls_fds, struct zt_ssl_key, struct zt_ssl_bind, ZT_MAX_SOCKETS);
BPF_HASH(zt_tls_pending, u32, struct zt_ssl_pending, ZT_MAX_INFLIGHT);
/* SSL* -> its first SSL_do_handshake entry, until a call returns 1. LRU: a handshake that
 * never completes (peer gone, SSL* freed) is pushed out by newer ones. */
BPF_TABLE("lru_hash", struct zt_ssl_key, u64, zt_tls_hs_start, ZT_MAX_INFLIGHT);

/* When the ciphertext the last read on a TLS socket took had arrived (zt_tls_arrived), kept
 * for the next SSL read on it: a busy server reads a request late, and its plaintext event
 * then says how long it waited, as a plain socket's read does. LRU: an arrival whose socket
 * closed before an SSL read took it is dropped by newer ones. */
struct zt_tls_arrival {
	u64 conn_start_ns;
	u64 arrived_ns;
	u64 newest_ns; /* when the newest of those bytes came (0: not known) */
};
BPF_TABLE("lru_hash", struct zt_sock_key, struct zt_tls_arrival, zt_tls_arrivals, ZT_MAX_SOCKETS);

static __always_inline void zt_tls_arrived(struct zt_sock_key *key, struct zt_sock_info *info,
					   u64 arrived_ns, u64 newest_ns)
{
	if (!arrived_ns) {
		zt_tls_arrivals.delete(key);
		return;
	}
	struct zt_tls_arrival a = {
		.conn_start_ns = info->conn_start_ns, .arrived_ns = arrived_ns, .newest_ns = newest_ns};
	zt_tls_arrivals.update(key, &a);
}

/* How long the plaintext an SSL read returned had waited (us), taking the arrival its
 * socket's read kept; 0 with no arrival (its bytes came during the read). */
static __always_inline u32 zt_tls_waited(struct zt_sock_key *key, u64 conn_start_ns,
					 u64 start_ns, u8 *flags)
{
	struct zt_tls_arrival *a = zt_tls_arrivals.lookup(key);
	if (!a)
		return 0;
	u64 arrived_ns = a->arrived_ns, conn = a->conn_start_ns;
	zt_tls_arrivals.delete(key);
	if (conn != conn_start_ns || arrived_ns > start_ns || start_ns - arrived_ns >= 3600000000000ULL)
		return 0;
	*flags |= ZT_SOCK_F_WAITED;
	return (u32)((start_ns - arrived_ns) / 1000);
}

/* The first byte of a call's buffer (buf, or the first iovec's base when vlen > 0): what an
 * egress call sends, or what an ingress call read, at its exit. */
static __always_inline int zt_first_byte(u64 buf, u64 vlen, u8 *byte)
{
	u64 base = buf;
	if (vlen && bpf_probe_read_user(&base, sizeof(base), (void *)buf) != 0)
		return 0;
	return bpf_probe_read_user(byte, 1, (void *)base) == 0;
}

/* A ciphertext read that starts with a ChangeCipherSpec (0x14) or handshake (0x16) record took
 * the end of a handshake, and whatever came behind it. A TLS 1.3 client sends its request
 * right after its Finished, but not at once when it is slow (a busy machine): a server that
 * reads both at once then has the Finished's arrival as its oldest unread bytes', which the
 * request must not take (its TTFT would count the client's delay). The plaintext takes the
 * newest bytes' arrival instead: the request's own when it came in one segment; a request
 * in many segments starts late by their transfer, which is short behind a handshake. */
static __always_inline void zt_tls_read_done(u32 tgid, s32 fd, u64 buf, u64 vlen)
{
	struct zt_sock_key key = {.pid = tgid, .fd = fd};
	struct zt_tls_arrival *a = zt_tls_arrivals.lookup(&key);
	u8 first = 0;
	if (!a || !a->newest_ns || !zt_first_byte(buf, vlen, &first))
		return;
	if (first == 0x14 || first == 0x16)
		a->arrived_ns = a->newest_ns;
}

/* The SSL* of a memory-BIO peer is now bound to this socket. Its calls made before (with
 * ZT_SOCK_F_FD_UNKNOWN and the SSL* as conn_start_ns) can now be placed on it in user space,
 * which a port filter needs (tls_placement.py): a conn event of kind ZT_CONN_TLS_BOUND, its ret
 * the SSL*. It follows those calls in the ring, so user space places them exactly, in order. */
static __always_inline void zt_tls_announce(u32 tgid, u32 tid, struct zt_sock_key *key,
					    struct zt_sock_info *info, u64 ssl)
{
	struct zt_sock_conn_event *ev = zt_socket_events.ringbuf_reserve(sizeof(*ev));
	if (!ev) {
		zt_stat_inc(ZT_STAT_LOST);
		return;
	}
	zt_offered(sizeof(*ev));
	__builtin_memset(ev, 0, sizeof(*ev));
	ev->type = ZT_EVENT_SOCK_CONN;
	ev->pid = tgid;
	ev->tid = tid;
	ev->fd = key->fd;
	ev->cgroup_id = bpf_get_current_cgroup_id();
	ev->start_ns = bpf_ktime_get_ns();
	ev->end_ns = ev->start_ns;
	ev->ret = (s64)ssl;
	ev->conn_start_ns = info->conn_start_ns;
	ev->kind = ZT_CONN_TLS_BOUND;
	ev->family = info->family;
	bpf_get_current_comm(ev->comm, sizeof(ev->comm));
	zt_socket_events.ringbuf_submit(ev, zt_wakeup_flag(sizeof(*ev)));
}

static __always_inline u8 zt_tls_on_syscall(u32 tgid, u32 tid, struct zt_sock_key *key,
					    struct zt_sock_info *info, u8 direction, u64 buf,
					    u64 vlen)
{
	struct zt_ssl_key sk = {.pid = tgid};
	struct zt_ssl_bind b = {.conn_start_ns = info->conn_start_ns, .fd = key->fd};
	struct zt_ssl_call *call = zt_tls_calls.lookup(&tid);
	if (call) {
		call->fd = key->fd;
		call->conn_start_ns = info->conn_start_ns;
		sk.ssl = call->ssl;
		zt_tls_fds.update(&sk, &b);
		info->tls = ZT_TLS_YES;
		return 0;
	}
	if (direction != ZT_DIR_EGRESS)
		return 0;
	struct zt_ssl_pending *p = zt_tls_pending.lookup(&tid);
	if (!p)
		return 0;
	sk.ssl = p->ssl;
	u64 age = bpf_ktime_get_ns() - p->ts;
	u8 record = p->record, first = 0;
	if (age > ZT_TLS_PENDING_NS) {
		zt_tls_pending.delete(&tid);
		return 0;
	}
	if (!zt_first_byte(buf, vlen, &first) || first != record)
		return 0; /* another connection's bytes: the SSL* waits for its own */
	zt_tls_pending.delete(&tid);
	b.guessed = 1;
	zt_tls_fds.update(&sk, &b);
	info->tls = ZT_TLS_YES;
	if (record == ZT_TLS_RECORD_DATA) /* after a handshake bind, no call was unplaced */
		zt_tls_announce(tgid, tid, key, info, sk.ssl);
	return 0;
}

static __always_inline int zt_ssl_enter(struct pt_regs *ctx, u8 op, u8 direction, int ex,
					int handshake)
{
	u64 id = bpf_get_current_pid_tgid();
	u32 tgid = id >> 32;
	u32 tid = (u32)id;
	if (!zt_task_wanted(tgid))
		return 0;
	struct zt_ssl_call *outer = zt_tls_calls.lookup(&tid);
	if (outer && (handshake || !outer->handshake))
		return 0; /* nested call inside libssl: the outer one reports */
	struct zt_ssl_call c = {};
	c.ssl = PT_REGS_PARM1(ctx);
	c.buf = PT_REGS_PARM2(ctx);
	c.out_len = ex ? PT_REGS_PARM4(ctx) : 0;
	c.start_ns = bpf_ktime_get_ns();
	c.fd = -1;
	c.op = op;
	c.direction = direction;
	c.handshake = handshake;
	if (handshake) {
		struct zt_ssl_key hk = {.pid = tgid, .ssl = c.ssl};
		zt_tls_hs_start.insert(&hk, &c.start_ns); /* keeps the first entry's time */
	}
	if (zt_tls_calls.update(&tid, &c) != 0)
		zt_stat_inc(ZT_STAT_INFLIGHT_FULL);
	return 0;
}

static __always_inline void zt_ssl_set_pending(u32 tid, u64 ssl, u8 record)
{
	struct zt_ssl_pending p = {.ssl = ssl, .ts = bpf_ktime_get_ns(), .record = record};
	zt_tls_pending.update(&tid, &p);
}

/*
 * The socket an SSL* was bound to, into *out (fd -1 when none). A binding outlives neither its
 * socket nor the SSL object, but nothing tells us when an SSL* is freed: the allocator hands
 * the same address to the next connection's SSL object (a server whose clients reconnect
 * sees it at once), and that connection's plaintext would be reported on the old one's fd and
 * connection, or on a new socket that reuses the fd number. So a binding counts only while
 * its fd still holds the connection it was made for (same conn_start_ns); a stale one is
 * dropped, and the SSL* is bound again like a new one.
 */
static __always_inline void zt_tls_bound(u32 tgid, struct zt_ssl_key *sk, struct zt_ssl_bind *out)
{
	struct zt_ssl_bind *b = zt_tls_fds.lookup(sk);
	if (!b)
		return;
	struct zt_ssl_bind held = {};
	bpf_probe_read_kernel(&held, sizeof(held), b);
	struct zt_sock_key key = {.pid = tgid, .fd = held.fd};
	struct zt_sock_info *info = zt_socket_fds.lookup(&key);
	if (!info || info->conn_start_ns != held.conn_start_ns) {
		zt_tls_fds.delete(sk);
		zt_stat_inc(ZT_STAT_TLS_STALE);
		return;
	}
	*out = held;
}

/* A handshake completed (SSL_do_handshake returned 1): its time, from the SSL*'s first
 * SSL_do_handshake entry, as a conn event on its socket. Not sent while no socket is known
 * for the SSL* (a memory-BIO peer not bound yet): user space could not place it. */
static __always_inline void zt_tls_handshake_done(u32 tgid, u32 tid, struct zt_ssl_call *st,
						  s32 fd, u64 conn_start_ns)
{
	struct zt_ssl_key hk = {.pid = tgid, .ssl = st->ssl};
	u64 *first = zt_tls_hs_start.lookup(&hk);
	u64 start_ns = first ? *first : st->start_ns;
	zt_tls_hs_start.delete(&hk);
	if (fd < 0)
		return;
	struct zt_sock_key key = {.pid = tgid, .fd = fd};
	struct zt_sock_info *info = zt_socket_fds.lookup(&key);
	if (!info || info->shed)
		return;
	struct zt_sock_conn_event *ev = zt_socket_events.ringbuf_reserve(sizeof(*ev));
	if (!ev) {
		zt_stat_inc(ZT_STAT_LOST);
		return;
	}
	zt_offered(sizeof(*ev));
	__builtin_memset(ev, 0, sizeof(*ev));
	ev->type = ZT_EVENT_SOCK_CONN;
	ev->pid = tgid;
	ev->tid = tid;
	ev->fd = fd;
	ev->cgroup_id = bpf_get_current_cgroup_id();
	ev->start_ns = start_ns;
	ev->end_ns = bpf_ktime_get_ns();
	ev->ret = (s64)st->ssl;
	ev->conn_start_ns = conn_start_ns;
	ev->kind = ZT_CONN_TLS_HANDSHAKE;
	ev->family = info->family;
	bpf_get_current_comm(ev->comm, sizeof(ev->comm));
	zt_socket_events.ringbuf_submit(ev, zt_wakeup_flag(sizeof(*ev)));
}

static __always_inline int zt_ssl_exit(struct pt_regs *ctx)
{
	u64 id = bpf_get_current_pid_tgid();
	u32 tgid = id >> 32;
	u32 tid = (u32)id;
	struct zt_ssl_call *cp = zt_tls_calls.lookup(&tid);
	if (!cp)
		return 0;
	struct zt_ssl_call st = {};
	bpf_probe_read_kernel(&st, sizeof(st), cp);
	zt_tls_calls.delete(&tid);

	struct zt_ssl_key sk = {.pid = tgid, .ssl = st.ssl};
	struct zt_ssl_bind bound = {.fd = -1};
	if (st.fd < 0)
		zt_tls_bound(tgid, &sk, &bound);
	struct zt_ssl_bind *b = bound.fd >= 0 ? &bound : 0;
	s64 rc = PT_REGS_RC(ctx);
	if (st.handshake) {
		if (st.fd < 0 && !b)
			zt_ssl_set_pending(tid, st.ssl, ZT_TLS_RECORD_HANDSHAKE);
		if (rc == 1)
			zt_tls_handshake_done(tgid, tid, &st, st.fd >= 0 ? st.fd : bound.fd,
					      st.fd >= 0 ? st.conn_start_ns : bound.conn_start_ns);
		return 0;
	}

	s64 n = rc;
	if (st.out_len) {
		u64 done = 0;
		if (rc != 1 || bpf_probe_read_user(&done, sizeof(done), (void *)st.out_len) != 0)
			return 0;
		n = (s64)done;
	}
	if (n <= 0)
		return 0;

	s32 fd = st.fd;
	u64 conn_start_ns = st.conn_start_ns;
	u8 flags = 0;
	if (fd < 0) {
		if (b) {
			fd = b->fd;
			conn_start_ns = b->conn_start_ns;
			if (b->guessed)
				flags |= ZT_SOCK_F_FD_GUESSED;
		} else {
			flags |= ZT_SOCK_F_FD_UNKNOWN;
			/* No connection yet: conn_start_ns names the SSL* instead, so user space
			 * can place the call once the SSL* is bound (a port filter needs it). */
			conn_start_ns = st.ssl;
			if (st.direction == ZT_DIR_EGRESS)
				zt_ssl_set_pending(tid, st.ssl, ZT_TLS_RECORD_DATA);
		}
	}
	u32 waited_us = 0;
	if (fd >= 0) {
		struct zt_sock_key key = {.pid = tgid, .fd = fd};
		struct zt_sock_info *info = zt_socket_fds.lookup(&key);
		if (info && info->shed) {
			zt_stat_inc(ZT_STAT_CALLS_SHED);
			return 0;
		}
		if (st.direction == ZT_DIR_INGRESS)
			waited_us = zt_tls_waited(&key, conn_start_ns, st.start_ns, &flags);
	}
	u64 py_task = 0; /* socket.c "Asyncio task keys" */
	if (st.direction == ZT_DIR_EGRESS)
		flags |= zt_py_task_of(tgid, tid, &py_task);
	zt_emit_data(tgid, tid, fd, st.start_ns, n, conn_start_ns, st.direction, ZT_SRC_TLS,
		     st.op, flags, 1, st.buf, 0, 0, waited_us, py_task);
	return 0;
}

int zt_ssl_read_enter(struct pt_regs *ctx)
{
	return zt_ssl_enter(ctx, ZT_OP_SSL_READ, ZT_DIR_INGRESS, 0, 0);
}
int zt_ssl_write_enter(struct pt_regs *ctx)
{
	return zt_ssl_enter(ctx, ZT_OP_SSL_WRITE, ZT_DIR_EGRESS, 0, 0);
}
int zt_ssl_read_ex_enter(struct pt_regs *ctx)
{
	return zt_ssl_enter(ctx, ZT_OP_SSL_READ_EX, ZT_DIR_INGRESS, 1, 0);
}
int zt_ssl_write_ex_enter(struct pt_regs *ctx)
{
	return zt_ssl_enter(ctx, ZT_OP_SSL_WRITE_EX, ZT_DIR_EGRESS, 1, 0);
}
int zt_ssl_handshake_enter(struct pt_regs *ctx)
{
	return zt_ssl_enter(ctx, 0, ZT_DIR_EGRESS, 0, 1);
}
int zt_ssl_exit_probe(struct pt_regs *ctx)
{
	return zt_ssl_exit(ctx);
}
