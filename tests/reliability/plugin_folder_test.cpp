// Hostile plugin folders: fake and corrupted ELF files, files that claim huge symbol tables,
// FIFOs, directories and links under plugin names, and links that lead out of a safe folder. Each
// is reported with the path (and a link's target) and a reason; no code of a refused file runs,
// the preflight's memory stays bounded by the file, and the real plugins beside them still load.
#include <nibble/registry.hpp>
#include "registry/elf_exports.hpp"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <elf.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>

namespace fs = std::filesystem;
using ::testing::HasSubstr;
using ::testing::Not;
using namespace nibble;

namespace {

const fs::path kPlugins = NIBBLE_PLUGIN_BUILD_DIR;

// The folders this process made (fresh_dir) are removed when the test program ends: they hold
// files that look like ELF libraries and are not, which other tools that walk the build tree
// (packers, ldd) should not meet.
class RemoveFreshDirs : public ::testing::Environment {
 public:
  void TearDown() override {
    const fs::path root = fs::path(NIBBLE_BUILD_DIR) / "tests" / "plugin_folders";
    const std::string suffix = "_" + std::to_string(getpid());
    std::error_code ec;
    for (const auto& e : fs::directory_iterator(root, ec)) {
      const std::string name = e.path().filename().string();
      if (name.size() > suffix.size() &&
          name.compare(name.size() - suffix.size(), suffix.size(), suffix) == 0) {
        // Write permission back first, in case a test took it away.
        fs::permissions(e.path(), fs::perms::owner_all, fs::perm_options::add, ec);
        fs::remove_all(e.path(), ec);
      }
    }
  }
};
const auto* const kRemoveFreshDirs = ::testing::AddGlobalTestEnvironment(new RemoveFreshDirs);

// A fresh folder of this process under the build tree (0755, owned by this user).
fs::path fresh_dir(const std::string& tag) {
  fs::path d = fs::path(NIBBLE_BUILD_DIR) / "tests" / "plugin_folders" /
               (tag + "_" + std::to_string(getpid()));
  fs::remove_all(d);
  fs::create_directories(d);
  fs::permissions(d, fs::perms::owner_all | fs::perms::group_read | fs::perms::group_exec |
                         fs::perms::others_read | fs::perms::others_exec);
  return d;
}

std::vector<std::byte> read_bytes(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::vector<char> c((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::vector<std::byte> b(c.size());
  std::memcpy(b.data(), c.data(), c.size());
  return b;
}

void write_bytes(const fs::path& p, std::span<const std::byte> b) {
  std::ofstream out(p, std::ios::binary | std::ios::trunc);
  out.write(reinterpret_cast<const char*>(b.data()), std::streamsize(b.size()));
}

RuntimeOptions options_for(std::vector<std::string> dirs, std::vector<std::string> allowed) {
  RuntimeOptions o;
  o.use_default_plugin_dir = false;
  o.plugin_dirs = std::move(dirs);
  o.allowed_plugins = std::move(allowed);
  return o;
}

const LoadReport* report_at(const Registry& reg, const fs::path& path) {
  for (const auto& r : reg.reports())
    if (r.path == path.string()) return &r;
  return nullptr;
}

// The section header of the first section of `type` in an ELF image, or nullptr.
Elf64_Shdr* section_of_type(std::vector<std::byte>& elf, uint32_t type) {
  Elf64_Ehdr eh;
  std::memcpy(&eh, elf.data(), sizeof eh);
  for (int i = 0; i < eh.e_shnum; ++i) {
    auto* sh =
        reinterpret_cast<Elf64_Shdr*>(elf.data() + eh.e_shoff + size_t(i) * sizeof(Elf64_Shdr));
    if (sh->sh_type == type) return sh;
  }
  return nullptr;
}

long peak_rss_kib() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return u.ru_maxrss;
}

TEST(PluginFolder, RealPluginsPassThePreflight) {
  for (const char* name : {"cpu_amx", "npu_ref", "gpu_ref"}) {
    fs::path p = kPlugins / (std::string("libnibble_") + name + ".so");
    ElfExports e = read_elf_exports(p.string(), "nibble_plugin_entry");
    EXPECT_EQ(e.problem, "") << p;
    EXPECT_TRUE(e.has_symbol) << p;
    // The in-memory reader agrees with the file reader.
    auto bytes = read_bytes(p);
    EXPECT_TRUE(read_elf_exports(bytes, "nibble_plugin_entry").has_symbol) << p;
    EXPECT_FALSE(read_elf_exports(bytes, "no_such_symbol_anywhere").has_symbol) << p;
  }
}

TEST(PluginFolder, TheFuzzSeedsAreTheTinyElfFilesTheyClaimToBe) {
  const fs::path seeds =
      fs::path(NIBBLE_TEST_DATA_DIR) / ".." / "fuzz" / "corpus" / "elf_preflight";
  ElfExports one = read_elf_exports((seeds / "plugin_entry.so").string(), "nibble_plugin_entry");
  EXPECT_EQ(one.problem, "");
  EXPECT_TRUE(one.has_symbol);
  EXPECT_EQ(one.dynamic_names, std::vector<std::string>{"nibble_plugin_entry"});
  ElfExports two = read_elf_exports((seeds / "two_tables.so").string(), "nibble_plugin_entry");
  EXPECT_EQ(two.problem, "");
  EXPECT_EQ(two.dynamic_names,
            (std::vector<std::string>{"helper", "nibble_plugin_entry", "other"}));
  ElfExports none = read_elf_exports((seeds / "no_entry.so").string(), "nibble_plugin_entry");
  EXPECT_EQ(none.problem, "");
  EXPECT_FALSE(none.has_symbol);
}

TEST(PluginFolder, AFakeElfIsReportedAndTheRealPluginsStillLoad) {
  fs::path dir = fresh_dir("fake_elf");
  // 300 bytes: a plausible ELF64 header, then noise that sends its offsets anywhere.
  std::mt19937 rng(300);
  for (int variant = 0; variant < 20; ++variant) {
    std::vector<std::byte> fake(300);
    for (auto& b : fake) b = std::byte(rng());
    Elf64_Ehdr eh{};
    std::memcpy(eh.e_ident, ELFMAG, SELFMAG);
    eh.e_ident[EI_CLASS] = ELFCLASS64;
    eh.e_ident[EI_DATA] = ELFDATA2LSB;
    eh.e_ident[EI_VERSION] = EV_CURRENT;
    eh.e_type = ET_DYN;
    eh.e_machine = EM_X86_64;
    eh.e_shentsize = sizeof(Elf64_Shdr);
    eh.e_shoff = variant < 10 ? 64 : rng();
    eh.e_shnum = uint16_t(variant < 10 ? 3 : rng());
    std::memcpy(fake.data(), &eh, sizeof eh);
    write_bytes(dir / ("libnibble_x" + std::to_string(variant) + ".so"), fake);
  }
  std::vector<std::string> allowed{"npu_ref"};
  for (int v = 0; v < 20; ++v) allowed.push_back("x" + std::to_string(v));
  auto reg = Registry::load(options_for({dir.string(), kPlugins.string()}, allowed));
  EXPECT_NE(reg->find("npu_ref"), nullptr);
  for (int v = 0; v < 20; ++v) {
    const LoadReport* r = report_at(*reg, dir / ("libnibble_x" + std::to_string(v) + ".so"));
    ASSERT_NE(r, nullptr) << v;
    EXPECT_FALSE(r->ok);
    EXPECT_EQ(r->stage, LoadReport::Stage::Preflight) << r->message;
    EXPECT_THAT(r->message, HasSubstr("not a shared library for this platform")) << v;
  }
}

TEST(PluginFolder, AClaimedHugeSymbolTableAllocatesNothingOfThatSize) {
  auto real = read_bytes(kPlugins / "libnibble_npu_ref.so");
  for (uint32_t type : {uint32_t(SHT_DYNSYM), uint32_t(SHT_STRTAB)}) {
    auto elf = real;
    Elf64_Shdr* sh = section_of_type(elf, type);
    ASSERT_NE(sh, nullptr);
    sh->sh_size = uint64_t(3) << 30;  // 3 GiB in a file of a few hundred KB
    const long before = peak_rss_kib();
    ElfExports e = read_elf_exports(elf, "nibble_plugin_entry");
    EXPECT_THAT(e.problem, HasSubstr("past the end of the")) << type;
    EXPECT_FALSE(e.has_symbol);
    EXPECT_LT(peak_rss_kib() - before, 64 * 1024) << "the preflight grew the process by > 64 MiB";
  }
  // A loadable segment that claims more of the file than there is.
  {
    auto elf = real;
    Elf64_Ehdr eh;
    std::memcpy(&eh, elf.data(), sizeof eh);
    auto* ph = reinterpret_cast<Elf64_Phdr*>(elf.data() + eh.e_phoff);
    ASSERT_EQ(ph->p_type, uint32_t(PT_LOAD));
    ph->p_filesz = ph->p_memsz = uint64_t(3) << 30;
    EXPECT_THAT(read_elf_exports(elf, "nibble_plugin_entry").problem, HasSubstr("segment 0"));
  }
  // Offsets that wrap around 2^64 when added to a size.
  auto elf = real;
  Elf64_Shdr* sh = section_of_type(elf, SHT_DYNSYM);
  sh->sh_offset = ~uint64_t(0) - 8;
  EXPECT_THAT(read_elf_exports(elf, "nibble_plugin_entry").problem, HasSubstr("past the end"));
}

TEST(PluginFolder, CorruptedCopiesOfARealPluginNeverCrashThePreflight) {
  const auto real = read_bytes(kPlugins / "libnibble_npu_ref.so");
  Elf64_Ehdr eh;
  std::memcpy(&eh, real.data(), sizeof eh);
  std::mt19937_64 rng(7);
  int refused = 0;
  for (int round = 0; round < 2000; ++round) {
    auto elf = real;
    // Corrupt bytes of the ELF header or of the section header table, where the offsets live.
    for (int k = 0; k < 1 + int(rng() % 4); ++k) {
      size_t at = rng() % 2 ? rng() % sizeof eh
                            : size_t(eh.e_shoff + rng() % (eh.e_shnum * sizeof(Elf64_Shdr)));
      elf[at] = std::byte(rng());
    }
    if (rng() % 8 == 0) elf.resize(rng() % elf.size());  // truncated mid-way
    ElfExports e = read_elf_exports(elf, "nibble_plugin_entry");
    if (!e.problem.empty()) {
      ++refused;
      EXPECT_FALSE(e.has_symbol);
      EXPECT_TRUE(e.dynamic_names.empty());
    }
    EXPECT_LE(e.dynamic_names.size(), ElfExports::kMaxListed);
  }
  EXPECT_GT(refused, 0);
}

TEST(PluginFolder, NonRegularFilesUnderPluginNamesAreReportedWithoutBlocking) {
  fs::path dir = fresh_dir("special");
  ASSERT_EQ(mkfifo((dir / "libnibble_fifo.so").c_str(), 0644), 0);
  fs::create_directory(dir / "libnibble_folder.so");
  fs::create_symlink(dir / "libnibble_fifo.so", dir / "libnibble_tofifo.so");
  fs::create_symlink(dir / "nowhere.so", dir / "libnibble_dangling.so");
  auto reg = Registry::load(options_for({dir.string()}, {}));
  EXPECT_TRUE(reg->backends().empty());
  auto expect = [&](const char* file, const char* says) {
    const LoadReport* r = report_at(*reg, dir / file);
    ASSERT_NE(r, nullptr) << file;
    EXPECT_FALSE(r->ok);
    EXPECT_THAT(r->message, HasSubstr(says)) << file;
  };
  expect("libnibble_fifo.so", "is a FIFO, not a regular file");
  expect("libnibble_folder.so", "is a directory, not a regular file");
  expect("libnibble_tofifo.so", "symbolic link to");
  expect("libnibble_tofifo.so", "a FIFO");
  expect("libnibble_dangling.so", "cannot be resolved");
  // The file preflight refuses a FIFO at once instead of waiting for a writer.
  EXPECT_THAT(read_elf_exports((dir / "libnibble_fifo.so").string(), "x").problem,
              HasSubstr("a FIFO"));
}

TEST(PluginFolder, ALinkUnderAnotherNameDoesNotSpoilTheRealPlugin) {
  fs::path dir = fresh_dir("alias");
  fs::create_symlink(kPlugins / "libnibble_npu_ref.so", dir / "libnibble_aaa.so");
  auto reg = Registry::load(options_for({dir.string(), kPlugins.string()}, {"aaa", "npu_ref"}));
  EXPECT_NE(reg->find("npu_ref"), nullptr) << "the real npu_ref must load under its own name";
  const LoadReport* link = report_at(*reg, dir / "libnibble_aaa.so");
  ASSERT_NE(link, nullptr);
  EXPECT_FALSE(link->ok);
  EXPECT_EQ(link->target, fs::canonical(kPlugins / "libnibble_npu_ref.so").string());
  EXPECT_EQ(link->stage, LoadReport::Stage::Scan) << "the alias must not run the plugin's code";
  EXPECT_THAT(link->message, HasSubstr("libnibble_aaa.so"));
  EXPECT_THAT(link->message, HasSubstr(link->target));
  EXPECT_THAT(link->message, HasSubstr("'npu_ref'"));
  const LoadReport* real = report_at(*reg, fs::canonical(kPlugins) / "libnibble_npu_ref.so");
  ASSERT_NE(real, nullptr);
  EXPECT_TRUE(real->ok) << real->message;
  EXPECT_THAT(real->message, Not(HasSubstr("aaa")));
}

TEST(PluginFolder, ALinkToAVersionedFileLoadsUnderTheLinksName) {
  fs::path dir = fresh_dir("versioned");
  fs::copy_file(kPlugins / "libnibble_npu_ref.so", dir / "npu_ref.so.1.2.3");
  fs::create_symlink("npu_ref.so.1.2.3", dir / "libnibble_npu_ref.so");
  auto reg = Registry::load(options_for({dir.string()}, {"npu_ref"}));
  const LoadReport* r = report_at(*reg, dir / "libnibble_npu_ref.so");
  ASSERT_NE(r, nullptr);
  EXPECT_TRUE(r->ok) << r->message;
  EXPECT_EQ(r->target, fs::canonical(dir / "npu_ref.so.1.2.3").string());
  ASSERT_NE(reg->find("npu_ref"), nullptr);
  EXPECT_EQ(reg->find("npu_ref")->file, r->target);
}

TEST(PluginFolder, ALinkIntoAWorldWritableFolderIsRefused) {
  fs::path safe = fresh_dir("safe_side");
  fs::path open_dir = fresh_dir("world_writable_side");
  fs::copy_file(kPlugins / "libnibble_npu_ref.so", open_dir / "libnibble_npu_ref.so");
  fs::permissions(open_dir, fs::perms::others_write, fs::perm_options::add);
  fs::create_symlink(open_dir / "libnibble_npu_ref.so", safe / "libnibble_npu_ref.so");
  auto o = options_for({safe.string()}, {"npu_ref"});
  auto reg = Registry::load(o);
  EXPECT_EQ(reg->find("npu_ref"), nullptr);
  const LoadReport* r = report_at(*reg, safe / "libnibble_npu_ref.so");
  ASSERT_NE(r, nullptr);
  EXPECT_EQ(r->stage, LoadReport::Stage::Scan);
  EXPECT_THAT(r->message, HasSubstr("world-writable"));
  EXPECT_THAT(r->message, HasSubstr(fs::canonical(open_dir).string()));
  EXPECT_EQ(r->target, fs::canonical(open_dir / "libnibble_npu_ref.so").string());
  // A world-writable target file behind a link in a safe folder is refused the same way.
  fs::permissions(open_dir, fs::perms::others_write, fs::perm_options::remove);
  fs::permissions(open_dir / "libnibble_npu_ref.so", fs::perms::others_write,
                  fs::perm_options::add);
  reg = Registry::load(o);
  EXPECT_EQ(reg->find("npu_ref"), nullptr);
  r = report_at(*reg, safe / "libnibble_npu_ref.so");
  ASSERT_NE(r, nullptr);
  EXPECT_THAT(r->message, HasSubstr("plugin file"));
  EXPECT_THAT(r->message, HasSubstr("world-writable"));
}

}  // namespace
