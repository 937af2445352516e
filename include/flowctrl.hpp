/*
 * flowctrl.hpp — a header-only C++17 layer over flowctrl.h: handles that
 * free themselves, permits released by their destructor, refusals as values.
 *
 *   #include "flowctrl.hpp"
 *
 *   flowctrl::Table table("my-service");                  // throws flowctrl::Error
 *   flowctrl::Task api = table.task("api", flowctrl::TaskConfig().max_concurrency(64));
 *   api.set_keys("10/second;1000/hour", 5);               // per key: rates, a cap
 *
 *   flowctrl::Admission got = api.acquire_key(caller);    // or acquire(), acquire_for(timeout)
 *   if (!got) {                                           // a limit refused: not an error
 *       const flowctrl::Refusal &r = got.refusal();       // r.reason, r.retry_after
 *       return answer_429(r.retry_after_seconds());       // Retry-After, whole seconds
 *   }
 *   flowctrl::Permit permit = std::move(got).permit();
 *   if (!serve()) permit.dropped();                       // the outcome its destructor uses
 *   // released here: "success" unless set otherwise, "dropped" if an exception unwinds it
 *
 * Errors and refusals are kept apart, as in the C API:
 *
 * - A limit refusing a request (the C statuses FC_LIMITED_*, 1-99) is a
 *   decision, returned as a value: an Admission holds either a Permit or a
 *   Refusal (its reason and, where the library knows it, when an identical
 *   request can pass). No exception is thrown for it.
 * - An error (statuses >= 100: a bad argument, a table that cannot be opened,
 *   a configuration mismatch...) throws flowctrl::Error, a
 *   std::runtime_error carrying the fc_status and fc_last_error()'s reason.
 *   Constructors throw too, so a Table or Task that exists is usable.
 *
 * Ownership: Table and Task own their C handles (fc_table_close,
 * fc_task_free in their destructors) and are move-only. A Task does not need
 * its Table to stay alive (the C library keeps the table mapped for it). A
 * Permit is move-only and refers to its Task's handle: release or destroy it
 * before that Task, as an iterator before its container. Moving a permit
 * moves the obligation: it is released once, by whichever object holds it
 * last.
 *
 * Threads: Table and Task are thread-safe (their C handles are); a Permit is
 * one request's and must not be used by two threads at once.
 */

#ifndef FLOWCTRL_HPP
#define FLOWCTRL_HPP

#include "flowctrl.h"

#include <chrono>
#include <cstdint>
#include <exception>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>
#include <variant>

namespace flowctrl {

/** How a request ended, given to a permit's release. */
enum class Outcome : fc_outcome {
    success = FC_OUTCOME_SUCCESS,
    dropped = FC_OUTCOME_DROPPED,  ///< failed, overloaded: a signal to adaptive limits
    ignored = FC_OUTCOME_IGNORED,  ///< abandoned (the client went away): no signal
};

/** Which limit refused a request: the C API's FC_LIMITED_* status. */
enum class Reason : std::uint32_t {
    local = FC_LIMITED_LOCAL,                       ///< the host's rate for the task
    global = FC_LIMITED_GLOBAL,                     ///< the cluster-wide quota
    concurrency = FC_LIMITED_CONCURRENCY,           ///< the host's cap for the task
    key_rate = FC_LIMITED_KEY_RATE,                 ///< one of the key's rates
    key_concurrency = FC_LIMITED_KEY_CONCURRENCY,   ///< the key's cap
    key_blocked = FC_LIMITED_KEY_BLOCKED,           ///< the key is blocked
    key_global = FC_LIMITED_KEY_GLOBAL,             ///< the key's rate across the fleet
};

/** "local", "global", "concurrency", "key_rate", "key_concurrency",
 *  "key_blocked", "key_global". */
inline const char *to_string(Reason reason) noexcept {
    switch (reason) {
    case Reason::local: return "local";
    case Reason::global: return "global";
    case Reason::concurrency: return "concurrency";
    case Reason::key_rate: return "key_rate";
    case Reason::key_concurrency: return "key_concurrency";
    case Reason::key_blocked: return "key_blocked";
    case Reason::key_global: return "key_global";
    }
    return "unknown";
}

/** An error of the library (a C status >= 100). Limits refusing are not errors. */
class Error : public std::runtime_error {
public:
    Error(fc_status status, const std::string &what) : std::runtime_error(what), status_(status) {}
    /** The C status, e.g. FC_ERR_CONFIG_MISMATCH. */
    fc_status status() const noexcept { return status_; }

private:
    fc_status status_;
};

namespace detail {
[[noreturn]] inline void fail(fc_status status, const char *call) {
    throw Error(status, std::string(call) + ": " + fc_status_str(status) + ": " + fc_last_error());
}
inline void check(fc_status status, const char *call) {
    if (status != FC_OK) fail(status, call);
}
inline const std::uint8_t *bytes(std::string_view key) noexcept {
    return reinterpret_cast<const std::uint8_t *>(key.data());
}
/** A duration as whole ms for the C API (a negative one: 0, refused there). */
inline std::uint64_t ms(std::chrono::milliseconds d) noexcept {
    return d.count() < 0 ? 0 : static_cast<std::uint64_t>(d.count());
}
}  // namespace detail

/** A refused request: which limit, and when an identical one can pass. */
struct Refusal {
    Reason reason;
    /** When an identical request can pass; empty where the library cannot
     *  know (a concurrency cap, where a release decides; a blocked key). */
    std::optional<std::chrono::nanoseconds> retry_after;
    /** For Reason::key_rate: which of the key's rates refused (0-based). */
    std::uint32_t which_rate = 0;

