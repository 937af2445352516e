/*
 * consumer.c's twin in C++17, on flowctrl.hpp (the RAII header): built by
 * tests/install.rs against an installed flowctrl and by
 * bindings/python/tests/test_release.py against the unpacked release
 * tarball, with CMake (find_package) and with pkg-config.
 *
 *   consumer_cpp <scratch-dir>
 *
 * Prints the library's version, checks that it is the header's, then takes
 * concurrency decisions on a table in <scratch-dir>: a permit held, a
 * refusal as a value, the permit released by its destructor, an error as a
 * flowctrl::Error. Exits 0 when every check passes, 1 at the first that
 * does not.
 */

#include <flowctrl.hpp>

#include <cstdio>
#include <cstring>
#include <string>
#include <utility>

#define STRINGIFY(x) #x
#define VERSION_OF(major, minor, patch) STRINGIFY(major) "." STRINGIFY(minor) "." STRINGIFY(patch)

namespace {

int failed(const char *what) {
    std::fprintf(stderr, "consumer_cpp: %s\n", what);
    return 1;
}

int decisions(const std::string &dir) {
    fc_table_options options;
    fc_table_options_init(&options, sizeof options);
    options.capacity = 4;
    options.max_processes = 4;
    flowctrl::Table table(dir + "/table", &options);
    flowctrl::Task task = table.task("install", flowctrl::TaskConfig().max_concurrency(1));
    {
        flowctrl::Admission first = task.acquire();
        if (!first) return failed("the first acquire was refused");
        flowctrl::Permit permit = std::move(first).permit();
        flowctrl::Admission second = task.acquire();
        if (second) return failed("a second acquire was admitted past the cap of 1");
        if (second.refusal().reason != flowctrl::Reason::concurrency)
            return failed("a second acquire was refused, but not by the cap");
    }  // the permit's destructor releases it
    flowctrl::Admission again = task.acquire();
    if (!again) return failed("an acquire after the release was refused");
    std::move(again).permit().release();
    if (task.stats().in_flight != 0) return failed("a permit is still in flight");
    try {
        table.task("install", flowctrl::TaskConfig().max_concurrency(2));
        return failed("a mismatched registration did not throw");
    } catch (const flowctrl::Error &e) {
        if (e.status() != FC_ERR_CONFIG_MISMATCH) return failed(e.what());
    }
    return 0;
}

}  // namespace

int main(int argc, char **argv) {
    const char *header = VERSION_OF(FC_VERSION_MAJOR, FC_VERSION_MINOR, FC_VERSION_PATCH);
    if (argc != 2) {
        std::fprintf(stderr, "usage: consumer_cpp <scratch-dir>\n");
        return 2;
    }
    std::printf("version %s\n", fc_version());
    // A header and a library of different versions: a broken install.
    if (std::strcmp(fc_version(), header) != 0) {
        std::fprintf(stderr, "consumer_cpp: library %s, header %s\n", fc_version(), header);
        return 1;
    }
    try {
        if (decisions(argv[1]) != 0) return 1;
    } catch (const flowctrl::Error &e) {
        return failed(e.what());
    }
    std::printf("decisions ok\n");
    return 0;
}
