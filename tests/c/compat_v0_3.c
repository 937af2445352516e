/*
 * A program built against the header of flowctrl 0.3.0 (tests/c/flowctrl-0.3.0.h,
 * a verbatim copy of include/flowctrl.h as released, frozen), run against
 * the current library: every struct of that header and every function it
 * declares must keep working as 0.3.0 documented them. The sized structs
 * are followed by a canary, checked after each call that writes them: the
 * library must touch no byte past the structs this program was built with.
 *
 *   compat_v0_3 <scratch-dir>
 *
 * Run by tests/c_abi.rs against libflowctrl.so and libflowctrl.a.
 *
 * Must compile with: gcc -std=c99 -Wall -Wextra -Werror -pedantic -pthread
 */

#define _XOPEN_SOURCE 700

#include <inttypes.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "flowctrl-0.3.0.h"

enum { CANARY = 0xa7, CANARY_LEN = 64 };

#include "test_util.h"

/* The call answers `want`; an error comes with a reason. */
#define EXPECT(call, want)                                                     \
    do {                                                                       \
        fc_status got_ = (call);                                               \
        CHECK(got_ == (want), "%s -> %s%s%s", #call, fc_status_str(got_),      \
              got_ >= FC_ERR_INVALID_ARGUMENT ? ": " : "",                     \
              got_ >= FC_ERR_INVALID_ARGUMENT ? fc_last_error() : "");         \
    } while (0)

/* The call fails with `want` and says why. */
#define EXPECT_ERROR(call, want)                                               \
    do {                                                                       \
        EXPECT(call, want);                                                    \
        CHECK(fc_last_error()[0] != '\0', "  ... with a reason: %s",          \
              fc_last_error());                                                \
    } while (0)

static int intact(const unsigned char *canary)
{
    int i;
    for (i = 0; i < CANARY_LEN; i++)
        if (canary[i] != CANARY)
            return 0;
    return 1;
}

static uint64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static void sleep_ms(unsigned ms)
{
    struct timespec ts;
    ts.tv_sec = ms / 1000;
    ts.tv_nsec = (long)(ms % 1000) * 1000000L;
    nanosleep(&ts, NULL);
}

/* Each sized struct with a canary behind it. */
static struct {
    fc_table_options v;
    unsigned char canary[CANARY_LEN];
} g_options;
static struct {
    fc_task_config v;
    unsigned char canary[CANARY_LEN];
} g_config;
static struct {
    struct fc_task_stats v;
    unsigned char canary[CANARY_LEN];
} g_stats;
static struct {
    fc_balancer_config v;
    unsigned char canary[CANARY_LEN];
} g_lb_config;
static struct {
    fc_pick_options v;
    unsigned char canary[CANARY_LEN];
} g_pick_options;
static struct {
    fc_backend_stats v[4];
    unsigned char canary[CANARY_LEN];
} g_backends;
static struct {
    struct fc_pick v;
    unsigned char canary[CANARY_LEN];
} g_pick;
static struct {
    fc_permit v;
    unsigned char canary[CANARY_LEN];
} g_permit;

static void canaries_set(void)
{
    memset(&g_options, CANARY, sizeof g_options);
    memset(&g_config, CANARY, sizeof g_config);
    memset(&g_stats, CANARY, sizeof g_stats);
    memset(&g_lb_config, CANARY, sizeof g_lb_config);
    memset(&g_pick_options, CANARY, sizeof g_pick_options);
    memset(&g_backends, CANARY, sizeof g_backends);
    memset(&g_pick, CANARY, sizeof g_pick);
    memset(&g_permit, CANARY, sizeof g_permit);
}

#define CANARIES_INTACT(when)                                                  \
    CHECK(intact(g_options.canary) && intact(g_config.canary) &&               \
              intact(g_stats.canary) && intact(g_lb_config.canary) &&          \
              intact(g_pick_options.canary) && intact(g_backends.canary) &&    \
              intact(g_pick.canary) && intact(g_permit.canary),                \
          "no byte written past the 0.3.0 structs %s", when)

