/*
 * A keyed task's record of its keys' global rates through the C face:
 * fc_store_set_key_record, fc_store_get_key_record and its getters,
 * fc_store_remove_key_record against a real Redis; a host with its own
 * 1000/s adopting the record (fc_task_key_record_version, fc_key_global_get);
 * fc_store_hot_keys listing a key the host pulled; and hostile input.
 *
 *   key_records_test <scratch-dir> <redis-url>
 *
 * Run by tests/c_abi.rs with a redis-server of its own.
 *
 * Must compile with: gcc -std=c99 -Wall -Wextra -Werror -pedantic -pthread
 */

#define _POSIX_C_SOURCE 200809L

#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "flowctrl.h"

#define TEST_LAST_ERROR fc_last_error
#include "test_util.h"

static void refused(fc_status st, fc_status want, const char *needle, int line, const char *what)
{
    const char *error = fc_last_error();
    CHECK_AT(st >= 100 && st == want && strstr(error, needle) != NULL, line,
             "%s: refused with %u (%s), want %u; fc_last_error() = \"%s\", want it to name \"%s\"",
             what, (unsigned)st, fc_status_str(st), (unsigned)want, error, needle);
}

#define REFUSED(st, want, needle, what) refused((st), (want), (needle), __LINE__, (what))

static void sleep_ms(long ms)
{
    struct timespec t = {ms / 1000, (ms % 1000) * 1000000L};
    nanosleep(&t, NULL);
}

static fc_key_global rate(double count, uint64_t period_ms, uint64_t slice_ms, uint32_t local,
                          uint32_t fallback)
{
    fc_key_global g;
    memset(&g, 0, sizeof g);
    g.count = count;
    g.period_ms = period_ms;
    g.slice_ms = slice_ms;
    g.local = local;
    g.fallback = fallback;
    return g;
}

/* The key's global rate in force on the host: its count (0: none). */
static double in_force(const fc_task *task, const char *key, uint64_t *slice_ms)
{
    double count = -1;
    fc_status st = fc_key_global_get(task, (const uint8_t *)key, strlen(key), &count, NULL,
                                     slice_ms, NULL, NULL);
    CHECK(st == FC_OK, "fc_key_global_get %s: %u", key, (unsigned)st);
    return count;
}

/* Waits up to 5 s for the host to have `want` in force. */
static uint64_t wait_adopted(const fc_task *task, uint64_t want)
{
    uint64_t adopted = 99, refused_version = 99;
    for (int i = 0; i < 100; i++) {
        CHECK(fc_task_key_record_version(task, &adopted, &refused_version) == FC_OK,
              "fc_task_key_record_version");
        if (adopted == want) {
            break;
        }
        sleep_ms(50);
    }
    CHECK(refused_version == 0, "no record refused (%" PRIu64 ")", refused_version);
    return adopted;
}

