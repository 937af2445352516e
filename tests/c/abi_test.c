/*
 * The C ABI test of flowctrl: every function of include/flowctrl.h, its
 * statuses for good and bad input, threads, and fork.
 *
 *   abi_test <scratch-dir>
 *
 * Works in a fresh directory made under <scratch-dir>, prints one line per
 * check and exits 1 at the first failure, leaving its files in place for
 * inspection; on success it removes them. Run by tests/c_abi.rs (cargo test),
 * linked once against libflowctrl.so and once against libflowctrl.a.
 *
 * Must compile with: gcc -std=c99 -Wall -Wextra -Werror -pedantic -pthread
 */

#define _XOPEN_SOURCE 700

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <math.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "flowctrl.h"

enum { PATH_LEN = 4096, MAX_FILES = 64 };

/* ------------------------------------------------------------------------ */
/* Reporting                                                                 */
/* ------------------------------------------------------------------------ */

/* A forked child still running, killed if a check fails meanwhile. */
static pid_t g_child = -1;

static void kill_child(void)
{
    if (g_child > 0) {
        kill(g_child, SIGKILL);
        waitpid(g_child, NULL, 0);
    }
}

#define TEST_ON_FAILURE kill_child
#include "test_util.h"

static const char *status_name(uint32_t status)
{
    switch (status) {
    case FC_OK: return "FC_OK";
    case FC_LIMITED_LOCAL: return "FC_LIMITED_LOCAL";
    case FC_LIMITED_GLOBAL: return "FC_LIMITED_GLOBAL";
    case FC_LIMITED_CONCURRENCY: return "FC_LIMITED_CONCURRENCY";
    case FC_LIMITED_KEY_RATE: return "FC_LIMITED_KEY_RATE";
    case FC_LIMITED_KEY_CONCURRENCY: return "FC_LIMITED_KEY_CONCURRENCY";
    case FC_LIMITED_KEY_BLOCKED: return "FC_LIMITED_KEY_BLOCKED";
    case FC_LIMITED_KEY_GLOBAL: return "FC_LIMITED_KEY_GLOBAL";
    case FC_ERR_INVALID_ARGUMENT: return "FC_ERR_INVALID_ARGUMENT";
    case FC_ERR_INVALID_NAME: return "FC_ERR_INVALID_NAME";
    case FC_ERR_TABLE_FULL: return "FC_ERR_TABLE_FULL";
    case FC_ERR_TOO_MANY_PROCESSES: return "FC_ERR_TOO_MANY_PROCESSES";
    case FC_ERR_CONFIG_MISMATCH: return "FC_ERR_CONFIG_MISMATCH";
    case FC_ERR_INCOMPATIBLE: return "FC_ERR_INCOMPATIBLE";
    case FC_ERR_CORRUPT: return "FC_ERR_CORRUPT";
    case FC_ERR_IO: return "FC_ERR_IO";
    case FC_ERR_PERMISSION: return "FC_ERR_PERMISSION";
    case FC_ERR_TIMEOUT: return "FC_ERR_TIMEOUT";
    case FC_ERR_INTERNAL: return "FC_ERR_INTERNAL";
    default: return "(unknown status)";
    }
}

static void section(const char *name)
{
    printf("\n# %s\n", name);
}

/* CHECK_EQ(got, want, "what is compared") for integers, showing both. */
#define CHECK_EQ(got, want, what)                                              \
    check_eq((uint64_t)(got), (uint64_t)(want), (what), __LINE__)

static void check_eq(uint64_t got, uint64_t want, const char *what, int line)
{
    if (got != want)
        FAIL_AT(line, "%s: %" PRIu64 ", expected %" PRIu64, what, got, want);
    test_pass("%s == %" PRIu64, what, got);
}

/* A status obtained indirectly (from a child, a thread): no last error to check. */
#define CHECK_STATUS(got, want, what)                                          \
    check_status((uint32_t)(got), (uint32_t)(want), (what), __LINE__)

static void check_status(uint32_t got, uint32_t want, const char *what, int line)
{
    if (got != want)
        FAIL_AT(line, "%s -> %s (%" PRIu32 "), expected %s", what, status_name(got),
                got, status_name(want));
    test_pass("%s -> %s", what, status_name(got));
}

/*
 * EXPECT(call, status): the call answers exactly `status`; an error status
 * must leave a non-empty reason in fc_last_error(), which is printed.
 */
#define EXPECT(call, want) expect((call), (want), #call, __LINE__)

static void expect(fc_status got, fc_status want, const char *call, int line)
{
    const char *why = fc_last_error();
    if (got != want && got >= FC_ERR_INVALID_ARGUMENT)
        FAIL_AT(line, "%s -> %s (%" PRIu32 "), expected %s: %s", call,
                status_name(got), (uint32_t)got, status_name(want), why ? why : "(NULL)");
    if (got != want)
        FAIL_AT(line, "%s -> %s (%" PRIu32 "), expected %s", call, status_name(got),
                (uint32_t)got, status_name(want));
    if (want < FC_ERR_INVALID_ARGUMENT) {
        test_pass("%s -> %s", call, status_name(got));
        return;
    }
    if (why == NULL || why[0] == '\0')
        FAIL_AT(line, "%s -> %s, but fc_last_error() is %s", call, status_name(got),
                why ? "empty" : "NULL");
    test_pass("%s -> %s: %s", call, status_name(got), why);
}

/* ------------------------------------------------------------------------ */
/* Scratch files, time                                                       */
/* ------------------------------------------------------------------------ */

static char g_work[PATH_LEN];
static char g_files[MAX_FILES][PATH_LEN];
static int g_file_count;

/* Writes <work dir>/<name> into `out` and remembers it for cleanup. */
static void scratch_path(char out[PATH_LEN], const char *name)
{
    int len = snprintf(out, PATH_LEN, "%s/%s", g_work, name);
    if (len < 0 || len >= PATH_LEN || g_file_count == MAX_FILES)
        FAIL_AT(__LINE__, "scratch path for %s", name);
    memcpy(g_files[g_file_count++], out, (size_t)len + 1);
}

/* Removes every scratch file, then the work directory, which must be empty:
 * the library leaves no temporary file behind. */
static void cleanup(void)
{
    int i;
    section("cleanup");
    for (i = 0; i < g_file_count; i++)
        CHECK(unlink(g_files[i]) == 0 || errno == ENOENT, "remove %s", g_files[i]);
    if (rmdir(g_work) != 0) {
        int err = errno;
        DIR *dir = opendir(g_work);
        struct dirent *e;
        /* Name what was left, and when each was last written, to tell a
         * file never removed from one made again after its removal. */
        while (dir && (e = readdir(dir)) != NULL) {
            char left[PATH_LEN + 256];
            struct stat st;
            if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0)
                continue;
            snprintf(left, sizeof left, "%s/%s", g_work, e->d_name);
            if (stat(left, &st) == 0)
                printf("      left: %s, %lld bytes, written %lld.%09ld\n", e->d_name,
                       (long long)st.st_size, (long long)st.st_mtim.tv_sec,
                       st.st_mtim.tv_nsec);
        }
        if (dir)
            closedir(dir);
        FAIL_AT(__LINE__, "remove %s: %s (files left behind?)", g_work, strerror(err));
    }
    test_pass("remove %s: no stray files left", g_work);
}

static void write_file(const char *path, const void *data, size_t len)
{
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    CHECK(fd >= 0 && write(fd, data, len) == (ssize_t)len && close(fd) == 0,
          "write %zu bytes to %s", len, path);
}

static int file_exists(const char *path)
{
    struct stat st;
    return stat(path, &st) == 0;
}

static uint64_t monotonic_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static void sleep_ms(long ms)
{
    struct timespec ts;
    ts.tv_sec = ms / 1000;
    ts.tv_nsec = (ms % 1000) * 1000000L;
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
    }
}

/* Waits for a child and returns its exit code, or -1 if it did not exit. */
static int wait_exit_code(pid_t pid)
{
    int status;
    if (waitpid(pid, &status, 0) != pid || !WIFEXITED(status))
        return -1;
    return WEXITSTATUS(status);
}

/* ------------------------------------------------------------------------ */
/* Library helpers that must succeed                                         */
/* ------------------------------------------------------------------------ */

/* Fails unless `status` is FC_OK; otherwise reports `what` as passed. */
#define REQUIRE_OK(status, ...) require_ok((status), __LINE__, __VA_ARGS__)