static void table_options(void)
{
    fc_table_options *o = &g_options.v;
    EXPECT(fc_table_options_init(o, sizeof *o), FC_OK);
    CHECK(o->size == sizeof *o && o->capacity == 256 && o->max_processes == 64 &&
              o->mode == 0600 && o->owner_uid == FC_UNSET && o->shared == 0 &&
              o->store_url == NULL && o->key_prefix == NULL && o->store_timeout_ms == 0 &&
              o->store_connect_timeout_ms == 0 && o->probe_interval_ms == 0 &&
              o->reserved == 0 && o->balancers == 16 && o->backends_per_balancer == 32,
          "fc_table_options_init: size %zu and the 0.3.0 defaults", sizeof *o);
    CANARIES_INTACT("after fc_table_options_init");
    o->capacity = 8;
    o->max_processes = 8;
    o->mode = 0600;
    o->owner_uid = (uint32_t)geteuid();
    o->balancers = 2;
    o->backends_per_balancer = 4;
}

/* Every field of a fresh config unset. */
static void config_init(void)
{
    fc_task_config *c = &g_config.v;
    EXPECT(fc_task_config_init(c, sizeof *c), FC_OK);
    CHECK(c->size == sizeof *c && c->burst == FC_UNSET && c->local_rate == FC_RATE_UNSET &&
              c->max_concurrency == FC_UNSET && c->reserved == 0 &&
              c->global_rate == FC_RATE_UNSET && c->slice_ms == FC_UNSET &&
              c->chunk == FC_UNSET && c->fallback_rate == FC_RATE_UNSET &&
              c->limiter[0] == '\0' && c->min_limit == FC_UNSET &&
              c->max_limit == FC_UNSET && c->initial_limit == FC_UNSET && c->reserved2 == 0,
          "fc_task_config_init: size %zu, every field unset", sizeof *c);
    CANARIES_INTACT("after fc_task_config_init");
}

static void stats_of(const fc_task *task)
{
    EXPECT(fc_task_stats_init(&g_stats.v, sizeof g_stats.v), FC_OK);
    CHECK(g_stats.v.size == sizeof g_stats.v, "fc_task_stats_init: size %zu",
          sizeof g_stats.v);
    EXPECT(fc_task_stats(task, &g_stats.v), FC_OK);
    CANARIES_INTACT("after fc_task_stats");
}

static void no_drift(const fc_task *task, const char *name)
{
    int64_t drift = -1;
    EXPECT(fc_task_check(task, &drift), FC_OK);
    CHECK(drift == 0, "fc_task_check(%s): drift %" PRId64, name, drift);
}

