/* A worker process of the global-quota tests, through the C face only.
 *
 *   quota_worker TABLE STORE_URL|- START_WALL_US SECONDS FALLBACK_RATE TIMEOUT_MS
 *
 * Registers task "api" with global_rate 2000 (and FALLBACK_RATE when > 0),
 * waits until START_WALL_US, then asks for permits for SECONDS with
 * saturating demand. Prints one line "slice <id> <admitted>" per slice (by
 * the store's clock as this host measured it), then
 * "done <errors> <slowest acquire in µs> <admitted>". */
#define _POSIX_C_SOURCE 200809L
#include <flowctrl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static long long wall_us(void) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (long long)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

#define MAX_SLICES 64

int main(int argc, char **argv) {
    fc_table_options options;
    fc_task_config config;
    struct fc_task_stats stats;
    fc_table *table = NULL;
    fc_task *task = NULL;
    long long start, end, first_slice = -1, offset = 0, slowest = 0, refreshed = 0;
    long long counts[MAX_SLICES] = {0};
    long errors = 0, admitted = 0;
    int i;

    if (argc != 7) {
        fprintf(stderr, "usage: %s TABLE STORE_URL|- START_WALL_US SECONDS FALLBACK_RATE TIMEOUT_MS\n", argv[0]);
        return 2;
    }
    fc_table_options_init(&options, sizeof options);
    if (strcmp(argv[2], "-") != 0) options.store_url = argv[2];
    options.store_timeout_ms = (uint32_t)atoi(argv[6]);
    options.probe_interval_ms = 1000;
    if (fc_table_open(argv[1], &options, &table) != FC_OK) {
        fprintf(stderr, "open: %s\n", fc_last_error());
        return 1;
    }
    fc_task_config_init(&config, sizeof config);
    config.global_rate = 2000;
    if (atof(argv[5]) > 0) config.fallback_rate = atof(argv[5]);
    if (fc_task_register(table, "api", &config, &task) != FC_OK) {
        fprintf(stderr, "register: %s\n", fc_last_error());
        return 1;
    }
    fc_task_stats_init(&stats, sizeof stats);
    start = atoll(argv[3]);
    end = start + (long long)(atof(argv[4]) * 1e6);
    while (wall_us() < start) {
        struct timespec nap = {0, 200000};
        nanosleep(&nap, NULL);
    }
    while (wall_us() < end) {
        fc_permit permit;
        long long began = wall_us(), took;
        fc_status status = fc_acquire(task, 1, &permit);
        took = wall_us() - began;
        if (took > slowest) slowest = took;
        if (status == FC_OK) {
            long long now = wall_us(), slice;
            if (now - refreshed > 2000) {
                if (fc_task_stats(task, &stats) == FC_OK) offset = stats.clock_offset_us;
                refreshed = now;
            }
            slice = (now + offset) / 1000000;
            if (first_slice < 0) first_slice = slice;
            if (slice - first_slice < MAX_SLICES) counts[slice - first_slice]++;
            admitted++;
            if (fc_release(task, &permit, FC_OUTCOME_SUCCESS) != FC_OK) errors++;
        } else if (status < 100) {
            struct timespec nap = {0, 200000};
            nanosleep(&nap, NULL);
        } else {
            errors++;
            fprintf(stderr, "acquire: %s\n", fc_last_error());
        }
    }
    for (i = 0; i < MAX_SLICES; i++)
        if (counts[i]) printf("slice %lld %lld\n", first_slice + i, counts[i]);
    printf("done %ld %lld %ld\n", errors, slowest, admitted);
    fc_task_free(task);
    fc_table_close(table);
    return 0;
}
