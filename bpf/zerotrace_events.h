/* SPDX-License-Identifier: Apache-2.0 */
/*
 * zerotrace: event records shared between BPF programs and the collector.
 *
 * Rules for every record in this file:
 *   - it starts with a u32 `type` tag (enum zt_event_type);
 *   - fields are laid out largest-alignment-first inside 8-byte groups so the
 *     struct has NO implicit padding (sizes are pinned by _Static_assert);
 *   - any change here must be mirrored in the Python decoder
 *     (services/collector/zerotrace_collector/probes/fileio_decode.py,
 *     socket_decode.py).
 *
 * Integers are in host byte order (little-endian on every supported target).
 */
#ifndef ZEROTRACE_EVENTS_H
#define ZEROTRACE_EVENTS_H

#define ZT_COMM_LEN 16
#define ZT_PATH_MAX 256

enum zt_event_type {
	ZT_EVENT_FILE_OPEN = 1,
	ZT_EVENT_SOCK_DATA = 2,
	ZT_EVENT_SOCK_CONN = 3,
	ZT_EVENT_FILE_RW = 4,
};

/*
 * One completed openat(2) call.
 *
 *   offset size field
 *        0    4 type        ZT_EVENT_FILE_OPEN
 *        4    4 pid         thread-group id (userspace "pid"), init pid ns
 *        8    4 tid         thread id, init pid ns
 *       12    4 open_flags  openat() flags argument (O_*), signed int
 *       16    8 cgroup_id   bpf_get_current_cgroup_id() (cgroup v2 inode)
 *       24    8 start_ns    bpf_ktime_get_ns() at syscall entry (CLOCK_MONOTONIC)
 *       32    8 end_ns      bpf_ktime_get_ns() at syscall exit  (CLOCK_MONOTONIC)
 *       40    8 ret         new fd, or -errno
 *       48   16 comm        task comm, NUL-terminated
 *       64  256 path        user-supplied path, NUL-terminated (may be truncated)
 *      320                  total
 */
struct zt_file_open_event {
	u32 type;
	u32 pid;
	u32 tid;
	s32 open_flags;
	u64 cgroup_id;
	u64 start_ns;
	u64 end_ns;
	s64 ret;
	char comm[ZT_COMM_LEN];
	char path[ZT_PATH_MAX];
};

_Static_assert(sizeof(struct zt_file_open_event) == 320,
	       "zt_file_open_event layout changed: update fileio_decode.py");

/* zt_file_rw_event.op */
#define ZT_FILE_OP_READ  1 /* read, pread64, readv */
#define ZT_FILE_OP_WRITE 2 /* write, pwrite64, writev */

/*
 * One completed read or write on a file descriptor that a traced openat(2) returned
 * (fileio.c keeps (pid, fd) -> path from the open until close).
 *
 *   offset size field
 *        0    4 type        ZT_EVENT_FILE_RW
 *        4    4 pid
 *        8    4 tid
 *       12    4 fd
 *       16    8 cgroup_id
 *       24    8 start_ns    syscall entry (CLOCK_MONOTONIC)
 *       32    8 end_ns      syscall exit
 *       40    8 ret         bytes moved, or -errno
 *       48    4 op          ZT_FILE_OP_*
 *       52    4 _pad
 *       56   16 comm
 *       72  256 path        the path the fd was opened with, NUL-terminated
 *      328                  total
 */
struct zt_file_rw_event {
	u32 type;
	u32 pid;
	u32 tid;
	s32 fd;
	u64 cgroup_id;
	u64 start_ns;
	u64 end_ns;
	s64 ret;
	u32 op;
	u32 _pad;
	char comm[ZT_COMM_LEN];
	char path[ZT_PATH_MAX];
};

_Static_assert(sizeof(struct zt_file_rw_event) == 328,
	       "zt_file_rw_event layout changed: update fileio_decode.py");

/* ---- socket family (bpf/socket.c, bpf/tls.c; decoder probes/socket_decode.py) ---- */

/* zt_sock_data_hdr.direction */
#define ZT_DIR_INGRESS 1 /* read, readv, recvfrom, recvmsg, SSL_read* */
#define ZT_DIR_EGRESS  2 /* write, writev, sendto, sendmsg, SSL_write* */

/* zt_sock_data_hdr.source */
#define ZT_SRC_SYSCALL 1
#define ZT_SRC_TLS     2

/* zt_sock_data_hdr.op: the call that moved the bytes */
#define ZT_OP_READ         1
#define ZT_OP_WRITE        2
#define ZT_OP_READV        3
#define ZT_OP_WRITEV       4
#define ZT_OP_RECVFROM     5
#define ZT_OP_SENDTO       6
#define ZT_OP_RECVMSG      7
#define ZT_OP_SENDMSG      8
#define ZT_OP_SSL_READ     9
#define ZT_OP_SSL_WRITE    10
#define ZT_OP_SSL_READ_EX  11
#define ZT_OP_SSL_WRITE_EX 12

/* zt_sock_data_hdr.flags */
#define ZT_SOCK_F_CIPHERTEXT 0x01 /* syscall bytes of a TLS connection: payload not copied */
#define ZT_SOCK_F_FD_GUESSED 0x02 /* TLS: SSL*->fd bound by the memory-BIO heuristic */
#define ZT_SOCK_F_FD_UNKNOWN 0x04 /* TLS: no fd known for this SSL* yet (fd is -1) */
#define ZT_SOCK_F_TCP_SEQ    0x08 /* tcp_seq holds the TCP sequence number of the first byte */
#define ZT_SOCK_F_WAITED     0x10 /* waited_us holds how long the bytes waited before the read */
#define ZT_SOCK_F_PY_NO_THREAD 0x20 /* egress of a known CPython process whose thread state the
				     * walker did not find (user space tells it: python_threads) */

