/*
 * Logging through the C face: fc_set_log_callback gets flowctrl's lines —
 * level, target and message valid during the call — from the calling
 * thread (a store that fails) and from the reaper thread (a dead process's
 * permits given back, the table file replaced); the callback may call back
 * into flowctrl, fc_set_log_callback too; lines above the level are not
 * delivered, and after fc_set_log_callback(..., NULL, NULL) nothing more
 * arrives.
 *
 *   log_test <scratch-dir>             the tests above
 *   log_test <scratch-dir> stderr      no callback: a store failure only
 *   log_test <scratch-dir> callback    a callback, then a store failure;
 *                                      prints "callback lines N"
 *
 * Both print "pid N" first. tests/c_abi.rs runs the last two with and
 * without FLOWCTRL_LOG and FLOWCTRL_LOG_FORMAT and reads stderr.
 * The store is a closed port (redis://127.0.0.1:1/0): every pull fails at
 * once.
 *
 * Must compile with: gcc -std=c99 -Wall -Wextra -Werror -pedantic -pthread
 */

#define _POSIX_C_SOURCE 200809L

#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "flowctrl.h"

#define CLOSED_STORE "redis://127.0.0.1:1/0"
#define MAX_LINES 64

#define TEST_LAST_ERROR fc_last_error
#include "test_util.h"

/* What the callback saw, under its own lock (it runs on several threads). */
struct line {
    unsigned level;
    char target[64];
    char message[512];
};

static struct {
    pthread_mutex_t lock;
    int count;
    int malformed;
    int reentered;
    int reset_inside;
    fc_status reset_status;
    struct line lines[MAX_LINES];
} g_seen = {PTHREAD_MUTEX_INITIALIZER, 0, 0, 0, 0, FC_OK, {{0, "", ""}}};

/* A task the callback acquires from: no flowctrl lock is held during it. */
static const fc_task *g_reenter;

static void on_log(void *user_data, const fc_log_params *p)
{
    int well_formed = user_data == &g_seen && p->size >= sizeof *p &&
                      strlen(p->target) == p->target_len &&
                      strlen(p->message) == p->message_len;
    int reentered = 0, reset = 0;
    fc_status reset_status = FC_OK;

    if (g_reenter != NULL) {
        fc_permit permit;
        if (fc_acquire(g_reenter, 1, &permit) == FC_OK &&
            fc_release(g_reenter, &permit, FC_OUTCOME_SUCCESS) == FC_OK)
            reentered = 1;
    }
    pthread_mutex_lock(&g_seen.lock);
    reset = g_seen.reset_inside;
    g_seen.reset_inside = 0;
    pthread_mutex_unlock(&g_seen.lock);
    if (reset) /* from within the callback: must not wait for itself */
        reset_status = fc_set_log_callback(FC_LOG_INFO, on_log, &g_seen);

    pthread_mutex_lock(&g_seen.lock);
    if (!well_formed)
        g_seen.malformed++;
    g_seen.reentered += reentered;
    if (reset)
        g_seen.reset_status = reset_status;
    if (g_seen.count < MAX_LINES) {
        struct line *l = &g_seen.lines[g_seen.count];
        l->level = p->level;
        snprintf(l->target, sizeof l->target, "%s", p->target);
        snprintf(l->message, sizeof l->message, "%s", p->message);
    }
    g_seen.count++;
    pthread_mutex_unlock(&g_seen.lock);
}

static int seen_count(void)
{
    int n;
    pthread_mutex_lock(&g_seen.lock);
    n = g_seen.count;
    pthread_mutex_unlock(&g_seen.lock);
    return n;
}

/* The first line from index `from` on of `level` and `target` whose
 * message has both needles, waiting up to `wait_ms` for it; -1 if none. */
static int find_line(int from, unsigned level, const char *target, const char *needle,
                     const char *needle2, int wait_ms)
{
    int waited, i, found = -1;
    for (waited = 0; found < 0; waited += 10) {
        pthread_mutex_lock(&g_seen.lock);
        for (i = from; i < g_seen.count && i < MAX_LINES && found < 0; i++) {
            const struct line *l = &g_seen.lines[i];
            if (l->level == level && strcmp(l->target, target) == 0 &&
                strstr(l->message, needle) != NULL && strstr(l->message, needle2) != NULL)
                found = i;
        }
        pthread_mutex_unlock(&g_seen.lock);
        if (found >= 0 || waited >= wait_ms)
            break;
        {
            struct timespec nap = {0, 10 * 1000000};
            nanosleep(&nap, NULL);
        }
    }
    return found;
}

