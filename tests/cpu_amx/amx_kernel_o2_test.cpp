// The AMX micro-kernels compiled into this test at -O2 (the plugin itself is built at -O3 in
// Release), checked against the portable kernels on the same packed weight: guards the GCC 12
// tile-configuration miscompilation (docs/cpu_amx.md#kernels) at both levels. Skipped without AMX.
#include <gtest/gtest.h>

#include "activations.hpp"
#include "kernel_api.hpp"
#include "packed_weight.hpp"
#include "probe.hpp"
#include "reference.hpp"

namespace nibble::cpu_amx {
namespace {

TEST(CpuAmxKernelO2, TileKernelsMatchThePortableOnes) {
  if (decide_isa().hardware != IsaLevel::amx) GTEST_SKIP() << "no AMX on this machine";
  for (int bits : {4, 8})
    for (int64_t M : {17, 64, 100}) {
      test::QuantSpec spec{384,
                           80,
                           bits,
                           128,
                           false,
                           bits == 8,
                           true,
                           bits == 4,
                           sdk::dtype_f16(),
                           uint32_t(M + bits)};
      test::CanonicalWeight tw = test::random_weight(spec);
      nibble_canonical_weight cw = tw.view();
      sdk::QuantWeight w(cw, "o2");
      auto packed = pack_linear(w, 1);
      test::Activations x = test::random_activations(M, spec.K, sdk::dtype_bf16(), 5);
      int64_t shape[2] = {M, spec.K};
      DLTensor xt{};
      xt.data = x.bytes.data();
      xt.device = DLDevice{kDLCPU, 0};
      xt.ndim = 2;
      xt.dtype = x.dtype;
      xt.shape = shape;
      sdk::Matrix xm = sdk::as_matrix(&xt, "x");
      std::vector<float> y_amx(size_t(M * spec.N)), y_ref(size_t(M * spec.N));
      OutputView ya{reinterpret_cast<char*>(y_amx.data()), spec.N, sdk::dtype_f32(), spec.N};
      OutputView yr{reinterpret_cast<char*>(y_ref.data()), spec.N, sdk::dtype_f32(), spec.N};
      {
        std::vector<uint8_t> ws(a16_workspace_bytes(*packed, M) + 64);
        void* aligned =
            reinterpret_cast<void*>((reinterpret_cast<uintptr_t>(ws.data()) + 63) & ~uintptr_t(63));
        A16Activations a = a16_view(*packed, M, aligned);
        a16_fill(xm, *packed, a, 0, padded_rows(M), IsaLevel::scalar);
        a16_amx(A16Call{packed.get(), a, ya, M}, 0, M, 0, packed->panels);
        a16_portable(A16Call{packed.get(), a, yr, M}, 0, M, 0, packed->panels);
        std::vector<double> da(y_amx.begin(), y_amx.end()), dr(y_ref.begin(), y_ref.end());
        EXPECT_LE(test::relative_error(da, dr), 1e-5) << "W4A16 bits " << bits << " M=" << M;
      }
      {
        std::vector<uint8_t> ws(a8_workspace_bytes(*packed, M) + 64);
        void* aligned =
            reinterpret_cast<void*>((reinterpret_cast<uintptr_t>(ws.data()) + 63) & ~uintptr_t(63));
        A8Activations a = a8_view(*packed, M, aligned);
        a8_fill(xm, *packed, a, 0, padded_rows(M), IsaLevel::scalar);
        a8_amx(A8Call{packed.get(), a, ya, M}, 0, M, 0, packed->panels);
        a8_portable(A8Call{packed.get(), a, yr, M}, 0, M, 0, packed->panels);
        EXPECT_EQ(0, std::memcmp(y_amx.data(), y_ref.data(), y_amx.size() * 4))
            << "W4A8 bits " << bits << " M=" << M;
      }
    }
}

}  // namespace
}  // namespace nibble::cpu_amx
