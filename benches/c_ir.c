/* Instructions per call inside fc_acquire / fc_release, counted by
 * callgrind (exact, and blind to the neighbours' load): the library is
 * loaded by path (argv[1]) so that two builds can be compared; argv[2] is
 * the case (0: fc_acquire on a rate-only task, 1: acquire + release,
 * 2: acquire + release with a cap, 3: the same on a table whose lanes come
 * from a pool of 64 sets). Run by scripts/bench.sh and
 * scripts/bench-compare.sh as
 *
 *   valgrind --tool=callgrind --toggle-collect='fc_acquire*' \
 *       --toggle-collect='fc_release*' c_ir libflowctrl.so <case>
 *
 * and divided by its 50,000 iterations.
 */
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "flowctrl.h"

#define CALLS 50000

int main(int argc, char **argv) {
    if (argc < 3) {
        fprintf(stderr, "usage: c_ir libflowctrl.so <case 0..3>\n");
        return 2;
    }
    void *h = dlopen(argv[1], RTLD_NOW);
    if (!h) {
        fprintf(stderr, "%s\n", dlerror());
        return 1;
    }
    fc_status (*options_init)(fc_table_options *, size_t) = dlsym(h, "fc_table_options_init");
    fc_status (*open)(const char *, const fc_table_options *, fc_table **) =
        dlsym(h, "fc_table_open");
    fc_status (*config_init)(fc_task_config *, size_t) = dlsym(h, "fc_task_config_init");
    fc_status (*reg)(const fc_table *, const char *, const fc_task_config *, fc_task **) =
        dlsym(h, "fc_task_register");
    fc_status (*acquire)(const fc_task *, uint32_t, fc_permit *) = dlsym(h, "fc_acquire");
    fc_status (*release)(const fc_task *, fc_permit *, fc_outcome) = dlsym(h, "fc_release");
    int which = atoi(argv[2]);
    char path[64];
    snprintf(path, sizeof path, "/tmp/flowctrl-ir-%d", (int)getpid());
    unlink(path);
    fc_table_options o;
    options_init(&o, sizeof o);
    if (which == 3) o.lanes = 64;
    fc_table *t;
    if (open(path, &o, &t) != FC_OK) return 1;
    unlink(path); /* the mapping stays */
    fc_task_config c;
    config_init(&c, sizeof c);
    c.local_rate = 1e9;
    c.burst = 1000000;
    c.max_concurrency = which >= 2 ? 1000000 : 0;
    fc_task *k;
    if (reg(t, "x", &c, &k) != FC_OK) return 1;
    fc_permit p;
    for (long i = 0; i < CALLS; i++) {
        if (acquire(k, 1, &p) != FC_OK) abort();
        if (which >= 1 && release(k, &p, FC_OUTCOME_SUCCESS) != FC_OK) abort();
    }
    return 0;
}
