// The C++ server recipes of docs/guide/recipes.md (tests/recipes.rs runs them): a tiny HTTP
// server on 127.0.0.1 whose requests share one host-wide concurrency cap, written on
// include/flowctrl.hpp (C++17): a Table and a Task that free themselves, a move-only Permit
// released by its destructor, a refusal as a value and an error as a flowctrl::Error.
//
//   recipe_server prefork TABLE WORKERS CAP   open + register, then fork
//                                             WORKERS single-threaded
//                                             processes that accept on the
//                                             shared socket (and replace any
//                                             that dies)
//   recipe_server threads TABLE THREADS CAP   one process, THREADS threads
//                                             accepting on the socket
//
// Prints "ready PORT" once it listens (port chosen by the kernel). GET
// /work?hold=MS holds a permit MS milliseconds and answers 200 with
// "PID TID T0 T1 IN_FLIGHT" (CLOCK_MONOTONIC ns just after the acquire and
// just before the release; the host's in_flight then); 503 "busy" when the
// cap is reached; 500 on an error (a flowctrl::Error). SIGTERM: stop
// accepting, finish the requests in hand, exit 0.
#include "flowctrl.hpp"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <functional>
#include <string>
#include <thread>
#include <vector>

namespace {

volatile sig_atomic_t stopping = 0;
void on_term(int) { stopping = 1; }

long long now_ns() {
    timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

void sleep_ms(long ms) {
    timespec left = {ms / 1000, (ms % 1000) * 1000000L};
    while (nanosleep(&left, &left) != 0 && errno == EINTR) {
    }
}

void send_all(int fd, const std::string &text) {
    size_t done = 0;
    while (done < text.size()) {
        ssize_t n = send(fd, text.data() + done, text.size() - done, MSG_NOSIGNAL);
        if (n <= 0 && errno != EINTR) return;
        if (n > 0) done += static_cast<size_t>(n);
    }
}

void answer(int fd, const char *status, const std::string &body) {
    send_all(fd, std::string("HTTP/1.0 ") + status + "\r\nContent-Length: " +
                     std::to_string(body.size()) + "\r\nConnection: close\r\n\r\n" + body);
}

// One connection: read the request head, admit through the cap, answer.
// Throws flowctrl::Error on an error of the library (not on a refusal).
void serve(const flowctrl::Task &api, int fd) {
    std::string head;
    char buf[1024];
    while (head.find("\r\n\r\n") == std::string::npos && head.size() < 8192) {
        ssize_t n = recv(fd, buf, sizeof buf, 0);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) return;
        head.append(buf, static_cast<size_t>(n));
    }
    size_t at = head.find("hold=");
    long hold_ms = at == std::string::npos ? 100 : std::atol(head.c_str() + at + 5);

    // The recipe: admit, serve, release; refuse (do not queue) when limited.
    flowctrl::Admission got = api.acquire();
    if (!got) {  // the cap refused: a decision, not an error
        answer(fd, "503 Service Unavailable", "busy\n");
        return;
    }
    long long t0, t1;
    std::uint32_t in_flight;
    {
        // Move-only: released once, by release() or else by its destructor
        // ("dropped" if an exception unwinds it, as api.stats() may throw).
        flowctrl::Permit permit = std::move(got).permit();
        t0 = now_ns();
        in_flight = api.stats().in_flight;
        sleep_ms(hold_ms);
        t1 = now_ns();
        permit.release();  // "success"; throws if the library refuses it
    }
    answer(fd, "200 OK",
           std::to_string(getpid()) + " " + std::to_string(syscall(SYS_gettid)) + " " +
               std::to_string(t0) + " " + std::to_string(t1) + " " + std::to_string(in_flight) +
               "\n");
}

// Accepts on the shared (non-blocking) socket until SIGTERM; a request in
// hand is finished first. poll wakes every 50 ms to look at the flag.
void accept_loop(const flowctrl::Task &api, int listener) {
    while (!stopping) {
        pollfd p = {listener, POLLIN, 0};
        if (poll(&p, 1, 50) <= 0) continue;
        int fd = accept(listener, nullptr, nullptr);
        if (fd < 0) continue;  // another worker took it (EAGAIN), or EINTR
        try {
            serve(api, fd);
        } catch (const flowctrl::Error &e) {  // e.status(): the C status
            std::fprintf(stderr, "recipe_server: %s\n", e.what());
            answer(fd, "500 Internal Server Error", "error\n");
        }
        close(fd);
    }
}

pid_t start_worker(const flowctrl::Task &api, int listener) {
    pid_t parent = getpid();
    pid_t pid = fork();
    if (pid == 0) {
        prctl(PR_SET_PDEATHSIG, SIGTERM);  // a worker never outlives its parent
        if (getppid() != parent) _exit(0);
        // The Task inherited from the parent: its first acquire attaches
        // this process to the table by itself. _exit: the parent's objects
        // are the parent's to destroy.
        accept_loop(api, listener);
        _exit(0);
    }
    if (pid < 0) std::perror("fork");
    return pid;
}

// Listens, then serves in WORKERS processes or THREADS threads until SIGTERM.
int run(const std::string &mode, int n, const flowctrl::Task &api) {
    int listener = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0);
    sockaddr_in addr;
    std::memset(&addr, 0, sizeof addr);
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);  // 127.0.0.1 only
    addr.sin_port = 0;                              // a free port
    socklen_t len = sizeof addr;
    if (listener < 0 || bind(listener, reinterpret_cast<sockaddr *>(&addr), sizeof addr) != 0 ||
        listen(listener, 128) != 0 ||
        getsockname(listener, reinterpret_cast<sockaddr *>(&addr), &len) != 0) {
        std::perror("listen");
        return 1;
    }

    if (mode == "prefork") {
        std::vector<pid_t> workers;
        for (int i = 0; i < n; i++) workers.push_back(start_worker(api, listener));
        std::printf("ready %d\n", ntohs(addr.sin_port));
        std::fflush(stdout);
        while (!stopping) {  // replace any worker that dies
            int status;
            pid_t dead = waitpid(-1, &status, WNOHANG);
            if (dead <= 0) {
                sleep_ms(20);
                continue;
            }
            for (pid_t &w : workers)
                if (w == dead) w = start_worker(api, listener);
        }
        for (pid_t w : workers) kill(w, SIGTERM);
        for (pid_t w : workers) waitpid(w, nullptr, 0);
    } else if (mode == "threads") {
        std::vector<std::thread> pool;
        for (int i = 0; i < n; i++) pool.emplace_back(accept_loop, std::cref(api), listener);
        std::printf("ready %d\n", ntohs(addr.sin_port));
        std::fflush(stdout);
        for (std::thread &t : pool) t.join();
    } else {
        std::fprintf(stderr, "unknown mode %s\n", mode.c_str());
        return 2;
    }
    close(listener);
    return 0;
}

}  // namespace

int main(int argc, char **argv) {
    if (argc != 5) {
        std::fprintf(stderr, "usage: %s prefork|threads TABLE N CAP\n", argv[0]);
        return 2;
    }
    std::string mode = argv[1];
    int n = std::atoi(argv[3]);

    struct sigaction sa;
    std::memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_term;
    sigaction(SIGTERM, &sa, nullptr);

    try {
        // Before any fork: the table and the task, opened once.
        flowctrl::Table table(argv[2]);
        flowctrl::Task api = table.task(
            "api", flowctrl::TaskConfig().max_concurrency(static_cast<std::uint32_t>(std::atoi(argv[4]))));
        return run(mode, n, api);
    } catch (const flowctrl::Error &e) {
        std::fprintf(stderr, "recipe_server: %s\n", e.what());
        return 1;
    }
}