    /** The C status (FC_LIMITED_*). */
    fc_status status() const noexcept { return static_cast<fc_status>(reason); }

    /** The value of a Retry-After header: the wait in whole seconds, rounded
     *  up and at least 1, or `unknown` where no wait is known. */
    std::chrono::seconds retry_after_seconds(
        std::chrono::seconds unknown = std::chrono::seconds(1)) const {
        if (!retry_after) return unknown;
        std::chrono::seconds whole = std::chrono::ceil<std::chrono::seconds>(*retry_after);
        return whole < std::chrono::seconds(1) ? std::chrono::seconds(1) : whole;
    }
};

/** A key's state, read without spending: the numbers of Retry-After and the
 *  RateLimit-* headers. */
struct KeyState {
    // The key's rates on the host (a global rate is not one: its slice is the fleet's).
    std::uint32_t limit = 0;      ///< the tightest rate's limit (its burst); 0: no rate
    std::uint32_t remaining = 0;  ///< what that rate admits now
    std::chrono::nanoseconds reset_after{0};  ///< until that rate is whole again
    std::chrono::nanoseconds retry_after{0};  ///< until one request can pass (0: now)
    std::uint32_t in_flight = 0;  ///< the key's permits held on the host (counted with a cap)
    std::uint32_t max_concurrency = 0;  ///< the key's cap; 0: none
    bool present = false;     ///< the key holds an entry now
    bool overridden = false;  ///< an override applies
    bool blocked = false;
    bool unlimited = false;
};

/** An admitted request's permits. Move-only; released once, by release() or
 *  by the destructor. The destructor uses the outcome set by success(),
 *  dropped() or ignored(); with none set, "dropped" when an exception thrown
 *  since the acquire is unwinding it, else "success". The destructor cannot
 *  report a release the library refuses (a permit carried across fork):
 *  call release() to see it. An empty Permit (default-made, moved from or
 *  released) holds nothing. */
class Permit {
public:
    Permit() noexcept = default;
    Permit(Permit &&other) noexcept
        : task_(std::exchange(other.task_, nullptr)), permit_(other.permit_),
          outcome_(other.outcome_), chosen_(other.chosen_), exceptions_(other.exceptions_) {}
    Permit &operator=(Permit &&other) noexcept {
        if (this != &other) {
            finish();
            task_ = std::exchange(other.task_, nullptr);
            permit_ = other.permit_;
            outcome_ = other.outcome_;
            chosen_ = other.chosen_;
            exceptions_ = other.exceptions_;
        }
        return *this;
    }
    Permit(const Permit &) = delete;
    Permit &operator=(const Permit &) = delete;
    ~Permit() { finish(); }

    /** The outcome the release will use. */
    void success() noexcept { set_outcome(Outcome::success); }
    void dropped() noexcept { set_outcome(Outcome::dropped); }
    void ignored() noexcept { set_outcome(Outcome::ignored); }
    void set_outcome(Outcome outcome) noexcept {
        outcome_ = outcome;
        chosen_ = true;
    }
    Outcome outcome() const noexcept { return outcome_; }

