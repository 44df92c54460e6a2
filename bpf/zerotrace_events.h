/* SPDX-License-Identifier: Apache-2.0 */
/*
 * zerotrace: event records shared between BPF programs and the collector.
 *
 * Rules for every record in this file:
 *   - it starts with a u32 `type` tag (enum zt_event_type);
 *   - fields are laid out largest-alignment-first inside 8-byte groups so the
 *     struct has NO implicit padding (sizes are pinned by _Static_assert);
 *   - any change here must be mirrored in the Python decoder
 *     (services/collector/zerotrace_collector/probes/fileio_decode.py).
 *
 * Integers are in host byte order (little-endian on every supported target).
 */
#ifndef ZEROTRACE_EVENTS_H
#define ZEROTRACE_EVENTS_H

#define ZT_COMM_LEN 16
#define ZT_PATH_MAX 256

enum zt_event_type {
	ZT_EVENT_FILE_OPEN = 1,
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

#endif /* ZEROTRACE_EVENTS_H */
