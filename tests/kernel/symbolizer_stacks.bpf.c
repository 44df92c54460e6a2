// Test program for tests/kernel/test_symbolizer_stacks.py: at each CPU-clock sample of one
// process (TARGET_PID, a -D cflag), count the pair of (user stack, kernel stack) ids.
#include <uapi/linux/bpf_perf_event.h>
#include <uapi/linux/ptrace.h>

struct stack_key {
    int user_id;
    int kernel_id;
};

BPF_STACK_TRACE(stacks, 4096);
BPF_HASH(counts, struct stack_key, u64, 4096);

int on_sample(struct bpf_perf_event_data *ctx) {
    u32 pid = bpf_get_current_pid_tgid() >> 32;
    if (pid != TARGET_PID)
        return 0;
    struct stack_key key = {};
    key.user_id = stacks.get_stackid(&ctx->regs, BPF_F_USER_STACK);
    key.kernel_id = stacks.get_stackid(&ctx->regs, 0);
    counts.increment(key);
    return 0;
}