    /** Releases now, with the outcome set (else "success"); throws Error if
     *  the library refuses the release (the permit then stays held). Does
     *  nothing on an empty Permit. */
    void release() {
        if (task_ == nullptr) return;
        detail::check(fc_release(task_, &permit_, static_cast<fc_outcome>(outcome_)), "fc_release");
        task_ = nullptr;
    }
    void release(Outcome outcome) {
        set_outcome(outcome);
        release();
    }

    /** Whether it still holds its permits (not empty, not released). */
    bool held() const noexcept { return task_ != nullptr; }
    explicit operator bool() const noexcept { return held(); }
    /** How many permits it holds. */
    std::uint32_t n() const noexcept { return task_ != nullptr ? permit_.n : 0; }
    /** The C permit, for calls this header does not wrap. */
    const fc_permit &native() const noexcept { return permit_; }

private:
    friend class Task;
    Permit(const fc_task *task, const fc_permit &permit) noexcept
        : task_(task), permit_(permit), exceptions_(std::uncaught_exceptions()) {}

    void finish() noexcept {
        if (task_ == nullptr) return;
        Outcome outcome = outcome_;
        if (!chosen_ && std::uncaught_exceptions() > exceptions_) outcome = Outcome::dropped;
        // A destructor cannot throw: a refused release is not reported here.
        (void)fc_release(std::exchange(task_, nullptr), &permit_, static_cast<fc_outcome>(outcome));
    }

    const fc_task *task_ = nullptr;
    fc_permit permit_{};
    Outcome outcome_ = Outcome::success;
    bool chosen_ = false;
    int exceptions_ = 0;
};

/** What an acquire gives: a Permit, or the Refusal of a limit. Converts to
 *  true when admitted. */
class Admission {
public:
    explicit Admission(Permit permit) noexcept : value_(std::move(permit)) {}
    explicit Admission(Refusal refusal) noexcept : value_(std::move(refusal)) {}

    bool admitted() const noexcept { return std::holds_alternative<Permit>(value_); }
    explicit operator bool() const noexcept { return admitted(); }
    /** The permit; std::bad_variant_access when refused. Move it out to keep
     *  it: `Permit p = std::move(admission).permit();` */
    Permit &permit() & { return std::get<Permit>(value_); }
    Permit &&permit() && { return std::get<Permit>(std::move(value_)); }
    /** The refusal; std::bad_variant_access when admitted. */
    const Refusal &refusal() const { return std::get<Refusal>(value_); }

private:
    std::variant<Permit, Refusal> value_;
};

/** A task's configuration for Table::task: every field unset unless named
 *  (unset fields take the defaults, and are not compared with an existing
 *  task's). native() reaches the fields not named here. */
class TaskConfig {
public:
    TaskConfig() noexcept { (void)fc_task_config_init(&config_, sizeof config_); }
    TaskConfig &local_rate(double per_second) noexcept { config_.local_rate = per_second; return *this; }
    TaskConfig &burst(std::uint32_t burst) noexcept { config_.burst = burst; return *this; }
    TaskConfig &max_concurrency(std::uint32_t cap) noexcept { config_.max_concurrency = cap; return *this; }
    TaskConfig &global_rate(double per_second) noexcept { config_.global_rate = per_second; return *this; }
    TaskConfig &wait_order(std::uint32_t order) noexcept { config_.wait_order = order; return *this; }
    fc_task_config &native() noexcept { return config_; }
    const fc_task_config &native() const noexcept { return config_; }

private:
    fc_task_config config_;
};

/** A task of a table, owning its fc_task handle. Move-only; thread-safe. */
class Task {
public:
    Task() noexcept = default;
    /** Takes ownership of a handle from fc_task_register. */
    explicit Task(fc_task *adopt) noexcept : task_(adopt) {}
    Task(Task &&other) noexcept : task_(std::exchange(other.task_, nullptr)) {}
    Task &operator=(Task &&other) noexcept {
        if (this != &other) {
            fc_task_free(task_);
            task_ = std::exchange(other.task_, nullptr);
        }
        return *this;
    }
    Task(const Task &) = delete;
    Task &operator=(const Task &) = delete;
    ~Task() { fc_task_free(task_); }

    /** Asks for `n` permits; refuses at once when a limit says no. */
    Admission acquire(std::uint32_t n = 1) const {
        fc_permit permit{};
        return admission(fc_acquire(task_, n, &permit), permit, n, "fc_acquire");
    }