static TEST_PRINTF_LIKE(3, 4) void require_ok(fc_status status, int line,
                                              const char *fmt, ...)
{
    char what[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(what, sizeof what, fmt, ap);
    va_end(ap);
    if (status != FC_OK)
        FAIL_AT(line, "%s -> %s (%" PRIu32 "): %s", what, status_name(status),
                (uint32_t)status, fc_last_error());
    test_pass("%s", what);
}

static fc_table *open_table(const char *path, const fc_table_options *options)
{
    fc_table *table = NULL;
    REQUIRE_OK(fc_table_open(path, options, &table), "open table %s", path);
    return table;
}

/* A configuration with every field unset. */
static fc_task_config unset_config(void)
{
    fc_task_config config;
    if (fc_task_config_init(&config, sizeof config) != FC_OK)
        FAIL_AT(__LINE__, "fc_task_config_init: %s", fc_last_error());
    return config;
}

/* max_concurrency 0: no cap, asked as FC_NO_CAP (0 itself is refused). */
static fc_task_config task_config(double local_rate, uint32_t burst,
                                  uint32_t max_concurrency)
{
    fc_task_config config = unset_config();
    config.local_rate = local_rate;
    config.burst = burst;
    config.max_concurrency = max_concurrency == 0 ? FC_NO_CAP : max_concurrency;
    return config;
}

static fc_task *register_task(const fc_table *table, const char *name,
                              double local_rate, uint32_t burst,
                              uint32_t max_concurrency)
{
    fc_task_config config = task_config(local_rate, burst, max_concurrency);
    fc_task *task = NULL;
    REQUIRE_OK(fc_task_register(table, name, &config, &task),
               "register task \"%s\" (local_rate %g, burst %" PRIu32
               ", max_concurrency %" PRIu32 ")",
               name, local_rate, burst, max_concurrency);
    return task;
}

/*
 * Reads a task's counters. The struct is named by its tag: it shares its
 * name with the function, and `struct fc_task_stats` is valid C and C++.
 */
static struct fc_task_stats stats_of(const fc_task *task)
{
    struct fc_task_stats stats;
    if (fc_task_stats_init(&stats, sizeof stats) != FC_OK)
        FAIL_AT(__LINE__, "fc_task_stats_init: %s", fc_last_error());
    if (fc_task_stats(task, &stats) != FC_OK)
        FAIL_AT(__LINE__, "fc_task_stats: %s", fc_last_error());
    return stats;
}

static void check_mode(const char *path, mode_t want, const char *what)
{
    struct stat st;
    CHECK(stat(path, &st) == 0 && S_ISREG(st.st_mode), "%s is a regular file", path);
    if ((st.st_mode & 07777) != want)
        FAIL_AT(__LINE__, "%s: mode %04o, expected %04o", what,
                (unsigned)(st.st_mode & 07777), (unsigned)want);
    test_pass("%s: mode %04o", what, (unsigned)want);
}

/* A table with default options at <work>/<name>, fully closed again. */
static void make_table_file(char path[PATH_LEN], const char *name)
{
    scratch_path(path, name);
    fc_table_close(open_table(path, NULL));
}

/* Any non-NULL address that the library must leave alone on failure. */
static char g_sentinel;
#define SENTINEL ((void *)&g_sentinel)

/* ------------------------------------------------------------------------ */
/* Version, status strings, struct layout                                    */
/* ------------------------------------------------------------------------ */

static void test_version_and_status_strings(void)
{
    static const uint32_t statuses[] = {
        FC_OK, FC_LIMITED_LOCAL, FC_LIMITED_GLOBAL, FC_LIMITED_CONCURRENCY,
        FC_LIMITED_KEY_RATE, FC_LIMITED_KEY_CONCURRENCY, FC_LIMITED_KEY_BLOCKED,
        FC_LIMITED_KEY_GLOBAL, FC_ERR_INVALID_ARGUMENT, FC_ERR_INVALID_NAME, FC_ERR_TABLE_FULL,
        FC_ERR_TOO_MANY_PROCESSES, FC_ERR_CONFIG_MISMATCH, FC_ERR_INCOMPATIBLE,
        FC_ERR_CORRUPT, FC_ERR_IO, FC_ERR_PERMISSION, FC_ERR_TIMEOUT,
        FC_ERR_INTERNAL,
    };
    static const uint32_t unknown[] = { 8, 99, 111, 198, 200, 0xffffffffu };
    const size_t count = sizeof statuses / sizeof statuses[0];
    char expected[32];
    const char *unknown_text = fc_status_str(unknown[0]);
    size_t i, j;

    section("version, status strings, struct layout");
    snprintf(expected, sizeof expected, "%d.%d.%d", FC_VERSION_MAJOR,
             FC_VERSION_MINOR, FC_VERSION_PATCH);
    CHECK(fc_version() != NULL && strcmp(fc_version(), expected) == 0,
          "fc_version() \"%s\" == FC_VERSION_* \"%s\"",
          fc_version() ? fc_version() : "(NULL)", expected);

    CHECK(unknown_text != NULL && unknown_text[0] != '\0',
          "fc_status_str(%" PRIu32 ") is \"%s\"", unknown[0],
          unknown_text ? unknown_text : "(NULL)");
    for (i = 0; i < sizeof unknown / sizeof unknown[0]; i++) {
        const char *text = fc_status_str(unknown[i]);
        CHECK(text != NULL && strcmp(text, unknown_text) == 0,
              "fc_status_str(%" PRIu32 ") is the unknown-status text", unknown[i]);
    }
    for (i = 0; i < count; i++) {
        const char *text = fc_status_str(statuses[i]);
        CHECK(text != NULL && text[0] != '\0' && strcmp(text, unknown_text) != 0,
              "fc_status_str(%s) is \"%s\"", status_name(statuses[i]),
              text ? text : "(NULL)");
        for (j = 0; j < i; j++)
            if (strcmp(text, fc_status_str(statuses[j])) == 0)
                FAIL_AT(__LINE__, "%s and %s share the text \"%s\"",
                        status_name(statuses[i]), status_name(statuses[j]), text);
    }

    /* The structs C allocates are ABI: the sized ones only ever grow at
     * their end (tests/c/compat_v1.c runs their smallest versions), and
     * fc_permit never changes. */
    CHECK_EQ(sizeof(fc_status), 4, "sizeof(fc_status)");
    CHECK_EQ(sizeof(fc_table_options), 88, "sizeof(fc_table_options)");
    CHECK_EQ(sizeof(struct fc_pick), 128, "sizeof(struct fc_pick)");
    CHECK_EQ(sizeof(fc_balancer_config), 56, "sizeof(fc_balancer_config)");
    CHECK_EQ(sizeof(fc_pick_options), 16, "sizeof(fc_pick_options)");
    CHECK_EQ(sizeof(fc_backend_stats), 184, "sizeof(fc_backend_stats)");
    CHECK_EQ(offsetof(fc_table_options, size), 0, "fc_table_options.size comes first");
    CHECK_EQ(sizeof(fc_task_config), 224, "sizeof(fc_task_config)");
    CHECK_EQ(offsetof(fc_task_config, size), 0, "fc_task_config.size comes first");
    CHECK_EQ(sizeof(fc_permit), 64, "sizeof(fc_permit)");
    CHECK_EQ(sizeof(struct fc_task_stats), 304, "sizeof(struct fc_task_stats)");
    CHECK_EQ(sizeof(struct fc_key_state), 56, "sizeof(struct fc_key_state)");
    CHECK_EQ(offsetof(struct fc_task_stats, size), 0, "fc_task_stats.size comes first");
    CHECK(FC_RATE_UNSET < 0 && 1.0-FC_RATE_UNSET == 2.0,
          "FC_RATE_UNSET is negative and safe in an expression");
    CHECK_EQ(FC_UNSET, UINT32_MAX, "FC_UNSET");
}

/* ------------------------------------------------------------------------ */
/* Opening tables                                                            */
/* ------------------------------------------------------------------------ */

static void test_open_and_modes(void)
{
    char t1[PATH_LEN], t2[PATH_LEN];
    fc_table_options options;
    fc_table *first, *second;
    mode_t old_umask;

    section("opening tables, file modes");
    memset(&options, 0xff, sizeof options);
    EXPECT(fc_table_options_init(&options, sizeof options), FC_OK);
    CHECK_EQ(options.size, sizeof options, "options.size");
    CHECK_EQ(options.capacity, 256, "default capacity");
    CHECK_EQ(options.max_processes, 64, "default max_processes");
    CHECK(options.mode == 0600, "default mode %04o", (unsigned)options.mode);
    CHECK_EQ(options.owner_uid, FC_UNSET, "default owner_uid: the caller's euid");
    CHECK_EQ(options.shared, 0, "default shared");

    scratch_path(t1, "t1");
    first = open_table(t1, &options);
    check_mode(t1, 0600, "a new table with default options");
    second = open_table(t1, &options);
    CHECK(second != first, "a second handle on the same table while the first is open");
    fc_table_close(second);
    fc_table_close(first);
    fc_table_close(open_table(t1, NULL));
    test_pass("reopened %s after closing every handle", t1);

    /* The mode applies exactly, whatever the umask. */
    scratch_path(t2, "t2");
    options.mode = 0640;
    old_umask = umask(077);
    fc_table_close(open_table(t2, &options));
    umask(old_umask);
    check_mode(t2, 0640, "a new table with options.mode 0640, under umask 077");

    /* Options only apply to a new file. */
    fc_table_close(open_table(t1, &options));
    check_mode(t1, 0600, "an existing table reopened with options.mode 0640");
}

/* ------------------------------------------------------------------------ */
/* Registering tasks                                                         */
/* ------------------------------------------------------------------------ */

static void check_config(const fc_task *task, double local_rate, uint32_t burst,
                         uint32_t max_concurrency)
{
    fc_task_config config = unset_config();
    EXPECT(fc_task_config_get(task, &config), FC_OK);
    CHECK(config.local_rate == local_rate, "local_rate %g == %g", config.local_rate,
          local_rate);
    CHECK_EQ(config.burst, burst, "burst");
    CHECK_EQ(config.max_concurrency, max_concurrency, "max_concurrency");
}

static void test_task_registration(void)
{
    char path[PATH_LEN];
    fc_table *table;
    fc_task *task, *attached, *same, *fresh, *nocap;
    fc_task *untouched = SENTINEL;
    fc_task_config config, other, update;
    fc_permit permit;

    section("registering tasks");
    scratch_path(path, "tasks");
    table = open_table(path, NULL);

    memset(&config, 0xab, sizeof config);
    EXPECT(fc_task_config_init(&config, sizeof config), FC_OK);
    CHECK(config.size == sizeof config && config.local_rate == FC_RATE_UNSET &&
              config.burst == FC_UNSET && config.max_concurrency == FC_UNSET &&
              config.reserved == 0,
          "fc_task_config_init: its size, every field unset");

    config = task_config(250.5, 4, 8);
    task = register_task(table, "api", 250.5, 4, 8);
    check_config(task, 250.5, 4, 8);

    other = task_config(250.5, 4, 9);
    EXPECT(fc_task_register(table, "api", &other, &untouched), FC_ERR_CONFIG_MISMATCH);
    CHECK(untouched == SENTINEL, "a failed registration leaves *out alone");

    attached = NULL;
    EXPECT(fc_task_register(table, "api", NULL, &attached), FC_OK);
    check_config(attached, 250.5, 4, 8);
    same = NULL;
    EXPECT(fc_task_register(table, "api", &config, &same), FC_OK);

    update = task_config(50, 2, 16);
    EXPECT(fc_task_update(task, &update), FC_OK);
    check_config(attached, 50, 2, 16);
    EXPECT(fc_task_register(table, "api", &config, &untouched), FC_ERR_CONFIG_MISMATCH);

    /* Bad configurations, at registration and update. */
    other = task_config(-2, 1, 0); /* negative, but not FC_RATE_UNSET */
    EXPECT(fc_task_register(table, "bad", &other, &untouched), FC_ERR_INVALID_ARGUMENT);
    other = task_config(NAN, 1, 0);
    EXPECT(fc_task_register(table, "bad", &other, &untouched), FC_ERR_INVALID_ARGUMENT);
    other = task_config(INFINITY, 1, 0);
    EXPECT(fc_task_register(table, "bad", &other, &untouched), FC_ERR_INVALID_ARGUMENT);
    other = task_config(1e12, 1, 0); /* more than one permit per clock tick */
    EXPECT(fc_task_register(table, "bad", &other, &untouched), FC_ERR_INVALID_ARGUMENT);
    other = task_config(10, 0, 0);
    EXPECT(fc_task_register(table, "bad", &other, &untouched), FC_ERR_INVALID_ARGUMENT);
    EXPECT(fc_task_update(task, &other), FC_ERR_INVALID_ARGUMENT);
    other = task_config(-5, 1, 0);
    EXPECT(fc_task_update(task, &other), FC_ERR_INVALID_ARGUMENT);
    check_config(task, 50, 2, 16);
    CHECK(untouched == SENTINEL, "failed registrations leave *out alone");

    other = task_config(10, 1, 0);
    other.reserved = 1;
    EXPECT(fc_task_register(table, "bad", &other, &untouched), FC_ERR_INVALID_ARGUMENT);
    EXPECT(fc_task_update(task, &other), FC_ERR_INVALID_ARGUMENT);
    check_config(task, 50, 2, 16);

    fresh = NULL;
    EXPECT(fc_task_register(table, "fresh", NULL, &fresh), FC_OK);
    check_config(fresh, 0, 1, FC_NO_CAP); /* no cap reads FC_NO_CAP */

    /* A cap of 0 is refused, at registration and update, with a reason
     * that names FC_NO_CAP; FC_NO_CAP removes a cap, reads back as itself,
     * and what fc_task_config_get wrote registers as it is. */
    other = unset_config();
    other.max_concurrency = 0;
    /* The layout that brought FC_NO_CAP, whatever sizeof says later. */
    other.size = 224;
    EXPECT(fc_task_register(table, "zero", &other, &untouched), FC_ERR_INVALID_ARGUMENT);
    CHECK(strstr(fc_last_error(), "max_concurrency 0 is refused") != NULL &&
              strstr(fc_last_error(), "FC_NO_CAP") != NULL,
          "the reason names the way to remove a cap: %s", fc_last_error());
    EXPECT(fc_task_update(task, &other), FC_ERR_INVALID_ARGUMENT);
    check_config(task, 50, 2, 16);
    other.max_concurrency = FC_NO_CAP;
    EXPECT(fc_task_update(task, &other), FC_OK);
    check_config(task, 50, 2, FC_NO_CAP);
    nocap = NULL;
    EXPECT(fc_task_register(table, "api", &other, &nocap), FC_OK);
    fc_task_free(nocap);
    other.max_concurrency = 16;
    EXPECT(fc_task_update(task, &other), FC_OK);
    check_config(task, 50, 2, 16);
    CHECK(untouched == SENTINEL, "failed registrations leave *out alone");

    /* A task keeps its table alive. */
    fc_table_close(table);
    EXPECT(fc_acquire(task, 1, &permit), FC_OK);
    EXPECT(fc_release(task, &permit, FC_OUTCOME_SUCCESS), FC_OK);
    test_pass("a task works after its table handle is closed");

    fc_task_free(fresh);
    fc_task_free(same);
    fc_task_free(attached);
    fc_task_free(task);
}

/* ------------------------------------------------------------------------ */
/* Decisions and statistics                                                  */
/* ------------------------------------------------------------------------ */

static void test_decisions_and_stats(void)
{
    char path[PATH_LEN];
    fc_table *table;
    fc_task *capped, *rated;
    fc_permit held[3], again, rejected, untouched, rate[2];
    struct fc_task_stats stats;

    section("decisions and statistics");
    scratch_path(path, "decisions");
    table = open_table(path, NULL);

    capped = register_task(table, "capped", 0, 1, 3);
    EXPECT(fc_acquire(capped, 1, &held[0]), FC_OK);
    EXPECT(fc_acquire(capped, 1, &held[1]), FC_OK);
    EXPECT(fc_acquire(capped, 1, &held[2]), FC_OK);
    stats = stats_of(capped);
    CHECK_EQ(stats.in_flight, 3, "in_flight with three permits held");
    CHECK_EQ(stats.held, 3, "held with three permits held");
    memset(&rejected, 0xab, sizeof rejected);
    memcpy(&untouched, &rejected, sizeof rejected);
    EXPECT(fc_acquire(capped, 1, &rejected), FC_LIMITED_CONCURRENCY);
    CHECK(memcmp(&rejected, &untouched, sizeof rejected) == 0,
          "a rejected acquire leaves *permit alone");
    sleep_ms(1);
    EXPECT(fc_release(capped, &held[0], FC_OUTCOME_SUCCESS), FC_OK);
    EXPECT(fc_acquire(capped, 1, &again), FC_OK);
    EXPECT(fc_release(capped, &held[1], FC_OUTCOME_DROPPED), FC_OK);
    EXPECT(fc_release(capped, &held[2], FC_OUTCOME_IGNORED), FC_OK);
    CHECK_EQ(stats_of(capped).in_flight, 1, "in_flight with one permit held");
    EXPECT(fc_release(capped, &again, FC_OUTCOME_IGNORED), FC_OK);

    stats = stats_of(capped);
    CHECK_EQ(stats.admitted, 4, "capped: admitted");
    CHECK_EQ(stats.limited_concurrency, 1, "capped: limited_concurrency");
    CHECK_EQ(stats.limited_local, 0, "capped: limited_local");
    CHECK_EQ(stats.limited_global, 0, "capped: limited_global");
    CHECK_EQ(stats.released_success, 1, "capped: released_success");
    CHECK_EQ(stats.released_dropped, 1, "capped: released_dropped");
    CHECK_EQ(stats.released_ignored, 2, "capped: released_ignored");
    CHECK_EQ(stats.reclaimed, 0, "capped: reclaimed");
    CHECK_EQ(stats.in_flight, 0, "capped: in_flight");
    CHECK_EQ(stats.rtt_samples, 2, "capped: rtt_samples (success and dropped)");
    /* The success release came at least 1 ms after its acquire (minus a
     * little slack for the calibration of the table's clock). */
    CHECK(stats.rtt_sum_ns >= 900000, "capped: rtt_sum_ns %" PRIu64 " >= ~1 ms",
          stats.rtt_sum_ns);

    rated = register_task(table, "rated", 10, 2, 0);
    EXPECT(fc_acquire(rated, 1, &rate[0]), FC_OK);
    EXPECT(fc_acquire(rated, 1, &rate[1]), FC_OK);
    EXPECT(fc_acquire(rated, 1, &rejected), FC_LIMITED_LOCAL);
    {
        /* 10/s with the burst of 2 spent: the next one is ~100 ms away. */
        uint64_t after = 0;
        EXPECT(fc_retry_after(rated, FC_LIMITED_LOCAL, 1, &after), FC_OK);
        CHECK(after > 80000000 && after <= 100000000, "fc_retry_after local: %" PRIu64 " ns",
              after);
        EXPECT(fc_retry_after(capped, FC_LIMITED_CONCURRENCY, 1, &after), FC_OK);
        CHECK(after == FC_RETRY_UNKNOWN, "fc_retry_after of a cap is unknown");
        CHECK(fc_retry_after(rated, FC_OK, 1, &after) >= 100 && fc_last_error()[0] != '\0',
              "fc_retry_after takes only FC_LIMITED_*");
        CHECK(fc_retry_after(rated, FC_LIMITED_LOCAL, 1, NULL) >= 100, "a NULL out-pointer");
        CHECK(fc_retry_after(NULL, FC_LIMITED_LOCAL, 1, &after) >= 100, "a NULL task");
    }
    stats = stats_of(rated);
    CHECK_EQ(stats.admitted, 2, "rated: admitted");
    CHECK_EQ(stats.limited_local, 1, "rated: limited_local");
    CHECK_EQ(stats.limited_concurrency, 0, "rated: limited_concurrency");
    CHECK_EQ(stats.in_flight, 0, "rated: in_flight (only a cap counts permits in flight)");
    EXPECT(fc_release(rated, &rate[0], FC_OUTCOME_SUCCESS), FC_OK);
    EXPECT(fc_release(rated, &rate[1], FC_OUTCOME_SUCCESS), FC_OK);
    stats = stats_of(rated);
    CHECK_EQ(stats.released_success, 2, "rated: released_success");
    CHECK_EQ(stats.in_flight, 0, "rated: in_flight after release");

    fc_task_free(rated);
    fc_task_free(capped);
    fc_table_close(table);
}

/* ------------------------------------------------------------------------ */
/* NULL pointers                                                             */
/* ------------------------------------------------------------------------ */

static void test_null_arguments(void)
{
    char path[PATH_LEN];
    fc_table *table;
    fc_task *task, *untouched_task = SENTINEL;
    fc_table_options options;
    fc_task_config config;
    fc_permit permit;
    struct fc_task_stats stats;
    uint32_t reaped;
    int64_t drift;

    section("NULL pointers");
    scratch_path(path, "null");
    EXPECT(fc_table_options_init(NULL, sizeof options), FC_ERR_INVALID_ARGUMENT);
    EXPECT(fc_table_options_init(&options, sizeof options), FC_OK);
    EXPECT(fc_table_open(path, &options, NULL), FC_ERR_INVALID_ARGUMENT);
    EXPECT(fc_table_open(path, NULL, NULL), FC_ERR_INVALID_ARGUMENT);
    /* A NULL path means the host's default table: out is checked first, so
     * this must fail without touching /dev/shm/flowctrl. */
    EXPECT(fc_table_open(NULL, NULL, NULL), FC_ERR_INVALID_ARGUMENT);
    CHECK(!file_exists(path), "no table created by the failed opens");
    fc_table_close(NULL);
    test_pass("fc_table_close(NULL) returns");

    table = open_table(path, NULL);
    EXPECT(fc_table_reap(NULL, &reaped), FC_ERR_INVALID_ARGUMENT);
    EXPECT(fc_table_reap(table, NULL), FC_ERR_INVALID_ARGUMENT);
    EXPECT(fc_task_config_init(NULL, sizeof config), FC_ERR_INVALID_ARGUMENT);
    EXPECT(fc_task_config_init(&config, sizeof config), FC_OK);
    EXPECT(fc_task_register(NULL, "t", &config, &untouched_task), FC_ERR_INVALID_ARGUMENT);
    EXPECT(fc_task_register(table, NULL, &config, &untouched_task), FC_ERR_INVALID_ARGUMENT);
    EXPECT(fc_task_register(table, "t", &config, NULL), FC_ERR_INVALID_ARGUMENT);
    EXPECT(fc_task_register(NULL, NULL, NULL, NULL), FC_ERR_INVALID_ARGUMENT);
    CHECK(untouched_task == SENTINEL, "failed registrations leave *out alone");
    task = register_task(table, "t", 0, 1, 0);

    EXPECT(fc_task_update(NULL, &config), FC_ERR_INVALID_ARGUMENT);
    EXPECT(fc_task_update(task, NULL), FC_ERR_INVALID_ARGUMENT);
    EXPECT(fc_task_config_get(NULL, &config), FC_ERR_INVALID_ARGUMENT);
    EXPECT(fc_task_config_get(task, NULL), FC_ERR_INVALID_ARGUMENT);
    EXPECT(fc_acquire(NULL, 1, &permit), FC_ERR_INVALID_ARGUMENT);
    EXPECT(fc_acquire(task, 1, NULL), FC_ERR_INVALID_ARGUMENT);
    CHECK_EQ(stats_of(task).admitted, 0, "nothing admitted by the failed acquires");
    EXPECT(fc_acquire(task, 1, &permit), FC_OK);
    EXPECT(fc_release(NULL, &permit, FC_OUTCOME_SUCCESS), FC_ERR_INVALID_ARGUMENT);
    EXPECT(fc_release(task, NULL, FC_OUTCOME_SUCCESS), FC_ERR_INVALID_ARGUMENT);
    EXPECT(fc_release(task, &permit, FC_OUTCOME_SUCCESS), FC_OK);
    EXPECT(fc_task_stats_init(NULL, sizeof stats), FC_ERR_INVALID_ARGUMENT);
    EXPECT(fc_task_stats_init(&stats, sizeof stats), FC_OK);
    EXPECT(fc_task_stats(NULL, &stats), FC_ERR_INVALID_ARGUMENT);
    EXPECT(fc_task_stats(task, NULL), FC_ERR_INVALID_ARGUMENT);
    EXPECT(fc_task_check(NULL, &drift), FC_ERR_INVALID_ARGUMENT);
    EXPECT(fc_task_check(task, NULL), FC_ERR_INVALID_ARGUMENT);
    fc_task_free(NULL);
    test_pass("fc_task_free(NULL) returns");

    fc_task_free(task);
    fc_table_close(table);
}

/* ------------------------------------------------------------------------ */
/* Task names                                                                */
/* ------------------------------------------------------------------------ */

static void test_names(void)
{
    char path[PATH_LEN], longest[FC_NAME_MAX + 1], too_long[FC_NAME_MAX + 2];
    fc_table *table;
    fc_task *task = NULL, *untouched = SENTINEL;

    section("task names");
    scratch_path(path, "names");
    table = open_table(path, NULL);
    memset(longest, 'x', FC_NAME_MAX);
    longest[FC_NAME_MAX] = '\0';
    memset(too_long, 'y', FC_NAME_MAX + 1);
    too_long[FC_NAME_MAX + 1] = '\0';

    EXPECT(fc_task_register(table, NULL, NULL, &untouched), FC_ERR_INVALID_ARGUMENT);
    EXPECT(fc_task_register(table, "", NULL, &untouched), FC_ERR_INVALID_NAME);
    EXPECT(fc_task_register(table, too_long, NULL, &untouched), FC_ERR_INVALID_NAME);
    EXPECT(fc_task_register(table, "\xff\xfe", NULL, &untouched), FC_ERR_INVALID_NAME);
    EXPECT(fc_task_register(table, "caf\xc3", NULL, &untouched), FC_ERR_INVALID_NAME);
    EXPECT(fc_task_register(table, "a\tb", NULL, &untouched), FC_ERR_INVALID_NAME);
    EXPECT(fc_task_register(table, "a\nb", NULL, &untouched), FC_ERR_INVALID_NAME);
    EXPECT(fc_task_register(table, "a\x7f", NULL, &untouched), FC_ERR_INVALID_NAME);
    CHECK(untouched == SENTINEL, "failed registrations leave *out alone");

    EXPECT(fc_task_register(table, longest, NULL, &task), FC_OK);
    fc_task_free(task);
    EXPECT(fc_task_register(table, "caf\xc3\xa9 \xe2\x86\x92 backend", NULL, &task), FC_OK);
    fc_task_free(task);
    EXPECT(fc_task_register(table, "a", NULL, &task), FC_OK);
    fc_task_free(task);
    fc_table_close(table);
}

/* ------------------------------------------------------------------------ */
/* Bad n, bad permits, bad outcomes                                          */
/* ------------------------------------------------------------------------ */

static void test_bad_requests_and_permits(void)
{
    char path[PATH_LEN], other_path[PATH_LEN];
    fc_table *table, *other_table;
    fc_task *rated, *capped, *other, *twin;
    fc_permit a, permit;

    section("bad n, bad permits, bad outcomes");
    scratch_path(path, "permits");
    table = open_table(path, NULL);
    rated = register_task(table, "rated", 10, 2, 0);
    capped = register_task(table, "capped", 0, 1, 3);
    other = register_task(table, "other", 0, 1, 3);

    EXPECT(fc_acquire(rated, 0, &permit), FC_ERR_INVALID_ARGUMENT);
    EXPECT(fc_acquire(rated, 3, &permit), FC_ERR_INVALID_ARGUMENT);
    EXPECT(fc_acquire(capped, 0, &permit), FC_ERR_INVALID_ARGUMENT);
    EXPECT(fc_acquire(capped, 4, &permit), FC_ERR_INVALID_ARGUMENT);
    EXPECT(fc_acquire(capped, UINT32_MAX, &permit), FC_ERR_INVALID_ARGUMENT);
    CHECK_EQ(stats_of(capped).admitted, 0, "nothing admitted by the refused acquires");
    EXPECT(fc_acquire(rated, 2, &permit), FC_OK);
    CHECK_EQ(permit.n, 2, "permit.n of an acquire of the whole burst");
    EXPECT(fc_release(rated, &permit, FC_OUTCOME_IGNORED), FC_OK);
    EXPECT(fc_acquire(capped, 3, &permit), FC_OK);
    EXPECT(fc_release(capped, &permit, FC_OUTCOME_IGNORED), FC_OK);

    /* A permit of another task, of another table, with a bad outcome. */
    EXPECT(fc_acquire(capped, 1, &a), FC_OK);
    EXPECT(fc_release(other, &a, FC_OUTCOME_SUCCESS), FC_ERR_INVALID_ARGUMENT);
    CHECK_EQ(stats_of(other).in_flight, 0, "other task: in_flight untouched");
    CHECK_EQ(stats_of(capped).in_flight, 1, "capped: the permit is still held");

    scratch_path(other_path, "permits-twin");
    other_table = open_table(other_path, NULL);
    twin = register_task(other_table, "capped", 0, 1, 3); /* same slot index */
    EXPECT(fc_release(twin, &a, FC_OUTCOME_SUCCESS), FC_ERR_INVALID_ARGUMENT);

    EXPECT(fc_release(capped, &a, 7), FC_ERR_INVALID_ARGUMENT);
    EXPECT(fc_release(capped, &a, UINT32_MAX), FC_ERR_INVALID_ARGUMENT);
    CHECK_EQ(stats_of(capped).in_flight, 1, "capped: still held after the refused releases");
    memset(&permit, 0, sizeof permit);
    EXPECT(fc_release(capped, &permit, FC_OUTCOME_SUCCESS), FC_ERR_INVALID_ARGUMENT);

    /* A permit altered in caller memory is refused: one byte of each field. */
    {
        static const struct {
            size_t offset;
            const char *field;
        } fields[] = {
            { offsetof(fc_permit, acquired_at), "acquired_at" },
            { offsetof(fc_permit, owner), "owner" },
            { offsetof(fc_permit, task), "task" },
            { offsetof(fc_permit, n), "n" },
            { offsetof(fc_permit, flags), "flags" },
            { offsetof(fc_permit, reserved0), "reserved0" },
            { offsetof(fc_permit, check), "check" },
            { offsetof(fc_permit, check) + 7, "check (its last byte)" },
            { offsetof(fc_permit, reserved), "reserved[0]" },
            { offsetof(fc_permit, reserved) + 2 * sizeof(uint64_t), "reserved[2]" },
        };
        size_t i;
        for (i = 0; i < sizeof fields / sizeof fields[0]; i++) {
            permit = a;
            ((unsigned char *)&permit)[fields[i].offset] ^= 1;
            if (fc_release(capped, &permit, FC_OUTCOME_SUCCESS) != FC_ERR_INVALID_ARGUMENT)
                FAIL_AT(__LINE__, "a permit with a bit of %s flipped was not refused", fields[i].field);
            CHECK(fc_last_error()[0] != '\0', "a permit with a bit of %s flipped is refused: %s",
                  fields[i].field, fc_last_error());
        }
    }
    CHECK_EQ(stats_of(capped).in_flight, 1, "capped: still held after the altered permits");
    EXPECT(fc_release(capped, &a, FC_OUTCOME_DROPPED), FC_OK);
    CHECK_EQ(stats_of(capped).in_flight, 0, "capped: in_flight after the real release");

    fc_task_free(twin);
    fc_table_close(other_table);
    fc_task_free(other);
    fc_task_free(capped);
    fc_task_free(rated);
    fc_table_close(table);
}

/* ------------------------------------------------------------------------ */
/* Bad table files, options, paths                                           */
/* ------------------------------------------------------------------------ */

static void test_bad_files(void)
{
    char path[PATH_LEN];
    unsigned char garbage[8192];
    char magic[8];
    uint32_t version;
    struct stat st;
    fc_table *untouched = SENTINEL;
    int fd;

    section("bad table files");
    scratch_path(path, "garbage");
    fd = open("/dev/urandom", O_RDONLY);
    CHECK(fd >= 0 && read(fd, garbage, sizeof garbage) == (ssize_t)sizeof garbage,
          "read %zu random bytes", sizeof garbage);
    close(fd);
    write_file(path, garbage, sizeof garbage);
    EXPECT(fc_table_open(path, NULL, &untouched), FC_ERR_CORRUPT);
    CHECK(untouched == SENTINEL, "a failed open leaves *out alone");

    scratch_path(path, "empty");
    write_file(path, "", 0);
    EXPECT(fc_table_open(path, NULL, &untouched), FC_ERR_CORRUPT);

    make_table_file(path, "truncated");
    CHECK(stat(path, &st) == 0 && st.st_size > 0, "%s is %jd bytes", path,
          (intmax_t)st.st_size);
    CHECK(truncate(path, st.st_size / 2) == 0, "truncate it to %jd bytes",
          (intmax_t)(st.st_size / 2));
    EXPECT(fc_table_open(path, NULL, &untouched), FC_ERR_CORRUPT);

    make_table_file(path, "version999");
    fd = open(path, O_RDWR);
    CHECK(fd >= 0 && pread(fd, magic, sizeof magic, 0) == (ssize_t)sizeof magic &&
              memcmp(magic, "FLOWCTRL", sizeof magic) == 0,
          "the table starts with the magic \"FLOWCTRL\"");
    CHECK(pread(fd, &version, sizeof version, 8) == (ssize_t)sizeof version &&
              version == FC_LAYOUT_VERSION,
          "layout_version at byte 8 is FC_LAYOUT_VERSION (%d)", FC_LAYOUT_VERSION);
    version = 999;
    CHECK(pwrite(fd, &version, sizeof version, 8) == (ssize_t)sizeof version &&
              close(fd) == 0,
          "overwrite layout_version with 999");
    EXPECT(fc_table_open(path, NULL, &untouched), FC_ERR_INCOMPATIBLE);
    CHECK(untouched == SENTINEL, "failed opens leave *out alone");
}

static void test_bad_options_and_paths(void)
{
    char path[PATH_LEN], missing[PATH_LEN];
    fc_table_options options;
    fc_table *untouched = SENTINEL;

    section("bad options and paths");
    scratch_path(path, "options");
    EXPECT(fc_table_options_init(&options, sizeof options), FC_OK);
    options.capacity = 0;
    EXPECT(fc_table_open(path, &options, &untouched), FC_ERR_INVALID_ARGUMENT);
    EXPECT(fc_table_options_init(&options, sizeof options), FC_OK);
    options.max_processes = 0;
    EXPECT(fc_table_open(path, &options, &untouched), FC_ERR_INVALID_ARGUMENT);
    EXPECT(fc_table_options_init(&options, sizeof options), FC_OK);
    options.shared = 2;
    EXPECT(fc_table_open(path, &options, &untouched), FC_ERR_INVALID_ARGUMENT);
    EXPECT(fc_table_options_init(&options, sizeof options), FC_OK);
    options.mode = 0660; /* group-writable, without shared */
    EXPECT(fc_table_open(path, &options, &untouched), FC_ERR_INVALID_ARGUMENT);
    options.mode = 0;
    EXPECT(fc_table_open(path, &options, &untouched), FC_ERR_INVALID_ARGUMENT);
    options.mode = 0400; /* owner cannot write */
    EXPECT(fc_table_open(path, &options, &untouched), FC_ERR_INVALID_ARGUMENT);
    options.mode = 04600; /* not only permission bits */
    EXPECT(fc_table_open(path, &options, &untouched), FC_ERR_INVALID_ARGUMENT);
    CHECK(!file_exists(path), "no table created with invalid options");

    scratch_path(missing, "missing/table");
    EXPECT(fc_table_open(missing, NULL, &untouched), FC_ERR_IO);
    EXPECT(fc_table_open(g_work, NULL, &untouched), FC_ERR_IO); /* a directory */
    CHECK(untouched == SENTINEL, "failed opens leave *out alone");
}

/*
 * A pooled table (`lanes`): a handle takes a lane set on its first use of a
 * task; a second handle finding the pool empty still decides a rate, and is
 * refused a capped permit as concurrency, counted as unlaned.
 */
static void test_lane_pool(void)
{
    char path[PATH_LEN], other[PATH_LEN];
    fc_table_options options;
    fc_table *first, *second, *untouched = SENTINEL;
    fc_task *capped, *capped2, *rated2;
    fc_permit permit, refused, rate;
    struct fc_task_stats stats;

    section("pooled lanes");
    scratch_path(path, "pooled");
    scratch_path(other, "pooled-bad");
    EXPECT(fc_table_options_init(&options, sizeof options), FC_OK);
    CHECK_EQ(options.lanes, 0, "lanes defaults to a set per pair");
    options.capacity = 4;
    options.max_processes = 4;
    options.lanes = 17; /* more than 4 x 4 pairs */
    EXPECT(fc_table_open(other, &options, &untouched), FC_ERR_INVALID_ARGUMENT);
    options.lanes = 1;
    options.reserved2 = 1;
    EXPECT(fc_table_open(other, &options, &untouched), FC_ERR_INVALID_ARGUMENT);
    CHECK(!file_exists(other) && untouched == SENTINEL, "refused options create nothing");
    options.reserved2 = 0;
    first = open_table(path, &options);
    second = open_table(path, NULL); /* a second attachment, same process */
    capped = register_task(first, "capped", 0, 1, 2);
    EXPECT(fc_acquire(capped, 1, &permit), FC_OK); /* takes the one set */
    capped2 = register_task(second, "capped", 0, 1, 2);
    rated2 = register_task(second, "rated", 1000.0, 5, 0);
    EXPECT(fc_acquire(capped2, 1, &refused), FC_LIMITED_CONCURRENCY);
    EXPECT(fc_acquire(rated2, 1, &rate), FC_OK);
    EXPECT(fc_release(rated2, &rate, FC_OUTCOME_SUCCESS), FC_OK);
    stats = stats_of(capped);
    CHECK_EQ(stats.in_flight, 1, "pooled: the first handle's permit counts");
    CHECK_EQ(stats.unlaned, 1, "pooled: the refused acquire is unlaned");
    CHECK_EQ(stats.unlaned_refused, 1, "pooled: and refused for want of lanes");
    CHECK_EQ(stats.limited_concurrency, 1, "pooled: counted as concurrency too");
    stats = stats_of(rated2);
    CHECK_EQ(stats.admitted, 1, "pooled: a rate decided without lanes");
    CHECK_EQ(stats.released_success, 1, "pooled: and its release counted");
    CHECK_EQ(stats.unlaned, 1, "pooled: on the task's shared line");
    EXPECT(fc_release(capped, &permit, FC_OUTCOME_SUCCESS), FC_OK);
    fc_task_free(capped);
    fc_task_free(capped2);
    fc_task_free(rated2);
    fc_table_close(second);
    fc_table_close(first);
}

/*
 * A table this process cannot open. Root bypasses file modes, so as root a
 * child drops to uid 65534 ("nobody") and tries a 0600 table of root's.
 */
static void test_permission(void)
{
    char path[PATH_LEN];
    fc_table *untouched = SENTINEL;
    pid_t pid;
    int code;

    section("permission denied");
    make_table_file(path, "private");
    check_mode(path, 0600, "the table");
    if (geteuid() != 0) {
        CHECK(chmod(path, 0) == 0, "chmod 000 %s", path);
        EXPECT(fc_table_open(path, NULL, &untouched), FC_ERR_PERMISSION);
        CHECK(chmod(path, 0600) == 0, "chmod 600 %s", path);
        return;
    }
    /* Let nobody reach the file, so that only its own mode stands in the way. */
    CHECK(chmod(g_work, 0711) == 0, "chmod 711 %s", g_work);
    fflush(stdout);
    pid = fork();
    if (pid < 0)
        FAIL_AT(__LINE__, "fork: %s", strerror(errno));
    if (pid == 0) {
        struct stat st;
        fc_table *table = NULL;
        fc_status status;
        alarm(30); /* never hang the test */
        if (setgid(65534) != 0 || setuid(65534) != 0)
            _exit(251);
        if (stat(path, &st) != 0)
            _exit(252); /* a parent directory is not searchable */
        status = fc_table_open(path, NULL, &table);
        if (status >= FC_ERR_INVALID_ARGUMENT && fc_last_error()[0] == '\0')
            _exit(250);
        _exit((int)status);
    }
    code = wait_exit_code(pid);
    CHECK(code != 250, "the child's error came with a reason in fc_last_error()");
    CHECK(code != 251, "the child dropped to uid 65534 (setuid must work to test this as root)");
    CHECK(code != 252, "the table is reachable for uid 65534 (scratch dir mode?)");
    CHECK_STATUS(code, FC_ERR_PERMISSION, "uid 65534: fc_table_open(0600 table of root)");
    CHECK(chmod(g_work, 0700) == 0, "chmod 700 %s", g_work);
}

/* ------------------------------------------------------------------------ */
/* Full tables                                                               */
/* ------------------------------------------------------------------------ */

static void test_full_tables(void)
{
    char path[PATH_LEN];
    fc_table_options options;
    fc_table *table, *untouched_table = SENTINEL;
    fc_task *a, *b, *again, *untouched = SENTINEL;

    section("full tables");
    scratch_path(path, "capacity2");
    EXPECT(fc_table_options_init(&options, sizeof options), FC_OK);
    options.capacity = 2;
    table = open_table(path, &options);
    a = register_task(table, "a", 0, 1, 0);
    b = register_task(table, "b", 0, 1, 0);
    EXPECT(fc_task_register(table, "c", NULL, &untouched), FC_ERR_TABLE_FULL);
    CHECK(untouched == SENTINEL, "a failed registration leaves *out alone");
    again = NULL;
    EXPECT(fc_task_register(table, "a", NULL, &again), FC_OK);
    fc_task_free(again);
    fc_task_free(b);
    fc_task_free(a);
    fc_table_close(table);

    /* Every handle attaches on its own: with one attachment slot, a second
     * handle in the same process is one too many. */
    scratch_path(path, "processes1");
    EXPECT(fc_table_options_init(&options, sizeof options), FC_OK);
    options.max_processes = 1;
    table = open_table(path, &options);
    EXPECT(fc_table_open(path, NULL, &untouched_table), FC_ERR_TOO_MANY_PROCESSES);
    CHECK(untouched_table == SENTINEL, "a failed open leaves *out alone");
    fc_table_close(table);
    fc_table_close(open_table(path, NULL));
    test_pass("the slot is free again once the first handle is closed");
}

/* ------------------------------------------------------------------------ */
/* Threads                                                                   */
/* ------------------------------------------------------------------------ */

enum { THREADS = 4, PAIRS_PER_THREAD = 100000, THREAD_CAP = 2 };

struct worker {
    const fc_task *task;
    pthread_t thread;
    uint64_t pairs;          /* acquired and released */
    uint64_t limited;        /* FC_LIMITED_CONCURRENCY answers */
    uint32_t max_in_flight;  /* the most permits in flight this thread saw */
    uint32_t error;          /* the first unexpected status, FC_OK if none */
    char error_text[256];    /* what failed, with fc_last_error() */
    int clean_last_error;    /* fc_last_error() was "" when the thread began */
};

/* Permits the workers hold, counted by them: incremented after an admitted
 * acquire, decremented before its release, so never above the library's
 * own count. */
static uint32_t g_held;

static void worker_failed(struct worker *w, const char *call, fc_status status)
{
    w->error = status;
    snprintf(w->error_text, sizeof w->error_text,
             "%s after %" PRIu64 " pairs: %s", call, w->pairs, fc_last_error());
}

static void *worker_main(void *arg)
{
    struct worker *w = arg;
    w->clean_last_error = fc_last_error() != NULL && fc_last_error()[0] == '\0';
    while (w->pairs < PAIRS_PER_THREAD) {
        fc_permit permit;
        uint32_t held;
        fc_status status = fc_acquire(w->task, 1, &permit);
        if (status == FC_LIMITED_CONCURRENCY) {
            w->limited++;
            continue;
        }
        if (status != FC_OK) {
            worker_failed(w, "fc_acquire", status);
            break;
        }
        held = __atomic_add_fetch(&g_held, 1, __ATOMIC_SEQ_CST);
        if (held > w->max_in_flight)
            w->max_in_flight = held;
        __atomic_sub_fetch(&g_held, 1, __ATOMIC_SEQ_CST);
        status = fc_release(w->task, &permit, FC_OUTCOME_SUCCESS);
        if (status != FC_OK) {
            worker_failed(w, "fc_release", status);
            break;
        }
        w->pairs++;
    }
    return NULL;
}

static void test_threads(void)
{
    char path[PATH_LEN];
    fc_table *table;
    fc_task *task;
    struct worker workers[THREADS];
    struct fc_task_stats stats;
    uint64_t limited = 0;
    uint32_t max_in_flight = 0;
    unsigned checked = 0, timed_out = 0;
    int64_t drift = -1;
    int i;

    section("threads");
    scratch_path(path, "threads");
    table = open_table(path, NULL);
    task = register_task(table, "shared", 0, 1, THREAD_CAP);
    memset(workers, 0, sizeof workers);
    for (i = 0; i < THREADS; i++) {
        workers[i].task = task;
        CHECK(pthread_create(&workers[i].thread, NULL, worker_main, &workers[i]) == 0,
              "start worker %d", i);
    }
    /* fc_task_check under traffic: it finds an instant to compare at (no
     * drift then), or says it found none. */
    for (i = 0; i < 20; i++) {
        int64_t moving = -1;
        fc_status status = fc_task_check(task, &moving);
        if (status == FC_OK && moving != 0)
            FAIL_AT(__LINE__, "fc_task_check under traffic: drift %" PRId64, moving);
        if (status != FC_OK && status != FC_ERR_TIMEOUT)
            FAIL_AT(__LINE__, "fc_task_check under traffic -> %s: %s", status_name(status),
                    fc_last_error());
        if (status == FC_OK)
            checked++;
        else
            timed_out++;
    }
    test_pass("fc_task_check under traffic: %u with no drift, %u timed out", checked, timed_out);
    for (i = 0; i < THREADS; i++) {
        struct worker *w = &workers[i];
        CHECK(pthread_join(w->thread, NULL) == 0, "join worker %d", i);
        if (w->error != FC_OK)
            FAIL_AT(__LINE__, "worker %d: %s -> %s", i, w->error_text, status_name(w->error));
        CHECK(w->clean_last_error, "worker %d: fc_last_error() is per thread (empty at start)", i);
        CHECK_EQ(w->pairs, PAIRS_PER_THREAD, "worker: acquire/release pairs");
        limited += w->limited;
        if (w->max_in_flight > max_in_flight)
            max_in_flight = w->max_in_flight;
    }
    CHECK(max_in_flight <= THREAD_CAP, "at most %d permits in flight at once (saw %" PRIu32 ")",
          THREAD_CAP, max_in_flight);
    stats = stats_of(task);
    CHECK_EQ(stats.admitted, (uint64_t)THREADS * PAIRS_PER_THREAD, "admitted");
    CHECK_EQ(stats.released_success, (uint64_t)THREADS * PAIRS_PER_THREAD, "released_success");
    CHECK_EQ(stats.rtt_samples, (uint64_t)THREADS * PAIRS_PER_THREAD, "rtt_samples");
    CHECK_EQ(stats.limited_concurrency, limited, "limited_concurrency == rejections the workers saw");
    CHECK_EQ(stats.in_flight, 0, "in_flight once all threads are done");
    CHECK_EQ(stats.held, 0, "held once all threads are done");
    EXPECT(fc_task_check(task, &drift), FC_OK);
    CHECK_EQ(drift, 0, "drift once all threads are done");
    fc_task_free(task);
    fc_table_close(table);
}

/* ------------------------------------------------------------------------ */
/* fork                                                                      */
/* ------------------------------------------------------------------------ */

/*
 * A pre-fork server: the master holds 2 of 10 permits, a worker forked from
 * it takes the other 8 through the inherited handles and is SIGKILLed; the
 * reaper must give its 8 back quickly, and the master's 2 must stay held.
 */
static void test_fork_reclaim(void)
{
    char path[PATH_LEN];
    fc_table *table;
    fc_task *task;
    fc_permit mine[2], extra, theirs;
    struct fc_task_stats stats;
    fc_status status;
    uint64_t start, elapsed_ns;
    uint32_t child_status = FC_ERR_INTERNAL;
    int ready[2], wstatus;
    pid_t pid;

    section("fork: a SIGKILLed worker's permits are reclaimed");
    scratch_path(path, "prefork");
    table = open_table(path, NULL);
    task = register_task(table, "prefork", 0, 1, 10);
    EXPECT(fc_acquire(task, 1, &mine[0]), FC_OK);
    EXPECT(fc_acquire(task, 1, &mine[1]), FC_OK);
    CHECK(pipe(ready) == 0, "pipe");
    fflush(stdout);
    pid = fork();
    if (pid < 0)
        FAIL_AT(__LINE__, "fork: %s", strerror(errno));
    if (pid == 0) {
        int i;
        close(ready[0]);
        alarm(30); /* never outlive a parent that failed to kill us */
        status = FC_OK;
        for (i = 0; i < 8 && status == FC_OK; i++)
            status = fc_acquire(task, 1, &theirs);
        if (write(ready[1], &status, sizeof status) != (ssize_t)sizeof status)
            _exit(1);
        for (;;)
            pause();
    }
    g_child = pid;
    close(ready[1]);
    CHECK(read(ready[0], &child_status, sizeof child_status) == (ssize_t)sizeof child_status,
          "the child reported");
    close(ready[0]);
    CHECK_STATUS(child_status, FC_OK, "child: 8 x fc_acquire(task, 1) through the inherited handles");
    CHECK_EQ(stats_of(task).in_flight, 10, "in_flight with the child's 8 and the parent's 2");
    EXPECT(fc_acquire(task, 1, &extra), FC_LIMITED_CONCURRENCY);

    CHECK(kill(pid, SIGKILL) == 0, "SIGKILL the child");
    CHECK(waitpid(pid, &wstatus, 0) == pid && WIFSIGNALED(wstatus) &&
              WTERMSIG(wstatus) == SIGKILL,
          "the child died by SIGKILL");
    g_child = -1;
    start = monotonic_ns();
    do {
        status = fc_acquire(task, 8, &theirs);
        elapsed_ns = monotonic_ns() - start;
    } while (status == FC_LIMITED_CONCURRENCY && elapsed_ns < 2000000000u);
    CHECK_STATUS(status, FC_OK, "fc_acquire(task, 8) after the child died");
    CHECK(elapsed_ns <= 100000000u, "the child's 8 permits came back within 100 ms (%.1f ms)",
          (double)elapsed_ns / 1e6);
    stats = stats_of(task);
    CHECK_EQ(stats.reclaimed, 8, "reclaimed");
    CHECK_EQ(stats.in_flight, 10, "in_flight: the parent's 2 are still held, plus the new 8");
    EXPECT(fc_release(task, &mine[0], FC_OUTCOME_SUCCESS), FC_OK);
    EXPECT(fc_release(task, &mine[1], FC_OUTCOME_SUCCESS), FC_OK);
    EXPECT(fc_release(task, &theirs, FC_OUTCOME_SUCCESS), FC_OK);
    CHECK_EQ(stats_of(task).in_flight, 0, "in_flight after the parent released everything");
    fc_task_free(task);
    fc_table_close(table);
}

/* A permit acquired before fork cannot be released by the child. */
static void test_permit_does_not_cross_fork(void)
{
    char path[PATH_LEN];
    fc_table *table;
    fc_task *task;
    fc_permit permit;
    pid_t pid;
    int code;

    section("fork: permits do not cross fork");
    scratch_path(path, "crossfork");
    table = open_table(path, NULL);
    task = register_task(table, "crossfork", 0, 1, 4);
    EXPECT(fc_acquire(task, 1, &permit), FC_OK);
    fflush(stdout);
    pid = fork();
    if (pid < 0)
        FAIL_AT(__LINE__, "fork: %s", strerror(errno));
    if (pid == 0) {
        fc_status status;
        alarm(30); /* never hang the test */
        status = fc_release(task, &permit, FC_OUTCOME_SUCCESS);
        if (status >= FC_ERR_INVALID_ARGUMENT && fc_last_error()[0] == '\0')
            _exit(250);
        _exit((int)status);
    }
    code = wait_exit_code(pid);
    CHECK(code != 250, "the child's error came with a reason in fc_last_error()");
    CHECK_STATUS(code, FC_ERR_INVALID_ARGUMENT, "child: fc_release(parent's permit)");
    CHECK_EQ(stats_of(task).in_flight, 1, "the parent still holds its permit");
    EXPECT(fc_release(task, &permit, FC_OUTCOME_SUCCESS), FC_OK);
    CHECK_EQ(stats_of(task).in_flight, 0, "in_flight after the parent's release");
    fc_task_free(task);
    fc_table_close(table);
}

/* ------------------------------------------------------------------------ */
/* Releasing a permit twice                                                  */
/* ------------------------------------------------------------------------ */

/* Releases a permit on a thread of its own. */
struct release_job {
    const fc_task *task;
    fc_permit *permit;
    fc_status status;
    char reason[256];
};

static void *release_main(void *arg)
{
    struct release_job *job = arg;
    job->status = fc_release(job->task, job->permit, FC_OUTCOME_SUCCESS);
    snprintf(job->reason, sizeof job->reason, "%s", fc_last_error());
    return NULL;
}

static fc_status release_on_thread(const fc_task *task, fc_permit *permit)
{
    struct release_job job;
    pthread_t thread;
    memset(&job, 0, sizeof job);
    job.task = task;
    job.permit = permit;
    job.status = FC_ERR_INTERNAL;
    CHECK(pthread_create(&thread, NULL, release_main, &job) == 0 &&
              pthread_join(thread, NULL) == 0,
          "release on another thread");
    if (job.status >= FC_ERR_INVALID_ARGUMENT)
        printf("      (that thread's fc_last_error(): %s)\n", job.reason);
    return job.status;
}

static void test_double_release(void)
{
    char path[PATH_LEN];
    fc_table *table;
    fc_task *task;
    fc_permit a, b, copy;
    struct fc_task_stats stats;

    section("releasing a permit twice");
    scratch_path(path, "twice");
    table = open_table(path, NULL);
    task = register_task(table, "twice", 0, 1, 3);

    /* fc_release marks the permit it was given: a second release of the
     * same memory is refused, even while other permits of the task are
     * held, from this thread and from another. */
    EXPECT(fc_acquire(task, 1, &a), FC_OK);
    EXPECT(fc_acquire(task, 1, &b), FC_OK);
    EXPECT(fc_release(task, &a, FC_OUTCOME_SUCCESS), FC_OK);
    EXPECT(fc_release(task, &a, FC_OUTCOME_SUCCESS), FC_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(release_on_thread(task, &a), FC_ERR_INVALID_ARGUMENT,
                 "the released permit again, from another thread");
    stats = stats_of(task);
    CHECK_EQ(stats.in_flight, 1, "in_flight: b is still held");
    CHECK_EQ(stats.released_success, 1, "released_success after the refused releases");
    CHECK_STATUS(release_on_thread(task, &b), FC_OK, "b, released on another thread");
    EXPECT(fc_release(task, &b, FC_OUTCOME_SUCCESS), FC_ERR_INVALID_ARGUMENT);
    CHECK_EQ(stats_of(task).in_flight, 0, "in_flight once both are released");

    /* The mark cannot reach a copy taken before the release: the copy is
     * refused when the process holds fewer permits than it names... */
    EXPECT(fc_acquire(task, 1, &a), FC_OK);
    copy = a;
    EXPECT(fc_release(task, &a, FC_OUTCOME_SUCCESS), FC_OK);
    EXPECT(fc_release(task, &copy, FC_OUTCOME_SUCCESS), FC_ERR_INVALID_ARGUMENT);

    /* ... and otherwise takes another permit's place, whose release is then
     * refused: the totals stay consistent, never more released than admitted. */
    EXPECT(fc_acquire(task, 1, &a), FC_OK);
    EXPECT(fc_acquire(task, 1, &b), FC_OK);
    copy = a;
    EXPECT(fc_release(task, &a, FC_OUTCOME_SUCCESS), FC_OK);
    EXPECT(fc_release(task, &copy, FC_OUTCOME_SUCCESS), FC_OK);
    EXPECT(fc_release(task, &b, FC_OUTCOME_SUCCESS), FC_ERR_INVALID_ARGUMENT);
    stats = stats_of(task);
    CHECK_EQ(stats.admitted, 5, "admitted");
    CHECK_EQ(stats.released_success, 5, "released_success never exceeds admitted");
    CHECK_EQ(stats.in_flight, 0, "in_flight once the process holds nothing");
    CHECK_EQ(stats.held, 0, "held once the process holds nothing");

    fc_task_free(task);
    fc_table_close(table);
}

/* ------------------------------------------------------------------------ */
/* Structs that grow                                                          */
/* ------------------------------------------------------------------------ */

static int all_bytes(const void *p, size_t len, unsigned char value)
{
    const unsigned char *bytes = p;
    size_t i;
    for (i = 0; i < len; i++)
        if (bytes[i] != value)
            return 0;
    return 1;
}

/*
 * A size below the smallest version, above 4096, or never set is refused
 * with a reason; a struct larger than this header's (a caller built against
 * a newer one) has its tail neither read nor written. The smallest versions
 * themselves are run by tests/c/compat_v1.c.
 */
/* ------------------------------------------------------------------------ */
/* Global quota (embedded store; Redis runs in tests/c/quota_worker.c)       */
/* ------------------------------------------------------------------------ */

static void test_global_quota(void)
{
    char path[PATH_LEN];
    fc_table *table = NULL;
    fc_table_options options;
    fc_task *global, *local;
    fc_task_config config;
    fc_permit permit;
    struct fc_task_stats stats;
    int64_t granted = -1;
    unsigned admitted = 0;
    fc_status s;

    section("global quota");
    scratch_path(path, "global");
    fc_table_options_init(&options, sizeof options);
    options.store_url = "http://127.0.0.1:6379";
    EXPECT(fc_table_open(path, &options, &table), FC_ERR_INVALID_ARGUMENT);
    options.store_url = "redis://127.0.0.1:1/0?timeout_ms=0";
    EXPECT(fc_table_open(path, &options, &table), FC_ERR_INVALID_ARGUMENT);
    options.store_url = NULL;
    options.host_id = "two words";
    EXPECT(fc_table_open(path, &options, &table), FC_ERR_INVALID_ARGUMENT);
    options.host_id = "edge-7";
    options.reserved = 1;
    EXPECT(fc_table_open(path, &options, &table), FC_ERR_INVALID_ARGUMENT);
    table = open_table(path, NULL);

    fc_task_config_init(&config, sizeof config);
    config.global_rate = -2;
    EXPECT(fc_task_register(table, "g", &config, &global), FC_ERR_INVALID_ARGUMENT);
    config.global_rate = 0.0 / 0.0;
    EXPECT(fc_task_register(table, "g", &config, &global), FC_ERR_INVALID_ARGUMENT);
    config.global_rate = 100;
    config.slice_ms = 50;
    EXPECT(fc_task_register(table, "g", &config, &global), FC_ERR_INVALID_ARGUMENT);
    config.slice_ms = 60000; /* one slice of 6000 permits for the whole test */
    config.global_burst = 6000; /* all released at once */
    /* The fallback policy: a rate only with FC_FALLBACK_RATE, which needs one. */
    config.fallback = FC_FALLBACK_DENY;
    config.fallback_rate = 50;
    EXPECT(fc_task_register(table, "g", &config, &global), FC_ERR_INVALID_ARGUMENT);
    config.fallback = FC_FALLBACK_RATE;
    config.fallback_rate = FC_RATE_UNSET;
    EXPECT(fc_task_register(table, "g", &config, &global), FC_ERR_INVALID_ARGUMENT);
    config.fallback = 7;
    EXPECT(fc_task_register(table, "g", &config, &global), FC_ERR_INVALID_ARGUMENT);
    config.fallback = FC_UNSET;
    config.reserved3 = 1;
    EXPECT(fc_task_register(table, "g", &config, &global), FC_ERR_INVALID_ARGUMENT);
    config.reserved3 = 0;
    EXPECT(fc_task_register(table, "g", &config, &global), FC_OK);
    {
        fc_task_config got, update;
        fc_task_config_init(&got, sizeof got);
        EXPECT(fc_task_config_get(global, &got), FC_OK);
        CHECK_EQ(got.fallback, FC_FALLBACK_SHARE, "the default fallback is the host's share");
        CHECK(got.fallback_rate == 0, "no fallback rate with share");
        fc_task_config_init(&update, sizeof update);
        update.fallback = FC_FALLBACK_RATE;
        update.fallback_rate = 25;
        EXPECT(fc_task_update(global, &update), FC_OK);
        EXPECT(fc_task_config_get(global, &got), FC_OK);
        CHECK(got.fallback == FC_FALLBACK_RATE && got.fallback_rate == 25,
              "fallback FC_FALLBACK_RATE at 25/s");
        update.fallback = FC_UNSET;
        update.fallback_rate = 0; /* as in 0.3: 0 is the default policy */
        EXPECT(fc_task_update(global, &update), FC_OK);
        EXPECT(fc_task_config_get(global, &got), FC_OK);
        CHECK_EQ(got.fallback, FC_FALLBACK_SHARE, "fallback_rate 0 is share again");
    }
    local = register_task(table, "l", 0, 1, 0);

    EXPECT(fc_pull_quota(NULL, 1, &granted), FC_ERR_INVALID_ARGUMENT);
    EXPECT(fc_pull_quota(global, 1, NULL), FC_ERR_INVALID_ARGUMENT);
    EXPECT(fc_pull_quota(global, 0, &granted), FC_ERR_INVALID_ARGUMENT);
    EXPECT(fc_pull_quota(global, -5, &granted), FC_ERR_INVALID_ARGUMENT);
    EXPECT(fc_pull_quota(global, 6001, &granted), FC_ERR_INVALID_ARGUMENT);
    EXPECT(fc_pull_quota(local, 1, &granted), FC_ERR_INVALID_ARGUMENT);
    EXPECT(fc_pull_quota(global, 100, &granted), FC_OK);
    CHECK_EQ(granted, 100, "granted by a warm-up pull");
    stats = stats_of(global);
    CHECK_EQ(stats.quota_state, FC_QUOTA_OPEN, "quota_state after a pull");
    CHECK_EQ(stats.quota_granted, 100, "quota_granted");
    CHECK(stats.pulls >= 1 && stats.failed_pulls == 0, "pulls counted");

    while ((s = fc_acquire(global, 1, &permit)) == FC_OK) {
        admitted++;
        EXPECT(fc_release(global, &permit, FC_OUTCOME_SUCCESS), FC_OK);
    }
    CHECK_STATUS(s, FC_LIMITED_GLOBAL, "acquire once the slice is spent");
    CHECK_EQ(admitted, 6000, "admitted in one slice of 6000");
    EXPECT(fc_pull_quota(global, 10, &granted), FC_LIMITED_GLOBAL);
    CHECK_EQ(granted, 0, "granted from an exhausted slice");
    stats = stats_of(global);
    CHECK_EQ(stats.quota_state, FC_QUOTA_LIMITED, "quota_state when exhausted");
    CHECK_EQ(stats.limited_global, 1, "limited_global");
    CHECK_EQ(stats.limited_fallback, 0, "limited_fallback: the store never failed");
    CHECK_EQ(stats.hosts_seen, 1, "hosts_seen: the embedded store has one host");
    stats = stats_of(local);
    CHECK_EQ(stats.quota_state, FC_QUOTA_NONE, "quota_state without a global rate");

    fc_task_free(global);
    fc_task_free(local);
    fc_table_close(table);

    /* A fleet's store: opening does not connect; reading an unreachable one
     * is FC_ERR_STORE; bad arguments are refused before anything happens. */
    {
        fc_store *store = SENTINEL;
        fc_host_record records[4];
        uint32_t count = 99;
        CHECK_EQ(sizeof(fc_host_record), 128, "sizeof(fc_host_record)");
        EXPECT(fc_store_open(NULL, &store), FC_ERR_INVALID_ARGUMENT);
        EXPECT(fc_store_open("http://x", &store), FC_ERR_INVALID_ARGUMENT);
        CHECK(store == SENTINEL, "no handle for a bad URL");
        EXPECT(fc_store_open("redis://127.0.0.1:1/0?connect_timeout_ms=50", NULL),
               FC_ERR_INVALID_ARGUMENT);
        EXPECT(fc_store_open("redis://127.0.0.1:1/0?connect_timeout_ms=50", &store), FC_OK);
        EXPECT(fc_store_fleet(store, "g", 1000, records, 4, &count), FC_ERR_STORE);
        CHECK(strstr(fc_last_error(), "127.0.0.1:1") != NULL, "the store is named: %s",
              fc_last_error());
        EXPECT(fc_store_fleet(store, "", 1000, records, 4, &count), FC_ERR_INVALID_NAME);
        EXPECT(fc_store_fleet(store, "g", 1000, NULL, 4, &count), FC_ERR_INVALID_ARGUMENT);
        EXPECT(fc_store_fleet(store, "g", 1000, records, 4, NULL), FC_ERR_INVALID_ARGUMENT);
        EXPECT(fc_store_fleet(NULL, "g", 1000, records, 4, &count), FC_ERR_INVALID_ARGUMENT);
        CHECK_EQ(count, 99, "count untouched on errors");
        fc_store_free(store);
        fc_store_free(NULL);
    }
}

static void test_sized_structs(void)
{
    char path[PATH_LEN], other_path[PATH_LEN];
    fc_table_options options;
    fc_task_config config;
    struct fc_task_stats stats, before;
    fc_table *table, *untouched_table = SENTINEL;
    fc_task *task, *untouched = SENTINEL;
    fc_permit permit;
    struct {
        struct fc_task_stats stats;
        unsigned char newer[40];
    } big_stats;
    struct {
        fc_task_config config;
        unsigned char newer[40];
    } big_config;
    struct {
        fc_table_options options;
        unsigned char newer[40];
    } big_options;

    section("structs that grow: sizes");
    scratch_path(path, "sized");
    scratch_path(other_path, "sized-other");
    EXPECT(fc_table_options_init(&options, 0), FC_ERR_INVALID_ARGUMENT);
    EXPECT(fc_table_options_init(&options, 15), FC_ERR_INVALID_ARGUMENT);
    CHECK(strstr(fc_last_error(), "fc_table_options_init") != NULL,
          "the reason names the init function");
    EXPECT(fc_table_options_init(&options, 4097), FC_ERR_INVALID_ARGUMENT);
    EXPECT(fc_table_options_init(&options, 16), FC_OK);
    EXPECT(fc_task_config_init(&config, 23), FC_ERR_INVALID_ARGUMENT);
    EXPECT(fc_task_config_init(&config, 4097), FC_ERR_INVALID_ARGUMENT);
    EXPECT(fc_task_stats_init(&stats, 95), FC_ERR_INVALID_ARGUMENT);
    EXPECT(fc_task_stats_init(&stats, 4097), FC_ERR_INVALID_ARGUMENT);
    EXPECT(fc_task_stats_init(&stats, 96), FC_OK);

    table = open_table(path, NULL);
    task = register_task(table, "sized", 0, 1, 4);

    /* Structs whose size was never set. */
    memset(&options, 0, sizeof options);
    EXPECT(fc_table_open(other_path, &options, &untouched_table), FC_ERR_INVALID_ARGUMENT);
    CHECK(!file_exists(other_path) && untouched_table == SENTINEL,
          "no table opened with options of size 0");
    memset(&config, 0, sizeof config);
    EXPECT(fc_task_register(table, "sized", &config, &untouched), FC_ERR_INVALID_ARGUMENT);
    EXPECT(fc_task_update(task, &config), FC_ERR_INVALID_ARGUMENT);
    EXPECT(fc_task_config_get(task, &config), FC_ERR_INVALID_ARGUMENT);
    CHECK(all_bytes(&config, sizeof config, 0), "a refused fc_task_config_get writes nothing");
    memset(&stats, 0xff, sizeof stats);
    memcpy(&before, &stats, sizeof stats);
    EXPECT(fc_task_stats(task, &stats), FC_ERR_INVALID_ARGUMENT);
    CHECK(memcmp(&stats, &before, sizeof stats) == 0, "a refused fc_task_stats writes nothing");
    CHECK(untouched == SENTINEL, "failed registrations leave *out alone");

    /* Larger structs, from a newer header: their tails are left alone. */
    EXPECT(fc_acquire(task, 1, &permit), FC_OK);
    memset(&big_stats, 0x5a, sizeof big_stats);
    EXPECT(fc_task_stats_init(&big_stats.stats, sizeof big_stats), FC_OK);
    CHECK_EQ(big_stats.stats.size, sizeof big_stats, "big stats: size as given");
    CHECK(all_bytes(big_stats.newer, sizeof big_stats.newer, 0x5a),
          "fc_task_stats_init leaves the unknown tail alone");
    EXPECT(fc_task_stats(task, &big_stats.stats), FC_OK);
    CHECK_EQ(big_stats.stats.size, sizeof big_stats, "fc_task_stats keeps the caller's size");
    CHECK_EQ(big_stats.stats.in_flight, 1, "big stats: in_flight");
    CHECK_EQ(big_stats.stats.held, 1, "big stats: held");
    CHECK(all_bytes(big_stats.newer, sizeof big_stats.newer, 0x5a),
          "fc_task_stats leaves the unknown tail alone");
    EXPECT(fc_release(task, &permit, FC_OUTCOME_SUCCESS), FC_OK);

    memset(&big_config, 0x5a, sizeof big_config);
    EXPECT(fc_task_config_init(&big_config.config, sizeof big_config), FC_OK);
    CHECK(all_bytes(big_config.newer, sizeof big_config.newer, 0x5a),
          "fc_task_config_init leaves the unknown tail alone");
    big_config.config.max_concurrency = 4;
    EXPECT(fc_task_register(table, "sized", &big_config.config, &untouched), FC_OK);
    fc_task_free(untouched);
    EXPECT(fc_task_update(task, &big_config.config), FC_OK);
    EXPECT(fc_task_config_get(task, &big_config.config), FC_OK);
    CHECK(big_config.config.burst == 1 && big_config.config.local_rate == 0 &&
              big_config.config.max_concurrency == 4,
          "fc_task_config_get into a big struct");
    CHECK(all_bytes(big_config.newer, sizeof big_config.newer, 0x5a),
          "fc_task_config_get leaves the unknown tail alone");

    memset(&big_options, 0x5a, sizeof big_options);
    EXPECT(fc_table_options_init(&big_options.options, sizeof big_options), FC_OK);
    CHECK(all_bytes(big_options.newer, sizeof big_options.newer, 0x5a),
          "fc_table_options_init leaves the unknown tail alone");
    fc_table_close(open_table(other_path, &big_options.options));
    test_pass("a table opened with big options (their tail not read)");

    fc_task_free(task);
    fc_table_close(table);
}

/* ------------------------------------------------------------------------ */
/* Unset fields                                                              */
/* ------------------------------------------------------------------------ */

static void test_unset_fields(void)
{
    char path[PATH_LEN];
    fc_table *table;
    fc_task *task, *other, *fresh, *untouched = SENTINEL;
    fc_task_config config;
    pid_t pid;
    int code;

    section("unset fields: compared and changed only when set");
    scratch_path(path, "unset");

    /* Another process registers the task with every field set. */
    fflush(stdout);
    pid = fork();
    if (pid < 0)
        FAIL_AT(__LINE__, "fork: %s", strerror(errno));
    if (pid == 0) {
        fc_table *t = NULL;
        fc_task *k = NULL;
        fc_task_config c;
        fc_status status;
        alarm(30); /* never hang the test */
        status = fc_table_open(path, NULL, &t);
        if (status == FC_OK)
            status = fc_task_config_init(&c, sizeof c);
        c.local_rate = 100;
        c.burst = 5;
        c.max_concurrency = 4;
        if (status == FC_OK)
            status = fc_task_register(t, "shared", &c, &k);
        fc_task_free(k);
        fc_table_close(t);
        _exit((int)status);
    }
    code = wait_exit_code(pid);
    CHECK_STATUS(code, FC_OK, "another process: register \"shared\" (100/s, burst 5, cap 4)");

    /* A worker that sets only local_rate attaches to it. */
    table = open_table(path, NULL);
    config = unset_config();
    config.local_rate = 100;
    task = NULL;
    EXPECT(fc_task_register(table, "shared", &config, &task), FC_OK);
    check_config(task, 100, 5, 4);
    config = unset_config();
    config.max_concurrency = 4;
    other = NULL;
    EXPECT(fc_task_register(table, "shared", &config, &other), FC_OK);
    fc_task_free(other);
    config = unset_config();
    other = NULL;
    EXPECT(fc_task_register(table, "shared", &config, &other), FC_OK);
    fc_task_free(other);
    config = unset_config();
    config.local_rate = 50;
    EXPECT(fc_task_register(table, "shared", &config, &untouched), FC_ERR_CONFIG_MISMATCH);
    config = unset_config();
    config.max_concurrency = 3;
    EXPECT(fc_task_register(table, "shared", &config, &untouched), FC_ERR_CONFIG_MISMATCH);
    CHECK(untouched == SENTINEL, "failed registrations leave *out alone");

    /* An update changes the set fields only. */
    config = unset_config();
    config.max_concurrency = 6;
    EXPECT(fc_task_update(task, &config), FC_OK);
    check_config(task, 100, 5, 6);
    config = unset_config();
    config.local_rate = 0;
    EXPECT(fc_task_update(task, &config), FC_OK);
    check_config(task, 0, 5, 6);
    config = unset_config();
    EXPECT(fc_task_update(task, &config), FC_OK);
    check_config(task, 0, 5, 6);

    /* A new task takes the defaults for what is unset. */
    config = unset_config();
    config.burst = 3;
    fresh = NULL;
    EXPECT(fc_task_register(table, "fresh", &config, &fresh), FC_OK);
    check_config(fresh, 0, 3, FC_NO_CAP);

    fc_task_free(fresh);
    fc_task_free(task);
    fc_table_close(table);
}

/*
 * Permits taken while the task had no cap hold no concurrency: setting a cap
 * later does not count them, and releasing them does not lower the count of
 * the permits taken since.
 */
static void test_cap_set_later(void)
{
    char path[PATH_LEN];
    fc_table *table;
    fc_task *task;
    fc_task_config config;
    fc_permit uncapped[2], capped, rejected;
    struct fc_task_stats stats;
    int64_t drift = -1;

    section("permits taken without a cap are not given to a cap set later");
    scratch_path(path, "later");
    table = open_table(path, NULL);
    task = register_task(table, "later", 0, 1, 0);
    EXPECT(fc_acquire(task, 1, &uncapped[0]), FC_OK);
    EXPECT(fc_acquire(task, 1, &uncapped[1]), FC_OK);
    CHECK_EQ(stats_of(task).in_flight, 0, "in_flight: nothing counted without a cap");

    config = unset_config();
    config.max_concurrency = 1;
    EXPECT(fc_task_update(task, &config), FC_OK);
    EXPECT(fc_acquire(task, 1, &capped), FC_OK);
    EXPECT(fc_acquire(task, 1, &rejected), FC_LIMITED_CONCURRENCY);
    EXPECT(fc_release(task, &uncapped[0], FC_OUTCOME_SUCCESS), FC_OK);
    EXPECT(fc_release(task, &uncapped[1], FC_OUTCOME_SUCCESS), FC_OK);
    stats = stats_of(task);
    CHECK_EQ(stats.in_flight, 1, "in_flight: the capped permit, after the others' release");
    CHECK_EQ(stats.held, 1, "held");
    EXPECT(fc_acquire(task, 1, &rejected), FC_LIMITED_CONCURRENCY);
    EXPECT(fc_task_check(task, &drift), FC_OK);
    CHECK_EQ(drift, 0, "fc_task_check: no drift");
    EXPECT(fc_release(task, &capped, FC_OUTCOME_SUCCESS), FC_OK);
    CHECK_EQ(stats_of(task).in_flight, 0, "in_flight after the capped permit's release");
    EXPECT(fc_acquire(task, 1, &capped), FC_OK);
    EXPECT(fc_release(task, &capped, FC_OUTCOME_SUCCESS), FC_OK);

    fc_task_free(task);
    fc_table_close(table);
}

/* ------------------------------------------------------------------------ */
/* fc_task_check, fc_table_reap                                              */
/* ------------------------------------------------------------------------ */

static void test_check_and_reap(void)
{
    char path[PATH_LEN];
    fc_table *table;
    fc_task *task;
    fc_permit mine, theirs;
    fc_status status, child_status = FC_ERR_INTERNAL;
    struct fc_task_stats stats;
    int64_t drift = -1;
    uint32_t reaped = 12345;
    int ready[2], wstatus;
    pid_t pid;

    section("fc_task_check, fc_table_reap, fc_table_check");
    scratch_path(path, "reap");
    table = open_table(path, NULL);
    task = register_task(table, "reap", 0, 1, 4);
    EXPECT(fc_acquire(task, 1, &mine), FC_OK);
    EXPECT(fc_task_check(task, &drift), FC_OK);
    CHECK_EQ(drift, 0, "drift with one permit held");
    EXPECT(fc_table_reap(table, &reaped), FC_OK);
    CHECK_EQ(reaped, 0, "nothing to reap");

    CHECK(pipe(ready) == 0, "pipe");
    fflush(stdout);
    pid = fork();
    if (pid < 0)
        FAIL_AT(__LINE__, "fork: %s", strerror(errno));
    if (pid == 0) {
        close(ready[0]);
        alarm(30); /* never outlive a parent that failed to kill us */
        status = fc_acquire(task, 2, &theirs);
        if (write(ready[1], &status, sizeof status) != (ssize_t)sizeof status)
            _exit(1);
        for (;;)
            pause();
    }
    g_child = pid;
    close(ready[1]);
    CHECK(read(ready[0], &child_status, sizeof child_status) == (ssize_t)sizeof child_status,
          "the child reported");
    close(ready[0]);
    CHECK_STATUS(child_status, FC_OK, "child: fc_acquire(task, 2)");
    CHECK(kill(pid, SIGKILL) == 0, "SIGKILL the child");
    CHECK(waitpid(pid, &wstatus, 0) == pid && WIFSIGNALED(wstatus) &&
              WTERMSIG(wstatus) == SIGKILL,
          "the child died by SIGKILL");
    g_child = -1;
    /* This handle's background reaper and fc_table_reap take turns: once
     * the call returns, the dead child's permits are back, whoever found it. */
    EXPECT(fc_table_reap(table, &reaped), FC_OK);
    CHECK(reaped <= 1, "fc_table_reap found %" PRIu32 " dead process(es)", reaped);
    stats = stats_of(task);
    CHECK_EQ(stats.in_flight, 1, "in_flight once fc_table_reap returned: only mine");
    CHECK_EQ(stats.reclaimed, 2, "reclaimed");
    EXPECT(fc_task_check(task, &drift), FC_OK);
    CHECK_EQ(drift, 0, "drift after the reap");

    /* The table-wide check: sound, then replaced under our feet. */
    {
        fc_table_report report;
        EXPECT(fc_table_report_init(&report, sizeof report), FC_OK);
        CHECK_EQ(report.size, sizeof report, "fc_table_report.size");
        EXPECT(fc_table_check(table, &report), FC_OK);
        CHECK(report.replaced == 0 && report.drifted == 0 && report.worst_task[0] == '\0',
              "a sound table: replaced %u drifted %u", report.replaced, report.drifted);
        CHECK_EQ(report.config_errors, 0, "no config file errors");
        CHECK(fc_table_check(NULL, &report) >= 100 && fc_last_error()[0] != '\0',
              "fc_table_check(NULL) is an error");
        CHECK(fc_table_check(table, NULL) >= 100, "fc_table_check(table, NULL) is an error");
        CHECK(unlink(path) == 0, "unlink the table");
        EXPECT(fc_table_check(table, &report), FC_OK);
        CHECK_EQ(report.replaced, 1, "a deleted table is reported replaced");
    }
    EXPECT(fc_release(task, &mine, FC_OUTCOME_SUCCESS), FC_OK);
    fc_task_free(task);
    fc_table_close(table);
}

/* ------------------------------------------------------------------------ */
/* A process whose main thread exited                                        */
/* ------------------------------------------------------------------------ */

struct holder {
    const char *path;
    int ready, go; /* pipe ends */
};

/* The holder's worker: takes both permits of a capped task, reports, waits
 * for the word, releases, and ends the process with the outcome. */
static void *holder_main(void *arg)
{
    struct holder *h = arg;
    fc_table *table = NULL;
    fc_task *task = NULL;
    fc_permit permits[2];
    fc_status status;
    char word;

    status = fc_table_open(h->path, NULL, &table);
    if (status == FC_OK)
        status = fc_task_register(table, "mainexit", NULL, &task);
    if (status == FC_OK)
        status = fc_acquire(task, 1, &permits[0]);
    if (status == FC_OK)
        status = fc_acquire(task, 1, &permits[1]);
    if (write(h->ready, &status, sizeof status) != (ssize_t)sizeof status || status != FC_OK)
        _exit(status == FC_OK ? 1 : (int)status);
    if (read(h->go, &word, 1) != 1)
        _exit(2);
    status = fc_release(task, &permits[0], FC_OUTCOME_SUCCESS);
    if (status == FC_OK)
        status = fc_release(task, &permits[1], FC_OUTCOME_SUCCESS);
    fc_task_free(task);
    fc_table_close(table);
    _exit((int)status);
}

/* The state letter of a process's main thread, from /proc/<pid>/stat. */
static char main_thread_state(pid_t pid)
{
    char path[64], text[512], *paren;
    FILE *f;
    size_t len;
    snprintf(path, sizeof path, "/proc/%d/stat", (int)pid);
    f = fopen(path, "r");
    if (f == NULL)
        return '?';
    len = fread(text, 1, sizeof text - 1, f);
    fclose(f);
    text[len] = '\0';
    paren = strrchr(text, ')');
    return paren != NULL && paren[1] == ' ' ? paren[2] : '?';
}

/*
 * A process whose main thread called pthread_exit lives on in its other
 * threads: its permits must stay held (liveness is the kernel's file lock,
 * not the state of the main thread).
 */
static void test_main_thread_exited(void)
{
    char path[PATH_LEN];
    fc_table *table;
    fc_task *task;
    fc_permit permit;
    fc_status child_status = FC_ERR_INTERNAL;
    struct fc_task_stats stats;
    uint32_t reaped = 12345;
    int ready[2], go[2], code;
    pid_t pid;

    section("a process whose main thread exited keeps its permits");
    scratch_path(path, "mainexit");
    table = open_table(path, NULL);
    task = register_task(table, "mainexit", 0, 1, 2);
    CHECK(pipe(ready) == 0 && pipe(go) == 0, "pipes");
    fflush(stdout);
    pid = fork();
    if (pid < 0)
        FAIL_AT(__LINE__, "fork: %s", strerror(errno));
    if (pid == 0) {
        static struct holder h;
        pthread_t worker;
        alarm(30); /* never hang the test */
        close(ready[0]);
        close(go[1]);
        h.path = path;
        h.ready = ready[1];
        h.go = go[0];
        if (pthread_create(&worker, NULL, holder_main, &h) != 0)
            _exit(3);
        pthread_exit(NULL); /* the main thread ends; the worker goes on */
    }
    g_child = pid;
    close(ready[1]);
    close(go[0]);
    CHECK(read(ready[0], &child_status, sizeof child_status) == (ssize_t)sizeof child_status,
          "the child's worker reported");
    CHECK_STATUS(child_status, FC_OK, "child's worker: both permits of the cap acquired");
    sleep_ms(150);
    CHECK(main_thread_state(pid) == 'Z',
          "the child's main thread has exited (state %c), its worker runs on",
          main_thread_state(pid));
    EXPECT(fc_table_reap(table, &reaped), FC_OK);
    CHECK_EQ(reaped, 0, "fc_table_reap finds no dead process");
    EXPECT(fc_acquire(task, 1, &permit), FC_LIMITED_CONCURRENCY);
    stats = stats_of(task);
    CHECK_EQ(stats.in_flight, 2, "in_flight: the child's 2, after 150 ms");
    CHECK_EQ(stats.reclaimed, 0, "reclaimed: nothing taken from the living child");
    CHECK(write(go[1], "g", 1) == 1, "tell the child's worker to release");
    close(go[1]);
    close(ready[0]);
    code = wait_exit_code(pid);
    g_child = -1;
    CHECK_STATUS(code, FC_OK, "child's worker: released both and exited");
    stats = stats_of(task);
    CHECK_EQ(stats.in_flight, 0, "in_flight after the child's releases");
    CHECK_EQ(stats.released_success, 2, "released_success: by the child, not reclaimed");
    CHECK_EQ(stats.reclaimed, 0, "reclaimed");
    EXPECT(fc_acquire(task, 2, &permit), FC_OK);
    EXPECT(fc_release(task, &permit, FC_OUTCOME_SUCCESS), FC_OK);
    fc_task_free(task);
    fc_table_close(table);
}

/* ------------------------------------------------------------------------ */
/* Tables that are not to be trusted                                         */
/* ------------------------------------------------------------------------ */

static void test_untrusted_tables(void)
{
    char path[PATH_LEN], link_path[PATH_LEN], dangling[PATH_LEN], nowhere[PATH_LEN];
    fc_table_options options;
    fc_table *untouched = SENTINEL;
    struct stat st;

    section("tables that are not to be trusted");

    /* A symbolic link at the path is never followed. */
    make_table_file(path, "trusted");
    scratch_path(link_path, "link");
    CHECK(symlink(path, link_path) == 0, "symlink %s -> %s", link_path, path);
    EXPECT(fc_table_open(link_path, NULL, &untouched), FC_ERR_PERMISSION);
    scratch_path(dangling, "dangling");
    scratch_path(nowhere, "nowhere"); /* never created */
    CHECK(symlink(nowhere, dangling) == 0, "symlink %s -> %s (missing)", dangling, nowhere);
    EXPECT(fc_table_open(dangling, NULL, &untouched), FC_ERR_PERMISSION);
    CHECK(!file_exists(nowhere), "nothing created through the dangling link");
    CHECK(lstat(link_path, &st) == 0 && S_ISLNK(st.st_mode), "the link is left as it was");

    /* Nor is a special file. */
    scratch_path(path, "fifo");
    CHECK(mkfifo(path, 0600) == 0, "mkfifo %s", path);
    EXPECT(fc_table_open(path, NULL, &untouched), FC_ERR_PERMISSION);

    /* A table others may write is refused unless shared is asked for. */
    make_table_file(path, "writable");
    CHECK(chmod(path, 0666) == 0, "chmod 666 %s", path);
    EXPECT(fc_table_open(path, NULL, &untouched), FC_ERR_PERMISSION);
    EXPECT(fc_table_options_init(&options, sizeof options), FC_OK);
    options.shared = 1;
    fc_table_close(open_table(path, &options));
    test_pass("opened with shared = 1");

    scratch_path(path, "shared");
    options.mode = 0660;
    fc_table_close(open_table(path, &options));
    check_mode(path, 0660, "a new shared table with mode 0660");
    EXPECT(fc_table_open(path, NULL, &untouched), FC_ERR_PERMISSION);

    /* A table of another owner: a squatter's, as far as we know. */
    if (geteuid() != 0) {
        printf("skip  a table owned by another uid: needs root to chown one\n");
        CHECK(untouched == SENTINEL, "failed opens leave *out alone");
        return;
    }
    make_table_file(path, "squatted");
    CHECK(chown(path, 65534, 65534) == 0, "chown 65534:65534 %s", path);
    EXPECT(fc_table_open(path, NULL, &untouched), FC_ERR_PERMISSION);
    EXPECT(fc_table_options_init(&options, sizeof options), FC_OK);
    options.owner_uid = 0;
    EXPECT(fc_table_open(path, &options, &untouched), FC_ERR_PERMISSION);
    options.owner_uid = 65534;
    fc_table_close(open_table(path, &options));
    test_pass("opened with owner_uid = 65534");
    CHECK(untouched == SENTINEL, "failed opens leave *out alone");
}

/* ------------------------------------------------------------------------ */

/* ------------------------------------------------------------------------ */
/* Balancers                                                                 */
/* ------------------------------------------------------------------------ */

static void test_balancers(void)
{
    char path[PATH_LEN];
    fc_table_options options;
    fc_table *table;
    fc_balancer_config config;
    fc_balancer *lb = NULL, *none = NULL;
    fc_pick_options pick_options;
    struct fc_pick pick, other;
    fc_backend_stats stats[4];
    const char *addresses[3] = {"10.0.0.1:80", "10.0.0.2:80", "10.0.0.3:80"};
    const char *twice[2] = {"10.0.0.1:80", "10.0.0.1:80"};
    const char *spaced[1] = {"10.0.0.1 :80"};
    char long_address[80];
    const char *too_long[1] = {long_address};
    uint32_t weights[3] = {1, 1, 2};
    uint32_t zero[1] = {0};
    uint32_t exclude_all[3] = {0, 1, 2};
    uint32_t exclude_two[2] = {0, 2};
    uint32_t allowed = 0, i, retries = 0;
    size_t count = 0;

    section("balancers");
    scratch_path(path, "balancers");
    REQUIRE_OK(fc_table_options_init(&options, sizeof options), "options init");
    options.balancers = 2;
    options.backends_per_balancer = 4;
    table = open_table(path, &options);
    REQUIRE_OK(fc_balancer_config_init(&config, sizeof config), "balancer config init");
    CHECK_EQ(config.slow_start_ms, 30000, "default slow start");
    REQUIRE_OK(fc_balancer_register(table, "api", &config, &lb), "register balancer");
    EXPECT(fc_balancer_register(table, "api", NULL, NULL), FC_ERR_INVALID_ARGUMENT);
    config.decay_ms = 1;
    EXPECT(fc_balancer_register(table, "api", &config, &none), FC_ERR_CONFIG_MISMATCH);

    /* Bad backend lists. */
    EXPECT(fc_balancer_set_backends(lb, addresses, NULL, 0), FC_ERR_INVALID_ARGUMENT);
    EXPECT(fc_balancer_set_backends(lb, twice, NULL, 2), FC_ERR_INVALID_ARGUMENT);
    EXPECT(fc_balancer_set_backends(lb, addresses, zero, 1), FC_ERR_INVALID_ARGUMENT);
    EXPECT(fc_balancer_set_backends(lb, spaced, NULL, 1), FC_ERR_INVALID_NAME);
    memset(long_address, 'a', 64);
    long_address[64] = '\0';
    EXPECT(fc_balancer_set_backends(lb, too_long, NULL, 1), FC_ERR_INVALID_NAME);
    EXPECT(fc_balancer_set_backends(lb, NULL, NULL, 2), FC_ERR_INVALID_ARGUMENT);
    EXPECT(fc_pick(lb, NULL, &pick), FC_ERR_INVALID_ARGUMENT); /* no backends */
    REQUIRE_OK(fc_balancer_set_backends(lb, addresses, weights, 3), "set 3 backends");

    /* Pick and done; the address is readable from the pick. */
    REQUIRE_OK(fc_pick(lb, NULL, &pick), "pick");
    CHECK(pick.backend < 3, "backend index %" PRIu32 " is one of the three", pick.backend);
    CHECK(strcmp(pick.address, addresses[pick.backend]) == 0, "address %s", pick.address);
    CHECK_EQ(pick.address_len, strlen(addresses[pick.backend]), "address_len");
    REQUIRE_OK(fc_pick_done(lb, &pick, FC_OUTCOME_SUCCESS), "done");
    EXPECT(fc_pick_done(lb, &pick, FC_OUTCOME_SUCCESS), FC_ERR_INVALID_ARGUMENT);
    REQUIRE_OK(fc_pick(lb, NULL, &pick), "pick again");
    other = pick;
    other.backend = 99;
    EXPECT(fc_pick_done(lb, &other, FC_OUTCOME_SUCCESS), FC_ERR_INVALID_ARGUMENT);
    EXPECT(fc_pick_done(lb, &pick, 7), FC_ERR_INVALID_ARGUMENT);
    REQUIRE_OK(fc_pick_done_with(lb, &pick, FC_OUTCOME_SUCCESS, 5000000, 0.25),
               "done with an RTT and a load");

    /* Exclusion: a retry avoids the backend that failed. */
    REQUIRE_OK(fc_pick_options_init(&pick_options, sizeof pick_options), "pick options init");
    pick_options.exclude = exclude_all;
    pick_options.exclude_count = 3;
    EXPECT(fc_pick(lb, &pick_options, &pick), FC_ERR_INVALID_ARGUMENT);
    pick_options.exclude = NULL;
    EXPECT(fc_pick(lb, &pick_options, &pick), FC_ERR_INVALID_ARGUMENT);
    pick_options.exclude = exclude_two;
    pick_options.exclude_count = 2;
    REQUIRE_OK(fc_pick(lb, &pick_options, &pick), "pick excluding 0 and 2");
    CHECK_EQ(pick.backend, 1, "the one backend left");
    REQUIRE_OK(fc_pick_done(lb, &pick, FC_OUTCOME_DROPPED), "a failure");
    /* Four more in a row eject it (once). */
    for (i = 0; i < 4; i++) {
        REQUIRE_OK(fc_pick(lb, &pick_options, &pick), "pick excluding 0 and 2 again");
        CHECK_EQ(pick.backend, 1, "the one backend left, ejected or not");
        REQUIRE_OK(fc_pick_done(lb, &pick, FC_OUTCOME_DROPPED), "another failure");
    }
    for (i = 0; i < 200; i++) {
        REQUIRE_OK(fc_pick(lb, NULL, &pick), "pick after the failure");
        CHECK(pick.backend != 1, "the failed backend is avoided");
        REQUIRE_OK(fc_pick_done(lb, &pick, FC_OUTCOME_IGNORED), "done");
    }

    /* The retry budget: 10/s over 10 s with no other traffic to speak of. */
    for (i = 0; i < 500; i++) {
        REQUIRE_OK(fc_retry_allowed(lb, &allowed), "retry allowed");
        retries += allowed;
    }
    CHECK(retries >= 100 && retries < 200, "%" PRIu32 " retries allowed", retries);

    /* Statistics. */
    for (i = 0; i < 4; i++)
        REQUIRE_OK(fc_backend_stats_init(&stats[i], sizeof stats[i]), "stats init");
    REQUIRE_OK(fc_balancer_stats(lb, stats, 4, &count), "stats");
    CHECK_EQ(count, 3, "three backends");
    CHECK(strcmp(stats[1].address, addresses[1]) == 0, "stats address");
    CHECK_EQ(stats[1].recent_failures, 5, "the failures are counted");
    CHECK_EQ(stats[2].weight, 2, "weight");
    /* The outcome counters `flowctrl metrics` exports, since each joined:
       two successes (the ignored picks count neither way), five failures,
       one ejection. */
    CHECK_EQ(stats[0].successes + stats[1].successes + stats[2].successes, 2,
             "successes since joining");
    CHECK_EQ(stats[1].failures, 5, "failures since joining");
    CHECK_EQ(stats[0].failures + stats[2].failures, 0, "no other failure");
    CHECK_EQ(stats[1].ejections_total, 1, "one ejection started");
    CHECK_EQ(stats[0].ejections_total + stats[2].ejections_total, 0, "no other ejection");
    /* A caller compiled before the counters (160-byte elements): each
       element is written up to its size, the counters of a newer header
       nowhere. */
    {
        static union {
            unsigned char bytes[3 * 160 + 24];
            uint64_t align;
        } buffer;
        unsigned char *old = buffer.bytes;
        memset(old, 0x5a, sizeof buffer.bytes);
        for (i = 0; i < 3; i++)
            REQUIRE_OK(fc_backend_stats_init((fc_backend_stats *)(old + i * 160), 160),
                       "old-size stats init");
        REQUIRE_OK(fc_balancer_stats(lb, (fc_backend_stats *)old, 3, &count), "old-size stats");
        CHECK_EQ(count, 3, "three backends, old size");
        for (i = 0; i < 3; i++) {
            const fc_backend_stats *e = (const fc_backend_stats *)(old + i * 160);
            CHECK(e->size == 160 && e->index == i && strcmp(e->address, addresses[i]) == 0,
                  "old-size element %" PRIu32 ": size %" PRIu32 " index %" PRIu32, i, e->size,
                  e->index);
        }
        CHECK(all_bytes(old + 3 * 160, 24, 0x5a), "nothing written past the old elements");
    }
    CHECK_EQ(stats[0].in_flight + stats[1].in_flight + stats[2].in_flight, 0,
             "nothing in flight");
    CHECK(stats[1].rtt_ns >= 4000000000ull, "the failure costs a penalty RTT");
    REQUIRE_OK(fc_balancer_stats(lb, stats, 1, &count), "stats into a short array");
    CHECK_EQ(count, 3, "count is all backends");
    EXPECT(fc_balancer_stats(lb, NULL, 4, &count), FC_ERR_INVALID_ARGUMENT);

    /* A table created without balancer slots has none to give. */
    fc_balancer_free(lb);
    fc_balancer_free(NULL);
    fc_table_close(table);
    scratch_path(path, "no-balancers");
    options.balancers = 0;
    table = open_table(path, &options);
    EXPECT(fc_balancer_register(table, "api", NULL, &none), FC_ERR_TABLE_FULL);
    fc_table_close(table);
}


/* ------------------------------------------------------------------------ */
/* Limits per caller                                                          */
/* ------------------------------------------------------------------------ */

static void test_keyed(void)
{
    char path[PATH_LEN], keys_path[PATH_LEN + 16];
    fc_table *table;
    fc_task *task;
    fc_permit p, held[2];
    struct fc_key_state state;
    uint64_t retry_ns = 0;
    uint32_t which = 99;
    int i, admitted = 0, wstatus;
    pid_t pid;

    section("keyed: per-key rates, caps, overrides and the answers of a refusal");
    scratch_path(path, "keyed");
    table = open_table(path, NULL);
    task = register_task(table, "api", 0, 1, 0);
    EXPECT(fc_acquire_key(task, (const uint8_t *)"a", 1, 1, &p), FC_ERR_INVALID_ARGUMENT);
    CHECK(strstr(fc_last_error(), "no key limits") != NULL, "a task without keys says so: %s",
          fc_last_error());
    EXPECT(fc_task_set_keys(task, "5/second;1000/fortnight", 0, 64, 0), FC_ERR_INVALID_ARGUMENT);
    EXPECT(fc_task_set_keys(task, "5/second;7/hour", 2, 64, 0), FC_OK);
    snprintf(keys_path, sizeof keys_path, "%s.keys.", path);
    for (i = 0; i < 10; i++) {
        fc_status st = fc_acquire_key(task, (const uint8_t *)"alice", 5, 1, &p);
        if (st == FC_OK) {
            admitted++;
            EXPECT(fc_release(task, &p, FC_OUTCOME_SUCCESS), FC_OK);
        } else {
            CHECK(st == FC_LIMITED_KEY_RATE, "refused by a rate: %s", status_name(st));
        }
    }
    check_eq((uint64_t)admitted, 5, "alice admitted at most her burst of 5", __LINE__);
    EXPECT(fc_last_refusal(&retry_ns, &which), FC_OK);
    CHECK(which == 0 && retry_ns > 100000000ull && retry_ns <= 200000000ull,
          "the first rate refused, retry in (100, 200] ms: rate %u, %llu ns", which,
          (unsigned long long)retry_ns);
    /* Today's layout (56 bytes) stays accepted when the struct grows. */
    EXPECT(fc_key_state_init(&state, 56), FC_OK);
    EXPECT(fc_key_state_init(&state, sizeof state), FC_OK);
    EXPECT(fc_key_state_get(task, (const uint8_t *)"alice", 5, &state), FC_OK);
    CHECK(state.present == 1 && state.limit == 5 && state.remaining == 0,
          "her state: present, limit 5, none remaining (%u %u %u)", state.present, state.limit,
          state.remaining);
    /* The cap: two in flight, the third refused, a release lets one in. */
    EXPECT(fc_acquire_key(task, (const uint8_t *)"bob", 3, 1, &held[0]), FC_OK);
    EXPECT(fc_acquire_key(task, (const uint8_t *)"bob", 3, 1, &held[1]), FC_OK);
    EXPECT(fc_acquire_key(task, (const uint8_t *)"bob", 3, 1, &p), FC_LIMITED_KEY_CONCURRENCY);
    EXPECT(fc_release(task, &held[0], FC_OUTCOME_SUCCESS), FC_OK);
    EXPECT(fc_release(task, &held[0], FC_OUTCOME_SUCCESS), FC_ERR_INVALID_ARGUMENT);
    EXPECT(fc_acquire_key(task, (const uint8_t *)"bob", 3, 1, &held[0]), FC_OK);
    /* Overrides. */
    EXPECT(fc_task_set_key_override(task, (const uint8_t *)"vip", 3, NULL, 0, FC_KEY_UNLIMITED),
           FC_OK);
    EXPECT(fc_task_set_key_override(task, (const uint8_t *)"bad", 3, NULL, 0, FC_KEY_BLOCKED),
           FC_OK);
    for (i = 0; i < 20; i++) {
        EXPECT(fc_acquire_key(task, (const uint8_t *)"vip", 3, 1, &p), FC_OK);
        EXPECT(fc_release(task, &p, FC_OUTCOME_SUCCESS), FC_OK);
    }
    EXPECT(fc_acquire_key(task, (const uint8_t *)"bad", 3, 1, &p), FC_LIMITED_KEY_BLOCKED);
    EXPECT(fc_task_set_key_override(task, (const uint8_t *)"bad", 3, NULL, 0, FC_KEY_REMOVE),
           FC_OK);
    EXPECT(fc_acquire_key(task, (const uint8_t *)"bad", 3, 1, &p), FC_OK);
    EXPECT(fc_release(task, &p, FC_OUTCOME_SUCCESS), FC_OK);
    /* Bad input: a status and a reason, never a crash. */
    EXPECT(fc_acquire_key(task, NULL, 3, 1, &p), FC_ERR_INVALID_ARGUMENT);
    EXPECT(fc_acquire_key(task, (const uint8_t *)"x", 5000, 1, &p), FC_ERR_INVALID_ARGUMENT);
    EXPECT(fc_acquire_key(task, (const uint8_t *)"x", 1, 1, NULL), FC_ERR_INVALID_ARGUMENT);
    EXPECT(fc_task_set_keys(task, NULL, 0, 0, 0x80), FC_ERR_INVALID_ARGUMENT);
    EXPECT(fc_task_set_key_override(task, (const uint8_t *)"k", 1, NULL, 0,
                                    FC_KEY_UNLIMITED | FC_KEY_BLOCKED),
           FC_ERR_INVALID_ARGUMENT);
    /* Arguments the call would ignore are refused: rates of an unlimited
       or blocked key, anything with FC_KEY_REMOVE. */
    EXPECT(fc_task_set_key_override(task, (const uint8_t *)"k", 1, "10/second", 0,
                                    FC_KEY_UNLIMITED),
           FC_ERR_INVALID_ARGUMENT);
    CHECK(strstr(fc_last_error(), "takes no rate") != NULL, "rates of an unlimited key: %s",
          fc_last_error());
    EXPECT(fc_task_set_key_override(task, (const uint8_t *)"k", 1, "10/second", 0, FC_KEY_BLOCKED),
           FC_ERR_INVALID_ARGUMENT);
    EXPECT(fc_task_set_key_override(task, (const uint8_t *)"k", 1, "garbage", 7, FC_KEY_REMOVE),
           FC_ERR_INVALID_ARGUMENT);
    CHECK(strstr(fc_last_error(), "FC_KEY_REMOVE") != NULL, "remove with rates: %s",
          fc_last_error());
    EXPECT(fc_task_set_key_override(task, (const uint8_t *)"k", 1, NULL, 2, FC_KEY_REMOVE),
           FC_ERR_INVALID_ARGUMENT);
    EXPECT(fc_task_set_key_override(task, (const uint8_t *)"k", 1, NULL, 0,
                                    FC_KEY_REMOVE | FC_KEYS_SHADOW),
           FC_ERR_INVALID_ARGUMENT);
    EXPECT(fc_task_set_key_override(task, (const uint8_t *)"k", 1, NULL, 0,
                                    FC_KEY_REMOVE | FC_KEY_BLOCKED),
           FC_ERR_INVALID_ARGUMENT);
    EXPECT(fc_task_set_key_override(task, (const uint8_t *)"k", 1, NULL, FC_NO_CAP, FC_KEY_REMOVE),
           FC_OK);
    EXPECT(fc_key_state_get(task, (const uint8_t *)"k", 1, NULL), FC_ERR_INVALID_ARGUMENT);
    /* A forked worker holding bob's last permit is SIGKILLed: it comes back. */
    EXPECT(fc_release(task, &held[1], FC_OUTCOME_SUCCESS), FC_OK);
    fflush(stdout);
    pid = fork();
    if (pid < 0)
        FAIL_AT(__LINE__, "fork: %s", strerror(errno));
    if (pid == 0) {
        alarm(30);
        if (fc_acquire_key(task, (const uint8_t *)"bob", 3, 1, &p) != FC_OK)
            _exit(1);
        kill(getpid(), SIGKILL);
        for (;;)
            pause();
    }
    CHECK(waitpid(pid, &wstatus, 0) == pid && WIFSIGNALED(wstatus), "the worker was killed");
    {
        uint32_t reaped = 0;
        EXPECT(fc_table_reap(table, &reaped), FC_OK);
    }
    EXPECT(fc_key_state_get(task, (const uint8_t *)"bob", 3, &state), FC_OK);
    check_eq(state.in_flight, 1, "bob: the live permit only, the dead one's came back",
             __LINE__);
    EXPECT(fc_release(task, &held[0], FC_OUTCOME_SUCCESS), FC_OK);
    EXPECT(fc_key_state_get(task, (const uint8_t *)"bob", 3, &state), FC_OK);
    check_eq(state.in_flight, 0, "bob holds nothing", __LINE__);
    fc_task_free(task);
    fc_table_close(table);
    for (i = 0; i < 4096; i++) {
        char k[PATH_LEN + 32];
        snprintf(k, sizeof k, "%s%d", keys_path, i);
        if (unlink(k) == 0)
            break;
    }
}

/* Sleeps, if needed, until the wall clock's slice of `slice_ms` (the
 * embedded store's) has most of it left. */
static void early_in_a_slice(uint64_t slice_ms)
{
    struct timespec now, pause;
    uint64_t ms, into;

    clock_gettime(CLOCK_REALTIME, &now);
    ms = (uint64_t)now.tv_sec * 1000u + (uint64_t)now.tv_nsec / 1000000u;
    into = ms % slice_ms;
    if (into <= slice_ms / 2)
        return;
    ms = slice_ms - into + 5;
    pause.tv_sec = (time_t)(ms / 1000u);
    pause.tv_nsec = (long)(ms % 1000u) * 1000000L;
    nanosleep(&pause, NULL);
}

/* Admits `key` until refused (at most `most` times): the number admitted;
 * the permits are released, the refusal's status is in *refused. */
static uint64_t admit_until_refused(const fc_task *task, const char *key, int most,
                                    fc_status *refused)
{
    fc_permit p;
    uint64_t admitted = 0;
    int i;

    *refused = FC_OK;
    for (i = 0; i < most; i++) {
        fc_status st = fc_acquire_key(task, (const uint8_t *)key, strlen(key), 1, &p);
        if (st != FC_OK) {
            *refused = st;
            break;
        }
        admitted++;
        if (fc_release(task, &p, FC_OUTCOME_SUCCESS) != FC_OK)
            FAIL_AT(__LINE__, "fc_release of %s's permit: %s", key, fc_last_error());
    }
    return admitted;
}

/* EXPECT an error whose fc_last_error() names `needle`. */
#define EXPECT_SAYS(call, want, needle)                                           \
    do {                                                                          \
        EXPECT(call, want);                                                       \
        CHECK(strstr(fc_last_error(), (needle)) != NULL, "  ... and says \"%s\"", \
              (needle));                                                          \
    } while (0)

static void test_key_global(void)
{
    char path[PATH_LEN], keys_path[PATH_LEN + 16];
    fc_table *table;
    fc_task *task;
    fc_status refused;
    double count = -1;
    uint64_t period_ms = 1, slice_ms = 1, retry_ns = 0;
    uint32_t local = 99, fallback = 99, which = 99;
    int i;

    section("keyed: a global rate per key, exact per slice on a table without a store");
    scratch_path(path, "key-global");
    table = open_table(path, NULL); /* no store URL: the host is the fleet */
    task = register_task(table, "api", 0, 1, 0);
    EXPECT_SAYS(fc_task_set_key_global(task, 5, 1000, 1000, 1, FC_FALLBACK_SHARE),
                FC_ERR_INVALID_ARGUMENT, "no key limits");
    EXPECT(fc_task_set_keys(task, "1000/second", 0, 64, 0), FC_OK);
    EXPECT(fc_task_set_key_global(task, 5, 1000, 1000, 1, FC_FALLBACK_SHARE), FC_OK);
    EXPECT(fc_key_global_get(task, (const uint8_t *)"alice", 5, &count, &period_ms, &slice_ms,
                             &local, &fallback),
           FC_OK);
    CHECK(count == 5 && period_ms == 1000 && slice_ms == 1000 && local == 1 &&
              fallback == FC_FALLBACK_SHARE,
          "read back: %g per %" PRIu64 " ms, slices of %" PRIu64 " ms, local %" PRIu32
          ", fallback %" PRIu32,
          count, period_ms, slice_ms, local, fallback);
    /* 5 a slice of 1 s, 1 of them on the host's own: exactly 5, then refused. */
    early_in_a_slice(1000);
    check_eq(admit_until_refused(task, "alice", 20, &refused), 5,
             "alice admitted in one slice", __LINE__);
    CHECK_STATUS(refused, FC_LIMITED_KEY_GLOBAL, "alice's 6th request");
    EXPECT(fc_last_refusal(&retry_ns, &which), FC_OK);
    CHECK(retry_ns > 0 && retry_ns <= 1000000000ull,
          "retry at the slice's end, within 1 s: %llu ns", (unsigned long long)retry_ns);
    check_eq(admit_until_refused(task, "bob", 20, &refused), 5, "bob has a slice of his own",
             __LINE__);
    /* fc_task_set_keys keeps the global rate; an override has its own. */
    EXPECT(fc_task_set_keys(task, "500/second", 0, 64, 0), FC_OK);
    EXPECT(fc_key_global_get(task, (const uint8_t *)"carol", 5, &count, NULL, NULL, NULL, NULL),
           FC_OK);
    CHECK(count == 5, "fc_task_set_keys kept the global rate: %g", count);
    EXPECT_SAYS(fc_task_set_key_override_global(task, (const uint8_t *)"vip", 3, 2, 1000, 0, 0,
                                                FC_FALLBACK_DENY),
                FC_ERR_INVALID_ARGUMENT, "no override");
    EXPECT(fc_task_set_key_override(task, (const uint8_t *)"vip", 3, "1000/second", 0, 0), FC_OK);
    EXPECT(fc_key_global_get(task, (const uint8_t *)"vip", 3, &count, &period_ms, &slice_ms,
                             &local, &fallback),
           FC_OK);
    CHECK(count == 0 && period_ms == 0 && slice_ms == 0 && local == 0 && fallback == 0,
          "a new override has no global rate: %g", count);
    EXPECT(fc_task_set_key_override_global(task, (const uint8_t *)"vip", 3, 2, 1000, 0, 0,
                                           FC_FALLBACK_DENY),
           FC_OK);
    EXPECT(fc_task_set_key_override(task, (const uint8_t *)"vip", 3, "900/second", 0, 0), FC_OK);
    EXPECT(fc_key_global_get(task, (const uint8_t *)"vip", 3, &count, &period_ms, &slice_ms,
                             &local, &fallback),
           FC_OK);
    CHECK(count == 2 && period_ms == 1000 && slice_ms == 1000 && local == 0 &&
              fallback == FC_FALLBACK_DENY,
          "the override's global rate, kept by a new override of the key: %g, local %" PRIu32
          ", fallback %" PRIu32,
          count, local, fallback);
    early_in_a_slice(1000);
    check_eq(admit_until_refused(task, "vip", 20, &refused), 2, "vip admitted in one slice",
             __LINE__);
    CHECK_STATUS(refused, FC_LIMITED_KEY_GLOBAL, "vip's 3rd request");
    /* Bad input: a status and a reason, nothing changed. */
    EXPECT_SAYS(fc_task_set_key_global(task, -1, 1000, 0, 1, FC_FALLBACK_SHARE),
                FC_ERR_INVALID_ARGUMENT, "count");
    EXPECT_SAYS(fc_task_set_key_global(task, NAN, 1000, 0, 1, FC_FALLBACK_SHARE),
                FC_ERR_INVALID_ARGUMENT, "count");
    EXPECT_SAYS(fc_task_set_key_global(task, INFINITY, 1000, 0, 1, FC_FALLBACK_SHARE),
                FC_ERR_INVALID_ARGUMENT, "count");
    EXPECT_SAYS(fc_task_set_key_global(task, 5, 0, 0, 1, FC_FALLBACK_SHARE),
                FC_ERR_INVALID_ARGUMENT, "period");
    EXPECT_SAYS(fc_task_set_key_global(task, 5, 1000, 5, 1, FC_FALLBACK_SHARE),
                FC_ERR_INVALID_ARGUMENT, "slice");
    EXPECT_SAYS(fc_task_set_key_global(task, 1, 3600000, 1000, 1, FC_FALLBACK_SHARE),
                FC_ERR_INVALID_ARGUMENT, "permits per slice");
    EXPECT_SAYS(fc_task_set_key_global(task, 5, 1000, 0, 32, FC_FALLBACK_SHARE),
                FC_ERR_INVALID_ARGUMENT, "at most 31");
    EXPECT_SAYS(fc_task_set_key_global(task, 5, 1000, 0, 1, FC_FALLBACK_RATE),
                FC_ERR_INVALID_ARGUMENT, "FC_FALLBACK_RATE");
    EXPECT_SAYS(fc_task_set_key_global(task, 5, 1000, 0, 1, 9), FC_ERR_INVALID_ARGUMENT,
                "not 9");
    EXPECT_SAYS(fc_task_set_key_global(task, 0, 1000, 0, 0, 0), FC_ERR_INVALID_ARGUMENT,
                "count 0");
    EXPECT(fc_task_set_key_global(NULL, 5, 1000, 0, 1, FC_FALLBACK_SHARE),
           FC_ERR_INVALID_ARGUMENT);
    EXPECT(fc_task_set_key_override_global(task, NULL, 3, 5, 1000, 0, 1, FC_FALLBACK_SHARE),
           FC_ERR_INVALID_ARGUMENT);
    EXPECT(fc_task_set_key_override_global(task, (const uint8_t *)"x", 5000, 5, 1000, 0, 1,
                                           FC_FALLBACK_SHARE),
           FC_ERR_INVALID_ARGUMENT);
    EXPECT(fc_key_global_get(task, NULL, 3, &count, NULL, NULL, NULL, NULL),
           FC_ERR_INVALID_ARGUMENT);
    EXPECT(fc_key_global_get(NULL, (const uint8_t *)"x", 1, &count, NULL, NULL, NULL, NULL),
           FC_ERR_INVALID_ARGUMENT);
    EXPECT(fc_task_set_key_override(task, (const uint8_t *)"bad", 3, NULL, 0, FC_KEY_BLOCKED),
           FC_OK);
    EXPECT_SAYS(fc_task_set_key_override_global(task, (const uint8_t *)"bad", 3, 5, 1000, 0, 1,
                                                FC_FALLBACK_SHARE),
                FC_ERR_INVALID_ARGUMENT, "blocked");
    EXPECT(fc_key_global_get(task, (const uint8_t *)"carol", 5, &count, &period_ms, &slice_ms,
                             &local, &fallback),
           FC_OK);
    CHECK(count == 5 && period_ms == 1000 && slice_ms == 1000 && local == 1 &&
              fallback == FC_FALLBACK_SHARE,
          "bad input changed nothing");
    /* Taken away: the keys' own rates alone. */
    EXPECT(fc_task_set_key_global(task, 0, 0, 0, 0, 0), FC_OK);
    EXPECT(fc_key_global_get(task, (const uint8_t *)"alice", 5, &count, NULL, NULL, NULL, NULL),
           FC_OK);
    CHECK(count == 0, "no global rate: %g", count);
    check_eq(admit_until_refused(task, "alice", 20, &refused), 20,
             "alice admitted past her slice", __LINE__);
    fc_task_free(task);
    fc_table_close(table);
    snprintf(keys_path, sizeof keys_path, "%s.keys.", path);
    for (i = 0; i < 4096; i++) {
        char k[PATH_LEN + 32];
        snprintf(k, sizeof k, "%s%d", keys_path, i);
        if (unlink(k) == 0)
            break;
    }
}

int main(int argc, char **argv)
{
    int len;

    setvbuf(stdout, NULL, _IOLBF, 0);
    if (argc != 2) {
        fprintf(stderr, "usage: %s <scratch-dir>\n", argv[0]);
        return 2;
    }
    len = snprintf(g_work, sizeof g_work, "%s/abi_test.XXXXXX", argv[1]);
    CHECK(len > 0 && len < (int)sizeof g_work && mkdtemp(g_work) != NULL,
          "make a work directory under %s", argv[1]);
    printf("flowctrl %s C ABI test in %s\n", fc_version(), g_work);

    test_version_and_status_strings();
    test_open_and_modes();
    test_task_registration();
    test_decisions_and_stats();
    test_null_arguments();
    test_names();
    test_bad_requests_and_permits();
    test_bad_files();
    test_bad_options_and_paths();
    test_lane_pool();
    test_permission();
    test_untrusted_tables();
    test_full_tables();
    test_sized_structs();
    test_global_quota();
    test_unset_fields();
    test_cap_set_later();
    test_fork_reclaim();
    test_keyed();
    test_key_global();
    test_permit_does_not_cross_fork();
    test_check_and_reap();
    test_main_thread_exited();
    test_threads(); /* after the forks: never fork a process with threads */
    test_double_release();
    test_balancers();
    cleanup();

    printf("\nall %u checks passed\n", g_checks);
    return 0;
}
