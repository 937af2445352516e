// The C++ side of the flowctrl ABI test: include/flowctrl.h used from C++11
// through small RAII wrappers, as a C++ service would. Proves the header's
// extern "C" guards: without them nothing here would link.
//
//   abi_test_cpp <scratch-dir>
//
// Prints one line per check and exits 1 at the first failure. Run by
// tests/c_abi.rs (cargo test) against libflowctrl.so and libflowctrl.a.
//
// Must compile with: g++ -std=c++11 -Wall -Wextra -Werror -pedantic -pthread

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <stdexcept>
#include <string>
#include <thread>
#include <type_traits>
#include <utility>
#include <vector>

#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include "flowctrl.h"
#include "test_util.h"

static_assert(sizeof(fc_status) == sizeof(uint32_t), "fc_status is a uint32_t");
static_assert(std::is_standard_layout<fc_permit>::value, "fc_permit is plain data");
static_assert(sizeof(fc_permit) == 64, "fc_permit is 64 bytes for good");

namespace flowctrl {

// A failed fc_* call: its status and fc_last_error() at the time.
class Error : public std::runtime_error {
public:
    Error(const std::string &call, fc_status status)
        : std::runtime_error(call + ": " + fc_status_str(status) + ": " + fc_last_error()),
          status_(status) {}

    fc_status status() const { return status_; }

private:
    fc_status status_;
};

inline void check(const char *call, fc_status status)
{
    if (status != FC_OK)
        throw Error(call, status);
}

// Owns an fc_table.
class Table {
public:
    explicit Table(const std::string &path, const fc_table_options *options = nullptr)
    {
        check("fc_table_open", fc_table_open(path.c_str(), options, &handle_));
    }
    ~Table() { fc_table_close(handle_); }
    Table(Table &&other) noexcept : handle_(other.handle_) { other.handle_ = nullptr; }
    Table &operator=(Table &&other) noexcept
    {
        std::swap(handle_, other.handle_);
        return *this;
    }
    Table(const Table &) = delete;
    Table &operator=(const Table &) = delete;

    const fc_table *get() const { return handle_; }

private:
    fc_table *handle_ = nullptr;
};

class Task;

// An admitted request; released with FC_OUTCOME_IGNORED unless released
// explicitly first.
class Permit {
public:
    Permit(const Permit &) = delete;
    Permit &operator=(const Permit &) = delete;
    Permit(Permit &&other) noexcept : task_(other.task_), permit_(other.permit_)
    {
        other.task_ = nullptr;
    }
    ~Permit()
    {
        if (task_ != nullptr)
            fc_release(task_, &permit_, FC_OUTCOME_IGNORED);
    }

    void release(fc_outcome outcome)
    {
        const fc_task *task = task_;
        task_ = nullptr;
        check("fc_release", fc_release(task, &permit_, outcome));
    }

    uint32_t n() const { return permit_.n; }

private:
    friend class Task;
    Permit(const fc_task *task, const fc_permit &permit) : task_(task), permit_(permit) {}

    const fc_task *task_;
    fc_permit permit_;
};

// Owns an fc_task.
class Task {
public:
    Task(const Table &table, const std::string &name, const fc_task_config *config)
    {
        check("fc_task_register", fc_task_register(table.get(), name.c_str(), config, &handle_));
    }
    ~Task() { fc_task_free(handle_); }
    Task(Task &&other) noexcept : handle_(other.handle_) { other.handle_ = nullptr; }
    Task(const Task &) = delete;
    Task &operator=(const Task &) = delete;

    // Admitted: a permit; limited: none, and `why` tells by what.
    bool acquire(uint32_t n, std::vector<Permit> &held, fc_status &why) const
    {
        fc_permit permit;
        why = fc_acquire(handle_, n, &permit);
        if (why == FC_OK) {
            held.push_back(Permit(handle_, permit));
            return true;
        }
        if (why >= FC_ERR_INVALID_ARGUMENT)
            throw Error("fc_acquire", why);
        return false;
    }

