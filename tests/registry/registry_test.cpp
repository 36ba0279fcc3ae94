// Loading plugins: named directories only, version negotiation, and every way a plugin file can
// be bad — each reported with its path and reason while the other plugins still load.
#include <nibble/registry.hpp>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <unistd.h>
#include <filesystem>

#include "test_dirs.hpp"

namespace fs = std::filesystem;
using nibble::LoadReport;
using nibble::Registry;
using nibble::test::only_test_plugins;
using nibble::test::test_plugin_dir;
using ::testing::HasSubstr;

namespace {

const LoadReport* report_for(const Registry& reg, const std::string& needle) {
  for (const auto& r : reg.reports())
    if (r.path.find(needle) != std::string::npos) return &r;
  return nullptr;
}

TEST(Registry, InTreePluginsLoadFromANamedDirectory) {
  nibble::RuntimeOptions o;
  o.use_default_plugin_dir = false;
  o.plugin_dirs = {std::string(NIBBLE_PLUGIN_BUILD_DIR)};
  auto reg = Registry::load(o);
  for (const char* name : {"cpu_amx", "npu_ref", "gpu_ref"}) {
    const nibble::BackendInfo* b = reg->find(name);
    ASSERT_NE(b, nullptr) << name << " did not load";
    EXPECT_EQ(b->abi_major, NIBBLE_ABI_MAJOR);
    EXPECT_THAT(b->file, HasSubstr(std::string("libnibble_") + name + ".so"));
    EXPECT_FALSE(b->probe_detail.empty()) << name << ": the probe should say what it found";
  }
}

TEST(Registry, DefaultDirectoryIsBesideLibnibble) {
  EXPECT_EQ(fs::weakly_canonical(Registry::default_plugin_dir()),
            fs::weakly_canonical(NIBBLE_PLUGIN_BUILD_DIR));
}

TEST(Registry, APluginInTheCurrentDirectoryIsNotLoaded) {
  fs::path tmp = fs::temp_directory_path() / ("nibble_cwd_" + std::to_string(getpid()));
  fs::create_directories(tmp);
  fs::copy_file(test_plugin_dir("alpha") + "/libnibble_alpha.so", tmp / "libnibble_cwdtrap.so",
                fs::copy_options::overwrite_existing);
  fs::path old = fs::current_path();
  fs::current_path(tmp);
  nibble::RuntimeOptions o;  // default directory only; the current directory is never searched
  auto reg = Registry::load(o);
  fs::current_path(old);
  EXPECT_EQ(report_for(*reg, "cwdtrap"), nullptr);
  EXPECT_EQ(reg->find("alpha"), nullptr);
  for (const auto& d : reg->searched_dirs()) EXPECT_NE(fs::path(d), tmp);
  fs::remove_all(tmp);
}

TEST(Registry, AnotherAbiMajorIsRefusedNamingFilePluginAndVersions) {
  auto reg = Registry::load(only_test_plugins({"major2"}));
  const LoadReport* r = report_for(*reg, "libnibble_major2.so");
  ASSERT_NE(r, nullptr);
  EXPECT_FALSE(r->ok);
  EXPECT_EQ(r->stage, LoadReport::Stage::Version);
  EXPECT_THAT(r->message, HasSubstr("'major2'"));
  EXPECT_THAT(r->message, HasSubstr("ABI 2.0"));
  EXPECT_THAT(r->message,
              HasSubstr(std::to_string(NIBBLE_ABI_MAJOR) + "." + std::to_string(NIBBLE_ABI_MINOR)));
  EXPECT_EQ(reg->find("major2"), nullptr);
}

TEST(Registry, ANewerMinorWithLargerStructsLoads) {
  auto reg = Registry::load(only_test_plugins({"newer"}));
  const nibble::BackendInfo* b = reg->find("newer");
  ASSERT_NE(b, nullptr);
  EXPECT_EQ(b->abi_minor, NIBBLE_ABI_MINOR_CURRENT + 1);
  ASSERT_EQ(b->kernels.size(), 1u);
  EXPECT_GT(b->kernels[0].kernel->struct_size, sizeof(nibble_kernel));
  EXPECT_EQ(b->kernels[0].name, "raw");
  EXPECT_DOUBLE_EQ(b->kernels[0].bound_f32, 1e-6);
}

TEST(Registry, AnOlderMinorLoadsWithItsShorterStructs) {
  auto reg = Registry::load(only_test_plugins({"older"}));
  const nibble::BackendInfo* b = reg->find("older");
  ASSERT_NE(b, nullptr);
  EXPECT_EQ(b->abi_minor, 0);
  ASSERT_EQ(b->kernels.size(), 1u);
  // 1.0's kernel ends at `release`; 1.1's prepared_bytes is absent and must not be read.
  EXPECT_EQ(b->kernels[0].kernel->struct_size, offsetof(nibble_kernel, prepared_bytes));
}

// Plugins of every older minor are CPU plugins: their kernels run on the CPU, they give no device
// memory, and a layer on a device passes them over saying so.
TEST(Registry, OlderMinorsAreCpuPlugins) {
  auto reg = Registry::load(only_test_plugins({"older", "older11", "older12"}));
  for (const char* name : {"older", "older11", "older12"}) {
    const nibble::BackendInfo* b = reg->find(name);
    ASSERT_NE(b, nullptr) << name;
    ASSERT_EQ(b->kernels.size(), 1u);
    EXPECT_EQ(b->kernels[0].device_type, kDLCPU) << name;
    EXPECT_EQ(b->device_memory, nullptr) << name;
    EXPECT_EQ(b->device_count, 0) << name;
  }
  EXPECT_EQ(reg->find("older12")->abi_minor, 2);
}

// A 1.3 C plugin that leaves nibble_kernel.device_type 0 declares a CPU kernel: it is asked for a
// layer on the CPU, and a layer on a device passes it over.
TEST(Registry, ADeviceTypeOfZeroMeansCpu) {
  auto reg = Registry::load(only_test_plugins({"raw13"}));
  const nibble::BackendInfo* b = reg->find("raw13");
  ASSERT_NE(b, nullptr);
  EXPECT_EQ(b->abi_minor, 3);
  ASSERT_EQ(b->kernels.size(), 1u);
  EXPECT_EQ(b->kernels[0].kernel->device_type, 0);
  EXPECT_EQ(b->kernels[0].device_type, kDLCPU);
  nibble_layer_desc d{};
  d.struct_size = sizeof d;
  d.op = NIBBLE_OP_LINEAR;
  d.name = "layer";
  d.K = 64;
  d.N = 64;
  d.bits = 4;
  d.group_size = 32;
  d.numeric_mode = NIBBLE_MODE_W4A16;
  auto why = [&] {
    try {
      reg->select(d, "raw13");
    } catch (const std::exception& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  // On the CPU the kernel is asked, and refuses in its own words.
  EXPECT_THAT(why(), HasSubstr("raw13/raw: this test kernel implements nothing"));
  d.device_type = kDLCUDA;
  EXPECT_THAT(why(), HasSubstr("raw13/raw: runs on cpu, the layer is on cuda:0"));
}

TEST(Registry, BadFilesAreReportedAndTheOthersStillLoad) {
  auto reg = Registry::load(only_test_plugins({"noentry", "entry_error", "throws", "garbage",
                                               "nullfwd", "dup_a", "dup_b", "alpha", "beta"}));
  struct Case {
    const char* file;
    LoadReport::Stage stage;
    const char* says;
  } cases[] = {
      {"noentry/libnibble_noentry.so", LoadReport::Stage::Preflight,
       "does not export nibble_plugin_entry"},
      {"entry_error/libnibble_entryerr.so", LoadReport::Stage::Entry, "license check failed"},
      {"throws/libnibble_throws.so", LoadReport::Stage::Entry, "backend constructor exploded"},
      {"garbage/libnibble_garbage.so", LoadReport::Stage::Preflight, "not a shared library"},
      {"nullfwd/libnibble_nullfwd.so", LoadReport::Stage::Validate, "'forward' is NULL"},
      {"dup_b/libnibble_dup.so", LoadReport::Stage::Validate, "already provided by"},
  };
  for (const Case& c : cases) {
    const LoadReport* r = report_for(*reg, c.file);
    ASSERT_NE(r, nullptr) << c.file;
    EXPECT_FALSE(r->ok) << c.file;
    EXPECT_EQ(r->stage, c.stage) << c.file << ": " << r->message;
    EXPECT_THAT(r->message, HasSubstr(c.says)) << c.file;
    EXPECT_THAT(r->path, HasSubstr(c.file));
  }
  const LoadReport* dup_b = report_for(*reg, "dup_b/libnibble_dup.so");
  EXPECT_THAT(dup_b->message, HasSubstr("dup_a/libnibble_dup.so"));
  EXPECT_NE(reg->find("alpha"), nullptr);
  EXPECT_NE(reg->find("beta"), nullptr);
  EXPECT_NE(reg->find("dup"), nullptr);
  EXPECT_EQ(reg->find("throws"), nullptr);
}

TEST(Registry, AMissingDirectoryIsReported) {
  nibble::RuntimeOptions o;
  o.use_default_plugin_dir = false;
  o.plugin_dirs = {"/nonexistent/nibble/plugins"};
  auto reg = Registry::load(o);
  ASSERT_EQ(reg->reports().size(), 1u);
  EXPECT_THAT(reg->reports()[0].message, HasSubstr("does not exist"));
}

TEST(Registry, AllowListSkipsOtherPlugins) {
  auto o = only_test_plugins({"alpha", "beta"});
  o.allowed_plugins = {"beta"};
  auto reg = Registry::load(o);
  EXPECT_EQ(reg->find("alpha"), nullptr);
  EXPECT_NE(reg->find("beta"), nullptr);
  const LoadReport* r = report_for(*reg, "libnibble_alpha.so");
  ASSERT_NE(r, nullptr);
  EXPECT_THAT(r->message, HasSubstr("allow-list"));
}

TEST(Registry, LoadingTwiceGivesTheSameAnswer) {
  auto a = Registry::load(only_test_plugins({"alpha", "beta"}));
  auto b = Registry::load(only_test_plugins({"alpha", "beta"}));
  ASSERT_EQ(a->backends().size(), b->backends().size());
  for (size_t i = 0; i < a->backends().size(); ++i) {
    const nibble::BackendInfo &x = a->backends()[i], &y = b->backends()[i];
    EXPECT_EQ(x.name, y.name);
    EXPECT_EQ(x.file, y.file);
    EXPECT_EQ(x.probe_detail, y.probe_detail);
    ASSERT_EQ(x.kernels.size(), y.kernels.size());
    for (size_t k = 0; k < x.kernels.size(); ++k)
      EXPECT_EQ(x.kernels[k].full_name(), y.kernels[k].full_name());
  }
}

}  // namespace

namespace {

// A private copy of a test plugin in a fresh directory under the build tree.
fs::path copy_plugin(const std::string& dir_name, const char* plugin) {
  fs::path dir = fs::path(NIBBLE_BUILD_DIR) / "tests" / "unsafe_dirs" / dir_name;
  fs::remove_all(dir);
  fs::create_directories(dir);
  fs::permissions(dir, fs::perms::owner_all | fs::perms::group_read | fs::perms::group_exec |
                           fs::perms::others_read | fs::perms::others_exec);
  fs::copy_file(test_plugin_dir(plugin) + "/libnibble_" + plugin + ".so",
                dir / (std::string("libnibble_") + plugin + ".so"));
  return dir;
}

TEST(PluginDirectorySafety, AWorldWritableDirectoryIsRefusedUnlessAllowed) {
  fs::path dir = copy_plugin("world_writable_dir", "alpha");
  fs::permissions(dir, fs::perms::others_write, fs::perm_options::add);
  nibble::RuntimeOptions o;
  o.use_default_plugin_dir = false;
  o.plugin_dirs = {dir.string()};
  auto reg = Registry::load(o);
  EXPECT_EQ(reg->find("alpha"), nullptr);
  ASSERT_EQ(reg->reports().size(), 1u);
  EXPECT_THAT(reg->reports()[0].message, HasSubstr("world-writable"));
  EXPECT_THAT(reg->reports()[0].message, HasSubstr("--allow-unsafe-plugin-dirs"));
  o.allow_unsafe_plugin_dirs = true;
  EXPECT_NE(Registry::load(o)->find("alpha"), nullptr);
}

TEST(PluginDirectorySafety, AWorldWritableFileIsRefused) {
  fs::path dir = copy_plugin("world_writable_file", "beta");
  fs::permissions(dir / "libnibble_beta.so", fs::perms::others_write, fs::perm_options::add);
  nibble::RuntimeOptions o;
  o.use_default_plugin_dir = false;
  o.plugin_dirs = {dir.string()};
  auto reg = Registry::load(o);
  EXPECT_EQ(reg->find("beta"), nullptr);
  const LoadReport* r = report_for(*reg, "libnibble_beta.so");
  ASSERT_NE(r, nullptr);
  EXPECT_THAT(r->message, HasSubstr("plugin file"));
  EXPECT_THAT(r->message, HasSubstr("world-writable"));
}

TEST(PluginDirectorySafety, AFileOwnedByAnotherUserIsRefused) {
  if (geteuid() != 0) GTEST_SKIP() << "needs root to give a file to another user";
  fs::path dir = copy_plugin("foreign_owner", "alpha");
  ASSERT_EQ(chown((dir / "libnibble_alpha.so").c_str(), 65534, 65534), 0);
  nibble::RuntimeOptions o;
  o.use_default_plugin_dir = false;
  o.plugin_dirs = {dir.string()};
  auto reg = Registry::load(o);
  EXPECT_EQ(reg->find("alpha"), nullptr);
  const LoadReport* r = report_for(*reg, "libnibble_alpha.so");
  ASSERT_NE(r, nullptr);
  EXPECT_THAT(r->message, HasSubstr("owned by uid 65534"));
}

}  // namespace
