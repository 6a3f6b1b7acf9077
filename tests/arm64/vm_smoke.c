// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/* Guest capability check for the arm64 full-system test.
 *
 * Answers "can this VM do what the BPF sampler needs?" independently of
 * tracecorr, so a failure of the real scenario can be told apart from a VM
 * that cannot run BPF at all:
 *   - /sys/kernel/btf/vmlinux exists and starts with the BTF magic (CO-RE needs it);
 *   - bpf(BPF_MAP_CREATE) and bpf(BPF_PROG_LOAD) of a BPF_PROG_TYPE_PERF_EVENT
 *     program work;
 *   - perf_event_open(PERF_TYPE_SOFTWARE, PERF_COUNT_SW_CPU_CLOCK) works, the
 *     program attaches to it, and it really runs: its counter grows while this
 *     process burns CPU.
 * Prints one JSON object on stdout; exit status 0 only if every check passed.
 * Built statically with aarch64-linux-gnu-gcc by tests/arm64/make_initramfs.py.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <linux/bpf.h>
#include <linux/perf_event.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

static long sys_bpf(int cmd, union bpf_attr *attr)
{
    return syscall(__NR_bpf, cmd, attr, sizeof(*attr));
}

static int btf_check(long *size)
{
    int fd = open("/sys/kernel/btf/vmlinux", O_RDONLY);
    if (fd < 0)
        return -errno;
    uint16_t magic = 0;
    ssize_t n = read(fd, &magic, sizeof magic);
    *size = lseek(fd, 0, SEEK_END);
    close(fd);
    return (n == (ssize_t)sizeof magic && magic == 0xeB9F) ? 0 : -EINVAL;
}

/* A one-slot array map: slot 0 counts how often the program ran. */
static int counter_map_create(void)
{
    union bpf_attr attr;
    memset(&attr, 0, sizeof attr);
    attr.map_type = BPF_MAP_TYPE_ARRAY;
    attr.key_size = 4;
    attr.value_size = 8;
    attr.max_entries = 1;
    return (int)sys_bpf(BPF_MAP_CREATE, &attr);
}

/* r0 = lookup(map, &key0); if (r0) atomic *(u64 *)r0 += 1; return 0; */
static int counting_prog_load(int map_fd, char *log, size_t log_size)
{
    struct bpf_insn insns[] = {
        {.code = BPF_ST | BPF_MEM | BPF_W, .dst_reg = BPF_REG_10, .off = -4, .imm = 0},
        {.code = BPF_ALU64 | BPF_MOV | BPF_X, .dst_reg = BPF_REG_2, .src_reg = BPF_REG_10},
        {.code = BPF_ALU64 | BPF_ADD | BPF_K, .dst_reg = BPF_REG_2, .imm = -4},
        {.code = BPF_LD | BPF_DW | BPF_IMM, .dst_reg = BPF_REG_1, .src_reg = BPF_PSEUDO_MAP_FD, .imm = map_fd},
        {0},
        {.code = BPF_JMP | BPF_CALL, .imm = BPF_FUNC_map_lookup_elem},
        {.code = BPF_JMP | BPF_JEQ | BPF_K, .dst_reg = BPF_REG_0, .off = 2, .imm = 0},
        {.code = BPF_ALU64 | BPF_MOV | BPF_K, .dst_reg = BPF_REG_1, .imm = 1},
        {.code = BPF_STX | BPF_ATOMIC | BPF_DW, .dst_reg = BPF_REG_0, .src_reg = BPF_REG_1, .imm = BPF_ADD},
        {.code = BPF_ALU64 | BPF_MOV | BPF_K, .dst_reg = BPF_REG_0, .imm = 0},
        {.code = BPF_JMP | BPF_EXIT},
    };
    union bpf_attr attr;
    memset(&attr, 0, sizeof attr);
    attr.prog_type = BPF_PROG_TYPE_PERF_EVENT;
    attr.insns = (uint64_t)(uintptr_t)insns;
    attr.insn_cnt = sizeof insns / sizeof insns[0];
    attr.license = (uint64_t)(uintptr_t)"Dual BSD/GPL";
    attr.log_buf = (uint64_t)(uintptr_t)log;
    attr.log_size = (uint32_t)log_size;
    attr.log_level = 1;
    return (int)sys_bpf(BPF_PROG_LOAD, &attr);
}

