/*
 * A reproducer (the waiter threads): two permits freed back to back
 * while two handles wait, one waiter each. The head's handle takes one
 * permit for its only waiter; the other handle's waiter should get the
 * second at once, but is served only when its waiter thread's bounded
 * sleep (20 ms) runs out, or the next release.
 *
 *   passon TABLE ROUNDS
 *
 * Per round: this process holds both permits of a task capped at 2;
 * child A starts waiting, then child B (a later ticket); both permits are
 * released together; each child reports how long after the releases it
 * was served. Prints a line per round: "<A's delay ns> <B's delay ns>".
 *
 * Compiled with -std=c99 -Wall -Wextra -Werror.
 */

#define _XOPEN_SOURCE 700
#define _DEFAULT_SOURCE

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "bench.h"

static fc_task *open_task(const char *path)
{
    fc_task_config config;
    fc_task_config_init(&config, sizeof config);
    config.max_concurrency = 2;
    return open_task_with(path, "passon", &config);
}

/* A waiter: starts at `start`, writes the time it was served to `fd`. */
static void waiter(const char *path, int64_t start, int fd)
{
    fc_task *task = open_task(path);
    fc_permit permit;
    sleep_until(start);
    if (fc_acquire_wait(task, 1, 2000, &permit) != FC_OK)
        die("fc_acquire_wait");
    int64_t served = now_ns();
    if (write(fd, &served, sizeof served) != sizeof served)
        exit(1);
    /* Held past the other's turn: its release must not be what serves
     * the other waiter. */
    sleep_until(served + 100000000);
    fc_release(task, &permit, FC_OUTCOME_SUCCESS);
    fc_task_free(task);
    exit(0);
}

int main(int argc, char **argv)
{
    if (argc != 3) {
        fprintf(stderr, "usage: passon TABLE ROUNDS\n");
        return 2;
    }
    int rounds = atoi(argv[2]);
    fc_task *task = open_task(argv[1]);
    for (int r = 0; r < rounds; r++) {
        fc_permit p1, p2;
        int fa[2], fb[2];
        if (fc_acquire(task, 1, &p1) != FC_OK || fc_acquire(task, 1, &p2) != FC_OK)
            die("fc_acquire");
        if (pipe(fa) || pipe(fb))
            return 1;
        int64_t t0 = now_ns() + 50000000;
        fflush(stdout); /* else each child would print the parent's lines again */
        if (fork() == 0)
            waiter(argv[1], t0, fa[1]);
        if (fork() == 0)
            waiter(argv[1], t0 + 10000000, fb[1]);
        /* Both queued by now (B's ticket after A's); release at a time
         * that varies against B's waiter thread's 20 ms sleeps. */
        sleep_until(t0 + 40000000 + (r % 20) * 1000000);
        int64_t released = now_ns();
        fc_release(task, &p1, FC_OUTCOME_SUCCESS);
        fc_release(task, &p2, FC_OUTCOME_SUCCESS);
        int64_t a, b;
        if (read(fa[0], &a, sizeof a) != sizeof a || read(fb[0], &b, sizeof b) != sizeof b)
            return 1;
        printf("%" PRId64 " %" PRId64 "\n", a - released, b - released);
        while (wait(NULL) > 0) {
        }
        close(fa[0]), close(fa[1]), close(fb[0]), close(fb[1]);
    }
    fc_task_free(task);
    return 0;
}
