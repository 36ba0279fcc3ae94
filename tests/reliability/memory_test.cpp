// Resource limits: memory while loading stays within a stated bound of the checkpoint's size, and
// headers that claim absurd sizes are refused before anything they claim is allocated.
#include <nibble/checkpoint.hpp>
#include <nibble/error.hpp>
#include <nibble/quantize.hpp>
#include <nibble/safetensors.hpp>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>

namespace fs = std::filesystem;
using ::testing::HasSubstr;
using namespace nibble;

namespace {

long peak_rss_kib() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return u.ru_maxrss;
}

// Runs f in a child process and returns what it wrote (a number), so the measurement starts
// from a small, known peak.
long in_child(const std::function<long()>& f) {
  int fd[2];
  if (pipe(fd) != 0) return -1;
  pid_t pid = fork();
  if (pid == 0) {
    close(fd[0]);
    long v = -1;
    try {
      v = f();
    } catch (...) {
    }
    if (write(fd[1], &v, sizeof v) != sizeof v) _exit(2);
    _exit(0);
  }
  close(fd[1]);
  long v = -1;
  if (read(fd[0], &v, sizeof v) != sizeof v) v = -1;
  close(fd[0]);
  int status = 0;
  waitpid(pid, &status, 0);
  return v;
}

TEST(Memory, LoadingStaysWithinTheCheckpointPlusTwoDecodedLayers) {
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
  GTEST_SKIP() << "a sanitizer's shadow memory and quarantine inflate RSS; measured in release";
#endif
  fs::path dir = fs::path(NIBBLE_BUILD_DIR) / "tests" /
                 // ctest runs each test case in its own process, several at once: one
                 // directory per process, so none reads a checkpoint another is writing.
                 ("memory_ckpt_" + std::to_string(getpid()));
  SyntheticSpec spec;
  for (int i = 0; i < 6; ++i) spec.layers.emplace_back(2048, 4096);  // 4 MiB packed each
  spec.seed = 3;
  QuantizeOptions o;
  o.group_size = 128;
  write_checkpoint(dir, make_synthetic_model(spec, o, SchemeKind::GptqV2), SchemeKind::GptqV2, o);
  const long file_kib = long(fs::file_size(dir / "model.safetensors") / 1024);
  const long layer_kib = 2048L * 4096 / 1024;  // one decoded layer: one byte per weight
  long growth = in_child([&] {
    long before = peak_rss_kib();
    auto ckpt = Checkpoint::open(dir);
    for (const auto& l : ckpt.linear_layers()) {
      CanonicalWeight w = ckpt.decode_linear(l.prefix);
      if (w.q.empty()) return -1L;
    }
    return peak_rss_kib() - before;
  });
  ASSERT_GE(growth, 0);
  // The stated bound (docs/reliability.md): the mapped file plus two decoded layers.
  EXPECT_LE(growth, file_kib + 2 * layer_kib)
      << "peak RSS grew " << growth << " KiB for a " << file_kib << " KiB checkpoint";
  RecordProperty("peak_rss_growth_kib", std::to_string(growth));
  RecordProperty("checkpoint_kib", std::to_string(file_kib));
  std::printf("loading a %ld KiB checkpoint (6 layers) grew peak RSS by %ld KiB\n", file_kib,
              growth);
}

std::string write_file(const std::string& name, const std::string& bytes) {
  fs::path p = fs::path(NIBBLE_BUILD_DIR) / "tests" / name;
  std::ofstream(p, std::ios::binary) << bytes;
  return p.string();
}

std::string header_file(const std::string& json, uint64_t claimed_len) {
  std::string s(8, '\0');
  std::memcpy(s.data(), &claimed_len, 8);
  return s + json;
}

TEST(Memory, AHugeTensorClaimIsRefusedWithoutAllocating) {
  std::string json =
      R"({"w":{"dtype":"F32","shape":[1000000000000,1000000],"data_offsets":[0,4]}})";
  std::string path = write_file("huge_tensor.safetensors", header_file(json, json.size()) + "abcd");
  long growth = in_child([&] {
    long before = peak_rss_kib();
    try {
      SafetensorsFile::open(path);
    } catch (const Error&) {
      return peak_rss_kib() - before;
    }
    return -2L;  // accepted: wrong
  });
  EXPECT_GE(growth, 0) << "the huge tensor was accepted";
  EXPECT_LT(growth, 16 * 1024);
}

TEST(Memory, AGiganticHeaderIsRefusedBeforeReading) {
  std::string path = write_file("gigantic_header.safetensors", header_file("{}", 1ull << 40));
  try {
    SafetensorsFile::open(path);
    FAIL();
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), HasSubstr("header"));
    EXPECT_THAT(e.what(), HasSubstr(path));
  }
}

TEST(Memory, MillionsOfTensorsAreRefused) {
  std::string json = "{";
  const size_t count = (1u << 20) + 10;
  json.reserve(count * 60);
  for (size_t i = 0; i < count; ++i) {
    // Appended piece by piece: GCC 12 warns falsely (-Wrestrict) on chained string +.
    if (i) json += ',';
    json += "\"t";
    json += std::to_string(i);
    json += R"(":{"dtype":"U8","shape":[0],"data_offsets":[0,0]})";
  }
  json += "}";
  std::string path = write_file("many_tensors.safetensors", header_file(json, json.size()));
  try {
    SafetensorsFile::open(path);
    FAIL() << "a header with more than 2^20 tensors was accepted";
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), HasSubstr(path));
  }
}

}  // namespace
