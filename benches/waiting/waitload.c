/*
 * Load for the waiting benchmarks: P processes x T threads
 * calling fc_acquire_wait on one task (cap 4 by default), each holding its
 * permit HOLD ms (nanosleep) before fc_release.
 *
 *   waitload closed TABLE SECONDS OUT PROCS THREADS TIMEOUT_MS HOLD_MS ORDER
 *   waitload open   TABLE SECONDS OUT PROCS THREADS TIMEOUT_MS HOLD_MS ORDER RATE
 *
 * closed: every thread asks again as soon as it released (offered load far
 * above the cap). open: arrivals at RATE/s on a fixed Poisson schedule
 * dealt round-robin to the threads, so a slow answer does not slow the
 * arrivals down (the schedule's lag is recorded to show it was kept).
 * ORDER is fifo or lifo (lifo needs a header with FC_WAIT_LIFO).
 *
 * Each child writes OUT.<i>, one line per request:
 *   start_ns wait_ns hold_ns ok lag_ns
 * (start relative to the common start time; hold = from the permit to the
 * return of fc_release). benches/waiting/report.py reads them.
 *
 * Compiled by scripts/bench-waiting.sh with -std=c99 -Wall -Wextra -Werror.
 */

#define _XOPEN_SOURCE 700
#define _DEFAULT_SOURCE

#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "bench.h"

#define TASK_NAME "waitbench"
#define CAP 4

struct sample {
    int64_t start, wait, hold, lag;
    int ok;
};

struct worker {
    pthread_t thread;
    fc_task *task;
    int index; /* global thread index, 0..procs*threads-1 */
    struct sample *samples;
    size_t count, room;
};

static int g_open;
static uint32_t g_timeout_ms;
static int64_t g_hold_ns, g_start, g_end;
static int g_total_threads;
static int64_t *g_arrivals; /* open: absolute times, the same in every process */
static size_t g_arrival_count;

static void sleep_for(int64_t ns)
{
    struct timespec ts = {(time_t)(ns / 1000000000), (long)(ns % 1000000000)};
    while (nanosleep(&ts, &ts) == -1 && errno == EINTR) {
    }
}

static void record(struct worker *w, int64_t start, int64_t wait, int64_t hold, int ok,
                   int64_t lag)
{
    if (w->count == w->room) {
        w->room = w->room ? 2 * w->room : 256;
        w->samples = realloc(w->samples, w->room * sizeof *w->samples);
        if (!w->samples) {
            perror("realloc");
            exit(1);
        }
    }
    w->samples[w->count++] = (struct sample){start - g_start, wait, hold, lag, ok};
}

/* One request: wait, hold, release; returns when it is over. */
static void request(struct worker *w, int64_t lag)
{
    fc_permit permit;
    int64_t t0 = now_ns();
    fc_status st = fc_acquire_wait(w->task, 1, g_timeout_ms, &permit);
    int64_t t1 = now_ns();
    if (st == FC_OK) {
        sleep_for(g_hold_ns);
        if (fc_release(w->task, &permit, FC_OUTCOME_SUCCESS) != FC_OK)
            die("fc_release");
        record(w, t0, t1 - t0, now_ns() - t1, 1, lag);
    } else if (st < 100) {
        record(w, t0, t1 - t0, 0, 0, lag);
    } else {
        die("fc_acquire_wait");
    }
}

static void *run(void *arg)
{
    struct worker *w = arg;
    if (g_open) {
        for (size_t i = (size_t)w->index; i < g_arrival_count; i += (size_t)g_total_threads) {
            sleep_until(g_arrivals[i]);
            request(w, now_ns() - g_arrivals[i]);
        }
    } else {
        sleep_until(g_start);
        while (now_ns() < g_end)
            request(w, 0);
    }
    return NULL;
}