    /** Waits up to `timeout` (whole ms) for `n` permits, host-wide in the
     *  task's wait order, sleeping in the kernel. */
    Admission acquire_for(std::chrono::milliseconds timeout, std::uint32_t n = 1) const {
        fc_permit permit{};
        auto ms = timeout.count() < 0 ? 0 : timeout.count();
        auto bounded = static_cast<std::uint32_t>(ms > 0xffffffffLL ? 0xffffffffLL : ms);
        return admission(fc_acquire_wait(task_, n, bounded, &permit), permit, n, "fc_acquire_wait");
    }

    /** Asks for `n` permits for `key` (at most 4,096 bytes): the key's limits
     *  and the task's own both admit it, or neither is spent. */
    Admission acquire_key(std::string_view key, std::uint32_t n = 1) const {
        fc_permit permit{};
        fc_status status = fc_acquire_key(task_, detail::bytes(key), key.size(), n, &permit);
        if (status == FC_OK) return Admission(Permit(task_, permit));
        if (status >= 100) detail::fail(status, "fc_acquire_key");
        std::uint64_t after = FC_RETRY_UNKNOWN;
        std::uint32_t which = 0;
        (void)fc_last_refusal(&after, &which);
        return Admission(refusal(status, after, which));
    }

    /** Gives the task limits per key, host-wide: `rates` like
     *  "10/second;1000/hour" (nullptr: none), a per-key cap (0: none),
     *  `capacity` keys (0: 65,536), `flags` FC_KEYS_SHADOW,
     *  FC_KEYS_OVERFLOW_ADMIT. */
    void set_keys(const char *rates, std::uint32_t max_concurrency = 0, std::uint32_t capacity = 0,
                  std::uint32_t flags = 0) const {
        detail::check(fc_task_set_keys(task_, rates, max_concurrency, capacity, flags), "fc_task_set_keys");
    }

    /** Gives `key` limits of its own, live; `flags` FC_KEY_UNLIMITED,
     *  FC_KEY_BLOCKED, FC_KEY_REMOVE, FC_KEYS_SHADOW. */
    void set_key_override(std::string_view key, const char *rates, std::uint32_t max_concurrency = 0,
                          std::uint32_t flags = 0) const {
        detail::check(fc_task_set_key_override(task_, detail::bytes(key), key.size(), rates,
                                               max_concurrency, flags),
                      "fc_task_set_key_override");
    }

    /** Gives every key a rate across the fleet (or changes it), keeping the
     *  other key limits: `count` per `period`, in slices of `slice` (zero:
     *  the period), `local` a slice on a host's own, `fallback`
     *  FC_FALLBACK_SHARE, _LOCAL or _DENY while the store fails. */
    void set_key_global(double count, std::chrono::milliseconds period,
                        std::chrono::milliseconds slice = std::chrono::milliseconds(0),
                        std::uint32_t local = 1, std::uint32_t fallback = FC_FALLBACK_SHARE) const {
        detail::check(fc_task_set_key_global(task_, count, detail::ms(period), detail::ms(slice), local,
                                             fallback),
                      "fc_task_set_key_global");
    }

    /** Takes the keys' global rate away. */
    void remove_key_global() const {
        detail::check(fc_task_set_key_global(task_, 0, 0, 0, 0, 0), "fc_task_set_key_global");
    }

    /** As set_key_global, for `key`'s override (which must exist). */
    void set_key_override_global(std::string_view key, double count, std::chrono::milliseconds period,
                                 std::chrono::milliseconds slice = std::chrono::milliseconds(0),
                                 std::uint32_t local = 1,
                                 std::uint32_t fallback = FC_FALLBACK_SHARE) const {
        detail::check(fc_task_set_key_override_global(task_, detail::bytes(key), key.size(), count,
                                                      detail::ms(period), detail::ms(slice), local,
                                                      fallback),
                      "fc_task_set_key_override_global");
    }

    /** `key`'s state, spending nothing. */
    KeyState key_state(std::string_view key) const {
        fc_key_state raw;
        (void)fc_key_state_init(&raw, sizeof raw);
        detail::check(fc_key_state_get(task_, detail::bytes(key), key.size(), &raw), "fc_key_state_get");
        KeyState state;
        state.limit = raw.limit;
        state.remaining = raw.remaining;
        state.reset_after = std::chrono::nanoseconds(static_cast<std::int64_t>(raw.reset_after_ns));
        state.retry_after = std::chrono::nanoseconds(static_cast<std::int64_t>(raw.retry_after_ns));
        state.in_flight = raw.in_flight;
        state.max_concurrency = raw.max_concurrency;
        state.present = raw.present != 0;
        state.overridden = raw.overridden != 0;
        state.blocked = raw.blocked != 0;
        state.unlimited = raw.unlimited != 0;
        return state;
    }

