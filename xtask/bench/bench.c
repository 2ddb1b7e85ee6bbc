/* Target program of `cargo xtask bench`.
 *
 *   bench compare N   N calls each of plain_fn (unprobed), empty_fn (empty
 *                     uprobe+uretprobe) and traced_fn (traced); prints
 *                     "plain EMPTY traced" in ns per call, interleaved rounds.
 *   bench flood N P   P processes, each calling traced_fn N times; prints the
 *                     wall time in seconds.
 * The three functions compile to the same instructions, so their probes
 * cost the same to hit.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
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
    return 2;
}