/* A local rate, a burst and a cap; update; a mismatch. */
static void local_task(const fc_table *table, fc_task **out)
{
    fc_task *task = NULL, *other = NULL;
    fc_permit held[2];
    uint32_t limit = 0;

    printf("\n# a local rate, a burst and a cap\n");
    config_init();
    g_config.v.local_rate = 100.0;
    g_config.v.burst = 3;
    g_config.v.max_concurrency = 2;
    EXPECT(fc_task_register(table, "local", &g_config.v, &task), FC_OK);
    EXPECT(fc_acquire(task, 1, &held[0]), FC_OK);
    EXPECT(fc_acquire(task, 1, &held[1]), FC_OK);
    EXPECT(fc_acquire(task, 1, &g_permit.v), FC_LIMITED_CONCURRENCY);
    EXPECT_ERROR(fc_acquire(task, 4, &g_permit.v), FC_ERR_INVALID_ARGUMENT); /* > burst */
    EXPECT_ERROR(fc_acquire(task, 0, &g_permit.v), FC_ERR_INVALID_ARGUMENT);
    EXPECT(fc_task_limit(task, &limit), FC_OK);
    CHECK(limit == 2, "fc_task_limit: the cap, %" PRIu32, limit);
    stats_of(task);
    CHECK(g_stats.v.admitted == 2 && g_stats.v.limited_concurrency == 1 &&
              g_stats.v.in_flight == 2 && g_stats.v.held == 2 &&
              g_stats.v.quota_state == FC_QUOTA_NONE && g_stats.v.limit == 2,
          "fc_task_stats: admitted %" PRIu64 ", limited_concurrency %" PRIu64
          ", in_flight %" PRIu64 ", held %" PRId64,
          g_stats.v.admitted, g_stats.v.limited_concurrency, g_stats.v.in_flight,
          g_stats.v.held);
    no_drift(task, "local");
    EXPECT(fc_release(task, &held[0], FC_OUTCOME_SUCCESS), FC_OK);
    EXPECT_ERROR(fc_release(task, &held[0], FC_OUTCOME_SUCCESS), FC_ERR_INVALID_ARGUMENT);
    EXPECT_ERROR(fc_release(task, &held[1], 7), FC_ERR_INVALID_ARGUMENT);
    EXPECT(fc_release(task, &held[1], FC_OUTCOME_IGNORED), FC_OK);

    /* Registering again: the same set fields are fine, others refused. */
    config_init();
    g_config.v.max_concurrency = 2;
    EXPECT(fc_task_register(table, "local", &g_config.v, &other), FC_OK);
    fc_task_free(other);
    other = NULL;
    EXPECT(fc_task_register(table, "local", NULL, &other), FC_OK);
    fc_task_free(other);
    other = NULL;
    g_config.v.max_concurrency = 9;
    EXPECT_ERROR(fc_task_register(table, "local", &g_config.v, &other),
                 FC_ERR_CONFIG_MISMATCH);
    CHECK(other == NULL, "no handle on a mismatch");

    /* An update of one field keeps the others. */
    config_init();
    g_config.v.max_concurrency = 4;
    EXPECT(fc_task_update(task, &g_config.v), FC_OK);
    config_init();
    EXPECT(fc_task_config_get(task, &g_config.v), FC_OK);
    CHECK(g_config.v.size == sizeof g_config.v && g_config.v.local_rate == 100.0 &&
              g_config.v.burst == 3 && g_config.v.max_concurrency == 4 &&
              g_config.v.global_rate == 0 && g_config.v.slice_ms == 1000 &&
              g_config.v.chunk == 0 && g_config.v.fallback_rate == 0 &&
              strcmp(g_config.v.limiter, "fixed") == 0,
          "fc_task_config_get after the update: rate %g burst %" PRIu32 " cap %" PRIu32
          " limiter \"%s\"",
          g_config.v.local_rate, g_config.v.burst, g_config.v.max_concurrency,
          g_config.v.limiter);
    CANARIES_INTACT("after fc_task_config_get");
    EXPECT(fc_task_limit(task, &limit), FC_OK);
    CHECK(limit == 4, "fc_task_limit after the update: %" PRIu32, limit);

    /* Bad configurations. */
    config_init();
    g_config.v.reserved = 1;
    EXPECT_ERROR(fc_task_register(table, "bad", &g_config.v, &other), FC_ERR_INVALID_ARGUMENT);
    config_init();
    g_config.v.burst = 0;
    EXPECT_ERROR(fc_task_register(table, "bad", &g_config.v, &other), FC_ERR_INVALID_ARGUMENT);
    config_init();
    strcpy(g_config.v.limiter, "nonsense");
    EXPECT_ERROR(fc_task_register(table, "bad", &g_config.v, &other), FC_ERR_INVALID_ARGUMENT);
    EXPECT_ERROR(fc_task_register(table, "", NULL, &other), FC_ERR_INVALID_NAME);
    EXPECT_ERROR(fc_task_register(table, "tab\there", NULL, &other), FC_ERR_INVALID_NAME);
    EXPECT_ERROR(fc_task_register(NULL, "local", NULL, &other), FC_ERR_INVALID_ARGUMENT);
    CHECK(other == NULL, "no handle on an error");
    *out = task;
}

