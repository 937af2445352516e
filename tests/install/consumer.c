/*
 * A program as a flowctrl user writes it, built by tests/install.rs against
 * an installed flowctrl only: once by CMake (find_package, the shared
 * library) and once by make (pkg-config --static, the archive).
 *
 *   consumer <scratch-dir>
 *
 * Prints the library's version, checks that it is the header's, then takes
 * concurrency and rate decisions on a table in <scratch-dir>. Exits 0 when
 * every check passes, 1 at the first that does not.
 */

#include <stdio.h>
#include <string.h>

#include <flowctrl.h>

#define STRINGIFY(x) #x
#define VERSION_OF(major, minor, patch) STRINGIFY(major) "." STRINGIFY(minor) "." STRINGIFY(patch)

static int failed(const char *what, fc_status status)
{
    fprintf(stderr, "consumer: %s: %s (%s)\n", what, fc_status_str(status), fc_last_error());
    return 1;
}

int main(int argc, char **argv)
{
    const char *header = VERSION_OF(FC_VERSION_MAJOR, FC_VERSION_MINOR, FC_VERSION_PATCH);
    char path[4096];
    fc_table_options options;
    fc_task_config config;
    fc_table *table;
    fc_task *task, *rated;
    fc_permit first, second;
    fc_status s;
    int admitted;

    if (argc != 2) {
        fprintf(stderr, "usage: consumer <scratch-dir>\n");
        return 2;
    }
    printf("version %s\n", fc_version());
    /* A header and a library of different versions: a broken install. */
    if (strcmp(fc_version(), header) != 0) {
        fprintf(stderr, "consumer: library %s, header %s\n", fc_version(), header);
        return 1;
    }

    fc_table_options_init(&options, sizeof options);
    options.capacity = 4;
    options.max_processes = 4;
    snprintf(path, sizeof path, "%s/table", argv[1]);
    if ((s = fc_table_open(path, &options, &table)) != FC_OK)
        return failed("fc_table_open", s);
    fc_task_config_init(&config, sizeof config);
    config.max_concurrency = 1;
    if ((s = fc_task_register(table, "install", &config, &task)) != FC_OK)
        return failed("fc_task_register", s);

    if ((s = fc_acquire(task, 1, &first)) != FC_OK)
        return failed("the first acquire", s);
    if ((s = fc_acquire(task, 1, &second)) != FC_LIMITED_CONCURRENCY)
        return failed("a second acquire, expected FC_LIMITED_CONCURRENCY", s);
    if ((s = fc_release(task, &first, FC_OUTCOME_SUCCESS)) != FC_OK)
        return failed("fc_release", s);
    if ((s = fc_acquire(task, 1, &second)) != FC_OK)
        return failed("an acquire after the release", s);
    if ((s = fc_release(task, &second, FC_OUTCOME_SUCCESS)) != FC_OK)
        return failed("the second fc_release", s);

    /* A rate: 0.5 a second, a burst of 2. Permits pass while the bucket
     * holds some (2 in a new table, fewer where a run in the last 4 s
     * spent them: the table is the host's), then one is refused, a
     * decision and not an error. */
    fc_task_config_init(&config, sizeof config);
    config.local_rate = 0.5;
    config.burst = 2;
    if ((s = fc_task_register(table, "install-rated", &config, &rated)) != FC_OK)
        return failed("fc_task_register of the rated task", s);
    for (admitted = 0; (s = fc_acquire(rated, 1, &first)) == FC_OK; admitted++) {
        if (admitted == 2) {
            fprintf(stderr, "consumer: a third permit at once, past a burst of 2\n");
            return 1;
        }
        if ((s = fc_release(rated, &first, FC_OUTCOME_SUCCESS)) != FC_OK)
            return failed("fc_release of a rated permit", s);
    }
    if (s != FC_LIMITED_LOCAL)
        return failed("an acquire past the burst, expected FC_LIMITED_LOCAL", s);
    printf("rate: %d admitted, then refused\n", admitted);

    fc_task_free(rated);
    fc_task_free(task);
    fc_table_close(table);
    printf("decisions ok\n");
    return 0;
}
