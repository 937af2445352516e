/*
 * Adaptive limits and waiting through the C face: every algorithm set by
 * its spec string, the limit and its statistics, fc_acquire_wait across
 * processes, fc_release_rtt, and bad input.
 *
 *   adaptive_test <scratch-dir>
 *
 * Run by tests/c_abi.rs against libflowctrl.so and libflowctrl.a.
 *
 * Must compile with: gcc -std=c99 -Wall -Wextra -Werror -pedantic -pthread
 */

#define _XOPEN_SOURCE 700
#define _DEFAULT_SOURCE

#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "flowctrl.h"

#define TEST_LAST_ERROR fc_last_error
#include "test_util.h"

static uint64_t now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

static fc_task *task_with(fc_table *table, const char *name, const char *limiter, uint32_t min,
                          uint32_t max, uint32_t initial, fc_status *status)
{
    fc_task_config config;
    fc_task *task = NULL;
    fc_task_config_init(&config, sizeof config);
    strncpy(config.limiter, limiter, sizeof config.limiter - 1);
    config.min_limit = min;
    config.max_limit = max;
    config.initial_limit = initial;
    *status = fc_task_register(table, name, &config, &task);
    return task;
}

int main(int argc, char **argv)
{
    char path[512];
    fc_table_options options;
    fc_table *table = NULL;
    fc_status st;
    uint32_t limit = 0;
    const char *algorithms[] = {"fixed", "aimd", "vegas", "gradient", "gradient2", "auto"};
    size_t i;

    if (argc != 2) {
        fprintf(stderr, "usage: adaptive_test <scratch-dir>\n");
        return 2;
    }
    snprintf(path, sizeof path, "%s/adaptive", argv[1]);
    fc_table_options_init(&options, sizeof options);
    CHECK(fc_table_open(path, &options, &table) == FC_OK, "open %s", path);

    /* Every algorithm, by name, with its bounds. */
    for (i = 0; i < sizeof algorithms / sizeof *algorithms; i++) {
        char name[32];
        fc_task *task;
        fc_task_config got;
        fc_permit permit;
        struct fc_task_stats stats;
        int fixed = i == 0;
        snprintf(name, sizeof name, "algo-%s", algorithms[i]);
        task = task_with(table, name, algorithms[i], fixed ? FC_UNSET : 2,
                         fixed ? FC_UNSET : 10, fixed ? FC_UNSET : 3, &st);
        CHECK(st == FC_OK, "register %s", algorithms[i]);
        CHECK(fc_task_limit(task, &limit) == FC_OK && limit == (fixed ? 0u : 3u),
              "%s: limit %u", algorithms[i], limit);
        fc_task_config_init(&got, sizeof got);
        CHECK(fc_task_config_get(task, &got) == FC_OK &&
                  strncmp(got.limiter, algorithms[i], strlen(algorithms[i])) == 0,
              "%s: config_get says \"%s\" min %u max %u initial %u", algorithms[i],
              got.limiter, got.min_limit, got.max_limit, got.initial_limit);
        /* Registering with what config_get wrote matches. */
        {
            fc_task *again = NULL;
            CHECK(fc_task_register(table, name, &got, &again) == FC_OK,
                  "%s: the configuration read back registers", algorithms[i]);
            fc_task_free(again);
        }
        CHECK(fc_acquire(task, 1, &permit) == FC_OK, "%s: acquire", algorithms[i]);
        CHECK(fc_release_rtt(task, &permit, FC_OUTCOME_SUCCESS, 5000000) == FC_OK,
              "%s: release with a measured RTT", algorithms[i]);
        CHECK(fc_release(task, &permit, FC_OUTCOME_SUCCESS) == FC_ERR_INVALID_ARGUMENT,
              "%s: a second release is refused", algorithms[i]);
        fc_task_stats_init(&stats, sizeof stats);
        CHECK(fc_task_stats(task, &stats) == FC_OK && stats.rtt_sum_ns == 5000000 &&
                  stats.released_success == 1 && stats.in_flight == 0 &&
                  stats.limit == (fixed ? 0u : 3u),
              "%s: stats rtt %" PRIu64 " limit %" PRIu64, algorithms[i], stats.rtt_sum_ns,
              stats.limit);
        fc_task_free(task);
    }

    /* Bad input. */
    {
        const char *bad[] = {"bbr", "vegas alpha=nan", "auto probe_interval=-1",
                             "gradient2 window=0", "aimd speed=2", "vegas alpha",
                             "auto tolerance=1", "aimd tolerance=1.5"};
        for (i = 0; i < sizeof bad / sizeof *bad; i++) {
            CHECK(task_with(table, "bad", bad[i], FC_UNSET, FC_UNSET, FC_UNSET, &st) == NULL &&
                      st == FC_ERR_INVALID_ARGUMENT,
                  "limiter \"%s\" refused: %s", bad[i], fc_last_error());
        }
        CHECK(task_with(table, "bad", "auto", 10, 5, FC_UNSET, &st) == NULL &&
                  st == FC_ERR_INVALID_ARGUMENT,
              "min above max refused: %s", fc_last_error());
        fc_task *a = task_with(table, "algo-auto", "vegas", FC_UNSET, FC_UNSET, FC_UNSET, &st);
        CHECK(a == NULL && st == FC_ERR_CONFIG_MISMATCH, "another limiter is a mismatch: %s",
              fc_last_error());
    }

    /* Waiting: a limit of 1, a child holds it for 200 ms; we wait for it. */
    {
        fc_task *task = task_with(table, "wait", "auto", 1, 1, 1, &st);
        fc_permit mine;
        pid_t child;
        int pipefd[2], status = 0;
        uint64_t began;
        char byte;
        CHECK(st == FC_OK, "register wait");
        CHECK(pipe(pipefd) == 0, "pipe");
        child = fork();
        if (child == 0) {
            fc_permit held;
            if (fc_acquire(task, 1, &held) != FC_OK)
                _exit(3);
            if (write(pipefd[1], "x", 1) != 1)
                _exit(4);
            usleep(200000);
            _exit(fc_release(task, &held, FC_OUTCOME_SUCCESS) == FC_OK ? 0 : 5);
        }
        CHECK(read(pipefd[0], &byte, 1) == 1, "the child holds the permit");
        CHECK(fc_acquire_wait(task, 1, 0, &mine) == FC_LIMITED_CONCURRENCY,
              "timeout 0 does not wait");
        began = now_ms();
        CHECK(fc_acquire_wait(task, 1, 50, &mine) == FC_LIMITED_CONCURRENCY &&
                  now_ms() - began >= 50,
              "a 50 ms wait times out after %" PRIu64 " ms", now_ms() - began);
        CHECK(fc_acquire_wait(task, 1, 5000, &mine) == FC_OK, "a long wait is admitted");
        CHECK(now_ms() - began < 1000, "woken by the release, after %" PRIu64 " ms",
              now_ms() - began);
        CHECK(waitpid(child, &status, 0) == child && WIFEXITED(status) &&
                  WEXITSTATUS(status) == 0,
              "the child released");
        CHECK(fc_release(task, &mine, FC_OUTCOME_DROPPED) == FC_OK, "release");
        CHECK(fc_acquire_wait(NULL, 1, 10, &mine) == FC_ERR_INVALID_ARGUMENT, "NULL task");
        CHECK(fc_acquire_wait(task, 1, 10, NULL) == FC_ERR_INVALID_ARGUMENT, "NULL permit");
        CHECK(fc_task_limit(task, NULL) == FC_ERR_INVALID_ARGUMENT, "NULL limit");
        fc_task_free(task);
    }

    /* The wait policy: registered, read back, refused when out of range. */
    {
        fc_task_config config, got;
        fc_task *task = NULL;
        struct fc_task_stats stats;
        fc_task_config_init(&config, sizeof config);
        CHECK(config.wait_order == FC_UNSET && config.barging == FC_UNSET,
              "the wait fields start unset");
        config.max_concurrency = 2;
        config.wait_order = FC_WAIT_LIFO;
        config.barging = 1;
        CHECK(fc_task_register(table, "ordered", &config, &task) == FC_OK, "register: %s",
              fc_last_error());
        fc_task_config_init(&got, sizeof got);
        CHECK(fc_task_config_get(task, &got) == FC_OK && got.wait_order == FC_WAIT_LIFO &&
                  got.barging == 1,
              "read back: order %u, barging %u", got.wait_order, got.barging);
        fc_task_stats_init(&stats, sizeof stats);
        CHECK(fc_task_stats(task, &stats) == FC_OK && stats.waiting == 0, "nobody waits");
        fc_task_free(task);
        for (uint32_t bad = 2; bad < 4; bad++) {
            fc_task *b = NULL;
            fc_task_config_init(&config, sizeof config);
            if (bad == 2)
                config.wait_order = 7;
            else
                config.barging = 2;
            CHECK(fc_task_register(table, "bad-order", &config, &b) == FC_ERR_INVALID_ARGUMENT &&
                      b == NULL && strstr(fc_last_error(), bad == 2 ? "wait_order" : "barging"),
                  "refused: %s", fc_last_error());
        }
    }

    fc_table_close(table);
    unlink(path);
    printf("%u checks passed\n", g_checks);
    return 0;
}
