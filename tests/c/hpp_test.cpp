// include/flowctrl.hpp, the header-only C++17 layer, exercised part by
// part: owning Table and Task handles, Permits released by their
// destructors (once, however often they are moved), the outcome setters,
// an exception unwinding a permit, refusals as values with their reason and
// wait, keyed acquires and key state, and errors as flowctrl::Error.
//
//   hpp_test <scratch-dir>
//
// Prints one line per check and exits 1 at the first failure. Run by
// tests/c_abi.rs against libflowctrl.so and libflowctrl.a, and by
// scripts/c-sanitizers.sh under ASan and UBSan.
//
// Must compile with: g++ -std=c++17 -Wall -Wextra -Werror -pedantic -pthread

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <stdexcept>
#include <string>
#include <thread>
#include <type_traits>
#include <utility>
#include <variant>

#include "flowctrl.hpp"
#include "test_util.h"

using flowctrl::Admission;
using flowctrl::Outcome;
using flowctrl::Permit;
using flowctrl::Reason;
using flowctrl::Table;
using flowctrl::Task;
using flowctrl::TaskConfig;
using namespace std::chrono_literals;

static_assert(!std::is_copy_constructible<Permit>::value, "a Permit is not copied");
static_assert(!std::is_copy_assignable<Permit>::value, "a Permit is not copied");
static_assert(std::is_nothrow_move_constructible<Permit>::value, "a Permit moves");
static_assert(std::is_nothrow_move_assignable<Permit>::value, "a Permit moves");
static_assert(!std::is_copy_constructible<Task>::value && std::is_nothrow_move_constructible<Task>::value,
              "a Task owns its handle");
static_assert(!std::is_copy_constructible<Table>::value && std::is_nothrow_move_constructible<Table>::value,
              "a Table owns its handle");
static_assert(std::is_base_of<std::runtime_error, flowctrl::Error>::value, "errors are exceptions");

// Runs `body`, which must throw flowctrl::Error with `status`.
template <typename F>
static bool throws(fc_status status, F body) {
    try {
        body();
    } catch (const flowctrl::Error &e) {
        std::printf("   (Error: %s)\n", e.what());
        return e.status() == status;
    }
    return false;
}

static std::uint64_t released(const Task &task) {
    struct fc_task_stats s = task.stats();
    return s.released_success + s.released_dropped + s.released_ignored;
}

static Permit take(const Task &task) {
    Admission got = task.acquire();
    if (!got) {
        std::fprintf(stderr, "FAIL: refused by %s\n", flowctrl::to_string(got.refusal().reason));
        std::exit(1);
    }
    return std::move(got).permit();
}

