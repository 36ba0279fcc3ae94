// Running the suite in a child process: the child streams one JSON line per event through a
// pipe ({"begin"}, {"result"}, {"info"}, {"end"}); the parent turns a signal into a failed check
// naming the check that was running, resumes with a fresh child from the next check, and kills
// the child when the plugin's time is up.
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <nlohmann/json.hpp>

#include <chrono>
#include <cstdio>
#include <cstring>

#include "suite.hpp"

namespace nibble::conformance {

size_t Report::passed() const {
  size_t n = 0;
  for (const CheckResult& c : checks) n += c.passed ? 1 : 0;
  return n;
}

size_t Report::failed() const { return checks.size() - passed(); }

namespace {

using Clock = std::chrono::steady_clock;

void write_line(int fd, const nlohmann::json& j) {
  std::string line = j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) + "\n";
  const char* p = line.data();
  size_t left = line.size();
  while (left > 0) {
    ssize_t n = ::write(fd, p, left);
    if (n < 0) {
      if (errno == EINTR) continue;
      return;  // the parent went away; nothing to report to
    }
    p += n;
    left -= size_t(n);
  }
}

[[noreturn]] void child_main(const Options& options, size_t first, int fd) {
  // The plugin's own prints must not mix with the kit's report on stdout.
  ::dup2(STDERR_FILENO, STDOUT_FILENO);
  set_step_reporter([fd](const std::string& step) { write_line(fd, {{"step", step}}); });
  run_suite(
      options, first,
      [fd](const std::string& key, const std::string& value) {
        write_line(fd, {{"info", key}, {"value", value}});
      },
      [fd](size_t i, const std::string& name) {
        write_line(fd, {{"begin", i}, {"name", name}});
      },
      [fd](size_t i, const CheckResult& r) {
        write_line(fd,
                   {{"result", i}, {"name", r.name}, {"passed", r.passed}, {"message", r.message}});
      });
  write_line(fd, {{"end", true}});
  std::fflush(nullptr);
  // Skip static destructors and atexit handlers: the plugin was shut down by the suite.
  ::_exit(0);
}

std::string describe_status(int status) {
  if (WIFSIGNALED(status)) {
    int sig = WTERMSIG(status);
    const char* abbrev = sigabbrev_np(sig);
    return std::string("the process died of SIG") + (abbrev ? abbrev : "?") + " (signal " +
           std::to_string(sig) + ", " + strsignal(sig) + ")";
  }
  if (WIFEXITED(status))
    return "the process exited with code " + std::to_string(WEXITSTATUS(status));
  return "the process ended abnormally";
}

}  // namespace

Report run(const Options& options) {
  Report report;
  report.plugin_path = options.plugin_path;
  report.host_abi_minor = NIBBLE_ABI_MINOR;
  const auto start = Clock::now();
  auto add = [&](const CheckResult& r) {
    report.checks.push_back(r);
    if (options.on_result) options.on_result(r);
  };
  auto info = [&](const std::string& key, const std::string& value) {
    if (key == "backend") report.backend = value;
    if (key == "description") report.description = value;
  };
  if (!options.fork_child) {
    run_suite(
        options, 0, info, [](size_t, const std::string&) {},
        [&](size_t, const CheckResult& r) { add(r); });
    report.seconds = std::chrono::duration<double>(Clock::now() - start).count();
    return report;
  }

  const auto deadline = start + std::chrono::seconds(options.timeout_seconds);
  size_t next = 0;
  constexpr int kMaxCrashes = 10;
  for (int crashes = 0;;) {
    int fds[2];
    if (::pipe(fds) != 0) throw std::runtime_error("pipe failed");
    std::fflush(nullptr);
    pid_t pid = ::fork();
    if (pid < 0) throw std::runtime_error("fork failed");
    if (pid == 0) {
      ::close(fds[0]);
      child_main(options, next, fds[1]);
    }
    ::close(fds[1]);
    std::string buffer, running_name, step;
    long running = -1;
    bool ended = false, timed_out = false;
    for (;;) {
      auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
      if (left.count() <= 0) {
        timed_out = true;
        break;
      }
      pollfd p{fds[0], POLLIN, 0};
      int ready = ::poll(&p, 1, int(std::min<long long>(left.count(), 1000)));
      if (ready < 0 && errno == EINTR) continue;
      if (ready <= 0) continue;
      char chunk[4096];
      ssize_t n = ::read(fds[0], chunk, sizeof chunk);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) break;
      buffer.append(chunk, size_t(n));
      size_t eol;
      while ((eol = buffer.find('\n')) != std::string::npos) {
        auto j = nlohmann::json::parse(buffer.substr(0, eol), nullptr, false);
        buffer.erase(0, eol + 1);
        if (j.is_discarded() || !j.is_object()) continue;
        if (j.contains("begin")) {
          running = j["begin"].get<long>();
          running_name = j["name"].get<std::string>();
          step.clear();
        } else if (j.contains("step")) {
          step = j["step"].get<std::string>();
        } else if (j.contains("result")) {
          add({j["name"].get<std::string>(), j["passed"].get<bool>(),
               j["message"].get<std::string>()});
          running = -1;
          next = j["result"].get<size_t>() + 1;
        } else if (j.contains("info")) {
          info(j["info"].get<std::string>(), j["value"].get<std::string>());
        } else if (j.contains("end")) {
          ended = true;
        }
      }
    }
    ::close(fds[0]);
    if (timed_out) ::kill(pid, SIGKILL);
    int status = 0;
    while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
    }
    if (timed_out) {
      add({running >= 0 ? running_name : "suite/timeout", false,
           "timed out: the plugin's checks took longer than " +
               std::to_string(options.timeout_seconds) + " s (--timeout); the rest did not run"});
      break;
    }
    if (ended && WIFEXITED(status) && WEXITSTATUS(status) == 0) break;
    const std::string how = describe_status(status);
    if (running < 0) {
      add({"suite/child process", false, how + " outside any check"});
      break;
    }
    add({running_name, false,
         how + " during this check" + (step.empty() ? "" : " (at " + step + ")")});
    next = size_t(running) + 1;
    if (++crashes >= kMaxCrashes) {
      add({"suite/crashes", false,
           "the plugin crashed " + std::to_string(crashes) +
               " times; the remaining checks did not run"});
      break;
    }
  }
  report.seconds = std::chrono::duration<double>(Clock::now() - start).count();
  return report;
}

}  // namespace nibble::conformance