    // The struct shares its name with the function: name it by its tag.
    struct fc_task_stats stats() const
    {
        struct fc_task_stats stats;
        check("fc_task_stats_init", fc_task_stats_init(&stats, sizeof stats));
        check("fc_task_stats", ::fc_task_stats(handle_, &stats));
        return stats;
    }

    fc_task_config config() const
    {
        fc_task_config config;
        check("fc_task_config_init", fc_task_config_init(&config, sizeof config));
        check("fc_task_config_get", fc_task_config_get(handle_, &config));
        return config;
    }

private:
    fc_task *handle_ = nullptr;
};

}  // namespace flowctrl

// ---------------------------------------------------------------------------

#define CHECK_EQ(got, want, what) check_eq((got), (want), (what), __LINE__)

static void check_eq(uint64_t got, uint64_t want, const std::string &what, int line)
{
    CHECK_AT(got == want, line,
             what + (got == want ? " == " + std::to_string(got)
                                 : ": " + std::to_string(got) + ", expected " + std::to_string(want)));
}

static fc_task_config task_config(double local_rate, uint32_t burst, uint32_t max_concurrency)
{
    fc_task_config config;
    flowctrl::check("fc_task_config_init", fc_task_config_init(&config, sizeof config));
    config.local_rate = local_rate;
    config.burst = burst;
    config.max_concurrency = max_concurrency;
    return config;
}

// Runs `body`, which must throw flowctrl::Error with `want`.
template <typename Body>
static void expect_error(const std::string &what, fc_status want, Body body)
{
    try {
        body();
    } catch (const flowctrl::Error &e) {
        CHECK_AT(e.status() == want && fc_last_error()[0] != '\0', __LINE__,
                 what + " throws " + fc_status_str(want) + ": " + e.what());
        return;
    }
    CHECK_AT(false, __LINE__, what + " throws");
}

// ---------------------------------------------------------------------------
// Releasing from a thread_local destructor
//
// A C++ thread_local that holds a permit releases it when its thread ends,
// while the thread's thread-locals are being destroyed, flowctrl's own among
// them, in an order nobody controls. The release, a failing call after it
// and fc_last_error() must all work there; an abort would end the process.

struct DestructorReport {
    fc_status release = FC_ERR_INTERNAL;        // the permit's release
    fc_status again = FC_ERR_INTERNAL;          // releasing it a second time
    bool reason = false;                        // fc_last_error() was non-empty
    fc_status bad_acquire = FC_ERR_INTERNAL;    // fc_acquire(NULL, ...)
    bool ran = false;
};

// Owns a table, a task and a permit of the thread it lives in; gives them
// all back in its destructor, recording what the calls answered.
class ThreadHolder {
public:
    void take(const std::string &path, DestructorReport *report)
    {
        report_ = report;
        flowctrl::check("fc_table_open", fc_table_open(path.c_str(), nullptr, &table_));
        fc_task_config config = task_config(FC_RATE_UNSET, FC_UNSET, 1);
        flowctrl::check("fc_task_register", fc_task_register(table_, "tls", &config, &task_));
        flowctrl::check("fc_acquire", fc_acquire(task_, 1, &permit_));
    }

    ~ThreadHolder()
    {
        if (report_ == nullptr)
            return;
        report_->release = fc_release(task_, &permit_, FC_OUTCOME_SUCCESS);
        report_->again = fc_release(task_, &permit_, FC_OUTCOME_SUCCESS);
        const char *why = fc_last_error();
        report_->reason = why != nullptr && why[0] != '\0';
        report_->bad_acquire = fc_acquire(nullptr, 1, nullptr);
        report_->reason = report_->reason && fc_last_error() != nullptr;
        fc_task_free(task_);
        fc_table_close(table_);
        report_->ran = true;
    }

private:
    DestructorReport *report_ = nullptr;
    fc_table *table_ = nullptr;
    fc_task *task_ = nullptr;
    fc_permit permit_{};
};

