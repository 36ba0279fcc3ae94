// Runs the GPTQ fixture's linear layer through an installed libnibble on every plugin the install
// ships, found where the runtime looks by default (lib/nibble/plugins beside libnibble.so).
//
//   run_installed_layer <fixture dir> <expected plugin dir> <backend>...
//
// Checks, for each backend: it was loaded from the expected directory, it runs the layer, and for
// f32 inputs x_m{M} (M = 1, 7, 33) the output's relative L2 error against the float64 y_m{M} is at
// most the bound its kernel declares for f32 and never above kMaxRelError. Exits 1 on any miss.
#include <nibble/checkpoint.hpp>
#include <nibble/error.hpp>
#include <nibble/runtime.hpp>
#include <nibble/safetensors.hpp>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <string>
#include <vector>

namespace {

// The widest f32 bound an in-tree linear kernel declares (cpu_amx's bf16 tile path: 1e-2).
constexpr double kMaxRelError = 1e-2;
constexpr const char* kLayer = "model.layers.0.self_attn.q_proj";

int failures = 0;

void fail(const std::string& what) {
  std::fprintf(stderr, "FAIL %s\n", what.c_str());
  ++failures;
}

std::vector<float> floats_of(const nibble::TensorView& t) {
  std::vector<float> v(size_t(t.numel()));
  for (size_t i = 0; i < v.size(); ++i) v[i] = float(t.as_double(i));
  return v;
}

DLTensor matrix(std::vector<float>& data, int64_t* shape) {
  return DLTensor{data.data(), {kDLCPU, 0}, 2, {kDLFloat, 32, 1}, shape, nullptr, 0};
}

double declared_f32_bound(const nibble::Runtime& rt, const nibble::Placement& p) {
  for (const auto& k : rt.registry().find(p.backend)->kernels)
    if (k.name == p.kernel) return k.bound_f32;
  return 0;
}

void run_on(const std::string& backend, const nibble::Checkpoint& ckpt,
            const nibble::SafetensorsFile& io) {
  nibble::RuntimeOptions options;
  options.backend = backend;
  options.threads = 2;
  nibble::Runtime rt(options);
  nibble::LinearLayer layer = rt.linear(ckpt, kLayer);
  if (layer.placement().backend != backend)
    fail(backend + ": placed on " + layer.placement().backend);
  const double bound = std::min(declared_f32_bound(rt, layer.placement()), kMaxRelError);
  for (int M : {1, 7, 33}) {
    std::vector<float> x = floats_of(io.tensor("x_m" + std::to_string(M)));
    const std::vector<float> expected = floats_of(io.tensor("y_m" + std::to_string(M)));
    std::vector<float> y(expected.size(), std::nanf(""));
    int64_t x_shape[2] = {M, layer.in_features()}, y_shape[2] = {M, layer.out_features()};
    DLTensor xt = matrix(x, x_shape), yt = matrix(y, y_shape);
    layer.forward(xt, yt);
    double num = 0, den = 0;
    for (size_t i = 0; i < y.size(); ++i) {
      num += (double(y[i]) - expected[i]) * (double(y[i]) - expected[i]);
      den += double(expected[i]) * expected[i];
    }
    const double err = std::sqrt(num / den);
    std::printf("%s/%s M=%d: relative error %.2e (bound %.0e)\n", backend.c_str(),
                layer.placement().kernel.c_str(), M, err, bound);
    if (!(err <= bound)) fail(backend + " M=" + std::to_string(M) + ": relative error above bound");
  }
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 4) {
    std::fprintf(stderr, "usage: %s <fixture dir> <expected plugin dir> <backend>...\n", argv[0]);
    return 2;
  }
  const std::string fixture = argv[1];
  const std::filesystem::path plugin_dir = std::filesystem::canonical(argv[2]);
  try {
    // The installed libnibble, not the build tree's, is the one loaded: its own plugin directory
    // is the install's.
    if (std::filesystem::canonical(nibble::Registry::default_plugin_dir()) != plugin_dir)
      fail("libnibble's plugin directory is " + nibble::Registry::default_plugin_dir() +
           ", not the install's " + plugin_dir.string());
    const nibble::Runtime rt;
    for (int i = 3; i < argc; ++i) {
      const nibble::BackendInfo* b = rt.registry().find(argv[i]);
      if (!b) {
        fail(std::string(argv[i]) + ": not loaded from " + plugin_dir.string());
        continue;
      }
      if (std::filesystem::canonical(b->file).parent_path() != plugin_dir)
        fail(b->name + " was loaded from " + b->file);
    }
    for (const auto& report : rt.registry().reports())
      if (!report.ok) fail(report.path + ": " + report.message);

    // nibble::Error thrown inside libnibble is caught here as nibble::Error: one typeinfo.
    try {
      nibble::Checkpoint::open(fixture + "/no such checkpoint");
      fail("opening a missing checkpoint did not throw");
    } catch (const nibble::Error&) {
    }

    const nibble::Checkpoint ckpt = nibble::Checkpoint::open(fixture);
    const auto io = nibble::SafetensorsFile::open(fixture + "/io.safetensors");
    for (int i = 3; i < argc; ++i) run_on(argv[i], ckpt, *io);
  } catch (const nibble::Error& e) {
    fail(e.what());
  } catch (const std::exception& e) {
    fail(std::string("not a nibble::Error: ") + e.what());
  }
  if (failures) return 1;
  std::printf("all %d backends reproduce the fixture\n", argc - 3);
  return 0;
}
