/*
 * The checks of the C and C++ test programs in tests/c: each check prints
 * "ok    what" and is counted in g_checks, or prints "FAIL  what" and where
 * (tests/c/FILE:LINE), then exits 1.
 *
 *   CHECK(cond, "what, printf-style", args...)
 *   CHECK_AT(cond, line, "what", args...)   (a helper's caller's line)
 *   CHECK_THAT(cond)                        (the condition is the what)
 *   test_pass("what", args...)              (a check that passed)
 *   FAIL_AT(line, "what", args...)          (one that failed: exits)
 *
 * In C++ the what may be a std::string too. Before including it, a
 * program may define TEST_LAST_ERROR as a function returning the last
 * error's text (fc_last_error), printed with a failure, and
 * TEST_ON_FAILURE as a function run before exiting (killing a child).
 * It includes no flowctrl header: the compatibility programs build it
 * against frozen ones. Compiles as C99 and C++11 with -Wall -Wextra
 * -Werror -pedantic, as tests/c_abi.rs and scripts/c-sanitizers.sh build
 * the programs.
 */
#ifndef FLOWCTRL_TEST_UTIL_H
#define FLOWCTRL_TEST_UTIL_H

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#if defined(__GNUC__)
#define TEST_PRINTF_LIKE(fmt, args) __attribute__((format(printf, fmt, args)))
#else
#define TEST_PRINTF_LIKE(fmt, args)
#endif

/* Checks passed so far. */
static unsigned g_checks;

static inline void test_vreport(const char *verdict, const char *fmt, va_list ap)
{
    printf("%-5s ", verdict);
    vprintf(fmt, ap);
    printf("\n");
}

static inline void test_vpass(const char *fmt, va_list ap)
{
    test_vreport("ok", fmt, ap);
    g_checks++;
}

/* Reports a failed check at `file`:`line` and exits 1. */
static inline void test_vfail(const char *file, int line, const char *fmt, va_list ap)
{
    const char *name = strrchr(file, '/');
    test_vreport("FAIL", fmt, ap);
#ifdef TEST_LAST_ERROR
    printf("      (tests/c/%s:%d) last error: %s\n", name ? name + 1 : file, line,
           TEST_LAST_ERROR());
#else
    printf("      (tests/c/%s:%d)\n", name ? name + 1 : file, line);
#endif
#ifdef TEST_ON_FAILURE
    TEST_ON_FAILURE();
#endif
    fflush(stdout);
    exit(1);
}

static inline TEST_PRINTF_LIKE(1, 2) void test_pass(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    test_vpass(fmt, ap);
    va_end(ap);
}

static inline TEST_PRINTF_LIKE(3, 4) void test_fail(const char *file, int line, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    test_vfail(file, line, fmt, ap);
    va_end(ap);
}

static inline TEST_PRINTF_LIKE(4, 5) void test_check(int ok, const char *file, int line,
                                                      const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    if (ok)
        test_vpass(fmt, ap);
    else
        test_vfail(file, line, fmt, ap);
    va_end(ap);
}

#ifdef __cplusplus
#include <string>

static inline void test_pass(const std::string &what)
{
    test_pass("%s", what.c_str());
}

static inline void test_fail(const char *file, int line, const std::string &what)
{
    test_fail(file, line, "%s", what.c_str());
}

static inline void test_check(int ok, const char *file, int line, const std::string &what)
{
    test_check(ok, file, line, "%s", what.c_str());
}
#endif

#define FAIL_AT(line, ...) test_fail(__FILE__, (line), __VA_ARGS__)
#define CHECK_AT(cond, line, ...) test_check((cond) ? 1 : 0, __FILE__, (line), __VA_ARGS__)
#define CHECK(cond, ...) CHECK_AT(cond, __LINE__, __VA_ARGS__)
#define CHECK_THAT(cond) CHECK(cond, "%s", #cond)

#endif
