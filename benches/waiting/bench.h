/* What the benchmark programs share: the clock (CLOCK_MONOTONIC is the
 * host's, so the processes agree on it) and opening the task. */
#ifndef WAITBENCH_BENCH_H
#define WAITBENCH_BENCH_H

#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "flowctrl.h"

static inline int64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

static inline void sleep_until(int64_t t)
{
    struct timespec ts = {(time_t)(t / 1000000000), (long)(t % 1000000000)};
    while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, NULL) == EINTR) {
    }
}

static inline void die(const char *what)
{
    fprintf(stderr, "%s: %s\n", what, fc_last_error());
    exit(1);
}

/* Attaches to the table at `path` and registers `name` with `config`
 * (the task keeps the attachment; the table handle is closed). */
static inline fc_task *open_task_with(const char *path, const char *name,
                                      const fc_task_config *config)
{
    fc_table *table;
    fc_task *task;
    if (fc_table_open(path, NULL, &table) != FC_OK)
        die("fc_table_open");
    if (fc_task_register(table, name, config, &task) != FC_OK)
        die("fc_task_register");
    fc_table_close(table);
    return task;
}

#endif
