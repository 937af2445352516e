/*
 * A program built against the smallest version of flowctrl's sized structs
 * (tests/c/compat_v1.h, frozen), run against the current library: it must
 * keep working, and the library must touch no byte past the caller's
 * structs. Each struct is used twice: followed by a canary (every byte
 * checked after each call), and ending exactly where an inaccessible page
 * begins (a read or write past it is a SIGSEGV, which fails the run).
 *
 *   compat_v1 <scratch-dir>
 *
 * Run by tests/c_abi.rs against libflowctrl.so and libflowctrl.a.
 *
 * Must compile with: gcc -std=c99 -Wall -Wextra -Werror -pedantic -pthread
 */

#define _XOPEN_SOURCE 700
#define _DEFAULT_SOURCE /* MAP_ANONYMOUS */

#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "compat_v1.h"

enum { CANARY = 0xc5, CANARY_LEN = 64 };

#include "test_util.h"

/* The call answers `want`; an error comes with a reason. */
#define EXPECT(call, want)                                                     \
    do {                                                                       \
        fc_status got_ = (call);                                               \
        CHECK(got_ == (want), "%s -> %s%s%s", #call, fc_status_str(got_),      \
              got_ >= FC_ERR_INVALID_ARGUMENT ? ": " : "",                     \
              got_ >= FC_ERR_INVALID_ARGUMENT ? fc_last_error() : "");         \
    } while (0)

static int canary_intact(const unsigned char *canary)
{
    int i;
    for (i = 0; i < CANARY_LEN; i++)
        if (canary[i] != CANARY)
            return 0;
    return 1;
}