static fc_task *open_task(const char *path, const char *order)
{
    fc_task_config config;
    fc_task_config_init(&config, sizeof config);
    config.max_concurrency = CAP;
    if (strcmp(order, "lifo") == 0) {
#ifdef FC_WAIT_LIFO
        config.wait_order = FC_WAIT_LIFO;
#else
        fprintf(stderr, "waitload: this flowctrl.h has no FC_WAIT_LIFO\n");
        exit(2);
#endif
    } else if (strcmp(order, "fifo") != 0) {
        fprintf(stderr, "waitload: order must be fifo or lifo, not %s\n", order);
        exit(2);
    }
    return open_task_with(path, TASK_NAME, &config);
}

static void child(int proc, int threads, const char *path, const char *order, const char *out)
{
    fc_task *task = open_task(path, order);
    struct worker *workers = calloc((size_t)threads, sizeof *workers);
    char name[4096];
    FILE *f;
    for (int i = 0; i < threads; i++) {
        workers[i].task = task;
        workers[i].index = proc * threads + i;
        if (pthread_create(&workers[i].thread, NULL, run, &workers[i]) != 0) {
            perror("pthread_create");
            exit(1);
        }
    }
    snprintf(name, sizeof name, "%s.%d", out, proc);
    f = fopen(name, "w");
    if (!f) {
        perror(name);
        exit(1);
    }
    for (int i = 0; i < threads; i++) {
        pthread_join(workers[i].thread, NULL);
        for (size_t j = 0; j < workers[i].count; j++) {
            struct sample *s = &workers[i].samples[j];
            fprintf(f, "%" PRId64 " %" PRId64 " %" PRId64 " %d %" PRId64 "\n", s->start, s->wait,
                    s->hold, s->ok, s->lag);
        }
    }
    fclose(f);
    fc_task_free(task);
    exit(0);
}

int main(int argc, char **argv)
{
    if (argc < 10 || (strcmp(argv[1], "open") == 0 && argc < 11)) {
        fprintf(stderr, "usage: waitload closed|open TABLE SECONDS OUT PROCS THREADS "
                        "TIMEOUT_MS HOLD_MS ORDER [RATE]\n");
        return 2;
    }
    g_open = strcmp(argv[1], "open") == 0;
    const char *path = argv[2];
    double seconds = atof(argv[3]);
    const char *out = argv[4];
    int procs = atoi(argv[5]), threads = atoi(argv[6]);
    g_timeout_ms = (uint32_t)atoi(argv[7]);
    g_hold_ns = (int64_t)(atof(argv[8]) * 1e6);
    const char *order = argv[9];
    g_total_threads = procs * threads;

    /* Created (with its config) before the children start, so they all
     * attach to the same task; they start together at g_start. */
    fc_task *task = open_task(path, order);
    g_start = now_ns() + 500000000;
    g_end = g_start + (int64_t)(seconds * 1e9);
    if (g_open) {
        double rate = atof(argv[10]);
        unsigned seed = 18;
        int64_t t = g_start;
        g_arrival_count = (size_t)(seconds * rate * 1.2) + 16;
        g_arrivals = malloc(g_arrival_count * sizeof *g_arrivals);
        for (size_t i = 0; i < g_arrival_count; i++) {
            double u = (rand_r(&seed) + 1.0) / ((double)RAND_MAX + 2.0);
            t += (int64_t)(-log(u) / rate * 1e9);
            if (t >= g_end) {
                g_arrival_count = i;
                break;
            }
            g_arrivals[i] = t;
        }
    }
    for (int p = 0; p < procs; p++) {
        pid_t pid = fork();
        if (pid < 0) {
            perror("fork");
            return 1;
        }
        if (pid == 0)
            child(p, threads, path, order, out);
    }
    int failed = 0;
    for (int p = 0; p < procs; p++) {
        int status;
        if (wait(&status) < 0 || !WIFEXITED(status) || WEXITSTATUS(status) != 0)
            failed = 1;
    }
    fc_task_free(task);
    return failed;
}
