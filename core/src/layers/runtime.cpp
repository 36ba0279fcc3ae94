// Runtime: plugin loading, and building linear layers (decode → select → prepare).
#include <nibble/error.hpp>
#include <nibble/log.hpp>
#include <nibble/runtime.hpp>
#include <nibble/sdk/device.hpp>
#include <nibble/sdk/host/device.hpp>
#include <nibble/sdk/host/layer_desc.hpp>
#include <nibble/sdk/host/prepared.hpp>
#include <nibble/sdk/numeric.hpp>
#include <nibble/untrusted_text.hpp>

#include <algorithm>
#include <thread>

#include "prepared_kernel.hpp"
#include "text/name_text.hpp"

namespace nibble {

namespace {

int effective_threads(int threads) {
  return threads > 0 ? threads : int(std::max(1u, std::thread::hardware_concurrency()));
}

void warn_fallback(const Selection& sel, const std::string& layer, const std::string& part) {
  if (sel.passed_over.empty()) return;
  // The layer name comes from the checkpoint and the reasons from plugins: both escaped.
  std::string msg = detail::name_text(layer) + " (" + part + ") runs on " +
                    escape_untrusted(sel.kernel->full_name(), 200) + " because:";
  for (const auto& p : sel.passed_over) msg += "\n  " + escape_untrusted(p, 1000);
  log(LogLevel::Warning, "core", msg);
}

// The device a runtime's layers run on: the one named, else the device of a single named backend
// whose kernels run on a device it finds, else the CPU. "auto" and lists never leave the CPU by
// themselves: where the caller's tensors must be is not something to guess.
DLDevice resolve_device(const RuntimeOptions& o, const Registry& reg) {
  if (!o.device.empty()) return parse_device(o.device, "device");
  const std::vector<std::string> names = parse_backend_list(o.backend, "backend");
  if (names.size() != 1 || names[0] == "auto" || names[0] == "*") return DLDevice{kDLCPU, 0};
  const BackendInfo* b = reg.find(names[0]);
  if (!b || !b->available || !b->device_memory || b->device_count < 1) return DLDevice{kDLCPU, 0};
  return DLDevice{DLDeviceType(sdk::normal_device_type(b->device_memory->device_type)), 0};
}

}  // namespace

Runtime::Runtime(RuntimeOptions options)
    : options_(std::move(options)), registry_(Registry::load(options_)) {
  device_ = resolve_device(options_, *registry_);
  if (device_.device_type != kDLCPU)
    log(LogLevel::Debug, "core", "layers run on " + sdk::device_name(device_));
}

int32_t Runtime::numeric_mode() const {
  return options_.mode == NumericMode::W4A8 ? NIBBLE_MODE_W4A8 : NIBBLE_MODE_W4A16;
}

nibble_layer_desc Runtime::describe(const CanonicalWeight& w, const char* name) const {
  nibble_layer_desc d = sdk::host::linear_desc(w.view(), name, numeric_mode());
  sdk::host::set_layer_device(d, device_);
  return d;
}

// Build a prepared dense layer (router or unconverted linear) from the checkpoint, on `device`.
std::shared_ptr<const PreparedKernel> make_dense(const std::shared_ptr<const Registry>& reg,
                                                 const RuntimeOptions& o, const DLDevice& device,
                                                 const Checkpoint& ckpt, const std::string& prefix,
                                                 const char* part) {
  DenseTensor t = ckpt.dense_weight(prefix);
  nibble_dense_weight w = t.view();
  nibble_layer_desc d = sdk::host::dense_desc(w, prefix.c_str());
  sdk::host::set_layer_device(d, device);
  Selection sel = reg->select(d, o.backend);
  warn_fallback(sel, prefix, part);
  return prepare_first_that_accepts(reg, sel, d, sdk::host::dense_input(w), part,
                                    effective_threads(o.threads));
}

LinearLayer Runtime::dense(const std::string& name, const nibble_dense_weight& w) const {
  if (w.K <= 0 || w.N <= 0 || !w.data || !sdk::is_float_dtype(w.dtype))
    throw Error("dense layer " + detail::name_text(name) +
                ": expected a non-empty f32, f16 or bf16 weight [N][K]");
  nibble_layer_desc d = sdk::host::dense_desc(w, name.c_str());
  sdk::host::set_layer_device(d, device_);
  Selection sel = registry_->select(d, options_.backend);
  warn_fallback(sel, name, "dense");
  LinearLayer layer;
  layer.op_ = prepare_first_that_accepts(registry_, sel, d, sdk::host::dense_input(w), "dense",
                                         effective_threads(options_.threads));
  return layer;
}

LinearLayer Runtime::linear(const Checkpoint& ckpt, const std::string& prefix) const {
  LinearLayer layer;
  std::vector<LayerInfo> layers = ckpt.linear_layers();
  auto it = std::find_if(layers.begin(), layers.end(),
                         [&](const LayerInfo& l) { return l.prefix == prefix; });
  if (it == layers.end()) {
    std::string known;
    for (size_t i = 0; i < layers.size() && i < 8; ++i)
      known += "\n  " + escape_untrusted(layers[i].prefix, 200);
    if (layers.size() > 8) known += "\n  ... (" + std::to_string(layers.size() - 8) + " more)";
    throw Error("checkpoint " + escape_untrusted(ckpt.directory().string(), 400) +
                " has no linear layer '" + detail::name_text(prefix) + "'" +
                (known.empty() ? std::string(" (it has none)") : "; it has:" + known));
  }
  if (it->kind == LayerKind::Dense) {
    layer.op_ = make_dense(registry_, options_, device_, ckpt, prefix, "dense");
    return layer;
  }
  // The canonical weight lives only until the backend has repacked it.
  CanonicalWeight w = ckpt.decode_linear(prefix);
  nibble_layer_desc d = describe(w, prefix.c_str());
  Selection sel = registry_->select(d, options_.backend);
  warn_fallback(sel, prefix, "linear");
  const nibble_canonical_weight view = w.view();
  layer.op_ = prepare_first_that_accepts(registry_, sel, d, sdk::host::quantized_input(view),
                                         "linear", effective_threads(options_.threads));
  return layer;
}

void LinearLayer::forward(const DLTensor& x, DLTensor& y) const { op_->forward(x, y); }
void LinearLayer::forward(const DLTensor& x, DLTensor& y, void* stream) const {
  op_->forward(x, y, nullptr, nullptr, stream);
}
DLDevice LinearLayer::device() const { return op_->device(); }
sdk::host::Device LinearLayer::device_memory() const { return op_->device_memory(); }
int64_t LinearLayer::in_features() const { return op_->desc().K; }
int64_t LinearLayer::out_features() const { return op_->desc().N; }
const Placement& LinearLayer::placement() const { return op_->placement(); }
size_t LinearLayer::prepared_bytes() const { return op_->prepared_bytes(); }

}  // namespace nibble
