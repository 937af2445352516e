/* A service that names no limits in its code: it opens the table and
 * registers its task with NULLs, and gets everything from the config file
 * FLOWCTRL_CONFIG names. Then it waits for an edit of the file to reach it.
 * Run by tests/c_abi.rs, which edits the file after "ready". */
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include <flowctrl.h>

#define FAIL(what)                                                        \
    do {                                                                  \
        fprintf(stderr, "FAIL %s (%s:%d): %s\n", what, __FILE__, __LINE__, \
                fc_last_error());                                         \
        return 1;                                                         \
    } while (0)

static double now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

static int settings(fc_task *task, fc_task_config *config) {
    fc_task_config_init(config, sizeof *config);
    return fc_task_config_get(task, config) == FC_OK;
}

int main(void) {
    fc_table *table = NULL;
    fc_task *task = NULL;
    fc_task_config config;
    fc_permit permits[5];
    int i;
    double edited;

    if (fc_table_open(NULL, NULL, &table) != FC_OK) FAIL("fc_table_open(NULL, NULL)");
    if (fc_task_register(table, "api", NULL, &task) != FC_OK) FAIL("fc_task_register(NULL)");
    if (!settings(task, &config)) FAIL("fc_task_config_get");
    if (config.local_rate != 100000.0 || config.burst != 100 || config.max_concurrency != 4)
        FAIL("the file's limits");
    for (i = 0; i < 4; i++)
        if (fc_acquire(task, 1, &permits[i]) != FC_OK) FAIL("an admission under the cap");
    if (fc_acquire(task, 1, &permits[4]) != FC_LIMITED_CONCURRENCY) FAIL("the file's cap");
    for (i = 0; i < 4; i++)
        if (fc_release(task, &permits[i], FC_OUTCOME_SUCCESS) != FC_OK) FAIL("fc_release");
    printf("ready\n");
    fflush(stdout);

    /* The test edits the file now: max_concurrency 8. */
    edited = now_ms();
    while (now_ms() - edited < 5000) {
        if (!settings(task, &config)) FAIL("fc_task_config_get");
        if (config.max_concurrency == 8) {
            printf("reloaded %.0f\n", now_ms() - edited);
            for (i = 0; i < 5; i++)
                if (fc_acquire(task, 1, &permits[i]) != FC_OK) FAIL("the new cap");
            for (i = 0; i < 5; i++) fc_release(task, &permits[i], FC_OUTCOME_SUCCESS);
            fc_task_free(task);
            fc_table_close(table);
            return 0;
        }
        struct timespec pause = {0, 5000000};
        nanosleep(&pause, NULL);
    }
    FAIL("the edit did not arrive within 5 s");
}