int main(int argc, char **argv) {
    if (argc < 2) {
        std::fprintf(stderr, "usage: %s <scratch-dir>\n", argv[0]);
        return 2;
    }
    const std::string dir = argv[1];

    // Errors: a constructor that cannot open its table throws.
    CHECK_THAT(throws(FC_ERR_IO, [&] { Table missing(dir + "/no/such/dir/table"); }));

    Table table(dir + "/table");
    Task api = table.task("api", TaskConfig().max_concurrency(2));
    CHECK_THAT(api.limit() == std::optional<std::uint32_t>(2));
    CHECK_THAT(throws(FC_ERR_CONFIG_MISMATCH, [&] { table.task("api", TaskConfig().max_concurrency(3)); }));
    CHECK_THAT(throws(FC_ERR_INVALID_ARGUMENT, [&] { (void)api.acquire(0); }));
    CHECK_THAT(throws(FC_ERR_INVALID_ARGUMENT, [] { (void)Task().acquire(); }));

    // A permit released by its destructor, as "success".
    {
        Permit permit = take(api);
        CHECK_THAT(permit.held() && permit.n() == 1 && api.stats().in_flight == 1);
    }
    CHECK_THAT(api.stats().in_flight == 0 && api.stats().released_success == 1);

    // A moved permit is released once, by its last holder.
    {
        Permit first = take(api);
        Permit second(std::move(first));
        CHECK_THAT(!first && second && first.n() == 0);
        Permit third;
        CHECK_THAT(!third);
        third = std::move(second);
        CHECK_THAT(!second && third && api.stats().in_flight == 1);
        first = Permit();  // assigning to an empty permit releases nothing
        CHECK_THAT(api.stats().in_flight == 1 && released(api) == 1);
    }
    CHECK_THAT(api.stats().in_flight == 0 && released(api) == 2);
    CHECK_THAT(api.stats().admitted == 2 && api.drift() == 0);

    // Move-assigning onto a held permit releases the one it held first.
    {
        Permit a = take(api);
        Permit b = take(api);
        CHECK_THAT(api.stats().in_flight == 2);
        a = std::move(b);
        CHECK_THAT(api.stats().in_flight == 1 && released(api) == 3);
    }
    CHECK_THAT(api.stats().in_flight == 0 && released(api) == 4);

    // The outcome setters decide what the destructor releases with.
    {
        Permit permit = take(api);
        permit.dropped();
        CHECK_THAT(permit.outcome() == Outcome::dropped);
    }
    CHECK_THAT(api.stats().released_dropped == 1);
    {
        Permit permit = take(api);
        permit.ignored();
    }
    CHECK_THAT(api.stats().released_ignored == 1);
    {
        Permit permit = take(api);
        permit.dropped();
        permit.success();  // the last word counts
    }
    CHECK_THAT(api.stats().released_success == 5);

    // An explicit release, then nothing more from the destructor.
    {
        Permit permit = take(api);
        permit.release(Outcome::ignored);
        CHECK_THAT(!permit.held() && api.stats().released_ignored == 2);
        permit.release();  // an empty permit: nothing
    }
    CHECK_THAT(released(api) == 8 && api.stats().admitted == 8);

    // An exception unwinding a permit releases it as "dropped", unless an
    // outcome was set.
    try {
        Permit permit = take(api);
        throw std::runtime_error("the request failed");
    } catch (const std::runtime_error &) {
    }
    CHECK_THAT(api.stats().released_dropped == 2 && api.stats().in_flight == 0);
    try {
        Permit permit = take(api);
        permit.success();
        throw std::runtime_error("after the answer");
    } catch (const std::runtime_error &) {
    }
    CHECK_THAT(api.stats().released_success == 6);

    // A permit moved to another thread is released there.
    {
        Permit permit = take(api);
        std::thread worker([p = std::move(permit)]() mutable { p.release(); });
        worker.join();
        CHECK_THAT(!permit && api.stats().in_flight == 0 && api.stats().released_success == 7);
    }

    // Refusals are values: the cap of 2 is full.
    {
        Permit a = take(api);
        Permit b = take(api);
        Admission got = api.acquire();
        CHECK_THAT(!got && !got.admitted());
        const flowctrl::Refusal &r = got.refusal();
        CHECK_THAT(r.reason == Reason::concurrency && r.status() == FC_LIMITED_CONCURRENCY);
        CHECK_THAT(!r.retry_after.has_value());  // a cap: a release decides
        CHECK_THAT(r.retry_after_seconds() == 1s && r.retry_after_seconds(0s) == 0s);
        CHECK_THAT(std::string(flowctrl::to_string(r.reason)) == "concurrency");
        bool threw = false;
        try {
            (void)got.permit();
        } catch (const std::bad_variant_access &) {
            threw = true;
        }
        CHECK_THAT(threw);

        // Waiting: refused after the timeout, admitted when a permit comes back.
        auto started = std::chrono::steady_clock::now();
        CHECK_THAT(!api.acquire_for(50ms));
        CHECK_THAT(std::chrono::steady_clock::now() - started >= 45ms);
        std::thread releaser([&a] {
            std::this_thread::sleep_for(20ms);
            a.release();
        });
        Admission waited = api.acquire_for(5s);
        releaser.join();
        CHECK_THAT(waited && waited.permit().held());
    }
    CHECK_THAT(api.stats().in_flight == 0 && api.drift() == 0);

    // A refusal by the task's rate carries its wait.
    {
        Task slow = table.task("slow", TaskConfig().local_rate(1.0).burst(1));
        Permit first = take(slow);
        Admission got = slow.acquire();
        CHECK_THAT(!got && got.refusal().reason == Reason::local);
        CHECK_THAT(got.refusal().retry_after && *got.refusal().retry_after > 500ms &&
              *got.refusal().retry_after <= 1s);
        CHECK_THAT(got.refusal().retry_after_seconds() == 1s);
    }

    // Keyed acquires: every key 5/minute.
    Task keyed = table.task("keyed", TaskConfig().max_concurrency(16));
    keyed.set_keys("5/minute", 0, 1024);
    CHECK_THAT(throws(FC_ERR_INVALID_ARGUMENT, [&] { keyed.set_keys("five a minute"); }));
    for (int i = 0; i < 5; i++) {
        Admission got = keyed.acquire_key("alice");
        CHECK_THAT(got);
    }
    {
        Admission sixth = keyed.acquire_key("alice");
        CHECK_THAT(!sixth && sixth.refusal().reason == Reason::key_rate && sixth.refusal().which_rate == 0);
        CHECK_THAT(sixth.refusal().retry_after && *sixth.refusal().retry_after >= 11s &&
              *sixth.refusal().retry_after <= 12s);
        CHECK_THAT(sixth.refusal().retry_after_seconds() == 12s);
        flowctrl::KeyState alice = keyed.key_state("alice");
        CHECK_THAT(alice.present && alice.limit == 5 && alice.remaining == 0);
        CHECK_THAT(alice.reset_after > 55s && alice.reset_after <= 60s && alice.retry_after >= 11s);
        CHECK_THAT(keyed.acquire_key("bob"));  // another key has its own 5
    }
    // Which of several rates refused.
    keyed.set_key_override("multi", "100/second;2/minute");
    CHECK_THAT(keyed.acquire_key("multi") && keyed.acquire_key("multi"));
    {
        Admission third = keyed.acquire_key("multi");
        CHECK_THAT(!third && third.refusal().reason == Reason::key_rate && third.refusal().which_rate == 1);
    }
    // A key's own cap, counted in its state, given back by the destructor.
    keyed.set_key_override("solo", "100/hour", 1);
    {
        Admission held = keyed.acquire_key("solo");
        CHECK_THAT(held && keyed.key_state("solo").in_flight == 1);
        Admission second = keyed.acquire_key("solo");
        CHECK_THAT(!second && second.refusal().reason == Reason::key_concurrency);
        CHECK_THAT(!second.refusal().retry_after);
        Permit moved = std::move(held).permit();
        CHECK_THAT(moved && keyed.key_state("solo").in_flight == 1);
    }
    CHECK_THAT(keyed.key_state("solo").in_flight == 0 && keyed.key_state("solo").overridden);
    // A blocked key.
    keyed.set_key_override("mallory", nullptr, 0, FC_KEY_BLOCKED);
    {
        Admission got = keyed.acquire_key("mallory");
        CHECK_THAT(!got && got.refusal().reason == Reason::key_blocked && keyed.key_state("mallory").blocked);
    }
    keyed.set_key_override("mallory", nullptr, 0, FC_KEY_REMOVE);
    CHECK_THAT(keyed.acquire_key("mallory"));
    // A key's rate across the fleet (no store: the host is the fleet), in
    // slices of 10 s of the wall clock, taken well inside one.
    keyed.set_key_override("quota", "100/second");
    keyed.set_key_override_global("quota", 2, 10s, 0ms, 0, FC_FALLBACK_DENY);
    {
        auto into = std::chrono::duration_cast<std::chrono::milliseconds>(
                        std::chrono::system_clock::now().time_since_epoch()) % 10000;
        if (into > 8s) std::this_thread::sleep_for(10s - into + 5ms);
        Admission first = keyed.acquire_key("quota");
        Admission second = keyed.acquire_key("quota");
        Admission third = keyed.acquire_key("quota");
        CHECK_THAT(first && second && !third && third.refusal().reason == Reason::key_global);
        CHECK_THAT(third.refusal().retry_after && *third.refusal().retry_after <= 10s);
        CHECK_THAT(std::string(to_string(third.refusal().reason)) == "key_global");
    }
    CHECK_THAT(throws(FC_ERR_INVALID_ARGUMENT, [&] { keyed.set_key_global(1, 1h, 1s); }));
    CHECK_THAT(throws(FC_ERR_INVALID_ARGUMENT, [&] { keyed.set_key_override_global("nobody", 5, 1s); }));
    keyed.set_key_global(1000, 1s);
    keyed.remove_key_global();
    keyed.set_key_override("quota", nullptr, 0, FC_KEY_REMOVE);
    CHECK_THAT(keyed.stats().in_flight == 0 && keyed.drift() == 0);

    // Moving handles: a Task moved, and a Task outliving its Table.
    {
        Task moved(std::move(api));
        CHECK_THAT(throws(FC_ERR_INVALID_ARGUMENT, [&] { (void)api.acquire(); }));
        Table other(dir + "/other");
        Task alone = other.task("alone", TaskConfig().max_concurrency(1));
        Table sink(std::move(other));
        { Table gone(std::move(sink)); }  // the table handle is closed here
        Permit permit = take(alone);
        CHECK_THAT(!alone.acquire() && alone.stats().in_flight == 1);
        permit.release();
        CHECK_THAT(alone.stats().in_flight == 0 && moved.stats().in_flight == 0);
        CHECK_THAT(table.reap() == 0);
    }

    std::printf("\nall %u checks passed\n", g_checks);
    return 0;
}