/* The global quota on the embedded store. */
static void global_task(const fc_table *table, const fc_task *local)
{
    fc_task *task = NULL;
    int64_t granted = -1;
    int i, limited = 0;

    printf("\n# a global quota on the embedded store\n");
    config_init();
    g_config.v.global_rate = 50.0;
    g_config.v.slice_ms = 200;
    g_config.v.chunk = 5;
    g_config.v.fallback_rate = 20.0;
    EXPECT(fc_task_register(table, "global", &g_config.v, &task), FC_OK);
    config_init();
    EXPECT(fc_task_config_get(task, &g_config.v), FC_OK);
    CHECK(g_config.v.global_rate == 50.0 && g_config.v.slice_ms == 200 &&
              g_config.v.chunk == 5 && g_config.v.fallback_rate == 20.0 &&
              g_config.v.local_rate == 0 && g_config.v.max_concurrency == 0,
          "fc_task_config_get: global %g slice %" PRIu32 " chunk %" PRIu32 " fallback %g",
          g_config.v.global_rate, g_config.v.slice_ms, g_config.v.chunk,
          g_config.v.fallback_rate);
    EXPECT(fc_pull_quota(task, 3, &granted), FC_OK);
    CHECK(granted >= 1 && granted <= 3, "fc_pull_quota: %" PRId64 " granted", granted);
    EXPECT_ERROR(fc_pull_quota(local, 3, &granted), FC_ERR_INVALID_ARGUMENT);
    EXPECT_ERROR(fc_pull_quota(task, 0, &granted), FC_ERR_INVALID_ARGUMENT);
    EXPECT(fc_acquire(task, 1, &g_permit.v), FC_OK);
    EXPECT(fc_release(task, &g_permit.v, FC_OUTCOME_SUCCESS), FC_OK);
    CANARIES_INTACT("after fc_acquire and fc_release");
    /* 10 permits a slice: the host runs out within the slice. */
    for (i = 0; i < 100 && !limited; i++) {
        fc_status s = fc_acquire(task, 1, &g_permit.v);
        if (s == FC_OK)
            EXPECT(fc_release(task, &g_permit.v, FC_OUTCOME_SUCCESS), FC_OK);
        else
            limited = s == FC_LIMITED_GLOBAL;
        if (s != FC_OK && !limited)
            CHECK(0, "fc_acquire on the global task: %s: %s", fc_status_str(s),
                  fc_last_error());
    }
    CHECK(limited, "the global quota ran out: FC_LIMITED_GLOBAL after %d acquires", i);
    stats_of(task);
    CHECK((g_stats.v.quota_state == FC_QUOTA_OPEN ||
           g_stats.v.quota_state == FC_QUOTA_LIMITED) &&
              g_stats.v.pulls >= 1 && g_stats.v.quota_granted >= 1 &&
              g_stats.v.limited_global >= 1 && g_stats.v.failed_pulls == 0,
          "fc_task_stats: quota state %" PRIu32 ", pulls %" PRIu64 ", granted %" PRIu64
          ", limited_global %" PRIu64,
          g_stats.v.quota_state, g_stats.v.pulls, g_stats.v.quota_granted,
          g_stats.v.limited_global);
    no_drift(task, "global");
    fc_task_free(task);
}

struct release_job {
    const fc_task *task;
    fc_permit *permit;
    unsigned after_ms;
    fc_status status;
};

static void *release_later(void *arg)
{
    struct release_job *job = arg;
    sleep_ms(job->after_ms);
    job->status = fc_release(job->task, job->permit, FC_OUTCOME_SUCCESS);
    return NULL;
}

