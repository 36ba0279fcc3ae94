// Marlin weights on the device: the SDK's Marlin packer (<nibble/sdk/layouts/marlin.hpp>), plus
// the group of every 16-row slab, uploaded into device memory the prepared layer owns. A stack
// holds equally shaped weights back to back (the experts of an MoE layer), filled one at a time so
// that one expert's host-side form is alive at once.
#pragma once

#include <nibble/sdk/layouts/marlin.hpp>
#include <nibble/sdk/weights.hpp>

#include <cstdint>
#include <string>
#include <vector>

#include "device_buffer.hpp"
#include "launch.hpp"

namespace nibble::cuda {

/// One weight packed for the Marlin kernels, still on the host.
struct MarlinHost {
  sdk::marlin::Packed packed;
  std::vector<int32_t> slab_groups;  ///< [K/16]
  std::vector<uint8_t> scales;       ///< packed.scales in the checkpoint's dtype
};

/// Pack `w`; throws UNSUPPORTED for what Marlin cannot represent, including act-order groupings
/// whose groups do not fill whole 16-row slabs once sorted. `what` names the weight.
MarlinHost pack_marlin(const sdk::QuantWeight& w, bool keep_zero_points, const std::string& what);

/// `count` Marlin weights of one shape in device memory.
class MarlinStack {
 public:
  /// Room for `count` weights shaped like `first` (zero points and act-order tables included
  /// when it has them) on `device`, with `first` stored as weight 0.
  MarlinStack(int device, int count, const MarlinHost& first);
  /// Store weight `index`; throws INVALID_ARGUMENT when it is shaped unlike weight 0.
  void put(int index, const MarlinHost& w, const std::string& what);
  /// The kernels' view (expert strides set).
  const MarlinDevice& view() const { return view_; }
  /// Device bytes held.
  size_t bytes() const;

 private:
  int device_ = 0, count_ = 0;
  DeviceBuffer qweight_, scales_, zeros_, slab_groups_, columns_;
  MarlinDevice view_;
  int64_t num_groups_ = 1;
};

}  // namespace nibble::cuda
