/* Before/after in one process: loads two builds of libflowctrl.so side by
 * side (dlopen by path, RTLD_LOCAL: each copy keeps its own symbols) and
 * times the same one-thread cases of benches/c_abi.c on each, batch for
 * batch, so a neighbour's load falls on both alike. Prints the median ns
 * per call of every case for A and B, and B / A.
 *
 *   cc -O2 -Iinclude benches/c_ab.c -o c_ab -ldl
 *   ./c_ab before/libflowctrl.so after/libflowctrl.so [rounds] [calls]
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "flowctrl.h"

#define MAX_ROUNDS 255

struct lib {
    fc_status (*table_options_init)(fc_table_options *, size_t);
    fc_status (*table_open)(const char *, const fc_table_options *, fc_table **);
    fc_status (*task_config_init)(fc_task_config *, size_t);
    fc_status (*task_register)(const fc_table *, const char *, const fc_task_config *,
                               fc_task **);
    fc_status (*acquire)(const fc_task *, uint32_t, fc_permit *);
    fc_status (*release)(const fc_task *, fc_permit *, fc_outcome);
    fc_task *rate, *capped;
};

static void *sym(void *h, const char *name) {
    void *f = dlsym(h, name);
    if (!f) {
        fprintf(stderr, "%s: %s\n", name, dlerror());
        exit(1);
    }
    return f;
}

static fc_task *task(struct lib *l, fc_table *t, const char *name, uint32_t cap) {
    fc_task_config c;
    l->task_config_init(&c, sizeof c);
    c.local_rate = 1e9;
    c.burst = 1000000;
    c.max_concurrency = cap;
    fc_task *k;
    if (l->task_register(t, name, &c, &k) != FC_OK) exit(1);
    return k;
}

static void load(struct lib *l, const char *path, int which) {
    void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (!h) {
        fprintf(stderr, "%s\n", dlerror());
        exit(1);
    }
    l->table_options_init = sym(h, "fc_table_options_init");
    l->table_open = sym(h, "fc_table_open");
    l->task_config_init = sym(h, "fc_task_config_init");
    l->task_register = sym(h, "fc_task_register");
    l->acquire = sym(h, "fc_acquire");
    l->release = sym(h, "fc_release");
    char file[128];
    snprintf(file, sizeof file, "/tmp/flowctrl-ab-%d-%d", (int)getpid(), which);
    unlink(file);
    fc_table_options o;
    l->table_options_init(&o, sizeof o);
    fc_table *t;
    if (l->table_open(file, &o, &t) != FC_OK) exit(1);
    unlink(file); /* the mapping stays */
    l->rate = task(l, t, "rate", 0);
    l->capped = task(l, t, "capped", 1000000);
}

static uint64_t now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static double run(struct lib *l, int which, long calls) {
    fc_permit p;
    uint64_t t0 = now_ns();
    for (long i = 0; i < calls; i++) {
        fc_task *k = which == 2 ? l->capped : l->rate;
        if (l->acquire(k, 1, &p) != FC_OK) abort();
        if (which >= 1 && l->release(k, &p, FC_OUTCOME_SUCCESS) != FC_OK) abort();
    }
    return (double)(now_ns() - t0) / (double)calls;
}

static int cmp(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double median(double *v, int n) {
    qsort(v, (size_t)n, sizeof *v, cmp);
    return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

int main(int argc, char **argv) {
    if (argc < 3) {
        fprintf(stderr, "usage: c_ab A.so B.so [rounds] [calls]\n");
        return 2;
    }
    int rounds = argc > 3 ? atoi(argv[3]) : 41;
    long calls = argc > 4 ? atol(argv[4]) : 200000;
    if (rounds < 1 || rounds > MAX_ROUNDS) return 2;
    struct lib libs[2];
    load(&libs[0], argv[1], 0);
    load(&libs[1], argv[2], 1);
    static const char *names[] = {"fc_acquire", "fc_acquire + fc_release",
                                  "capped acquire + release"};
    static double t[3][2][MAX_ROUNDS];
    for (int c = 0; c < 3; c++)
        for (int l = 0; l < 2; l++) run(&libs[l], c, calls / 10);
    for (int r = 0; r < rounds; r++)
        for (int c = 0; c < 3; c++)
            for (int i = 0; i < 2; i++) {
                int l = (r & 1) ? 1 - i : i; /* alternate which goes first */
                t[c][l][r] = run(&libs[l], c, calls);
            }
    printf("%-26s %9s %9s %7s\n", "case (median ns per call)", "A", "B", "B / A");
    for (int c = 0; c < 3; c++) {
        double a = median(t[c][0], rounds), b = median(t[c][1], rounds);
        printf("%-26s %9.2f %9.2f %7.3f\n", names[c], a, b, b / a);
    }
    return 0;
}
