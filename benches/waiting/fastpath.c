/*
 * The uncontended fast path (the "unchanged" budget): one thread,
 * fc_acquire + fc_release in a loop on a task that never limits, timed.
 * Built against the old and the new library by scripts/bench-waiting.sh,
 * which runs the two alternately and takes medians.
 *
 *   fastpath TABLE ITERATIONS
 *
 * Prints one line per task: "<task> <ns per acquire+release> <limited>".
 *   cap:  max_concurrency 1000 (never reached: one permit at a time)
 *   rate: local_rate 1e8/s, burst 1000 (far above one thread's pace)
 *
 * Compiled with -std=c99 -Wall -Wextra -Werror.
 */

#define _XOPEN_SOURCE 700

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "bench.h"

/* ns per acquire+release over `iterations`, after a warm-up. */
static void bench(fc_task *task, const char *name, long iterations)
{
    fc_permit permit;
    long limited = 0;
    for (long i = 0; i < iterations / 10; i++) {
        if (fc_acquire(task, 1, &permit) == FC_OK)
            fc_release(task, &permit, FC_OUTCOME_SUCCESS);
    }
    int64_t t0 = now_ns();
    for (long i = 0; i < iterations; i++) {
        fc_status st = fc_acquire(task, 1, &permit);
        if (st == FC_OK) {
            if (fc_release(task, &permit, FC_OUTCOME_SUCCESS) != FC_OK)
                die("fc_release");
        } else if (st < 100) {
            limited++;
        } else {
            die("fc_acquire");
        }
    }
    int64_t t1 = now_ns();
    printf("%s %.2f %ld\n", name, (double)(t1 - t0) / (double)iterations, limited);
}

int main(int argc, char **argv)
{
    fc_table *table;
    fc_task *cap, *rate;
    fc_task_config config;
    if (argc != 3) {
        fprintf(stderr, "usage: fastpath TABLE ITERATIONS\n");
        return 2;
    }
    long iterations = atol(argv[2]);
    if (fc_table_open(argv[1], NULL, &table) != FC_OK)
        die("fc_table_open");
    fc_task_config_init(&config, sizeof config);
    config.max_concurrency = 1000;
    if (fc_task_register(table, "fastpath-cap", &config, &cap) != FC_OK)
        die("fc_task_register cap");
    fc_task_config_init(&config, sizeof config);
    config.local_rate = 1e8;
    config.burst = 1000;
    if (fc_task_register(table, "fastpath-rate", &config, &rate) != FC_OK)
        die("fc_task_register rate");
    bench(cap, "cap", iterations);
    bench(rate, "rate", iterations);
    fc_task_free(cap);
    fc_task_free(rate);
    fc_table_close(table);
    return 0;
}
