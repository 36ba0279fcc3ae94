// The general layout on the device (launch.hpp, GeneralDevice): what every valid canonical weight
// fits — any group size or grouping, zero points 0 .. 2^bits (GPTQ v1's 16 included), act-order
// with zero points, 4 or 8 bits.
#pragma once

#include <nibble/sdk/weights.hpp>

#include "device_buffer.hpp"
#include "launch.hpp"

namespace nibble::cuda {

/// One weight in the general layout in device memory.
class GeneralWeight {
 public:
  /// Pack and upload `w` to `device`.
  GeneralWeight(int device, const sdk::QuantWeight& w);
  const GeneralDevice& view() const { return view_; }
  size_t bytes() const {
    return qweight_.bytes() + scales_.bytes() + zeros_.bytes() + groups_.bytes();
  }

 private:
  DeviceBuffer qweight_, scales_, zeros_, groups_;
  GeneralDevice view_;
};

}  // namespace nibble::cuda
