// Output files (nibble run --output, nibble quantize --out): whatever is at the target that is
// not a regular file is refused and left as it was, a planted temporary or link is never
// followed, the temporary's name is not predictable, and a failed write leaves no temporary and
// the old file intact.
#include <nibble/error.hpp>
#include <nibble/output_file.hpp>
#include <nibble/quantize.hpp>
#include <nibble/safetensors.hpp>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>
#include <csignal>
#include <filesystem>
#include <fstream>

#include "error_text.hpp"

namespace fs = std::filesystem;
using ::testing::HasSubstr;
using namespace nibble;

namespace {

using nibble::test::error_text;

fs::path fresh_dir(const std::string& tag) {
  fs::path d = fs::path(NIBBLE_BUILD_DIR) / "tests" / "output_files" /
               (tag + "_" + std::to_string(getpid()));
  fs::remove_all(d);
  fs::create_directories(d);
  return d;
}

std::string slurp(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

std::vector<std::string> names_in(const fs::path& dir) {
  std::vector<std::string> out;
  for (const auto& e : fs::directory_iterator(dir)) out.push_back(e.path().filename().string());
  std::sort(out.begin(), out.end());
  return out;
}

std::vector<float> values(size_t n, float base) {
  std::vector<float> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = base + float(i);
  return v;
}

void write_y(const fs::path& path, const std::vector<float>& v) {
  TensorToWrite t{"y",
                  DType::F32,
                  {int64_t(v.size())},
                  std::as_bytes(std::span<const float>(v.data(), v.size()))};
  write_safetensors(path, {t});
}

TEST(OutputFile, NonRegularTargetsAreRefusedAndLeftAsTheyWere) {
  fs::path dir = fresh_dir("special");
  ASSERT_EQ(mkfifo((dir / "fifo.safetensors").c_str(), 0644), 0);
  fs::create_directory(dir / "folder.safetensors");
  fs::path victim = dir / "victim.txt";
  std::ofstream(victim) << "precious";
  fs::create_symlink(victim, dir / "link.safetensors");
  const auto before = names_in(dir);
  const std::pair<const char*, const char*> cases[] = {{"fifo.safetensors", "is a FIFO"},
                                                       {"folder.safetensors", "is a directory"},
                                                       {"link.safetensors", "is a symbolic link"}};
  for (auto [name, says] : cases) {
    std::string why = error_text([&] { write_y(dir / name, values(4, 1)); });
    EXPECT_THAT(why, HasSubstr(name));
    EXPECT_THAT(why, HasSubstr(says));
  }
  EXPECT_THAT(error_text([&] { write_y(dir / "link.safetensors", values(4, 1)); }),
              HasSubstr(victim.string()));
  EXPECT_EQ(names_in(dir), before) << "a temporary was left behind";
  EXPECT_TRUE(fs::is_fifo(dir / "fifo.safetensors"));
  EXPECT_TRUE(fs::is_symlink(dir / "link.safetensors"));
  EXPECT_EQ(slurp(victim), "precious");
  // A device: refused before anything is created in its folder.
  EXPECT_THAT(error_text([] { OutputFile f("/dev/null"); }), HasSubstr("a character device"));
  struct stat st;
  ASSERT_EQ(stat("/dev/null", &st), 0);
  EXPECT_TRUE(S_ISCHR(st.st_mode));
}

TEST(OutputFile, APlantedTemporaryLinkIsNotFollowed) {
  fs::path dir = fresh_dir("planted");
  fs::path victim = dir / "victim.txt";
  std::ofstream(victim) << "precious";
  // Every name an older writer used, and the obvious guesses, lead to the victim.
  for (const char* name : {"y.safetensors.tmp", ".y.safetensors.tmp", "y.safetensors~"})
    fs::create_symlink(victim, dir / name);
  write_y(dir / "y.safetensors", values(8, 2));
  EXPECT_EQ(slurp(victim), "precious");
  for (const char* name : {"y.safetensors.tmp", ".y.safetensors.tmp", "y.safetensors~"})
    EXPECT_TRUE(fs::is_symlink(dir / name)) << name;
  auto f = SafetensorsFile::open(dir / "y.safetensors");
  const TensorView& y = f->tensor("y");
  ASSERT_EQ(y.nbytes, 8 * sizeof(float));
  std::vector<float> got(8);
  std::memcpy(got.data(), y.data, y.nbytes);
  EXPECT_EQ(got, values(8, 2));
}

TEST(OutputFile, TemporariesAreUnpredictableAndExclusive) {
  fs::path dir = fresh_dir("names");
  OutputFile a(dir / "out.bin"), b(dir / "out.bin");
  EXPECT_NE(a.temporary(), b.temporary());
  EXPECT_EQ(a.temporary().parent_path(), dir);
  EXPECT_THAT(a.temporary().filename().string(), HasSubstr("out.bin"));
  EXPECT_EQ(a.temporary().filename().string().size(), b.temporary().filename().string().size());
  EXPECT_EQ(names_in(dir).size(), 2u);
}

TEST(OutputFile, AnExistingRegularFileIsReplacedWhole) {
  fs::path dir = fresh_dir("replace");
  write_y(dir / "y.safetensors", values(4, 1));
  write_y(dir / "y.safetensors", values(16, 5));
  auto f = SafetensorsFile::open(dir / "y.safetensors");
  EXPECT_EQ(f->tensor("y").nbytes, 16 * sizeof(float));
  EXPECT_EQ(names_in(dir), std::vector<std::string>{"y.safetensors"});
}

TEST(OutputFile, AFailedWriteRemovesTheTemporaryAndKeepsTheOldFile) {
  fs::path dir = fresh_dir("failed");
  write_y(dir / "y.safetensors", values(4, 1));
  const std::string old = slurp(dir / "y.safetensors");
  // A file-size limit makes the write fail part-way (EFBIG instead of SIGXFSZ).
  auto old_handler = std::signal(SIGXFSZ, SIG_IGN);
  rlimit saved{};
  getrlimit(RLIMIT_FSIZE, &saved);
  rlimit small = saved;
  small.rlim_cur = 4096;
  ASSERT_EQ(setrlimit(RLIMIT_FSIZE, &small), 0);
  std::string why = error_text([&] { write_y(dir / "y.safetensors", values(100000, 3)); });
  setrlimit(RLIMIT_FSIZE, &saved);
  std::signal(SIGXFSZ, old_handler);
  EXPECT_THAT(why, HasSubstr("y.safetensors"));
  EXPECT_THAT(why, HasSubstr("writing failed"));
  EXPECT_EQ(names_in(dir), std::vector<std::string>{"y.safetensors"});
  EXPECT_EQ(slurp(dir / "y.safetensors"), old);
  // Abandoned without commit: nothing appears.
  {
    OutputFile f(dir / "never.bin");
    f.write(std::string_view("partial"));
  }
  EXPECT_EQ(names_in(dir), std::vector<std::string>{"y.safetensors"});
}

TEST(OutputFile, AMissingFolderIsNamed) {
  fs::path dir = fresh_dir("missing");
  std::string why =
      error_text([&] { write_y(dir / "no" / "such" / "y.safetensors", values(2, 0)); });
  EXPECT_THAT(why, HasSubstr("does not exist"));
  EXPECT_THAT(why, HasSubstr((dir / "no" / "such").string()));
}

TEST(OutputFile, QuantizeOutRefusesALinkedConfigAndAFileAsTheFolder) {
  fs::path dir = fresh_dir("quantize");
  fs::path out = dir / "ckpt";
  fs::create_directories(out);
  fs::path victim = dir / "victim.json";
  std::ofstream(victim) << "precious";
  fs::create_symlink(victim, out / "config.json");
  SyntheticSpec spec;
  spec.layers = {{64, 32}};
  QuantizeOptions o;
  o.group_size = 32;
  auto model = make_synthetic_model(spec, o, SchemeKind::GptqV1);
  std::string why = error_text([&] { write_checkpoint(out, model, SchemeKind::GptqV1, o); });
  EXPECT_THAT(why, HasSubstr("config.json"));
  EXPECT_THAT(why, HasSubstr("symbolic link"));
  EXPECT_EQ(slurp(victim), "precious");
  std::ofstream(dir / "plain_file") << "x";
  why = error_text([&] { write_checkpoint(dir / "plain_file", model, SchemeKind::GptqV1, o); });
  EXPECT_THAT(why, HasSubstr("plain_file"));
  EXPECT_EQ(slurp(dir / "plain_file"), "x");
}

}  // namespace