thread_local ThreadHolder t_holder;
static DestructorReport g_main_report;

static void check_report(const DestructorReport &r, const std::string &who, int line)
{
    CHECK_AT(r.ran, line, who + ": the thread_local's destructor ran");
    CHECK_AT(r.release == FC_OK, line, who + ": release in the destructor: " + fc_status_str(r.release));
    CHECK_AT(r.again == FC_ERR_INVALID_ARGUMENT, line,
             who + ": a second release there is refused: " + fc_status_str(r.again));
    CHECK_AT(r.bad_acquire == FC_ERR_INVALID_ARGUMENT, line,
             who + ": fc_acquire(NULL) there: " + fc_status_str(r.bad_acquire));
    CHECK_AT(r.reason, line, who + ": fc_last_error() there is a reason, never NULL");
}

static void test_thread_local_destructors(const std::string &dir)
{
    const std::string path = dir + "/tls-table";
    DestructorReport first, last;

    std::printf("\n# releasing from thread_local destructors\n");
    // The holder is constructed before flowctrl's thread-locals are first
    // touched on the thread (so it is destroyed after them)...
    std::thread a([&] {
        t_holder.take(path, &first);
        (void)fc_acquire(nullptr, 1, nullptr);
    });
    a.join();
    check_report(first, "holder made first", __LINE__);
    // ... and after them (so it is destroyed before them).
    std::thread b([&] {
        (void)fc_acquire(nullptr, 1, nullptr);
        (void)fc_last_error();
        t_holder.take(path, &last);
    });
    b.join();
    check_report(last, "holder made last", __LINE__);

    flowctrl::Table table(path);
    fc_task_config config = task_config(FC_RATE_UNSET, FC_UNSET, FC_UNSET);
    flowctrl::Task task(table, "tls", &config);
    struct fc_task_stats stats = task.stats();
    CHECK_EQ(stats.released_success, 2, "released_success: both destructors' releases");
    CHECK_EQ(stats.in_flight, 0, "in_flight once both threads ended");
}

// The main thread's holder is destroyed by exit(); it can only report by the
// exit status.
static void check_main_holder_at_exit()
{
    const DestructorReport &r = g_main_report;
    if (!r.ran || r.release != FC_OK || r.again != FC_ERR_INVALID_ARGUMENT ||
        r.bad_acquire != FC_ERR_INVALID_ARGUMENT || !r.reason) {
        std::printf("FAIL  the main thread's thread_local destructor: release %u, again %u, "
                    "bad acquire %u, reason %d\n",
                    (unsigned)r.release, (unsigned)r.again, (unsigned)r.bad_acquire, (int)r.reason);
        std::fflush(stdout);
        _exit(1);
    }
}

