#include "prepared_kernel.hpp"

#include <nibble/error.hpp>
#include <nibble/sdk/device.hpp>
#include <nibble/sdk/host/device.hpp>
#include <nibble/sdk/host/prepared.hpp>
#include <nibble/sdk/numeric.hpp>

#include <memory>

namespace nibble {

void check_device(const DLTensor& t, const char* what, const DLDevice& device,
                  const std::string& layer) {
  if (sdk::tensor_fits_device(t.device, device)) return;
  const std::string at = "layer " + layer + ": " + what + " is on " + sdk::device_name(t.device);
  if (device.device_type == kDLCPU)
    throw Error(at + ", the layer runs on cpu: it must be in host memory (cpu, cuda_host or " +
                "rocm_host)");
  throw Error(at + ", the layer runs on " + sdk::device_name(device) +
              ": copy it there first (the layer's device_memory() allocates and copies)");
}

int64_t check_activation(const DLTensor& t, const char* what, int64_t cols,
                         const std::string& layer, const DLDevice& device) {
  std::string at = "layer " + layer + ": " + what;
  if (t.ndim != 2)
    throw Error(at + " must be 2-D [M, " + std::to_string(cols) + "], got " +
                std::to_string(t.ndim) + " dimensions");
  check_device(t, what, device, layer);
  if (!sdk::is_float_dtype(t.dtype))
    throw Error(at + " has dtype " + sdk::dtype_name(t.dtype) + "; expected f32, bf16 or f16");
  if (!t.shape || t.shape[0] < 0) throw Error(at + " has a bad shape");
  if (t.shape[1] != cols)
    throw Error(at + " has " + std::to_string(t.shape[1]) + " columns; the layer expects " +
                std::to_string(cols));
  if (t.strides && t.shape[0] > 1 && (t.strides[1] != 1 || t.strides[0] < cols))
    throw Error(at + " must have contiguous rows (column stride 1, row stride >= " +
                std::to_string(cols) + ")");
  if (!t.data && t.shape[0] > 0) throw Error(at + " has no data");
  return t.shape[0];
}

PreparedKernel::PreparedKernel(std::shared_ptr<const Registry> reg, const Selection& sel,
                               const nibble_layer_desc& desc, const nibble_weight_input& weight,
                               std::string part, int threads)
    : registry_(std::move(reg)),
      kernel_(sel.kernel->kernel),
      desc_(desc),
      name_(desc.name ? desc.name : ""),
      threads_(threads) {
  desc_.name = name_.c_str();
  if (sel.kernel->device_type != kDLCPU) {
    const DLDevice layer = sdk::host::layer_device_of(desc_);
    device_ = DLDevice{DLDeviceType(sel.kernel->device_type), layer.device_id};
    device_memory_ = sel.backend->device(layer.device_id);
  }
  placement_.layer = name_;
  placement_.part = std::move(part);
  placement_.backend = sel.backend->name;
  placement_.kernel = sel.kernel->name;
  placement_.passed_over = sel.passed_over;
  placement_.alternatives = registry_->explain(desc_);
  try {
    prepared_ = sdk::host::prepare(kernel_, desc_, weight);
  } catch (const sdk::host::CallError& e) {
    const std::string said = e.message().empty() ? "no message" : e.message();
    if (e.status() == NIBBLE_UNSUPPORTED)
      throw PrepareUnsupported(sel.kernel->full_name() + " refused at prepare: " + said);
    throw Error("layer " + name_ + ": " + sel.kernel->full_name() + " failed to prepare the " +
                placement_.part + " weight (" + nibble_status_name(e.status()) + "): " + said);
  }
}

std::shared_ptr<const PreparedKernel> prepare_first_that_accepts(
    const std::shared_ptr<const Registry>& reg, Selection sel, const nibble_layer_desc& desc,
    const nibble_weight_input& weight, const std::string& part, int threads) {
  std::vector<std::string> refusals;
  for (size_t next = 0;; ++next) {
    try {
      Selection attempt = sel;
      for (const auto& r : refusals) attempt.passed_over.push_back(r);
      return std::make_shared<const PreparedKernel>(reg, attempt, desc, weight, part, threads);
    } catch (const PrepareUnsupported& e) {
      refusals.push_back(e.what());
      if (next >= sel.later.size()) {
        std::string msg = "layer " + std::string(desc.name ? desc.name : "") +
                          ": every kernel that accepted the layer refused its weight:";
        for (const auto& r : refusals) msg += "\n  " + r;
        throw Error(msg);
      }
      sel.backend = sel.later[next].first;
      sel.kernel = sel.later[next].second;
    }
  }
}

size_t PreparedKernel::prepared_bytes() const { return prepared_.bytes(); }

void PreparedKernel::forward(const DLTensor& x, DLTensor& y, const DLTensor* ids,
                             const DLTensor* weights, void* stream) const {
  const int64_t out_cols = desc_.op == NIBBLE_OP_MOE ? desc_.K : desc_.N;
  int64_t M = check_activation(x, "input x", desc_.K, name_, device_);
  int64_t My = check_activation(y, "output y", out_cols, name_, device_);
  if (ids) check_device(*ids, "topk_ids", device_, name_);
  if (weights) check_device(*weights, "topk_weights", device_, name_);
  if (My != M)
    throw Error("layer " + name_ + ": output y has " + std::to_string(My) + " rows, input x has " +
                std::to_string(M));
  if (!sdk::same_dtype(x.dtype, y.dtype))
    throw Error("layer " + name_ + ": output y is " + sdk::dtype_name(y.dtype) +
                " but input x is " + sdk::dtype_name(x.dtype) + "; they must match");
  if (M == 0) return;
  // One growing scratch buffer per calling thread: a steady-state forward allocates nothing.
  thread_local sdk::host::Workspace workspace;
  try {
    prepared_.forward(sdk::host::forward_args(x, y, ids, weights), M, threads_, workspace, stream);
  } catch (const sdk::host::CallError& e) {
    throw Error("layer " + name_ + ": " + placement_.backend + "/" + placement_.kernel + " " +
                e.what());
  }
}

}  // namespace nibble
