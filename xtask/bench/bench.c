/* Target program of `cargo xtask bench`.
 *
 *   bench compare N   N calls each of plain_fn (unprobed), empty_fn (empty
 *                     uprobe+uretprobe) and traced_fn (traced); prints
 *                     "plain EMPTY traced" in ns per call, interleaved rounds.
 *   bench flood N P   P processes, each calling traced_fn N times; prints the
 *                     wall time in seconds.
 *   bench sys N       N rounds of four system-call kinds, in CPU ns per call:
 *                     "getppid sock pipe file" (getppid is never recorded; a
 *                     64-byte write+read on a socketpair is two socket
 *                     calls; the same on a pipe is two calls on neither a
 *                     socket nor a file; a 4 KiB pread of a cached file is
 *                     file I/O), interleaved rounds.
 * The three functions compile to the same instructions, so their probes
 * cost the same to hit.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <fcntl.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

__attribute__((noinline)) int plain_fn(int x) { __asm__ volatile("" ::: "memory"); return x + 1; }
__attribute__((noinline)) int empty_fn(int x) { __asm__ volatile("" ::: "memory"); return x + 1; }
__attribute__((noinline)) int traced_fn(int x) { __asm__ volatile("" ::: "memory"); return x + 1; }

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec / 1e9;
}

typedef int (*fn_t)(int);

static double per_call(fn_t f, long n) {
    volatile int s = 0;
    double t = now();
    for (long i = 0; i < n; i++) s += f((int)i);
    return (now() - t) / n * 1e9;
}

static int sock[2], pipefd[2], file = -1;
static char buf[4096];

/* syscall(2), not the libc wrappers: another tracer on the machine may
 * probe libc's read or pread in every process, and that would be measured. */
static void getppid_op(void) { syscall(SYS_getppid); }
static void sock_op(void) {
    if (syscall(SYS_write, sock[0], buf, 64) != 64 || syscall(SYS_read, sock[1], buf, 64) != 64)
        exit(3);
}
static void pipe_op(void) {
    if (syscall(SYS_write, pipefd[1], buf, 64) != 64 || syscall(SYS_read, pipefd[0], buf, 64) != 64)
        exit(3);
}
static void file_op(void) {
    if (syscall(SYS_pread64, file, buf, sizeof buf, 0) != (long)sizeof buf) exit(3);
}

/* CPU time of this thread, s: on a shared machine, wall time would also
 * count the time other programs ran. */
static double cpu_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return ts.tv_sec + ts.tv_nsec / 1e9;
}

/* CPU ns per system call of `op`, which makes `calls` of them. */
static double per_syscall(void (*op)(void), int calls, long n) {
    double t = cpu_now();
    for (long i = 0; i < n; i++) op();
    return (cpu_now() - t) / n / calls * 1e9;
}

static int sys_bench(long n) {
    char path[] = "/tmp/eftrace-bench-XXXXXX";
    if (socketpair(AF_UNIX, SOCK_STREAM, 0, sock) || pipe(pipefd)) return 3;
    file = mkstemp(path);
    if (file < 0 || write(file, buf, sizeof buf) != (ssize_t)sizeof buf) return 3;
    unlink(path);
    double g = 0, s = 0, p = 0, f = 0;
    for (int round = 0; round < 5; round++) {
        g += per_syscall(getppid_op, 1, n / 5);
        s += per_syscall(sock_op, 2, n / 5);
        p += per_syscall(pipe_op, 2, n / 5);
        f += per_syscall(file_op, 1, n / 5);
    }
    printf("%.1f %.1f %.1f %.1f\n", g / 5, s / 5, p / 5, f / 5);
    return 0;
}

int main(int argc, char **argv) {
    const char *mode = argc > 1 ? argv[1] : "compare";
    long n = argc > 2 ? atol(argv[2]) : 100000;
    if (!strcmp(mode, "compare")) {
        double p = 0, e = 0, t = 0;
        for (int round = 0; round < 5; round++) {
            p += per_call(plain_fn, n / 5);
            e += per_call(empty_fn, n / 5);
            t += per_call(traced_fn, n / 5);
        }
        printf("%.1f %.1f %.1f\n", p / 5, e / 5, t / 5);
        return 0;
    }
    if (!strcmp(mode, "flood")) {
        int procs = argc > 3 ? atoi(argv[3]) : 1;
        double t = now();
        for (int i = 1; i < procs; i++)
            if (fork() == 0) { per_call(traced_fn, n); _exit(0); }
        per_call(traced_fn, n);
        while (wait(NULL) > 0) {}
        printf("%.6f\n", now() - t);
        return 0;
    }
    if (!strcmp(mode, "sys")) return sys_bench(n);
    return 2;
}