    /** Changes the set fields of `config` for every process on the host. */
    void update(const TaskConfig &config) const {
        detail::check(fc_task_update(task_, &config.native()), "fc_task_update");
    }

    /** The task's counters, summed over every process on the host. */
    struct fc_task_stats stats() const {
        struct fc_task_stats value;
        (void)fc_task_stats_init(&value, sizeof value);
        detail::check(fc_task_stats(task_, &value), "fc_task_stats");
        return value;
    }

    /** The concurrency count minus what the processes' ledgers hold (0: exact). */
    std::int64_t drift() const {
        std::int64_t value = 0;
        detail::check(fc_task_check(task_, &value), "fc_task_check");
        return value;
    }

    /** The concurrency limit applied now; empty when there is no cap. */
    std::optional<std::uint32_t> limit() const {
        std::uint32_t value = 0;
        detail::check(fc_task_limit(task_, &value), "fc_task_limit");
        return value == 0 ? std::nullopt : std::optional<std::uint32_t>(value);
    }

    /** The C handle, for calls this header does not wrap. */
    const fc_task *native() const noexcept { return task_; }

private:
    static Refusal refusal(fc_status status, std::uint64_t after_ns, std::uint32_t which) {
        Refusal refusal{static_cast<Reason>(status), std::nullopt, which};
        if (after_ns != FC_RETRY_UNKNOWN)
            refusal.retry_after = std::chrono::nanoseconds(static_cast<std::int64_t>(after_ns));
        return refusal;
    }

    Admission admission(fc_status status, const fc_permit &permit, std::uint32_t n, const char *call) const {
        if (status == FC_OK) return Admission(Permit(task_, permit));
        if (status >= 100) detail::fail(status, call);
        std::uint64_t after = FC_RETRY_UNKNOWN;
        if (fc_retry_after(task_, status, n, &after) != FC_OK) after = FC_RETRY_UNKNOWN;
        return Admission(refusal(status, after, 0));
    }

    fc_task *task_ = nullptr;
};

/** A shared-memory task table, owning its fc_table handle. Move-only;
 *  thread-safe. */
class Table {
public:
    /** Opens the table at `path` (nullptr: /dev/shm/flowctrl; a bare name:
     *  /dev/shm/<name>), creating it if missing; throws Error. */
    explicit Table(const char *path, const fc_table_options *options = nullptr) {
        detail::check(fc_table_open(path, options, &table_), "fc_table_open");
    }
    explicit Table(const std::string &path, const fc_table_options *options = nullptr)
        : Table(path.c_str(), options) {}
    Table(Table &&other) noexcept : table_(std::exchange(other.table_, nullptr)) {}
    Table &operator=(Table &&other) noexcept {
        if (this != &other) {
            fc_table_close(table_);
            table_ = std::exchange(other.table_, nullptr);
        }
        return *this;
    }
    Table(const Table &) = delete;
    Table &operator=(const Table &) = delete;
    ~Table() { fc_table_close(table_); }

    /** Registers the task host-wide, or attaches to it; throws Error (e.g.
     *  FC_ERR_CONFIG_MISMATCH when a set field differs from the task's). */
    Task task(const char *name, const TaskConfig &config = TaskConfig()) const {
        fc_task *task = nullptr;
        detail::check(fc_task_register(table_, name, &config.native(), &task), "fc_task_register");
        return Task(task);
    }
    Task task(const std::string &name, const TaskConfig &config = TaskConfig()) const {
        return this->task(name.c_str(), config);
    }

    /** Looks for dead processes now; how many were found (their permits are back). */
    std::uint32_t reap() const {
        std::uint32_t reaped = 0;
        detail::check(fc_table_reap(table_, &reaped), "fc_table_reap");
        return reaped;
    }

    /** The C handle, for calls this header does not wrap. */
    const fc_table *native() const noexcept { return table_; }

private:
    fc_table *table_ = nullptr;
};

}  // namespace flowctrl

#endif /* FLOWCTRL_HPP */
