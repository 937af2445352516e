/*
 * A task's record in the store through the C face: fc_store_set_task_config,
 * fc_store_get_task_config and fc_store_remove_task_config against a real
 * Redis, the host adopting the record at its next fc_pull_quota (seen in
 * fc_task_config_get's global_source), going back to its own numbers when
 * the record goes, and bad input.
 *
 *   records_test <scratch-dir> <redis-url>
 *
 * Run by tests/c_abi.rs (module quota) with a redis-server of its own.
 *
 * Must compile with: gcc -std=c99 -Wall -Wextra -Werror -pedantic -pthread
 */

#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "flowctrl.h"

#define TEST_LAST_ERROR fc_last_error
#include "test_util.h"

/* A refusal: an error status (not a decision), and fc_last_error() saying
 * why, naming `needle` (so the text is this call's, not an earlier one's). */
static void refused(fc_status st, fc_status want, const char *needle, int line, const char *what)
{
    const char *error = fc_last_error();
    CHECK_AT(st >= 100 && st == want && error[0] != '\0' && strstr(error, needle) != NULL, line,
             "%s: refused with %u (%s), want %u; fc_last_error() = \"%s\", want it to name \"%s\"",
             what, (unsigned)st, fc_status_str(st), (unsigned)want, error, needle);
}

#define REFUSED(st, want, needle, what) refused((st), (want), (needle), __LINE__, (what))

/* The host pulls: the record in the store (or its absence) is adopted. */
static void pull(const fc_task *task, const char *when)
{
    int64_t granted = -1;
    fc_status st = fc_pull_quota(task, 10, &granted);
    CHECK(st == FC_OK && granted == 10, "%s: fc_pull_quota(10) = %u (%s), granted %" PRId64,
          when, (unsigned)st, fc_status_str(st), granted);
}

