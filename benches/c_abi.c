/* The cost of a decision through the C ABI, against governor's `check()`
 * (benches/governor-shim, its default quanta clock) in the same process,
 * batch for batch: each round runs one batch of every case in turn, so a
 * neighbour's load falls on all cases alike; the figures are the medians
 * over the rounds. Both libraries are shared objects called through the
 * PLT. Limits are far above what a loop reaches (rate 1e9/s, burst 1e6,
 * cap 1e6): every call is admitted and does its full work.
 *
 * Built and run by scripts/bench.sh; prints one JSON object (ns per call
 * for the one-thread cases, aggregate calls per second for the two-worker
 * cases) that benches/report.py turns into benches/RESULTS.md.
 *
 *   c_abi [rounds] [calls per batch] [one]
 *
 * `one` runs the one-thread cases only (a quick look; two builds are
 * compared side by side by benches/c_ab.c, scripts/bench-compare.sh).
 */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include <x86intrin.h>

#include "flowctrl.h"

/* benches/governor-shim */
void *gov_new(uint32_t per_second, uint32_t burst);
int gov_check(const void *limiter);
void gov_free(void *limiter);

#define RATE 1e9
#define BURST 1000000u
#define CAP 1000000u
#define MAX_ROUNDS 64

static fc_task *rate_task, *capped_task;
static void *limiter;

static uint64_t now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static void check(fc_status s, const char *what) {
    if (s != FC_OK) {
        fprintf(stderr, "%s: %s (%s)\n", what, fc_status_str(s), fc_last_error());
        exit(1);
    }
}

/* One call of each case; a failure aborts (every call must be admitted). */
static void acquire_only(fc_task *task) {
    fc_permit p;
    if (fc_acquire(task, 1, &p) != FC_OK) abort();
}

static void pair(fc_task *task) {
    fc_permit p;
    if (fc_acquire(task, 1, &p) != FC_OK) abort();
    if (fc_release(task, &p, FC_OUTCOME_SUCCESS) != FC_OK) abort();
}

static volatile uint64_t sink;

static void run_case(int which, long calls) {
    switch (which) {
    case 0: { /* floor: one TSC read */
        uint64_t acc = 0;
        for (long i = 0; i < calls; i++) acc += __rdtsc();
        sink = acc;
        break;
    }
    case 1: { /* floor: one uncontended compare-and-swap */
        static uint64_t word;
        for (long i = 0; i < calls; i++) {
            uint64_t seen = __atomic_load_n(&word, __ATOMIC_RELAXED);
            __atomic_compare_exchange_n(&word, &seen, seen + 1, 0, __ATOMIC_RELAXED,
                                        __ATOMIC_RELAXED);
        }
        break;
    }
    case 2:
        for (long i = 0; i < calls; i++) acquire_only(rate_task);
        break;
    case 3:
        for (long i = 0; i < calls; i++) pair(rate_task);
        break;
    case 4:
        for (long i = 0; i < calls; i++) pair(capped_task);
        break;
    case 5: {
        int ok = 0;
        for (long i = 0; i < calls; i++) ok += gov_check(limiter);
        if (ok != calls) abort();
        break;
    }
    }
}

static const char *one_names[] = {
    "floor_clock_read", "floor_compare_and_swap", "fc_acquire",
    "fc_acquire_release", "fc_capped_acquire_release", "governor_check",
};
#define ONE_CASES 6

/* Two workers: forked processes on one task (cases 0..2), or two threads
 * on one governor limiter (case 3). Each starts at `start_at` and returns
 * its own loop time; the aggregate rate is 2 × calls over the slower. */
struct worker {
    int which;
    long calls;
    uint64_t start_at;
    uint64_t ns;
    /* governor's refusals (a refusal is cheaper; reported) */
    long refused;
};

static void two_loop(struct worker *w) {
    switch (w->which) {
    case 0: acquire_only(rate_task); break;
    case 1: pair(rate_task); break;
    case 2: pair(capped_task); break;
    case 3: gov_check(limiter); break;
    }
    while (now_ns() < w->start_at) {
    }
    uint64_t t0 = now_ns();
    switch (w->which) {
    case 0:
        for (long i = 0; i < w->calls; i++) acquire_only(rate_task);
        break;
    case 1:
        for (long i = 0; i < w->calls; i++) pair(rate_task);
        break;
    case 2:
        for (long i = 0; i < w->calls; i++) pair(capped_task);
        break;
    case 3:
        for (long i = 0; i < w->calls; i++) w->refused += !gov_check(limiter);
        break;
    }
    w->ns = now_ns() - t0;
}

static void *thread_main(void *arg) {
    two_loop(arg);
    return NULL;
}

static long gov_refused;