static void run(const std::string &dir)
{
    const std::string path = dir + "/cpp-table";

    std::printf("flowctrl %s C++ ABI test in %s\n", fc_version(), dir.c_str());
    CHECK(std::string(fc_version()) == std::to_string(FC_VERSION_MAJOR) + "." +
                                           std::to_string(FC_VERSION_MINOR) + "." +
                                           std::to_string(FC_VERSION_PATCH),
          std::string("fc_version() is ") + fc_version());
    CHECK(std::string(fc_status_str(FC_ERR_CORRUPT)) != fc_status_str(12345),
          "fc_status_str tells known statuses from unknown ones");
    {
        flowctrl::Table table(path);
        CHECK(table.get() != nullptr, "open " + path);
        fc_task_config config = task_config(1000, 4, 2);
        flowctrl::Task task(table, "cpp", &config);
        fc_task_config only_rate = task_config(1000, FC_UNSET, FC_UNSET);
        flowctrl::Task same(table, "cpp", &only_rate);
        CHECK(same.config().max_concurrency == 2, "registering with only local_rate set");
        CHECK(task.config().max_concurrency == 2 && task.config().burst == 4 &&
                  task.config().local_rate == 1000,
              "fc_task_config_get returns the registered configuration");

        std::vector<flowctrl::Permit> held;
        held.reserve(3);
        fc_status why = FC_OK;
        CHECK(task.acquire(1, held, why), "first acquire admitted");
        CHECK(task.acquire(1, held, why), "second acquire admitted");
        bool admitted = task.acquire(1, held, why);
        CHECK(!admitted && why == FC_LIMITED_CONCURRENCY,
              std::string("third acquire: ") + fc_status_str(why));
        CHECK_EQ(task.stats().in_flight, 2, "in_flight");
        held[0].release(FC_OUTCOME_SUCCESS);
        held.clear();  // the second is released by its destructor
        struct fc_task_stats stats = task.stats();
        CHECK_EQ(stats.admitted, 2, "admitted");
        CHECK_EQ(stats.limited_concurrency, 1, "limited_concurrency");
        CHECK_EQ(stats.released_success, 1, "released_success");
        CHECK_EQ(stats.released_ignored, 1, "released_ignored (by a destructor)");
        CHECK_EQ(stats.in_flight, 0, "in_flight once the permits are gone");

        flowctrl::Task moved(std::move(task));
        CHECK(moved.acquire(2, held, why) && held.back().n() == 2, "a moved task still works");
        held.clear();

        expect_error("registering \"\"", FC_ERR_INVALID_NAME,
                     [&] { flowctrl::Task bad(table, "", nullptr); });
        fc_task_config other = task_config(1000, 4, 3);
        expect_error("registering \"cpp\" with another max_concurrency", FC_ERR_CONFIG_MISMATCH,
                     [&] { flowctrl::Task bad(table, "cpp", &other); });
        expect_error("acquiring 5 permits (above the burst)", FC_ERR_INVALID_ARGUMENT,
                     [&] { moved.acquire(5, held, why); });
        expect_error("opening a table in a missing directory", FC_ERR_IO,
                     [&] { flowctrl::Table bad(dir + "/missing/table"); });
    }
    CHECK(unlink(path.c_str()) == 0, "remove " + path);

    test_thread_local_destructors(dir);
    CHECK(unlink((dir + "/tls-table").c_str()) == 0, "remove " + dir + "/tls-table");
}

int main(int argc, char **argv)
{
    if (argc != 2) {
        std::fprintf(stderr, "usage: %s <scratch-dir>\n", argv[0]);
        return 2;
    }
    std::string dir = std::string(argv[1]) + "/abi_test_cpp.XXXXXX";
    std::vector<char> buffer(dir.begin(), dir.end());
    buffer.push_back('\0');
    if (mkdtemp(buffer.data()) == nullptr) {
        std::printf("FAIL  mkdtemp %s: %s\n", dir.c_str(), std::strerror(errno));
        return 1;
    }
    dir = buffer.data();
    try {
        run(dir);
        // The main thread's holder lives until exit(), which destroys it and
        // then runs check_main_holder_at_exit. Its table stays mapped after
        // the file is removed.
        const std::string path = dir + "/main-tls-table";
        t_holder.take(path, &g_main_report);
        CHECK(unlink(path.c_str()) == 0, "remove " + path + " (the main thread's holder keeps it)");
        CHECK(std::atexit(check_main_holder_at_exit) == 0, "atexit");
    } catch (const std::exception &e) {
        std::printf("FAIL  unexpected exception: %s\n", e.what());
        return 1;
    }
    CHECK(rmdir(dir.c_str()) == 0, "remove " + dir + " (no stray files left)");
    std::printf("\nall %u checks passed (the main thread's holder is checked at exit)\n", g_checks);
    return 0;
}