/* A limiter with bounds; the waiting acquire; a release with an RTT. */
static void adaptive_task(const fc_table *table)
{
    fc_task *task = NULL;
    fc_permit held[30];
    uint32_t limit = 0, i;
    uint64_t began;
    pthread_t thread;
    struct release_job job;

    printf("\n# an adaptive limit, the waiting acquire\n");
    config_init();
    /* A window of a minute: the limit stays where it starts during the test. */
    strcpy(g_config.v.limiter, "gradient2 tolerance=2 window=60000");
    g_config.v.min_limit = 2;
    g_config.v.max_limit = 30;
    g_config.v.initial_limit = 5;
    EXPECT(fc_task_register(table, "adaptive", &g_config.v, &task), FC_OK);
    config_init();
    EXPECT(fc_task_config_get(task, &g_config.v), FC_OK);
    CHECK(strncmp(g_config.v.limiter, "gradient2 ", 10) == 0 &&
              strstr(g_config.v.limiter, " window=60000") != NULL &&
              strstr(g_config.v.limiter, " tolerance=2") != NULL &&
              g_config.v.min_limit == 2 && g_config.v.max_limit == 30 &&
              g_config.v.initial_limit == 5,
          "fc_task_config_get: \"%s\" min %" PRIu32 " max %" PRIu32 " initial %" PRIu32,
          g_config.v.limiter, g_config.v.min_limit, g_config.v.max_limit,
          g_config.v.initial_limit);
    CANARIES_INTACT("after fc_task_config_get");
    EXPECT(fc_task_limit(task, &limit), FC_OK);
    CHECK(limit == 5, "fc_task_limit: the initial limit, %" PRIu32, limit);

    EXPECT(fc_acquire_wait(task, 1, 0, &g_permit.v), FC_OK);
    EXPECT(fc_release_rtt(task, &g_permit.v, FC_OUTCOME_SUCCESS, 2000000), FC_OK);
    EXPECT_ERROR(fc_release_rtt(task, &g_permit.v, FC_OUTCOME_SUCCESS, 2000000),
                 FC_ERR_INVALID_ARGUMENT);
    CANARIES_INTACT("after fc_acquire_wait and fc_release_rtt");
    stats_of(task);
    EXPECT(fc_task_limit(task, &limit), FC_OK);
    CHECK(g_stats.v.rtt_samples == 1 && g_stats.v.rtt_sum_ns == 2000000 &&
              g_stats.v.released_success == 1 && g_stats.v.limit == limit && limit >= 2 &&
              limit <= 30,
          "fc_task_stats: rtt_samples %" PRIu64 ", rtt_sum_ns %" PRIu64 ", limit %" PRIu64,
          g_stats.v.rtt_samples, g_stats.v.rtt_sum_ns, g_stats.v.limit);

    /* Hold the whole limit: a waiter waits for a release. */
    for (i = 0; i < limit; i++)
        EXPECT(fc_acquire(task, 1, &held[i]), FC_OK);
    EXPECT(fc_acquire_wait(task, 1, 0, &g_permit.v), FC_LIMITED_CONCURRENCY);
    began = now_ns();
    EXPECT(fc_acquire_wait(task, 1, 50, &g_permit.v), FC_LIMITED_CONCURRENCY);
    CHECK(now_ns() - began >= 45000000u, "a 50 ms wait waited %" PRIu64 " µs",
          (now_ns() - began) / 1000);
    job.task = task;
    job.permit = &held[0];
    job.after_ms = 30;
    job.status = FC_ERR_INTERNAL;
    CHECK(pthread_create(&thread, NULL, release_later, &job) == 0, "start a releasing thread");
    began = now_ns();
    EXPECT(fc_acquire_wait(task, 1, 5000, &g_permit.v), FC_OK);
    CHECK(now_ns() - began < 2000000000u, "admitted %" PRIu64 " µs into a 5 s wait",
          (now_ns() - began) / 1000);
    CHECK(pthread_join(thread, NULL) == 0 && job.status == FC_OK,
          "the other thread's release: %s", fc_status_str(job.status));
    EXPECT(fc_release(task, &g_permit.v, FC_OUTCOME_DROPPED), FC_OK);
    for (i = 1; i < limit; i++)
        EXPECT(fc_release(task, &held[i], FC_OUTCOME_SUCCESS), FC_OK);
    EXPECT_ERROR(fc_acquire_wait(NULL, 1, 10, &g_permit.v), FC_ERR_INVALID_ARGUMENT);
    EXPECT_ERROR(fc_acquire_wait(task, 1, 10, NULL), FC_ERR_INVALID_ARGUMENT);
    stats_of(task);
    CHECK(g_stats.v.in_flight == 0 && g_stats.v.held == 0, "nothing held at the end");
    no_drift(task, "adaptive");
    fc_task_free(task);
}

static const char *const ADDRESSES[3] = {"10.0.0.1:80", "10.0.0.2:80", "db.local:5432"};

