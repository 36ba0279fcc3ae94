// gpu_ref's Marlin weight: the SDK packer's output and the tables its compute decodes with.
#include "marlin_layout.hpp"

namespace nibble::gpu_ref {

MarlinWeight MarlinWeight::pack(const sdk::QuantWeight& w) {
  MarlinWeight m;
  try {
    m.packed_ = sdk::marlin::pack(w);
  } catch (const sdk::PluginError& e) {
    if (e.status() != NIBBLE_UNSUPPORTED) throw;
    throw sdk::PluginError(NIBBLE_UNSUPPORTED,
                           std::string(e.what()) + "; gpu_ref's exllama kernel takes it");
  }
  const std::array<int, kMarlinRun> perm = sdk::marlin::weight_perm(m.packed_.bits);
  for (int64_t c = 0; c < kMarlinRun; ++c) {
    const int o = perm[size_t(c)];
    m.run_row_[size_t(c)] = int16_t((o % 256) / 16);
    m.run_col_[size_t(c)] = int16_t((o / 256) * 16 + o % 16);
  }
  m.chunks_ = sdk::portable::split_chunks(m.packed_.K, {});
  return m;
}

}  // namespace nibble::gpu_ref
