#include "prepared_kernel.hpp"

#include <nibble/error.hpp>
#include <nibble/sdk/numeric.hpp>

#include <cstdlib>
#include <cstring>
#include <memory>

namespace nibble {

namespace {

std::string status_text(nibble_status s) {
  switch (s) {
    case NIBBLE_OK:
      return "ok";
    case NIBBLE_INVALID_ARGUMENT:
      return "invalid argument";
    case NIBBLE_UNSUPPORTED:
      return "unsupported";
    case NIBBLE_OUT_OF_MEMORY:
      return "out of memory";
    case NIBBLE_UNAVAILABLE:
      return "unavailable";
    case NIBBLE_INTERNAL:
      return "internal error";
  }
  return "status " + std::to_string(s);
}

// Per-thread scratch that grows to the largest workspace a thread has needed: forward calls
// allocate nothing in the steady state.
struct Scratch {
  void* data = nullptr;
  size_t size = 0;
  ~Scratch() { std::free(data); }
  void* get(size_t bytes) {
    if (bytes > size) {
      std::free(data);
      size_t rounded = (bytes + 4095) & ~size_t(4095);
      data = std::aligned_alloc(64, rounded);
      if (!data) throw Error("cannot allocate a workspace of " + std::to_string(bytes) + " bytes");
      size = rounded;
    }
    return data;
  }
};

}  // namespace

int64_t check_activation(const DLTensor& t, const char* what, int64_t cols,
                         const std::string& layer) {
  std::string at = "layer " + layer + ": " + what;
  if (t.ndim != 2)
    throw Error(at + " must be 2-D [M, " + std::to_string(cols) + "], got " +
                std::to_string(t.ndim) + " dimensions");
  if (t.device.device_type != kDLCPU) throw Error(at + " must be a CPU tensor");
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

PreparedKernel::PreparedKernel(const Registry& reg, const Selection& sel,
                               const nibble_layer_desc& desc, const nibble_weight_input& weight,
                               std::string part, int threads)
    : kernel_(sel.kernel->kernel),
      desc_(desc),
      name_(desc.name ? desc.name : ""),
      threads_(threads) {
  desc_.name = name_.c_str();
  placement_.layer = name_;
  placement_.part = std::move(part);
  placement_.backend = sel.backend->name;
  placement_.kernel = sel.kernel->name;
  placement_.passed_over = sel.passed_over;
  placement_.alternatives = reg.explain(desc_);
  nibble_error err{};
  err.struct_size = sizeof err;
  nibble_status s = NIBBLE_INTERNAL;
  try {
    s = kernel_->prepare(kernel_, &desc_, &weight, &prepared_, &err);
  } catch (...) {
    std::strcpy(err.message, "prepare threw a C++ exception across the C ABI");
  }
  err.message[sizeof err.message - 1] = '\0';
  if (s != NIBBLE_OK || !prepared_) {
    // A failed prepare must leave nothing behind; a handle returned with an error is released.
    if (prepared_) kernel_->release(kernel_, prepared_);
    prepared_ = nullptr;
    if (s == NIBBLE_UNSUPPORTED)
      throw PrepareUnsupported(sel.kernel->full_name() + " refused at prepare: " +
                               (err.message[0] ? err.message : "no message"));
    throw Error("layer " + name_ + ": " + sel.kernel->full_name() + " failed to prepare the " +
                placement_.part + " weight (" + status_text(s) +
                "): " + (err.message[0] ? err.message : "no message"));
  }
}

std::shared_ptr<const PreparedKernel> prepare_first_that_accepts(const Registry& reg, Selection sel,
                                                                 const nibble_layer_desc& desc,
                                                                 const nibble_weight_input& weight,
                                                                 const std::string& part,
                                                                 int threads) {
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

PreparedKernel::~PreparedKernel() {
  if (prepared_) kernel_->release(kernel_, prepared_);
}

size_t PreparedKernel::prepared_bytes() const {
#if NIBBLE_ABI_MINOR >= 1
  // prepared_bytes arrived in ABI 1.1: a 1.0 plugin's kernel struct ends before it.
  if (kernel_->struct_size >= offsetof(nibble_kernel, prepared_bytes) + sizeof(void*) &&
      kernel_->prepared_bytes)
    return kernel_->prepared_bytes(kernel_, prepared_);
#endif
  return 0;
}

void PreparedKernel::forward(const DLTensor& x, DLTensor& y, const DLTensor* ids,
                             const DLTensor* weights) const {
  const int64_t out_cols = desc_.op == NIBBLE_OP_MOE ? desc_.K : desc_.N;
  int64_t M = check_activation(x, "input x", desc_.K, name_);
  int64_t My = check_activation(y, "output y", out_cols, name_);
  if (My != M)
    throw Error("layer " + name_ + ": output y has " + std::to_string(My) + " rows, input x has " +
                std::to_string(M));
  if (!sdk::same_dtype(x.dtype, y.dtype))
    throw Error("layer " + name_ + ": output y is " + sdk::dtype_name(y.dtype) +
                " but input x is " + sdk::dtype_name(x.dtype) + "; they must match");
  if (M == 0) return;
  nibble_error err{};
  err.struct_size = sizeof err;
  size_t ws = 0;
  nibble_status s = kernel_->workspace_bytes(kernel_, prepared_, M, &ws, &err);
  if (s != NIBBLE_OK)
    throw Error("layer " + name_ + ": " + placement_.backend + "/" + placement_.kernel +
                " workspace_bytes failed: " + err.message);
  // A plugin asking for more than any machine has is a bug; say so instead of trying.
  constexpr size_t kMaxWorkspace = size_t(1) << 40;
  if (ws > kMaxWorkspace)
    throw Error("layer " + name_ + ": " + placement_.backend + "/" + placement_.kernel +
                " asks for a workspace of " + std::to_string(ws) +
                " bytes for M = " + std::to_string(M) + "; refusing");
  thread_local Scratch scratch;
  nibble_exec exec{};
  exec.struct_size = sizeof exec;
  exec.workspace = ws ? scratch.get(ws) : nullptr;
  exec.workspace_size = ws;
  exec.num_threads = threads_;
  nibble_forward_args args{};
  args.struct_size = sizeof args;
  args.x = &x;
  args.y = &y;
  args.topk_ids = ids;
  args.topk_weights = weights;
  try {
    s = kernel_->forward(kernel_, prepared_, &args, &exec, &err);
  } catch (...) {
    s = NIBBLE_INTERNAL;
    std::strcpy(err.message, "forward threw a C++ exception across the C ABI");
  }
  if (s != NIBBLE_OK) {
    err.message[sizeof err.message - 1] = '\0';
    throw Error("layer " + name_ + ": " + placement_.backend + "/" + placement_.kernel +
                " forward failed (" + status_text(s) + "): " + err.message);
  }
}

}  // namespace nibble
