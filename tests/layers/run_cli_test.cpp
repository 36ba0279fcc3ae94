// `nibble run` on every upstream fixture, on every backend and mode, reproduces the expected
// outputs within the kernel's declared bound.
#include <nibble/runtime.hpp>
#include <nibble/safetensors.hpp>

#include <gtest/gtest.h>

#include <cstdlib>

#include "layer_test_util.hpp"

using namespace nibble;
using namespace nibble::test;

namespace {

struct Fixture {
  const char* dir;
  const char* layer;
  const char* extra;     // extra flags
  const char* expected;  // expected tensor prefix
};

double bound_for(const std::string& backend, bool moe, const std::string& mode, bool bf16) {
  Runtime rt(in_tree(backend));
  for (const auto& k : rt.registry().find(backend)->kernels) {
    if (k.op != (moe ? NIBBLE_OP_MOE : NIBBLE_OP_LINEAR)) continue;
    if (k.mode != (mode == "w4a8" ? NIBBLE_MODE_W4A8 : NIBBLE_MODE_W4A16)) continue;
    return bf16 ? k.bound_bf16 : k.bound_f32;
  }
  return -1;  // no such kernel
}

TEST(RunCli, EveryFixtureOnEveryBackend) {
  const Fixture fixtures[] = {
      {"gptq_v1_sym_g128", "model.layers.0.self_attn.q_proj", "", "y_"},
      {"awq_gemm_g128", "model.layers.0.self_attn.q_proj", "", "y_"},
      {"moe_gptq_e8_top2", "model.layers.0.mlp", "", "y_"},
      {"moe_gptq_e8_top2", "model.layers.0.mlp", "--no-renormalize", "y_norenorm_"},
  };
  auto out_dir = scratch("run_cli");
  int runs = 0;
  for (const Fixture& f : fixtures) {
    bool moe = std::string(f.layer).find("mlp") != std::string::npos;
    std::string data = std::string(NIBBLE_FIXTURES_DIR) + "/" + f.dir;
    auto io = SafetensorsFile::open(data + "/io.safetensors");
    for (const char* backend : {"npu_ref", "gpu_ref", "cpu_amx"}) {
      for (const char* mode : {"w4a16", "w4a8"}) {
        for (const char* tag : {"", "bf16_"}) {
          double bound = bound_for(backend, moe, mode, *tag != 0);
          if (bound < 0) continue;  // this backend has no kernel for the op and mode
          for (int M : {1, 7, 33}) {
            std::string sfx = std::string(tag) + "m" + std::to_string(M);
            std::string out =
                (out_dir / (std::string(f.dir) + backend + mode + sfx + ".st")).string();
            std::string cmd =
                std::string(NIBBLE_CLI) + " run --no-default-plugin-dir --plugin-dir " +
                NIBBLE_PLUGIN_BUILD_DIR + " --model " + data + " --layer " + f.layer +
                " --backend " + backend + " --mode " + mode + " --input " + data +
                "/io.safetensors:x_" + sfx + " --output " + out + " " + f.extra + " > /dev/null";
            ASSERT_EQ(std::system(cmd.c_str()), 0) << cmd;
            ++runs;
            auto got = SafetensorsFile::open(out);
            const TensorView& y = got->tensor("y");
            const TensorView& want = io->tensor(std::string(f.expected) + sfx);
            ASSERT_EQ(y.numel(), want.numel());
            double num = 0, den = 0;
            for (size_t i = 0; i < size_t(y.numel()); ++i) {
              double d = y.as_double(i) - want.as_double(i);
              num += d * d;
              den += want.as_double(i) * want.as_double(i);
            }
            double err = std::sqrt(num / den);
            // Linear fixtures meet the kernel's own bound; the MoE output compounds two layers
            // and the router, so it gets twice the bound.
            EXPECT_LE(err, (moe ? 2 : 1) * bound)
                << f.dir << " " << backend << " " << mode << " " << sfx;
          }
        }
      }
    }
  }
  EXPECT_GE(runs, 2 * 2 * 2 * 3 * 2);
}

}  // namespace