int main(int argc, char **argv)
{
    char path[512], store_url[512];
    fc_table_options options;
    fc_table *table = NULL;
    fc_task *task = NULL;
    fc_store *store = NULL;
    fc_key_record *record = NULL;
    fc_key_global def, globals[2], got, bad[1];
    fc_hot_key hot[FC_HOT_KEYS_MAX];
    const char *keys[2] = {"vip", "free"};
    const char *key = NULL;
    const char *many[FC_KEY_RECORD_MAX + 1];
    fc_key_global many_globals[FC_KEY_RECORD_MAX + 1];
    fc_task_config config;
    fc_status st;
    uint64_t version = 0, read_version = 99, again = 0, slice = 0, pulled = 0, slice_ms = 0;
    uint32_t removed = 99, count = 0;
    size_t n = 99, key_len = 0;
    int found = 0;

    if (argc != 3) {
        fprintf(stderr, "usage: key_records_test <scratch-dir> <redis-url>\n");
        return 2;
    }
    snprintf(path, sizeof path, "%s/key-records", argv[1]);
    snprintf(store_url, sizeof store_url, "%s?timeout_ms=1000&connect_timeout_ms=1000", argv[2]);
    fc_table_options_init(&options, sizeof options);
    options.store_url = argv[2];
    options.store_timeout_ms = 1000;
    options.store_connect_timeout_ms = 1000;
    CHECK(fc_table_open(path, &options, &table) == FC_OK, "open %s", path);
    CHECK(fc_store_open(store_url, &store) == FC_OK, "fc_store_open %s", store_url);

    /* The host's own: every key 1000/s across the fleet. */
    fc_task_config_init(&config, sizeof config);
    CHECK(fc_task_register(table, "api", &config, &task) == FC_OK, "register api");
    CHECK(fc_task_set_keys(task, NULL, 0, 0, 0) == FC_OK, "set_keys");
    CHECK(fc_task_set_key_global(task, 1000, 1000, 0, 1, FC_FALLBACK_SHARE) == FC_OK,
          "its own key_global 1000/s");
    CHECK(wait_adopted(task, 0) == 0, "no record in force yet");

    st = fc_store_get_key_record(store, "api", &record, &read_version);
    CHECK(st == FC_OK && record == NULL && read_version == 0,
          "no record: %u, record %p, version %" PRIu64, (unsigned)st, (void *)record,
          read_version);

    /* The record: 20/s for every key, vip 60/s in 500 ms slices, free none. */
    def = rate(20, 1000, 0, 1, FC_FALLBACK_SHARE);
    globals[0] = rate(60, 1000, 500, 3, FC_FALLBACK_DENY);
    globals[1] = rate(0, 0, 0, 0, 0);
    st = fc_store_set_key_record(store, "api", &def, keys, globals, 2, &version);
    CHECK(st == FC_OK && version > 0, "set: %u, version %" PRIu64, (unsigned)st, version);

    st = fc_store_get_key_record(store, "api", &record, &read_version);
    CHECK(st == FC_OK && record != NULL && read_version == version,
          "get: %u, version %" PRIu64 " (written %" PRIu64 ")", (unsigned)st, read_version,
          version);
    memset(&got, 0xff, sizeof got);
    st = fc_key_record_default(record, &got);
    CHECK(st == FC_OK && got.count == 20 &&
              got.period_ms == 1000 && got.slice_ms == 1000 && got.local == 1 &&
              got.fallback == FC_FALLBACK_SHARE && got.reserved[0] == 0,
          "default: %g per %" PRIu64 " ms, slice %" PRIu64 ", local %u, fallback %u", got.count,
          got.period_ms, got.slice_ms, got.local, got.fallback);
    st = fc_key_record_count(record, &n);
    CHECK(st == FC_OK && n == 2, "two keys named: %zu", n);
    /* In byte order: free, then vip. */
    st = fc_key_record_override(record, 0, &key, &key_len, &got);
    CHECK(st == FC_OK && strcmp(key, "free") == 0 && key_len == 4 && got.count == 0 &&
              got.period_ms == 0 && got.slice_ms == 0 && got.local == 0,
          "override 0: \"%s\" (%zu) %g", key, key_len, got.count);
    st = fc_key_record_override(record, 1, &key, NULL, &got);
    CHECK(st == FC_OK && strcmp(key, "vip") == 0 && got.count == 60 && got.period_ms == 1000 &&
              got.slice_ms == 500 && got.local == 3 && got.fallback == FC_FALLBACK_DENY,
          "override 1: \"%s\" %g per %" PRIu64 " ms, slice %" PRIu64 ", local %u, fallback %u",
          key, got.count, got.period_ms, got.slice_ms, got.local, got.fallback);
    REFUSED(fc_key_record_override(record, 2, &key, NULL, &got), FC_ERR_INVALID_ARGUMENT, "index 2",
            "an index past the keys");
    REFUSED(fc_key_record_override(record, 0, NULL, NULL, &got), FC_ERR_INVALID_ARGUMENT, "key",
            "override with key NULL");
    REFUSED(fc_key_record_default(NULL, &got), FC_ERR_INVALID_ARGUMENT, "record",
            "default of a NULL record");
    REFUSED(fc_key_record_count(record, NULL), FC_ERR_INVALID_ARGUMENT, "count",
            "count with count NULL");
    fc_key_record_free(record);
    fc_key_record_free(NULL);

    /* The host adopts it within about a second, over its own 1000/s. */
    CHECK(wait_adopted(task, version) == version, "the host has version %" PRIu64 " in force",
          version);
    CHECK(in_force(task, "k", &slice_ms) == 20 && slice_ms == 1000, "k: the record's 20/s");
    CHECK(in_force(task, "vip", &slice_ms) == 60 && slice_ms == 500, "vip: the record's 60/s");
    CHECK(in_force(task, "free", NULL) == 0, "free: no global rate");

    /* A key asked past its allowance: the host pulls it, the store lists it. */
    for (int round = 0; round < 50 && !found; round++) {
        for (int i = 0; i < 5; i++) {
            fc_permit permit;
            if (fc_acquire_key(task, (const uint8_t *)"hot", 3, 1, &permit) == FC_OK) {
                fc_release(task, &permit, FC_OUTCOME_SUCCESS);
            }
        }
        sleep_ms(100);
        count = 99;
        st = fc_store_hot_keys(store, "api", 1000, hot, FC_HOT_KEYS_MAX, &count, &slice, &pulled);
        CHECK(st == FC_OK && count <= FC_HOT_KEYS_MAX && pulled >= count,
              "hot keys: %u, count %u of %" PRIu64, (unsigned)st, count, pulled);
        for (uint32_t i = 0; i < count; i++) {
            found |= hot[i].name_len == 3 && memcmp(hot[i].name, "hot", 3) == 0 &&
                     hot[i].given >= 1 && hot[i].asks >= 1 && hot[i].reserved[0] == 0;
        }
    }
    CHECK(found && slice > 0, "the key \"hot\" listed with what it was given (slice %" PRIu64 ")",
          slice);
    CHECK(fc_store_hot_keys(store, "api", 1000, NULL, 0, &count, NULL, NULL) == FC_OK &&
              count == 0,
          "capacity 0: the counts alone");

    /* Hostile input: refused with its reason, nothing written. */
    REFUSED(fc_store_set_key_record(NULL, "api", &def, NULL, NULL, 0, &again),
            FC_ERR_INVALID_ARGUMENT, "store", "set on a NULL store");
    REFUSED(fc_store_set_key_record(store, NULL, &def, NULL, NULL, 0, &again),
            FC_ERR_INVALID_ARGUMENT, "task", "set for a NULL task name");
    REFUSED(fc_store_set_key_record(store, "", &def, NULL, NULL, 0, &again), FC_ERR_INVALID_NAME,
            "task", "set for the task \"\"");
    REFUSED(fc_store_set_key_record(store, "api", &def, NULL, globals, 1, &again),
            FC_ERR_INVALID_ARGUMENT, "keys", "set with keys NULL");
    REFUSED(fc_store_set_key_record(store, "api", &def, keys, NULL, 1, &again),
            FC_ERR_INVALID_ARGUMENT, "globals", "set with globals NULL");
    many[0] = NULL;
    bad[0] = def;
    REFUSED(fc_store_set_key_record(store, "api", &def, many, bad, 1, &again),
            FC_ERR_INVALID_ARGUMENT, "keys[0]", "set with a NULL key");
    for (int i = 0; i <= FC_KEY_RECORD_MAX; i++) {
        many[i] = "k";
        many_globals[i] = def;
    }
    REFUSED(fc_store_set_key_record(store, "api", &def, many, many_globals, FC_KEY_RECORD_MAX + 1,
                                    &again),
            FC_ERR_INVALID_ARGUMENT, "FC_KEY_RECORD_MAX", "set with 65 keys");
    bad[0] = rate(20, 1000, 0, 1, FC_FALLBACK_RATE);
    REFUSED(fc_store_set_key_record(store, "api", bad, NULL, NULL, 0, &again),
            FC_ERR_INVALID_ARGUMENT, "FC_FALLBACK_RATE", "a default with FC_FALLBACK_RATE");
    bad[0] = rate(20, 1000, 0, 32, FC_FALLBACK_SHARE);
    REFUSED(fc_store_set_key_record(store, "api", &def, keys, bad, 1, &again),
            FC_ERR_INVALID_ARGUMENT, "globals[0]", "an override with local 32");
    bad[0] = rate(0, 1000, 0, 0, 0);
    REFUSED(fc_store_set_key_record(store, "api", bad, NULL, NULL, 0, &again),
            FC_ERR_INVALID_ARGUMENT, "count 0", "count 0 with a period");
    bad[0] = rate(20, 1000, 5, 1, FC_FALLBACK_SHARE);
    REFUSED(fc_store_set_key_record(store, "api", bad, NULL, NULL, 0, &again),
            FC_ERR_INVALID_ARGUMENT, "default_global", "a 5 ms slice");
    bad[0] = def;
    bad[0].reserved[2] = 7;
    REFUSED(fc_store_set_key_record(store, "api", bad, NULL, NULL, 0, &again),
            FC_ERR_INVALID_ARGUMENT, "reserved", "a reserved word set");
    many[0] = "\xff\xfe";
    REFUSED(fc_store_set_key_record(store, "api", &def, many, &def, 1, &again),
            FC_ERR_INVALID_ARGUMENT, "UTF-8", "a key not UTF-8");
    CHECK(again == 0, "no refused call wrote a version (%" PRIu64 ")", again);
    REFUSED(fc_store_get_key_record(store, "api", NULL, &read_version), FC_ERR_INVALID_ARGUMENT,
            "record", "get with record NULL");
    REFUSED(fc_store_get_key_record(store, "api", &record, NULL), FC_ERR_INVALID_ARGUMENT,
            "version", "get with version NULL");
    REFUSED(fc_store_remove_key_record(store, "", &removed), FC_ERR_INVALID_NAME, "task",
            "remove for the task \"\"");
    REFUSED(fc_store_hot_keys(store, "api", 1000, hot, FC_HOT_KEYS_MAX + 1, &count, NULL, NULL),
            FC_ERR_INVALID_ARGUMENT, "at most 100", "101 hot keys");
    REFUSED(fc_store_hot_keys(store, "api", 5, hot, 10, &count, NULL, NULL),
            FC_ERR_INVALID_ARGUMENT, "slice_ms", "hot keys of 5 ms slices");
    REFUSED(fc_store_hot_keys(store, "api", 1000, NULL, 10, &count, NULL, NULL),
            FC_ERR_INVALID_ARGUMENT, "keys", "hot keys into NULL");
    REFUSED(fc_store_hot_keys(store, "api", 1000, hot, 10, NULL, NULL, NULL),
            FC_ERR_INVALID_ARGUMENT, "count", "hot keys with count NULL");
    REFUSED(fc_task_key_record_version(NULL, NULL, NULL), FC_ERR_INVALID_ARGUMENT, "task",
            "the version of a NULL task");
    CHECK(removed == 99, "no refused remove wrote *removed (%u)", removed);
    st = fc_store_get_key_record(store, "api", &record, &read_version);
    CHECK(st == FC_OK && read_version == version, "the refusals changed nothing: %" PRIu64,
          read_version);
    fc_key_record_free(record);

    /* Removed once; hosts keep its rates until their own are written again. */
    st = fc_store_remove_key_record(store, "api", &removed);
    CHECK(st == FC_OK && removed == 1, "remove: removed %u", removed);
    st = fc_store_remove_key_record(store, "api", &removed);
    CHECK(st == FC_OK && removed == 0, "remove again: removed %u", removed);
    CHECK(wait_adopted(task, 0) == 0, "no record in force once removed");
    CHECK(in_force(task, "k", NULL) == 20, "k keeps the removed record's 20/s");

    fc_store_free(store);
    fc_task_free(task);
    fc_table_close(table);
    printf("key_records_test: %u checks passed\n", g_checks);
    return 0;
}
