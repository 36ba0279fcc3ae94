// Resources bounded by the input: parsers with a budget, no allocation sized by an unchecked
// number, linear-time config parsing, regular files only (a FIFO or device is refused by name and
// never blocks), shards inside the checkpoint folder, and checked numbers from config.json and the
// environment, reported with the accepted range.
#include <nibble/checkpoint.hpp>
#include <nibble/error.hpp>
#include <nibble/options.hpp>
#include <nibble/quant_config.hpp>

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <sys/stat.h>

#include <chrono>
#include <cstdlib>

#include "error_text.hpp"
#include "hostile_input.hpp"

using ::testing::AllOf;
using ::testing::HasSubstr;
using namespace nibble;
using namespace nibble::test;

namespace {

#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
constexpr bool kSanitized = true;
#else
constexpr bool kSanitized = false;
#endif

std::string fmt_key(int i) { return "unused_key_" + std::to_string(i); }

// A checkpoint with one small quantized layer, so that opening it reaches every config check.
void small_checkpoint(const fs::path& dir, const std::string& config) {
  std::map<std::string, OwnedTensor> t;
  add_gptq_layer(t, "model.layers.0.self_attn.q_proj");
  write_checkpoint(dir, t, config);
}

TEST(ResourceBounds, AHundredMegabyteHeaderOfEmptyObjectsStaysSmall) {
  if (kSanitized) GTEST_SKIP() << "RSS under a sanitizer says nothing about the parser";
  ScratchDir dir("header_objects");
  // A well-formed tensor whose unknown key holds ~100 MiB of `{}`: nibble reads past it.
  std::string filler = "[";
  const size_t target = (100u << 20) - 200;
  filler.reserve(target + 8);
  while (filler.size() < target) filler += "{},";
  filler += "{}]";
  const std::string header =
      R"({"a":{"dtype":"U8","shape":[1],"data_offsets":[0,1],"x":)" + filler + "}}";
  ASSERT_LE(header.size(), size_t(100) << 20);
  write_file(dir / "big.safetensors", safetensors_image(header, "z"));
  filler.clear();
  filler.shrink_to_fit();
  const fs::path path = dir / "big.safetensors";
  ChildRun r = in_child([&] {
    auto f = SafetensorsFile::open(path);
    return std::to_string(f->tensors().size());
  });
  EXPECT_EQ(r.output, "1");
  // The mapped file is 100 MiB; a DOM of its 35 million objects took 3.7 GiB.
  EXPECT_LT(r.peak_kib, 400 * 1024) << "peak " << r.peak_kib << " KiB";
}

TEST(ResourceBounds, HeadersAndConfigsHaveABudget) {
  // Nesting, value count and tensor count are bounded before they are allocated.
  EXPECT_THAT(open_error(safetensors_image(std::string(100, '[') + std::string(100, ']'), "")),
              HasSubstr("nests deeper than 64"));
  std::string many = "[";
  for (int i = 0; i < (1 << 20) + 10; ++i) many += "0,";
  many += "0]";
  EXPECT_THAT(error_text([&] { parse_quant_config_text("{\"x\":" + many + "}", "cfg.json"); }),
              AllOf(HasSubstr("cfg.json"), HasSubstr("more than 1048576 JSON values")));
  std::string meta = R"({"__metadata__":{)";
  for (int i = 0; i < (1 << 20) + 1; ++i)
    meta += (i ? ",\"" : "\"") + std::to_string(i) + "\":\"\"";
  meta += "}}";
  EXPECT_THAT(open_error(safetensors_image(meta, "")), HasSubstr("more than 1048576 keys"));
}

TEST(ResourceBounds, AConfigWithManyKeysParsesInLinearTime) {
  ScratchDir dir("many_keys");
  std::string top;
  for (int i = 0; i < 300000; ++i) top += (i ? ",\"" : "\"") + fmt_key(i) + "\": 1";
  small_checkpoint(dir.path(), gptq_config("", top));
  ASSERT_GT(fs::file_size(dir / "config.json"), 3u << 20);
  const auto t0 = std::chrono::steady_clock::now();
  Checkpoint ckpt = Checkpoint::open(dir.path());
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_EQ(ckpt.linear_layers().size(), 1u);
  // Quadratic insertion took over a minute; linear parsing takes well under a second.
  EXPECT_LT(seconds, kSanitized ? 10.0 : 1.0);
}

TEST(ResourceBounds, FifosDevicesAndDirectoriesAreRefusedWithoutBlocking) {
  ScratchDir dir("fifo");
  const fs::path fifo = dir / "pipe";
  ASSERT_EQ(mkfifo(fifo.c_str(), 0600), 0);
  auto refused = [&](const std::function<void()>& f) {
    ChildRun r = in_child([&] { return error_text(f); }, 20);
    EXPECT_FALSE(r.timed_out) << "blocked";
    return r.output;
  };
  EXPECT_THAT(refused([&] { SafetensorsFile::open(fifo); }),
              AllOf(HasSubstr(fifo.string()), HasSubstr("is a FIFO")));
  EXPECT_THAT(refused([&] { Checkpoint::open(fifo); }), HasSubstr("is a FIFO"));
  EXPECT_THAT(refused([&] { SafetensorsFile::open("/dev/zero"); }),
              AllOf(HasSubstr("/dev/zero"), HasSubstr("character device")));
  RuntimeOptions options;
  EXPECT_THAT(refused([&] { apply_config_file(options, fifo.string()); }),
              AllOf(HasSubstr("config file " + fifo.string()), HasSubstr("is a FIFO")));
  EXPECT_THAT(refused([&] { apply_config_file(options, dir.path().string()); }),
              AllOf(HasSubstr(dir.path().string()), HasSubstr("is a directory")));
  // config.json and a shard as FIFOs inside a checkpoint.
  const fs::path ckpt = dir / "ckpt";
  small_checkpoint(ckpt, gptq_config());
  fs::remove(ckpt / "config.json");
  ASSERT_EQ(mkfifo((ckpt / "config.json").c_str(), 0600), 0);
  EXPECT_THAT(refused([&] { Checkpoint::open(ckpt); }),
              AllOf(HasSubstr("config.json"), HasSubstr("is a FIFO")));
  const fs::path sharded = dir / "sharded";
  fs::create_directories(sharded);
  write_file(sharded / "model.safetensors.index.json",
             R"({"weight_map": {"x": "shard.safetensors"}})");
  ASSERT_EQ(mkfifo((sharded / "shard.safetensors").c_str(), 0600), 0);
  EXPECT_THAT(refused([&] { Checkpoint::open(sharded); }),
              AllOf(HasSubstr("shard.safetensors"), HasSubstr("is a FIFO")));
}

TEST(ResourceBounds, TheCliRefusesAFifoInputAndAnEmptyTensorOfManyRows) {
  ScratchDir dir("cli_input");
  const std::string model = std::string(NIBBLE_FIXTURES_DIR) + "/gptq_v1_sym_g128";
  const fs::path fifo = dir / "x.safetensors";
  ASSERT_EQ(mkfifo(fifo.c_str(), 0600), 0);
  auto run = [&](const std::string& input) {
    return run_cli({"run", "--no-default-plugin-dir", "--plugin-dir", NIBBLE_PLUGIN_BUILD_DIR,
                    "--model", model, "--layer", "model.layers.0.self_attn.q_proj", "--input",
                    input, "--output", (dir / "y.safetensors").string()},
                   60);
  };
  ChildRun r = run(fifo.string() + ":x");
  EXPECT_FALSE(r.timed_out);
  EXPECT_EQ(r.status, 1);
  EXPECT_THAT(r.output, AllOf(HasSubstr(fifo.string()), HasSubstr("is a FIFO")));
  // 80 bytes that claim 4,000,000 rows of nothing: refused for its K before any buffer.
  write_file(dir / "empty.safetensors",
             safetensors_image(R"({"x":{"dtype":"F32","shape":[4000000,0],"data_offsets":[0,0]}})"
                               "                                ",
                               ""));
  r = run((dir / "empty.safetensors").string() + ":x");
  EXPECT_EQ(r.status, 1) << r.output;
  EXPECT_THAT(r.output, AllOf(HasSubstr("[4000000, 0]"), HasSubstr("K = 512")));
  if (!kSanitized) {
    EXPECT_LT(r.peak_kib, 512 * 1024) << "peak " << r.peak_kib << " KiB";
  }
}

TEST(ResourceBounds, AbsurdShapesGetANamedErrorNotBadAlloc) {
  for (const char* shape : {"[4611686018427387904,4]", "[18446744073709551615]",
                            "[3037000500,3037000500]", "[1,1,1,1,1,1,1,1,1]"}) {
    const std::string msg = open_error(safetensors_image(
        std::string(R"({"huge":{"dtype":"F32","shape":)") + shape + R"(,"data_offsets":[0,4]}})",
        "abcd"));
    EXPECT_THAT(msg, AllOf(HasSubstr("mem.safetensors"), HasSubstr("tensor huge"))) << shape;
    EXPECT_THAT(msg, ::testing::Not(HasSubstr("bad_alloc")));
  }
}

TEST(ResourceBounds, AShardLinkLeadingOutOfTheCheckpointIsRefused) {
  ScratchDir dir("shard_link");
  const fs::path outside = dir / "outside";
  std::map<std::string, OwnedTensor> t;
  add_gptq_layer(t, "model.layers.0.self_attn.q_proj");
  fs::create_directories(outside);
  write_safetensors(outside / "elsewhere.safetensors", t);
  const fs::path ckpt = dir / "ckpt";
  fs::create_directories(ckpt);
  write_file(ckpt / "config.json", gptq_config());
  std::string index = R"({"weight_map": {)";
  bool first = true;
  for (const auto& [name, v] : t) {
    index += std::string(first ? "" : ",") + "\"" + name + "\": \"shard.safetensors\"";
    first = false;
  }
  index += "}}";
  write_file(ckpt / "model.safetensors.index.json", index);
  fs::create_symlink(outside / "elsewhere.safetensors", ckpt / "shard.safetensors");
  EXPECT_THAT(error_text([&] { Checkpoint::open(ckpt); }),
              AllOf(HasSubstr("shard.safetensors"), HasSubstr("outside the checkpoint directory")));
  // Control: the same shard through a link that stays in the folder opens.
  fs::remove(ckpt / "shard.safetensors");
  fs::copy_file(outside / "elsewhere.safetensors", ckpt / "real.safetensors");
  fs::create_symlink("real.safetensors", ckpt / "shard.safetensors");
  EXPECT_EQ(Checkpoint::open(ckpt).linear_layers().size(), 1u);
  // The Hugging Face cache layout: snapshots/<rev>/ links into the same repository's blobs/.
  const fs::path repo = dir / "models--org--name";
  const fs::path snapshot = repo / "snapshots" / "0123abcd";
  fs::create_directories(snapshot);
  fs::create_directories(repo / "blobs");
  fs::copy_file(outside / "elsewhere.safetensors", repo / "blobs" / "5f3e");
  fs::copy_file(ckpt / "config.json", snapshot / "config.json");
  fs::copy_file(ckpt / "model.safetensors.index.json", snapshot / "model.safetensors.index.json");
  fs::create_symlink("../../blobs/5f3e", snapshot / "shard.safetensors");
  EXPECT_EQ(Checkpoint::open(snapshot).linear_layers().size(), 1u);
}

TEST(ResourceBounds, MoeConfigNumbersAreCheckedNotWrappedOrIgnored) {
  ScratchDir dir("moe_numbers");
  const fs::path src = fs::path(NIBBLE_FIXTURES_DIR) / "moe_gptq_e8_top2";
  const fs::path ckpt = dir / "moe";
  fs::create_directories(ckpt);
  fs::copy_file(src / "model.safetensors", ckpt / "model.safetensors");
  nlohmann::json base = nlohmann::json::parse(std::ifstream(src / "config.json"));
  auto with = [&](const char* key, const nlohmann::json& value) {
    nlohmann::json c = base;
    c[key] = value;
    write_file(ckpt / "config.json", c.dump());
    return error_text([&] { Checkpoint::open(ckpt); });
  };
  for (const nlohmann::json& bad :
       {nlohmann::json(4294967298ull), nlohmann::json(0), nlohmann::json(-1), nlohmann::json("2"),
        nlohmann::json(2.5), nlohmann::json(9)}) {
    EXPECT_THAT(with("num_experts_per_tok", bad), AllOf(HasSubstr("num_experts_per_tok = "),
                                                        HasSubstr("not a whole number in [1, 8]")))
        << bad.dump();
  }
  EXPECT_THAT(with("norm_topk_prob", "yes"),
              AllOf(HasSubstr("norm_topk_prob = \"yes\""), HasSubstr("true or false")));
  EXPECT_THAT(with("hidden_size", "256"), HasSubstr("hidden_size = \"256\" is not a whole number"));
  EXPECT_THAT(with("scoring_func", 1), HasSubstr("scoring_func = 1 must be a string"));
  // Control: the values the fixture states are accepted.
  EXPECT_EQ(with("num_experts_per_tok", 2), "");
}

TEST(ResourceBounds, NumbersFromTheEnvironmentCarryTheirRange) {
  setenv("NIBBLE_THREADS", "100000", 1);
  RuntimeOptions options;
  EXPECT_THAT(error_text([&] { apply_environment(options); }),
              AllOf(HasSubstr("NIBBLE_THREADS"), HasSubstr("[0, 4096]")));
  setenv("NIBBLE_THREADS", "4294967298", 1);
  EXPECT_THAT(error_text([&] { apply_environment(options); }), HasSubstr("[0, 4096]"));
  setenv("NIBBLE_THREADS", "8", 1);
  EXPECT_EQ(error_text([&] { apply_environment(options); }), "");
  EXPECT_EQ(options.threads, 8);
  unsetenv("NIBBLE_THREADS");
}

}  // namespace