/* A balancer: register, set backends, pick, done, stats, retries. */
static void balancer(const fc_table *table)
{
    fc_balancer *lb = NULL, *none = NULL;
    uint32_t weights[3] = {1, 2, 3}, zero[1] = {0}, exclude[2] = {0, 2};
    uint32_t all[3] = {0, 1, 2}, allowed = 9, i;
    uint64_t picked = 0;
    size_t count = 0;
    struct fc_pick copy;

    printf("\n# a balancer\n");
    EXPECT(fc_balancer_config_init(&g_lb_config.v, sizeof g_lb_config.v), FC_OK);
    CHECK(g_lb_config.v.size == sizeof g_lb_config.v && g_lb_config.v.reserved == 0 &&
              g_lb_config.v.decay_ms == 10000 && g_lb_config.v.failure_penalty_ms == 5000 &&
              g_lb_config.v.slow_start_ms == 30000 && g_lb_config.v.default_rtt_us == 100000 &&
              g_lb_config.v.retry_ratio == 0.2 && g_lb_config.v.retry_min_per_sec == 10.0,
          "fc_balancer_config_init: size %zu and the 0.3.0 defaults", sizeof g_lb_config.v);
    CANARIES_INTACT("after fc_balancer_config_init");
    g_lb_config.v.decay_ms = 5000;
    g_lb_config.v.slow_start_ms = 0;
    g_lb_config.v.reserved = 1;
    EXPECT_ERROR(fc_balancer_register(table, "lb", &g_lb_config.v, &lb),
                 FC_ERR_INVALID_ARGUMENT);
    g_lb_config.v.reserved = 0;
    EXPECT(fc_balancer_register(table, "lb", &g_lb_config.v, &lb), FC_OK);
    g_lb_config.v.decay_ms = 6000;
    EXPECT_ERROR(fc_balancer_register(table, "lb", &g_lb_config.v, &none),
                 FC_ERR_CONFIG_MISMATCH);
    EXPECT_ERROR(fc_pick(lb, NULL, &g_pick.v), FC_ERR_INVALID_ARGUMENT); /* no backends */
    EXPECT_ERROR(fc_balancer_set_backends(lb, ADDRESSES, NULL, 0), FC_ERR_INVALID_ARGUMENT);
    EXPECT_ERROR(fc_balancer_set_backends(lb, ADDRESSES, zero, 1), FC_ERR_INVALID_ARGUMENT);
    EXPECT(fc_balancer_set_backends(lb, ADDRESSES, weights, 3), FC_OK);

    for (i = 0; i < 30; i++) {
        EXPECT(fc_pick(lb, NULL, &g_pick.v), FC_OK);
        CHECK(g_pick.v.backend < 3 && strcmp(g_pick.v.address, ADDRESSES[g_pick.v.backend]) == 0 &&
                  g_pick.v.address_len == strlen(ADDRESSES[g_pick.v.backend]),
              "pick %" PRIu32 ": backend %" PRIu32 " %s", i, g_pick.v.backend,
              g_pick.v.address);
        if (i % 3 == 0)
            EXPECT(fc_pick_done_with(lb, &g_pick.v, FC_OUTCOME_SUCCESS, 1000000, 0.5), FC_OK);
        else
            EXPECT(fc_pick_done(lb, &g_pick.v, i % 3 == 1 ? FC_OUTCOME_SUCCESS
                                                           : FC_OUTCOME_IGNORED),
                   FC_OK);
    }
    CANARIES_INTACT("after fc_pick and fc_pick_done");
    EXPECT_ERROR(fc_pick_done(lb, &g_pick.v, FC_OUTCOME_SUCCESS), FC_ERR_INVALID_ARGUMENT);
    EXPECT(fc_pick(lb, NULL, &g_pick.v), FC_OK);
    copy = g_pick.v;
    copy.backend = 99;
    EXPECT_ERROR(fc_pick_done(lb, &copy, FC_OUTCOME_SUCCESS), FC_ERR_INVALID_ARGUMENT);
    EXPECT_ERROR(fc_pick_done(lb, &g_pick.v, 7), FC_ERR_INVALID_ARGUMENT);
    EXPECT(fc_pick_done(lb, &g_pick.v, FC_OUTCOME_SUCCESS), FC_OK);

    EXPECT(fc_pick_options_init(&g_pick_options.v, sizeof g_pick_options.v), FC_OK);
    CHECK(g_pick_options.v.size == sizeof g_pick_options.v &&
              g_pick_options.v.exclude_count == 0 && g_pick_options.v.exclude == NULL,
          "fc_pick_options_init: size %zu, no exclusion", sizeof g_pick_options.v);
    CANARIES_INTACT("after fc_pick_options_init");
    g_pick_options.v.exclude = exclude;
    g_pick_options.v.exclude_count = 2;
    EXPECT(fc_pick(lb, &g_pick_options.v, &g_pick.v), FC_OK);
    CHECK(g_pick.v.backend == 1, "excluding 0 and 2 picks 1, not %" PRIu32, g_pick.v.backend);
    EXPECT(fc_pick_done(lb, &g_pick.v, FC_OUTCOME_DROPPED), FC_OK);
    g_pick_options.v.exclude = all;
    g_pick_options.v.exclude_count = 3;
    EXPECT_ERROR(fc_pick(lb, &g_pick_options.v, &g_pick.v), FC_ERR_INVALID_ARGUMENT);

    EXPECT(fc_retry_allowed(lb, &allowed), FC_OK);
    CHECK(allowed == 0 || allowed == 1, "fc_retry_allowed: %" PRIu32, allowed);

    for (i = 0; i < 4; i++) {
        EXPECT(fc_backend_stats_init(&g_backends.v[i], sizeof g_backends.v[i]), FC_OK);
        CHECK(g_backends.v[i].size == sizeof g_backends.v[i],
              "fc_backend_stats_init: size %zu", sizeof g_backends.v[i]);
    }
    EXPECT(fc_balancer_stats(lb, g_backends.v, 4, &count), FC_OK);
    CHECK(count == 3, "fc_balancer_stats: %zu backends", count);
    for (i = 0; i < 3; i++) {
        const fc_backend_stats *b = &g_backends.v[i];
        CHECK(b->index == i && strcmp(b->address, ADDRESSES[i]) == 0 &&
                  b->weight == weights[i] && b->active == 1 && b->in_flight == 0,
              "backend %" PRIu32 ": %s weight %" PRIu32 " active %" PRIu32
              " in_flight %" PRIu64 " picked %" PRIu64,
              i, b->address, b->weight, b->active, b->in_flight, b->picked);
        picked += b->picked;
    }
    CHECK(picked == 32, "%" PRIu64 " picks counted of 32", picked);
    CHECK(g_backends.v[1].recent_failures == 1, "the dropped call is a failure");
    CHECK(g_backends.v[3].size == sizeof g_backends.v[3] && g_backends.v[3].index == 0 &&
              g_backends.v[3].address[0] == '\0',
          "the element past the backends is left as it was");
    CANARIES_INTACT("after fc_balancer_stats");
    EXPECT(fc_balancer_stats(lb, g_backends.v, 1, &count), FC_OK);
    CHECK(count == 3, "a short array: count is still every backend");
    EXPECT_ERROR(fc_balancer_stats(lb, NULL, 4, &count), FC_ERR_INVALID_ARGUMENT);
    fc_balancer_free(lb);
    fc_balancer_free(NULL);
}