int main(int argc, char **argv)
{
    char path[512], store_url[512];
    fc_table_options options;
    fc_table *table = NULL;
    fc_task *task = NULL;
    fc_store *store = NULL;
    fc_task_config own, record, got, bad;
    fc_status st;
    uint64_t version = 0, read_version = 99, again = 0;
    uint32_t removed = 99;

    if (argc != 3) {
        fprintf(stderr, "usage: records_test <scratch-dir> <redis-url>\n");
        return 2;
    }
    snprintf(path, sizeof path, "%s/records", argv[1]);
    /* A shared test machine may be slow to answer: 1 s per command (the
     * default of 5 ms is for production next to its Redis). */
    snprintf(store_url, sizeof store_url, "%s?timeout_ms=1000&connect_timeout_ms=1000", argv[2]);

    fc_table_options_init(&options, sizeof options);
    options.store_url = argv[2];
    options.store_timeout_ms = 1000;
    options.store_connect_timeout_ms = 1000;
    st = fc_table_open(path, &options, &table);
    CHECK(st == FC_OK, "open %s with store %s: %u", path, argv[2], (unsigned)st);
    CHECK(fc_store_open(store_url, &store) == FC_OK && store != NULL, "fc_store_open %s",
          store_url);

    /* The host's own number: 3000/s. */
    fc_task_config_init(&own, sizeof own);
    own.global_rate = 3000;
    CHECK(fc_task_register(table, "api", &own, &task) == FC_OK, "register api, global_rate 3000");
    fc_task_config_init(&got, sizeof got);
    st = fc_task_config_get(task, &got);
    CHECK(st == FC_OK && got.global_rate == 3000 && got.slice_ms == 1000 &&
              got.global_source == FC_SOURCE_LOCAL,
          "before any record: global_rate %g slice_ms %u global_source %u", got.global_rate,
          got.slice_ms, got.global_source);

    /* No record yet: version 0, *out untouched. */
    fc_task_config_init(&got, sizeof got);
    got.global_rate = 12345;
    st = fc_store_get_task_config(store, "api", &got, &read_version);
    CHECK(st == FC_OK && read_version == 0 && got.global_rate == 12345,
          "no record: get = %u, version %" PRIu64 ", out left alone (global_rate %g)",
          (unsigned)st, read_version, got.global_rate);

    /* The record: 1000/s in slices of 500 ms. */
    fc_task_config_init(&record, sizeof record);
    record.global_rate = 1000;
    record.slice_ms = 500;
    st = fc_store_set_task_config(store, "api", &record, &version);
    CHECK(st == FC_OK && version > 0, "set the record 1000/s, 500 ms: %u, version %" PRIu64,
          (unsigned)st, version);

    fc_task_config_init(&got, sizeof got);
    read_version = 0;
    st = fc_store_get_task_config(store, "api", &got, &read_version);
    CHECK(st == FC_OK, "get the record: %u", (unsigned)st);
    CHECK(read_version == version, "get: version %" PRIu64 " (written %" PRIu64 ")",
          read_version, version);
    CHECK(got.size == sizeof got && got.global_rate == 1000 && got.slice_ms == 500 &&
              got.global_source == FC_SOURCE_STORE,
          "get: size %u global_rate %g slice_ms %u global_source %u", got.size, got.global_rate,
          got.slice_ms, got.global_source);
    CHECK(got.chunk == 0 && got.fallback == FC_FALLBACK_SHARE && got.fallback_rate == 0,
          "get: the fields left unset are their defaults: chunk %u fallback %u "
          "fallback_rate %g",
          got.chunk, got.fallback, got.fallback_rate);
    CHECK(got.local_rate == FC_RATE_UNSET && got.burst == FC_UNSET &&
              got.max_concurrency == FC_UNSET && got.limiter[0] == '\0' &&
              got.min_limit == FC_UNSET && got.max_limit == FC_UNSET &&
              got.initial_limit == FC_UNSET,
          "get: the local and limiter fields are unset: local_rate %g burst %u "
          "max_concurrency %u limiter \"%s\" limits %u %u %u",
          got.local_rate, got.burst, got.max_concurrency, got.limiter, got.min_limit,
          got.max_limit, got.initial_limit);

    /* Not adopted before the host's next pull... */
    fc_task_config_init(&got, sizeof got);
    st = fc_task_config_get(task, &got);
    CHECK(st == FC_OK && got.global_rate == 3000 && got.global_source == FC_SOURCE_LOCAL,
          "before the pull: still its own (global_rate %g global_source %u)", got.global_rate,
          got.global_source);
    /* ...and adopted by it. */
    pull(task, "first pull under the record");
    fc_task_config_init(&got, sizeof got);
    st = fc_task_config_get(task, &got);
    CHECK(st == FC_OK, "config_get after the pull: %u", (unsigned)st);
    CHECK(got.global_rate == 1000 && got.slice_ms == 500 && got.global_source == FC_SOURCE_STORE,
          "adopted: global_rate %g slice_ms %u global_source %u (want 1000, 500, %u)",
          got.global_rate, got.slice_ms, got.global_source, (unsigned)FC_SOURCE_STORE);
    CHECK(got.local_rate == 0 && got.burst == 1 && got.max_concurrency == FC_NO_CAP,
          "adopted: the local fields stay the host's own: local_rate %g burst %u "
          "max_concurrency %u",
          got.local_rate, got.burst, got.max_concurrency);
    pull(task, "second pull under the record");

    /* Bad input: nothing written, each refused with its reason. */
    fc_task_config_init(&bad, sizeof bad);
    bad.global_rate = 0;
    REFUSED(fc_store_set_task_config(store, "api", &bad, &again), FC_ERR_INVALID_ARGUMENT,
            "global_rate", "set with global_rate 0");
    fc_task_config_init(&bad, sizeof bad);
    bad.global_rate = -5;
    REFUSED(fc_store_set_task_config(store, "api", &bad, &again), FC_ERR_INVALID_ARGUMENT,
            "global_rate", "set with global_rate -5");
    fc_task_config_init(&bad, sizeof bad);
    REFUSED(fc_store_set_task_config(store, "api", &bad, &again), FC_ERR_INVALID_ARGUMENT,
            "global_rate", "set with global_rate unset");
    fc_task_config_init(&bad, sizeof bad);
    bad.global_rate = 1000;
    bad.local_rate = 50;
    REFUSED(fc_store_set_task_config(store, "api", &bad, &again), FC_ERR_INVALID_ARGUMENT,
            "local_rate", "set with local_rate 50");
    fc_task_config_init(&bad, sizeof bad);
    bad.global_rate = 1000;
    strcpy(bad.limiter, "aimd");
    REFUSED(fc_store_set_task_config(store, "api", &bad, &again), FC_ERR_INVALID_ARGUMENT,
            "limiter", "set with a limiter");
    fc_task_config_init(&bad, sizeof bad);
    bad.global_rate = 1000;
    bad.slice_ms = 5;
    REFUSED(fc_store_set_task_config(store, "api", &bad, &again), FC_ERR_INVALID_ARGUMENT,
            "slice_ms", "set with slice_ms 5");
    REFUSED(fc_store_set_task_config(NULL, "api", &record, &again), FC_ERR_INVALID_ARGUMENT,
            "store", "set on a NULL store");
    REFUSED(fc_store_set_task_config(store, NULL, &record, &again), FC_ERR_INVALID_ARGUMENT,
            "task", "set for a NULL task name");
    REFUSED(fc_store_set_task_config(store, "", &record, &again), FC_ERR_INVALID_NAME, "task",
            "set for the task \"\"");
    REFUSED(fc_store_set_task_config(store, "api", NULL, &again), FC_ERR_INVALID_ARGUMENT,
            "config", "set with a NULL config");
    CHECK(again == 0, "no refused call wrote a version (%" PRIu64 ")", again);
    REFUSED(fc_store_get_task_config(NULL, "api", &got, &read_version), FC_ERR_INVALID_ARGUMENT,
            "store", "get on a NULL store");
    REFUSED(fc_store_get_task_config(store, "", &got, &read_version), FC_ERR_INVALID_NAME,
            "task", "get for the task \"\"");
    REFUSED(fc_store_get_task_config(store, "api", &got, NULL), FC_ERR_INVALID_ARGUMENT,
            "version", "get with a NULL version");
    REFUSED(fc_store_remove_task_config(NULL, "api", &removed), FC_ERR_INVALID_ARGUMENT, "store",
            "remove on a NULL store");
    REFUSED(fc_store_remove_task_config(store, NULL, &removed), FC_ERR_INVALID_ARGUMENT, "task",
            "remove for a NULL task name");
    CHECK(removed == 99, "no refused remove wrote *removed (%u)", removed);

    /* The record is as written: the refusals changed nothing. */
    fc_task_config_init(&got, sizeof got);
    read_version = 0;
    st = fc_store_get_task_config(store, "api", &got, &read_version);
    CHECK(st == FC_OK && read_version == version && got.global_rate == 1000 &&
              got.slice_ms == 500,
          "after the refusals: version %" PRIu64 " (written %" PRIu64 ") global_rate %g "
          "slice_ms %u",
          read_version, version, got.global_rate, got.slice_ms);

    /* Removed: once, then there is none. */
    removed = 99;
    st = fc_store_remove_task_config(store, "api", &removed);
    CHECK(st == FC_OK && removed == 1, "remove the record: removed %u (want 1)", removed);
    removed = 99;
    st = fc_store_remove_task_config(store, "api", &removed);
    CHECK(st == FC_OK && removed == 0, "remove it again: removed %u (want 0)", removed);
    CHECK(fc_store_remove_task_config(store, "api", NULL) == FC_OK,
          "remove with removed NULL (not wanted)");
    read_version = 99;
    st = fc_store_get_task_config(store, "api", &got, &read_version);
    CHECK(st == FC_OK && read_version == 0, "get after remove: version %" PRIu64 " (want 0)", read_version);

    /* The host returns to its own numbers at its next pull. */
    pull(task, "first pull after the remove");
    fc_task_config_init(&got, sizeof got);
    st = fc_task_config_get(task, &got);
    CHECK(st == FC_OK, "config_get after the remove: %u", (unsigned)st);
    CHECK(got.global_rate == 3000 && got.slice_ms == 1000 && got.global_source == FC_SOURCE_LOCAL,
          "back to its own: global_rate %g slice_ms %u global_source %u (want 3000, 1000, %u)",
          got.global_rate, got.slice_ms, got.global_source, (unsigned)FC_SOURCE_LOCAL);

    /* A record written anew gets a greater version. */
    CHECK(fc_store_set_task_config(store, "api", &record, NULL) == FC_OK,
          "set again with version NULL (not wanted)");
    read_version = 0;
    st = fc_store_get_task_config(store, "api", &got, &read_version);
    CHECK(st == FC_OK && read_version > version,
          "a new record's version %" PRIu64 " > the first's %" PRIu64, read_version, version);
    removed = 99;
    st = fc_store_remove_task_config(store, "api", &removed);
    CHECK(st == FC_OK && removed == 1, "remove it: removed %u (want 1)", removed);

    fc_store_free(store);
    fc_store_free(NULL);
    fc_task_free(task);
    fc_table_close(table);
    printf("records_test: %u checks passed\n", g_checks);
    return 0;
}