static void sleep_ms(long ms)
{
    struct timespec nap;
    nap.tv_sec = ms / 1000;
    nap.tv_nsec = (ms % 1000) * 1000000;
    nanosleep(&nap, NULL);
}

static fc_table *open_table(const char *path)
{
    fc_table_options options;
    fc_table *table = NULL;
    fc_status st;
    fc_table_options_init(&options, sizeof options);
    options.store_url = CLOSED_STORE;
    st = fc_table_open(path, &options, &table);
    CHECK(st == FC_OK, "fc_table_open(%s) with the store at a closed port", path);
    return table;
}

static fc_task *register_task(const fc_table *table, const char *name, double global_rate,
                              uint32_t max_concurrency)
{
    fc_task_config config;
    fc_task *task = NULL;
    fc_task_config_init(&config, sizeof config);
    if (global_rate > 0)
        config.global_rate = global_rate;
    if (max_concurrency > 0)
        config.max_concurrency = max_concurrency;
    CHECK(fc_task_register(table, name, &config, &task) == FC_OK, "fc_task_register(%s)", name);
    return task;
}

/* One acquire: the store fails at once, the fallback admits. */
static void acquire_once(const fc_task *task, const char *name)
{
    fc_permit permit;
    fc_status st = fc_acquire(task, 1, &permit);
    CHECK(st == FC_OK, "fc_acquire(%s) admitted by the fallback while the store fails: %s",
          name, fc_status_str(st));
    CHECK(fc_release(task, &permit, FC_OUTCOME_SUCCESS) == FC_OK, "fc_release(%s)", name);
}

/* A child takes `n` permits of `task` and exits without releasing them. */
static void die_holding(const fc_task *task, uint32_t n)
{
    int wstatus;
    pid_t pid;
    fflush(stdout);
    pid = fork();
    if (pid < 0)
        CHECK(0, "fork: %s", strerror(errno));
    if (pid == 0) {
        fc_permit permit;
        _exit(fc_acquire(task, n, &permit) == FC_OK ? 0 : 1);
    }
    CHECK(waitpid(pid, &wstatus, 0) == pid && WIFEXITED(wstatus) && WEXITSTATUS(wstatus) == 0,
          "the child took %u permits and exited holding them", (unsigned)n);
}

/* Replaces the file at `path` by another one (the reaper notices in ~1 s). */
static void replace_file(const char *path)
{
    char fresh[600];
    FILE *f;
    snprintf(fresh, sizeof fresh, "%s.new", path);
    f = fopen(fresh, "w");
    CHECK(f != NULL && fputs("not a table\n", f) >= 0 && fclose(f) == 0, "write %s", fresh);
    CHECK(rename(fresh, path) == 0, "rename it over %s", path);
}

/* Modes stderr, callback and off (FC_LOG_OFF set, as an older program
 * silences the library): one store failure, for tests/c_abi.rs. */
static int store_failure_only(const char *dir, int with_callback)
{
    char path[512];
    fc_table *table;
    fc_task *task;
    alarm(60);
    printf("pid %ld\n", (long)getpid());
    if (with_callback == 1)
        CHECK(fc_set_log_callback(FC_LOG_INFO, on_log, &g_seen) == FC_OK, "callback set");
    if (with_callback == 2)
        CHECK(fc_set_log_callback(FC_LOG_OFF, NULL, NULL) == FC_OK, "logging off");
    snprintf(path, sizeof path, "%s/env", dir);
    table = open_table(path);
    task = register_task(table, "api", 100, 0);
    acquire_once(task, "api");
    if (with_callback == 1)
        printf("callback lines %d\n", seen_count());
    fc_task_free(task);
    fc_table_close(table);
    return 0;
}

