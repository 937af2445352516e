/* A flowctrl demo worker in C: offers requests to one task as fast as its
 * pacing allows and serves those admitted. Usage:
 *   worker TABLE TASK SECONDS RATE BURST ATTEMPTS_PER_SECOND */
#define _POSIX_C_SOURCE 200809L
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "flowctrl.h"

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

int main(int argc, char **argv) {
    if (argc != 7) {
        fprintf(stderr, "usage: %s TABLE TASK SECONDS RATE BURST ATTEMPTS_PER_SECOND\n", argv[0]);
        return 2;
    }
    fc_table *table = NULL;
    fc_task *task = NULL;
    fc_task_config config;
    fc_task_config_init(&config, sizeof config);
    config.local_rate = atof(argv[4]);
    config.burst = (uint32_t)atoi(argv[5]);
    if (fc_table_open(argv[1], NULL, &table) != FC_OK ||
        fc_task_register(table, argv[2], &config, &task) != FC_OK) {
        fprintf(stderr, "worker.c: %s\n", fc_last_error());
        return 1;
    }
    double end = now_s() + atof(argv[3]);
    struct timespec pause = {0, (long)(1e9 / atof(argv[6]))};
    while (now_s() < end) {
        fc_permit permit;
        fc_status status = fc_acquire(task, 1, &permit);
        if (status == FC_OK) {
            fc_release(task, &permit, FC_OUTCOME_SUCCESS);
        } else if (status >= 100) {
            fprintf(stderr, "worker.c: %s: %s\n", fc_status_str(status), fc_last_error());
            return 1;
        }
        nanosleep(&pause, NULL);
    }
    fc_task_free(task);
    fc_table_close(table);
    return 0;
}