/*
 * Bytes moved on a tracked socket by one syscall or one SSL_read/SSL_write.
 * On the wire the header is followed by exactly payload_len bytes of payload
 * (the first bytes of the call's data; payload_len < ret means truncated).
 *
 *   offset size field
 *        0    4 type           ZT_EVENT_SOCK_DATA
 *        4    4 pid            tgid
 *        8    4 tid
 *       12    4 fd             socket fd, or -1 (TLS, fd unknown)
 *       16    8 cgroup_id
 *       24    8 start_ns       call entry (CLOCK_MONOTONIC)
 *       32    8 end_ns         call return (CLOCK_MONOTONIC)
 *       40    8 ret            bytes transferred (> 0)
 *       48    8 conn_start_ns  identifies the connection on (pid, fd): ktime when tracking began;
 *                              with ZT_SOCK_F_FD_UNKNOWN (TLS, no socket yet) the SSL* instead
 *       56    1 direction      ZT_DIR_*
 *       57    1 source         ZT_SRC_*
 *       58    1 op             ZT_OP_*
 *       59    1 flags          ZT_SOCK_F_*
 *       60    4 payload_len    bytes of payload that follow the header
 *       64   16 comm
 *       80    4 tcp_seq        with ZT_SOCK_F_TCP_SEQ: sequence number of the call's first
 *                              byte (syscalls: write_seq / copied_seq at entry)
 *       84    4 waited_us      with ZT_SOCK_F_WAITED (reads): microseconds from the arrival
 *                              of the socket's oldest unread bytes (tcp:tcp_probe; without it
 *                              its last segment, tcp_sock.tcp_mstamp) to the call's entry: how
 *                              long a request waited before a busy server read it (TLS reads:
 *                              from the arrival of the ciphertext they decrypt)
 *       88    8 py_task        egress calls of a CPython process the socket probe knows: the
 *                              thread's asyncio task key (python_stack.h zt_python_task: the
 *                              address of the outermost coroutine frame), 0 when it runs none
 *       96                     header total; payload follows
 */
struct zt_sock_data_hdr {
	u32 type;
	u32 pid;
	u32 tid;
	s32 fd;
	u64 cgroup_id;
	u64 start_ns;
	u64 end_ns;
	s64 ret;
	u64 conn_start_ns;
	u8 direction;
	u8 source;
	u8 op;
	u8 flags;
	u32 payload_len;
	char comm[ZT_COMM_LEN];
	u32 tcp_seq;
	u32 waited_us;
	u64 py_task;
};

_Static_assert(sizeof(struct zt_sock_data_hdr) == 96,
	       "zt_sock_data_hdr layout changed: update socket_decode.py");

/* zt_sock_conn_event.kind */
#define ZT_CONN_CONNECT 1
#define ZT_CONN_ACCEPT  2
#define ZT_CONN_CLOSE   3
#define ZT_CONN_SHED    4 /* shed from here on (socket.c "Shedding"): its exchange is cut */
#define ZT_CONN_TLS_BOUND 5 /* tls.c: an SSL* bound to this socket; ret = the SSL* (never
			     * published: user space places that SSL*'s earlier calls) */
#define ZT_CONN_TLS_HANDSHAKE 6 /* tls.c: a TLS handshake on this socket completed; start_ns its
				 * first SSL_do_handshake entry, end_ns the successful return,
				 * ret the SSL* */
#define ZT_CONN_ESTABLISHED 7 /* socket.c: a non-blocking connect (it returned -EINPROGRESS)
			       * reached ESTABLISHED; start_ns the connect() entry, end_ns the
			       * state change (sock:inet_sock_set_state), ret -EINPROGRESS */

/*
 * A tracked socket appears (connect, accept) or goes (close).
 *
 *   offset size field
 *        0    4 type           ZT_EVENT_SOCK_CONN
 *        4    4 pid
 *        8    4 tid
 *       12    4 fd             the connected/accepted/closed fd
 *       16    8 cgroup_id
 *       24    8 start_ns       syscall entry
 *       32    8 end_ns         syscall exit
 *       40    8 ret            syscall result (connect: 0 or -EINPROGRESS)
 *       48    8 conn_start_ns  as in zt_sock_data_hdr
 *       56    4 kind           ZT_CONN_*
 *       60    2 family         AF_INET / AF_INET6, 0 when unknown
 *       62    2 dgram          1: a UDP socket (socket.c "Datagrams"), else 0
 *       64   16 comm
 *       80   28 addr           connect: the user's struct sockaddr (remote); else zeros
 *      108    4 _pad2
 *      112                     total
 */
struct zt_sock_conn_event {
	u32 type;
	u32 pid;
	u32 tid;
	s32 fd;
	u64 cgroup_id;
	u64 start_ns;
	u64 end_ns;
	s64 ret;
	u64 conn_start_ns;
	u32 kind;
	u16 family;
	u16 dgram;
	char comm[ZT_COMM_LEN];
	u8 addr[28];
	u8 _pad2[4];
	/* TCP connect, its ESTABLISHED, accept: the socket's own address and its peer's as
	 * struct sockaddr_in / sockaddr_in6, read from its sock_common when the call returned
	 * (connect's autobind has set the local one by then); family 0 when not read. User space
	 * then needs no /proc to name a connection that closes before it looks. */
	u8 local[28];
	u8 peer[28];
};

_Static_assert(sizeof(struct zt_sock_conn_event) == 168,
	       "zt_sock_conn_event layout changed: update socket_decode.py");

#endif /* ZEROTRACE_EVENTS_H */