static int cpu_clock_open(void)
{
    struct perf_event_attr attr;
    memset(&attr, 0, sizeof attr);
    attr.size = sizeof attr;
    attr.type = PERF_TYPE_SOFTWARE;
    attr.config = PERF_COUNT_SW_CPU_CLOCK;
    attr.freq = 1;
    attr.sample_freq = 1000;
    /* This process, any CPU: the same shape as a per-process sampler. */
    return (int)syscall(__NR_perf_event_open, &attr, 0, -1, -1, PERF_FLAG_FD_CLOEXEC);
}

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static uint64_t counter_read(int map_fd)
{
    uint32_t key = 0;
    uint64_t value = 0;
    union bpf_attr attr;
    memset(&attr, 0, sizeof attr);
    attr.map_fd = (uint32_t)map_fd;
    attr.key = (uint64_t)(uintptr_t)&key;
    attr.value = (uint64_t)(uintptr_t)&value;
    if (sys_bpf(BPF_MAP_LOOKUP_ELEM, &attr) != 0)
        return 0;
    return value;
}

static void json_string(const char *s)
{
    putchar('"');
    for (; *s; s++) {
        if (*s == '"' || *s == '\\')
            printf("\\%c", *s);
        else if ((unsigned char)*s < 0x20)
            printf("\\u%04x", *s);
        else
            putchar(*s);
    }
    putchar('"');
}

int main(void)
{
    static char verifier_log[4096];
    long btf_size = 0;
    int btf_rc = btf_check(&btf_size);

    int map_fd = counter_map_create();
    int map_errno = map_fd < 0 ? errno : 0;
    int prog_fd = -1, prog_errno = 0;
    if (map_fd >= 0) {
        prog_fd = counting_prog_load(map_fd, verifier_log, sizeof verifier_log);
        prog_errno = prog_fd < 0 ? errno : 0;
    }

    int perf_fd = cpu_clock_open();
    int perf_errno = perf_fd < 0 ? errno : 0;
    int attach_errno = -1; /* -1: not attempted */
    uint64_t runs = 0;
    if (perf_fd >= 0 && prog_fd >= 0) {
        attach_errno = ioctl(perf_fd, PERF_EVENT_IOC_SET_BPF, prog_fd) == 0 ? 0 : errno;
        if (attach_errno == 0) {
            ioctl(perf_fd, PERF_EVENT_IOC_ENABLE, 0);
            /* Burn CPU until the program has run a few times; 5 s is a budget
             * for a slow emulated guest, not an expectation. */
            volatile uint64_t spin = 0;
            double deadline = now_s() + 5.0;
            while (now_s() < deadline && (runs = counter_read(map_fd)) < 20)
                for (int i = 0; i < 100000; i++)
                    spin += (uint64_t)i;
            ioctl(perf_fd, PERF_EVENT_IOC_DISABLE, 0);
        }
    }

    int ok = btf_rc == 0 && map_fd >= 0 && prog_fd >= 0 && perf_fd >= 0 && attach_errno == 0 && runs > 0;
    printf("{\"btf_vmlinux\":%s,\"btf_size\":%ld,\"btf_error\":", btf_rc == 0 ? "true" : "false", btf_size);
    json_string(btf_rc == 0 ? "" : strerror(-btf_rc));
    printf(",\"bpf_map_create\":%s,\"bpf_map_error\":", map_fd >= 0 ? "true" : "false");
    json_string(map_errno ? strerror(map_errno) : "");
    printf(",\"bpf_prog_load\":%s,\"bpf_prog_error\":", prog_fd >= 0 ? "true" : "false");
    json_string(prog_errno ? strerror(prog_errno) : "");
    printf(",\"verifier_log\":");
    json_string(prog_fd >= 0 ? "" : verifier_log);
    printf(",\"perf_cpu_clock\":%s,\"perf_error\":", perf_fd >= 0 ? "true" : "false");
    json_string(perf_errno ? strerror(perf_errno) : "");
    printf(",\"perf_attach_bpf\":%s,\"attach_error\":", attach_errno == 0 ? "true" : "false");
    json_string(attach_errno > 0 ? strerror(attach_errno) : "");
    printf(",\"bpf_program_runs\":%llu,\"ok\":%s}\n", (unsigned long long)runs, ok ? "true" : "false");
    return ok ? 0 : 1;
}