static double two_workers(int which, long calls) {
    struct worker w[2];
    uint64_t start_at = now_ns() + 20000000u;
    for (int i = 0; i < 2; i++) w[i] = (struct worker){which, calls, start_at, 0, 0};
    if (which == 3) {
        pthread_t t;
        pthread_create(&t, NULL, thread_main, &w[1]);
        two_loop(&w[0]);
        pthread_join(t, NULL);
    } else {
        int fds[2][2];
        pid_t pids[2];
        for (int i = 0; i < 2; i++) {
            if (pipe(fds[i]) != 0) abort();
            pids[i] = fork();
            if (pids[i] == 0) {
                two_loop(&w[i]);
                if (write(fds[i][1], &w[i].ns, 8) != 8) _exit(1);
                _exit(0);
            }
            close(fds[i][1]);
        }
        for (int i = 0; i < 2; i++) {
            if (read(fds[i][0], &w[i].ns, 8) != 8) {
                fprintf(stderr, "a worker process failed\n");
                exit(1);
            }
            close(fds[i][0]);
            waitpid(pids[i], NULL, 0);
        }
    }
    gov_refused += w[0].refused + w[1].refused;
    uint64_t slowest = w[0].ns > w[1].ns ? w[0].ns : w[1].ns;
    return 2.0 * (double)calls / ((double)slowest / 1e9);
}

static const char *two_names[] = {
    "two_processes_fc_acquire", "two_processes_fc_acquire_release",
    "two_processes_fc_capped_acquire_release", "two_threads_governor_check",
};
#define TWO_CASES 4

static int cmp(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double median(double *v, int n) {
    double s[MAX_ROUNDS];
    memcpy(s, v, sizeof(double) * (size_t)n);
    qsort(s, (size_t)n, sizeof(double), cmp);
    return n % 2 ? s[n / 2] : (s[n / 2 - 1] + s[n / 2]) / 2;
}

static fc_task *task(fc_table *table, const char *name, uint32_t cap) {
    fc_task_config config;
    check(fc_task_config_init(&config, sizeof config), "config");
    config.local_rate = RATE;
    config.burst = BURST;
    config.max_concurrency = cap;
    fc_task *t;
    check(fc_task_register(table, name, &config, &t), "register");
    return t;
}

static void print_series(const char *name, double *v, int rounds, int last) {
    printf("  \"%s\": {\"median\": %.3f, \"rounds\": [", name, median(v, rounds));
    for (int r = 0; r < rounds; r++) printf("%s%.3f", r ? ", " : "", v[r]);
    printf("]}%s\n", last ? "" : ",");
}

int main(int argc, char **argv) {
    int rounds = argc > 1 ? atoi(argv[1]) : 9;
    long calls = argc > 2 ? atol(argv[2]) : 2000000;
    int one_only = argc > 3 && strcmp(argv[3], "one") == 0;
    if (rounds < 1 || rounds > MAX_ROUNDS || calls < 1) {
        fprintf(stderr, "usage: c_abi [rounds 1..64] [calls per batch]\n");
        return 2;
    }
    char path[128];
    snprintf(path, sizeof path, "/tmp/flowctrl-c-bench-%d", (int)getpid());
    unlink(path);
    fc_table_options options;
    check(fc_table_options_init(&options, sizeof options), "options");
    fc_table *table;
    check(fc_table_open(path, &options, &table), "open");
    rate_task = task(table, "rate", 0);
    capped_task = task(table, "capped", CAP);
    limiter = gov_new(1000000000u, BURST);

    double one[ONE_CASES][MAX_ROUNDS], two[TWO_CASES][MAX_ROUNDS];
    for (int c = 0; c < ONE_CASES; c++) run_case(c, calls / 10); /* warm up */
    for (int r = 0; r < rounds; r++) {
        for (int c = 0; c < ONE_CASES; c++) {
            uint64_t t0 = now_ns();
            run_case(c, calls);
            one[c][r] = (double)(now_ns() - t0) / (double)calls;
        }
        for (int c = 0; c < TWO_CASES; c++) two[c][r] = one_only ? 0 : two_workers(c, calls);
    }
    printf("{\n  \"rounds\": %d,\n  \"calls_per_batch\": %ld,\n  \"ns_per_call\": {\n", rounds,
           calls);
    for (int c = 0; c < ONE_CASES; c++) print_series(one_names[c], one[c], rounds, c == ONE_CASES - 1);
    printf("  },\n  \"calls_per_second\": {\n");
    for (int c = 0; c < TWO_CASES; c++) print_series(two_names[c], two[c], rounds, c == TWO_CASES - 1);
    printf("  },\n  \"governor_two_threads_refused\": %ld\n}\n", gov_refused);

    gov_free(limiter);
    fc_task_free(rate_task);
    fc_task_free(capped_task);
    fc_table_close(table);
    unlink(path);
    return 0;
}
