// Helpers for the hostile-input tests: small checkpoints written on the spot, raw safetensors
// images, the CLI run as a child process (output captured, time limited, peak memory measured)
// and the check that text is safe to show on a terminal.
#pragma once

#include <nibble/safetensors.hpp>
#include <nibble/untrusted_text.hpp>

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <random>
#include <string>
#include <string_view>
#include <vector>

namespace nibble::test {

namespace fs = std::filesystem;

/// A fresh directory under the build tree, removed when the object dies.
class ScratchDir {
 public:
  explicit ScratchDir(const std::string& name) {
    static std::mt19937_64 rng(std::random_device{}());
    path_ = fs::path(NIBBLE_BUILD_DIR) / "tests" / "hostile" / (name + "_" + std::to_string(rng()));
    fs::create_directories(path_);
  }
  ~ScratchDir() {
    std::error_code ec;
    fs::remove_all(path_, ec);
  }
  const fs::path& path() const { return path_; }
  fs::path operator/(const std::string& name) const { return path_ / name; }

 private:
  fs::path path_;
};

/// Write `bytes` to `path`.
inline void write_file(const fs::path& path, std::string_view bytes) {
  std::ofstream(path, std::ios::binary).write(bytes.data(), std::streamsize(bytes.size()));
}

/// A safetensors image: the 8-byte little-endian header length, `header`, then `data`.
inline std::string safetensors_image(const std::string& header, const std::string& data) {
  std::string out(8, '\0');
  uint64_t n = header.size();
  std::memcpy(out.data(), &n, 8);
  return out + header + data;
}

/// Validate an image in memory; the error message, or "" when it was accepted.
inline std::string open_error(const std::string& image) {
  try {
    SafetensorsFile::from_bytes(
        std::span<const std::byte>(reinterpret_cast<const std::byte*>(image.data()), image.size()),
        "mem.safetensors");
  } catch (const std::exception& e) {
    return e.what();
  }
  return "";
}

/// Add a zero-filled GPTQ layer (K x N, 4-bit, one group of K) under `prefix`.
inline void add_gptq_layer(std::map<std::string, OwnedTensor>& t, const std::string& prefix,
                           int64_t K = 32, int64_t N = 8) {
  t[prefix + ".qweight"] = OwnedTensor::zeros(DType::I32, {K / 8, N});
  t[prefix + ".qzeros"] = OwnedTensor::zeros(DType::I32, {1, N / 8});
  t[prefix + ".scales"] = OwnedTensor::zeros(DType::F16, {1, N});
}

/// config.json for add_gptq_layer's layers, with `extra` (",\"key\": value...") inside
/// quantization_config and `top` at the top level.
inline std::string gptq_config(const std::string& extra = "", const std::string& top = "") {
  return "{" + top + (top.empty() ? "" : ",") +
         R"("quantization_config": {"quant_method": "gptq", "bits": 4, "group_size": 32, )"
         R"("sym": false, "desc_act": false)" +
         extra + "}}";
}

/// Write a checkpoint directory: model.safetensors and config.json.
inline void write_checkpoint(const fs::path& dir, const std::map<std::string, OwnedTensor>& t,
                             const std::string& config) {
  fs::create_directories(dir);
  write_safetensors(dir / "model.safetensors", t);
  write_file(dir / "config.json", config);
}

/// What a child process did.
struct ChildRun {
  int status = -1;  ///< exit status, or -1 when killed or it did not exit
  bool timed_out = false;
  std::string output;  ///< stdout and stderr together
  long peak_kib = 0;   ///< peak resident memory
};

inline ChildRun collect(pid_t pid, int fd, int timeout_s) {
  ChildRun r;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(timeout_s);
  char buf[65536];
  while (true) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) {
      r.timed_out = true;
      kill(pid, SIGKILL);
      break;
    }
    pollfd p{fd, POLLIN, 0};
    if (poll(&p, 1, int(left.count())) <= 0) continue;
    const ssize_t n = read(fd, buf, sizeof buf);
    if (n <= 0) break;
    r.output.append(buf, size_t(n));
  }
  close(fd);
  int status = 0;
  rusage usage{};
  wait4(pid, &status, 0, &usage);
  r.peak_kib = usage.ru_maxrss;
  if (!r.timed_out && WIFEXITED(status)) r.status = WEXITSTATUS(status);
  return r;
}

/// Run the nibble CLI with `args`, at most `timeout_s` seconds.
inline ChildRun run_cli(const std::vector<std::string>& args, int timeout_s = 60) {
  int fd[2];
  if (pipe(fd) != 0) return {};
  const pid_t pid = fork();
  if (pid == 0) {
    dup2(fd[1], 1);
    dup2(fd[1], 2);
    close(fd[0]);
    close(fd[1]);
    std::vector<char*> argv{const_cast<char*>(NIBBLE_CLI)};
    for (const auto& a : args) argv.push_back(const_cast<char*>(a.c_str()));
    argv.push_back(nullptr);
    execv(NIBBLE_CLI, argv.data());
    _exit(127);
  }
  close(fd[1]);
  return collect(pid, fd[0], timeout_s);
}

/// Run `f` in a child process; its output is what f returns (an error message, say), and its
/// exit status 0 unless it threw something other than std::exception.
inline ChildRun in_child(const std::function<std::string()>& f, int timeout_s = 60) {
  int fd[2];
  if (pipe(fd) != 0) return {};
  const pid_t pid = fork();
  if (pid == 0) {
    close(fd[0]);
    std::string out;
    int code = 0;
    try {
      out = f();
    } catch (const std::exception& e) {
      out = std::string("exception: ") + e.what();
    } catch (...) {
      code = 3;
    }
    size_t done = 0;
    while (done < out.size()) {
      const ssize_t n = write(fd[1], out.data() + done, out.size() - done);
      if (n <= 0) break;
      done += size_t(n);
    }
    _exit(code);
  }
  close(fd[1]);
  return collect(pid, fd[0], timeout_s);
}

/// Whether `s` can reach a terminal: valid UTF-8 without control characters (newline aside),
/// DEL, C1 controls or the invisible reordering characters. `why` says what was found.
inline bool terminal_safe(std::string_view s, std::string* why) {
  if (!is_valid_utf8(s)) {
    *why = "invalid UTF-8";
    return false;
  }
  for (size_t i = 0; i < s.size(); ++i) {
    const unsigned char c = static_cast<unsigned char>(s[i]);
    if ((c < 0x20 && c != '\n') || c == 0x7F) {
      *why = "control byte " + std::to_string(c) + " at " + std::to_string(i);
      return false;
    }
    const unsigned char d = i + 1 < s.size() ? static_cast<unsigned char>(s[i + 1]) : 0;
    const unsigned char e = i + 2 < s.size() ? static_cast<unsigned char>(s[i + 2]) : 0;
    if (c == 0xC2 && d >= 0x80 && d <= 0x9F) {
      *why = "C1 control at " + std::to_string(i);
      return false;
    }
    if (c == 0xE2 && d == 0x80 && ((e >= 0xAA && e <= 0xAE) || e == 0x8E || e == 0x8F)) {
      *why = "bidirectional control at " + std::to_string(i);
      return false;
    }
  }
  return true;
}

}  // namespace nibble::test