int main(int argc, char **argv)
{
    char dir[4096], path[4200];
    fc_table *table = NULL, *again = NULL;
    fc_task *local = NULL;
    uint32_t reaped = 99, major = 0, minor = 0;

    setvbuf(stdout, NULL, _IOLBF, 0);
    if (argc != 2) {
        fprintf(stderr, "usage: %s <scratch-dir>\n", argv[0]);
        return 2;
    }
    snprintf(dir, sizeof dir, "%s/compat_v0_3.XXXXXX", argv[1]);
    CHECK(mkdtemp(dir) != NULL, "make a work directory under %s", argv[1]);
    printf("flowctrl %s against the 0.3.0 header in %s\n", fc_version(), dir);
    CHECK(FC_VERSION_MAJOR == 0 && FC_VERSION_MINOR == 3 && FC_VERSION_PATCH == 0 &&
              FC_LAYOUT_VERSION == 3,
          "the frozen header is 0.3.0's, layout 3");
    CHECK(sscanf(fc_version(), "%" SCNu32 ".%" SCNu32, &major, &minor) == 2 &&
              (major > 0 || minor >= 3),
          "fc_version %s is 0.3 or later", fc_version());
    CHECK(sizeof(fc_table_options) == 64 && sizeof(fc_task_config) == 192 &&
              sizeof(fc_permit) == 64 && sizeof(fc_balancer_config) == 56 &&
              sizeof(fc_pick_options) == 16 && sizeof(fc_backend_stats) == 160 &&
              sizeof(struct fc_pick) == 128 && sizeof(struct fc_task_stats) == 216,
          "0.3.0 sizes: options 64, config 192, permit 64, balancer config 56, pick "
          "options 16, backend stats 160, pick 128, task stats 216");
    CHECK(strcmp(fc_status_str(FC_OK), fc_status_str(FC_ERR_CORRUPT)) != 0 &&
              fc_status_str(FC_LIMITED_GLOBAL)[0] != '\0' && fc_status_str(12345) != NULL &&
              fc_status_str(12345)[0] != '\0',
          "fc_status_str: %s / %s / %s", fc_status_str(FC_OK),
          fc_status_str(FC_LIMITED_GLOBAL), fc_status_str(12345));
    canaries_set();

    printf("\n# opening\n");
    EXPECT_ERROR(fc_table_options_init(NULL, sizeof g_options.v), FC_ERR_INVALID_ARGUMENT);
    table_options();
    snprintf(path, sizeof path, "%s/table", dir);
    g_options.v.reserved = 1;
    EXPECT_ERROR(fc_table_open(path, &g_options.v, &table), FC_ERR_INVALID_ARGUMENT);
    g_options.v.reserved = 0;
    g_options.v.mode = 0666;
    EXPECT_ERROR(fc_table_open(path, &g_options.v, &table), FC_ERR_INVALID_ARGUMENT);
    g_options.v.mode = 0600;
    CHECK(table == NULL && access(path, F_OK) != 0, "nothing made on an error");
    EXPECT(fc_table_open(path, &g_options.v, &table), FC_OK);
    CANARIES_INTACT("after fc_table_open");

    local_task(table, &local);
    global_task(table, local);
    adaptive_task(table);
    balancer(table);

    printf("\n# reaping, closing, opening again\n");
    EXPECT(fc_table_reap(table, &reaped), FC_OK);
    CHECK(reaped == 0, "fc_table_reap: %" PRIu32 " dead processes", reaped);
    no_drift(local, "local");
    fc_task_free(local);
    fc_task_free(NULL);
    fc_table_close(table);
    fc_table_close(NULL);
    /* An existing table keeps its geometry and its tasks' configuration. */
    table_options();
    g_options.v.capacity = 1;
    EXPECT(fc_table_open(path, &g_options.v, &again), FC_OK);
    EXPECT(fc_task_register(again, "local", NULL, &local), FC_OK);
    config_init();
    EXPECT(fc_task_config_get(local, &g_config.v), FC_OK);
    CHECK(g_config.v.local_rate == 100.0 && g_config.v.burst == 3 &&
              g_config.v.max_concurrency == 4,
          "the configuration outlives the handles");
    stats_of(local);
    CHECK(g_stats.v.admitted == 2 && g_stats.v.released_success == 1 &&
              g_stats.v.released_ignored == 1 && g_stats.v.in_flight == 0,
          "the counters outlive the handles: admitted %" PRIu64, g_stats.v.admitted);
    fc_task_free(local);
    fc_table_close(again);
    CANARIES_INTACT("at the end");

    CHECK(unlink(path) == 0 && rmdir(dir) == 0, "remove %s (no stray files left)", dir);
    printf("\nall %u checks passed\n", g_checks);
    return 0;
}
