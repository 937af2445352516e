/* A process of release 0.3.0 (its header, and linked against its library by
 * tests/c_abi.rs) on a table another build shares: it opens the table at
 * argv[1] (made there if missing), takes every permit the task "shared"
 * (a cap of argv[2]) lets it have, releases them, and prints how many it
 * got and the task's in-flight count while it held them. */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "flowctrl-0.3.0.h"

#define MAX_HELD 64

static int fail(const char *what, fc_status status)
{
    fprintf(stderr, "%s: %s (%s)\n", what, fc_status_str(status), fc_last_error());
    return 1;
}

int main(int argc, char **argv)
{
    struct fc_table_options options;
    fc_task_config config;
    struct fc_task_stats stats;
    fc_permit held[MAX_HELD];
    fc_table *table = NULL;
    fc_task *task = NULL;
    fc_status s;
    uint32_t got = 0;

    if (argc != 3) {
        fprintf(stderr, "usage: %s <table> <cap>\n", argv[0]);
        return 2;
    }
    if ((s = fc_table_options_init(&options, sizeof options)) != FC_OK)
        return fail("fc_table_options_init", s);
    options.capacity = 4;
    options.max_processes = 4;
    options.mode = 0600;
    options.owner_uid = (uint32_t)geteuid();
    if ((s = fc_table_open(argv[1], &options, &table)) != FC_OK)
        return fail("fc_table_open", s);
    if ((s = fc_task_config_init(&config, sizeof config)) != FC_OK)
        return fail("fc_task_config_init", s);
    config.max_concurrency = (uint32_t)atoi(argv[2]);
    if ((s = fc_task_register(table, "shared", &config, &task)) != FC_OK)
        return fail("fc_task_register", s);
    while (got < MAX_HELD && (s = fc_acquire(task, 1, &held[got])) == FC_OK)
        got++;
    if (s != FC_LIMITED_CONCURRENCY)
        return fail("fc_acquire", s);
    if ((s = fc_task_stats_init(&stats, sizeof stats)) != FC_OK ||
        (s = fc_task_stats(task, &stats)) != FC_OK)
        return fail("fc_task_stats", s);
    for (uint32_t i = 0; i < got; i++)
        if ((s = fc_release(task, &held[i], FC_OUTCOME_SUCCESS)) != FC_OK)
            return fail("fc_release", s);
    printf("got %" PRIu32 " in_flight %" PRIu64 "\n", got, stats.in_flight);
    fc_task_free(task);
    fc_table_close(table);
    return 0;
}