int main(int argc, char **argv)
{
    char path[512], path2[512];
    fc_table *table, *table2;
    fc_task *api, *api2, *api3, *local;
    struct fc_task_stats stats;
    int before, at, waited;

    if (argc == 3 && strcmp(argv[2], "stderr") == 0)
        return store_failure_only(argv[1], 0);
    if (argc == 3 && strcmp(argv[2], "callback") == 0)
        return store_failure_only(argv[1], 1);
    if (argc == 3 && strcmp(argv[2], "off") == 0)
        return store_failure_only(argv[1], 2);
    if (argc != 2) {
        fprintf(stderr, "usage: log_test <scratch-dir> [stderr|callback]\n");
        return 2;
    }
    alarm(60);
    snprintf(path, sizeof path, "%s/logs", argv[1]);
    snprintf(path2, sizeof path2, "%s/logs2", argv[1]);

    CHECK(fc_set_log_callback(6, on_log, &g_seen) == FC_ERR_INVALID_ARGUMENT,
          "level 6 is refused");
    CHECK(strcmp(fc_log_level_str(FC_LOG_WARN), "WARN") == 0, "fc_log_level_str(FC_LOG_WARN)");
    CHECK(fc_set_log_callback(FC_LOG_INFO, on_log, &g_seen) == FC_OK, "callback set at INFO");

    /* A store failure, on this thread, inside fc_acquire. */
    table = open_table(path);
    api = register_task(table, "api", 100, 0);
    local = register_task(table, "local", 0, 8);
    g_reenter = local;
    pthread_mutex_lock(&g_seen.lock);
    g_seen.reset_inside = 1;
    pthread_mutex_unlock(&g_seen.lock);
    acquire_once(api, "api");
    at = find_line(0, FC_LOG_WARN, "flowctrl::store", "task \"api\"", "quota store failed", 0);
    CHECK(at >= 0, "a WARN line of flowctrl::store about task \"api\" arrived during fc_acquire");
    printf("      the line: %s\n", g_seen.lines[at].message);
    CHECK(g_seen.reentered > 0, "the callback called fc_acquire/fc_release of another task");
    CHECK(g_seen.reset_status == FC_OK, "fc_set_log_callback from within the callback");

    /* A dead process's permits, given back by the reaper thread. */
    before = seen_count();
    die_holding(local, 3);
    at = find_line(before, FC_LOG_INFO, "flowctrl::table", "task \"local\"",
                   "gave back 3 permit(s) held by dead process", 5000);
    CHECK(at >= 0, "an INFO line of flowctrl::table: the dead child's 3 permits given back");
    printf("      the line: %s\n", g_seen.lines[at].message);

    /* Above the level: not delivered. */
    CHECK(fc_set_log_callback(FC_LOG_ERROR, on_log, &g_seen) == FC_OK, "callback set at ERROR");
    before = seen_count();
    api2 = register_task(table, "api2", 100, 0);
    acquire_once(api2, "api2");
    CHECK(seen_count() == before, "the WARN of api2's store failure is not delivered at ERROR");

    /* The table file replaced, seen by the reaper thread (every ~1 s). */
    CHECK(fc_set_log_callback(FC_LOG_WARN, on_log, &g_seen) == FC_OK, "callback set at WARN");
    before = seen_count();
    replace_file(path);
    at = find_line(before, FC_LOG_WARN, "flowctrl::table", path, "deleted or replaced", 5000);
    CHECK(at >= 0, "a WARN line of flowctrl::table: the table file was replaced");

    /* Off: events happen, nothing arrives. */
    g_reenter = NULL;
    CHECK(fc_set_log_callback(FC_LOG_INFO, NULL, NULL) == FC_OK, "callback set to NULL");
    before = seen_count();
    table2 = open_table(path2);
    api3 = register_task(table2, "api3", 100, 0);
    acquire_once(api3, "api3");
    die_holding(local, 2);
    fc_task_stats_init(&stats, sizeof stats);
    for (waited = 0; waited < 3000; waited += 10) {
        CHECK(fc_task_stats(local, &stats) == FC_OK, "fc_task_stats(local)");
        if (stats.reclaimed == 5)
            break;
        sleep_ms(10);
    }
    CHECK(stats.reclaimed == 5, "the second child's 2 permits were given back too (5 in all)");
    replace_file(path2);
    sleep_ms(2500);
    CHECK(seen_count() == before, "nothing arrived after NULL (%d lines, want %d)", seen_count(),
          before);
    CHECK(g_seen.malformed == 0, "every line had its size, NUL-terminated strings and lengths");

    fc_task_free(api);
    fc_task_free(api2);
    fc_task_free(api3);
    fc_task_free(local);
    fc_table_close(table);
    fc_table_close(table2);
    printf("log_test: all %u checks passed\n", g_checks);
    return 0;
}