/* `size` bytes that end where an inaccessible page begins. */
static void *at_page_end(size_t size)
{
    long page = sysconf(_SC_PAGESIZE);
    unsigned char *base = mmap(NULL, (size_t)page * 2, PROT_READ | PROT_WRITE,
                               MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    CHECK(base != MAP_FAILED && mprotect(base + page, (size_t)page, PROT_NONE) == 0,
          "map a page followed by an inaccessible one");
    return base + page - size;
}

struct guarded_options {
    fc_table_options options;
    unsigned char canary[CANARY_LEN];
};

struct guarded_config {
    fc_task_config config;
    unsigned char canary[CANARY_LEN];
};

struct guarded_stats {
    struct fc_task_stats stats;
    unsigned char canary[CANARY_LEN];
};

/* Registers, acquires and reads stats through the given struct memory. */
static void run(const char *dir, const char *name, fc_table_options *options,
                const unsigned char *options_canary, fc_task_config *config,
                const unsigned char *config_canary, struct fc_task_stats *stats,
                const unsigned char *stats_canary)
{
    char path[4096];
    fc_table *table = NULL;
    fc_task *task = NULL;
    fc_permit permits[3];
    int64_t drift = -1;

#define CANARIES_INTACT(when)                                                  \
    CHECK((options_canary == NULL || canary_intact(options_canary)) &&         \
              (config_canary == NULL || canary_intact(config_canary)) &&       \
              (stats_canary == NULL || canary_intact(stats_canary)),           \
          "no byte written past the structs %s", when)

    printf("\n# %s\n", name);
    snprintf(path, sizeof path, "%s/%s", dir, name);

    EXPECT(fc_table_options_init(options, sizeof *options), FC_OK);
    CHECK(options->size == 16 && options->capacity == 256 && options->max_processes == 64 &&
              options->mode == 0600,
          "fc_table_options_init: size 16 and the defaults");
    CANARIES_INTACT("after fc_table_options_init");
    options->capacity = 8;
    EXPECT(fc_table_open(path, options, &table), FC_OK);

    EXPECT(fc_task_config_init(config, sizeof *config), FC_OK);
    CHECK(config->size == 24 && config->local_rate == FC_RATE_UNSET &&
              config->burst == FC_UNSET && config->max_concurrency == FC_UNSET,
          "fc_task_config_init: size 24, every field unset");
    CANARIES_INTACT("after fc_task_config_init");
    config->max_concurrency = 2;
    EXPECT(fc_task_register(table, "compat", config, &task), FC_OK);
    EXPECT(fc_task_update(task, config), FC_OK);
    EXPECT(fc_task_config_get(task, config), FC_OK);
    CHECK(config->size == 24 && config->local_rate == 0 && config->burst == 1 &&
              config->max_concurrency == 2,
          "fc_task_config_get: the whole configuration");
    CANARIES_INTACT("after fc_task_config_get");

    EXPECT(fc_acquire(task, 1, &permits[0]), FC_OK);
    EXPECT(fc_acquire(task, 1, &permits[1]), FC_OK);
    EXPECT(fc_acquire(task, 1, &permits[2]), FC_LIMITED_CONCURRENCY);

    EXPECT(fc_task_stats_init(stats, sizeof *stats), FC_OK);
    CHECK(stats->size == 96, "fc_task_stats_init: size 96");
    CANARIES_INTACT("after fc_task_stats_init");
    EXPECT(fc_task_stats(task, stats), FC_OK);
    CHECK(stats->size == 96 && stats->admitted == 2 && stats->limited_concurrency == 1 &&
              stats->in_flight == 2 && stats->rtt_samples == 0,
          "fc_task_stats: admitted %" PRIu64 ", limited_concurrency %" PRIu64
          ", in_flight %" PRIu64,
          stats->admitted, stats->limited_concurrency, stats->in_flight);
    CANARIES_INTACT("after fc_task_stats");
    EXPECT(fc_task_check(task, &drift), FC_OK);
    CHECK(drift == 0, "fc_task_check: drift %" PRId64, drift);

    EXPECT(fc_release(task, &permits[0], FC_OUTCOME_SUCCESS), FC_OK);
    EXPECT(fc_release(task, &permits[1], FC_OUTCOME_DROPPED), FC_OK);
    EXPECT(fc_release(task, &permits[1], FC_OUTCOME_DROPPED), FC_ERR_INVALID_ARGUMENT);
    EXPECT(fc_task_stats(task, stats), FC_OK);
    CHECK(stats->in_flight == 0 && stats->released_success == 1 &&
              stats->released_dropped == 1 && stats->rtt_samples == 2,
          "fc_task_stats after the releases");
    CANARIES_INTACT("at the end");

    fc_task_free(task);
    fc_table_close(table);
    CHECK(unlink(path) == 0, "remove %s", path);
#undef CANARIES_INTACT
}

int main(int argc, char **argv)
{
    char dir[4096];
    struct guarded_options go;
    struct guarded_config gc;
    struct guarded_stats gs;

    setvbuf(stdout, NULL, _IOLBF, 0);
    if (argc != 2) {
        fprintf(stderr, "usage: %s <scratch-dir>\n", argv[0]);
        return 2;
    }
    snprintf(dir, sizeof dir, "%s/compat_v1.XXXXXX", argv[1]);
    CHECK(mkdtemp(dir) != NULL, "make a work directory under %s", argv[1]);
    printf("flowctrl %s against the v1 structs in %s\n", fc_version(), dir);
    CHECK(sizeof(fc_table_options) == 16 && sizeof(fc_task_config) == 24 &&
              sizeof(struct fc_task_stats) == 96 && sizeof(fc_permit) == 64,
          "v1 sizes: options 16, config 24, stats 96, permit 64");

    memset(&go, CANARY, sizeof go);
    memset(&gc, CANARY, sizeof gc);
    memset(&gs, CANARY, sizeof gs);
    run(dir, "canaries", &go.options, go.canary, &gc.config, gc.canary, &gs.stats, gs.canary);

    /* Any access past a struct now faults. */
    run(dir, "guard-pages", at_page_end(sizeof(fc_table_options)), NULL,
        at_page_end(sizeof(fc_task_config)), NULL, at_page_end(sizeof(struct fc_task_stats)),
        NULL);

    CHECK(rmdir(dir) == 0, "remove %s (no stray files left)", dir);
    printf("\nall %u checks passed\n", g_checks);
    return 0;
}
