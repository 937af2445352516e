/*
 * tests/c/compat_v1.h: include/flowctrl.h as a program built against the
 * smallest version of its sized structs sees it. FROZEN: never regenerate
 * or update it; tests/header.rs checks that it stays a prefix of the real
 * header (same constants and statuses, struct fields a prefix, the same
 * function declarations). Versions are left out: they are not ABI.
 *
 * Against the current header, it lacks:
 *   - fc_table_options: owner_uid, shared  (16 bytes instead of 24)
 *   - struct fc_task_stats: held           (96 bytes instead of 104)
 * fc_task_config is at its smallest version already, and fc_permit never
 * changes. tests/c/compat_v1.c runs a program built against it.
 */

#ifndef FLOWCTRL_H
#define FLOWCTRL_H

#include <stdint.h>
#include <stddef.h>
#include <stdbool.h>

#define FC_NAME_MAX 63

#define FC_UNSET 4294967295

#define FC_RATE_UNSET (-1.0)

enum fc_status
#if defined(__cplusplus) || __STDC_VERSION__ >= 202311L
  : uint32_t
#endif // defined(__cplusplus) || __STDC_VERSION__ >= 202311L
 {
  FC_OK = 0,
  FC_LIMITED_LOCAL = 1,
  FC_LIMITED_GLOBAL = 2,
  FC_LIMITED_CONCURRENCY = 3,
  FC_ERR_INVALID_ARGUMENT = 100,
  FC_ERR_INVALID_NAME = 101,
  FC_ERR_TABLE_FULL = 102,
  FC_ERR_TOO_MANY_PROCESSES = 103,
  FC_ERR_CONFIG_MISMATCH = 104,
  FC_ERR_INCOMPATIBLE = 105,
  FC_ERR_CORRUPT = 106,
  FC_ERR_IO = 107,
  FC_ERR_PERMISSION = 108,
  FC_ERR_TIMEOUT = 109,
  FC_ERR_INTERNAL = 199,
};
#ifndef __cplusplus
#if __STDC_VERSION__ >= 202311L
typedef enum fc_status fc_status;
#else
typedef uint32_t fc_status;
#endif // __STDC_VERSION__ >= 202311L
#endif // __cplusplus

typedef struct fc_table fc_table;

typedef struct fc_task fc_task;

typedef struct fc_table_options {
  uint32_t size;
  uint32_t capacity;
  uint32_t max_processes;
  uint32_t mode;
} fc_table_options;

typedef struct fc_task_config {
  uint32_t size;
  uint32_t burst;
  double local_rate;
  uint32_t max_concurrency;
  uint32_t reserved;
} fc_task_config;

typedef struct fc_permit {
  uint64_t acquired_at;
  uint64_t owner;
  uint32_t task;
  uint32_t n;
  uint32_t flags;
  uint32_t reserved0;
  uint64_t check;
  uint64_t reserved[3];
} fc_permit;

typedef uint32_t fc_outcome;

struct fc_task_stats {
  uint32_t size;
  uint32_t reserved;
  uint64_t admitted;
  uint64_t limited_local;
  uint64_t limited_global;
  uint64_t limited_concurrency;
  uint64_t released_success;
  uint64_t released_dropped;
  uint64_t released_ignored;
  uint64_t reclaimed;
  uint64_t in_flight;
  uint64_t rtt_sum_ns;
  uint64_t rtt_samples;
};

#define FC_OUTCOME_SUCCESS 0

#define FC_OUTCOME_DROPPED 1

#define FC_OUTCOME_IGNORED 2

#ifdef __cplusplus
extern "C" {
#endif // __cplusplus

fc_status fc_table_options_init(struct fc_table_options *options, size_t size);

fc_status fc_table_open(const char *path,
                        const struct fc_table_options *options,
                        struct fc_table **out);

void fc_table_close(struct fc_table *table);

fc_status fc_table_reap(const struct fc_table *table, uint32_t *reaped);

fc_status fc_task_config_init(struct fc_task_config *config, size_t size);

fc_status fc_task_register(const struct fc_table *table,
                           const char *name,
                           const struct fc_task_config *config,
                           struct fc_task **out);

fc_status fc_task_update(const struct fc_task *task, const struct fc_task_config *config);

fc_status fc_task_config_get(const struct fc_task *task, struct fc_task_config *out);

void fc_task_free(struct fc_task *task);

fc_status fc_acquire(const struct fc_task *task, uint32_t n, struct fc_permit *permit);

fc_status fc_release(const struct fc_task *task, struct fc_permit *permit, fc_outcome outcome);

fc_status fc_task_stats_init(struct fc_task_stats *stats, size_t size);

fc_status fc_task_stats(const struct fc_task *task, struct fc_task_stats *out);

fc_status fc_task_check(const struct fc_task *task, int64_t *drift);

const char *fc_version(void);

const char *fc_status_str(uint32_t status);

const char *fc_last_error(void);

#ifdef __cplusplus
}  // extern "C"
#endif  // __cplusplus

#endif  /* FLOWCTRL_H */
