// A device backend without a device: its kernels declare device type kDLExtDev (no real plugin
// here uses it) and take only memory its own nibble_device_memory handed out (malloc'd blocks it
// tracks per device index), so a host that passes a host pointer, or memory of another device
// index, is refused, and a test proves the host really staged its tensors. The kernels compute
// with the portable reference code (the memory is host memory underneath). A non-null stream must
// be a MockStream (mock_stream.hpp), on which forwards, copies and synchronizes are counted.
// NIBBLE_MOCKDEV_DEVICES (0..16, default 2) sets how many devices it finds; with 0 the probe
// says the device is absent. A CPU kernel, host_linear, is there for selection tests.
// NIBBLE_MOCKDEV_THREADS plays a device runtime's threads for the kit's thread checks: "runtime"
// starts one thread at the first probe of the process that lives until exit (as CUDA's driver
// does); "leak" starts one per load at its first allocation and never joins it (a plugin bug).
// NIBBLE_MOCKDEV_SYNC_US makes every synchronize take that long, as waiting for queued work does,
// and NIBBLE_MOCKDEV_FORWARD_US every forward (the bench tests use them to see how often the bench
// waits and how many calls a sample of a long call runs). Its events take the host's clock when
// recorded (its work runs as it is queued); NIBBLE_MOCKDEV_EVENTS=0 offers none.
#include <nibble/sdk/env.hpp>
#include <nibble/sdk/portable_kernels.hpp>
#include <nibble/sdk/weights.hpp>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <thread>

#include "mock_stream.hpp"

namespace {

namespace sdk = nibble::sdk;
namespace portable = nibble::sdk::portable;

constexpr int32_t kDevice = kDLExtDev;
constexpr double kBoundF32 = 1e-5, kBoundF16 = 5e-4, kBoundBf16 = 4e-3;

// Count an event on `stream` (nullptr: the default stream, nothing to count).
void count_on(void* stream, std::atomic<uint64_t> nibble::test::MockStream::*counter) {
  if (!stream) return;
  auto* s = static_cast<nibble::test::MockStream*>(stream);
  sdk::require(s->magic == nibble::test::kMockStreamMagic,
               "the stream is not a mock stream (its first field is not the magic number)");
  ++(s->*counter);
}

std::string address(const void* p) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%p", p);
  return buf;
}

bool threads_mode(const char* mode) {
  const char* v = std::getenv("NIBBLE_MOCKDEV_THREADS");
  return v && std::strcmp(v, mode) == 0;
}

void start_sleeper() {
  std::thread([] {
    for (;;) std::this_thread::sleep_for(std::chrono::hours(1));
  }).detach();
}

// Blocks handed out per device index; every check of a pointer goes through here.
class MockMemory : public sdk::DeviceMemory {
 public:
  explicit MockMemory(int devices) : devices_(devices) {}
  int32_t device_type() const override { return kDevice; }
  int device_count() override { return devices_; }
  /// The devices this memory manages (device_count for const callers).
  int devices() const { return devices_; }
  void* alloc(int device_id, size_t bytes) override {
    require_device(device_id);
    if (threads_mode("leak")) std::call_once(leak_once_, start_sleeper);
    void* p = std::aligned_alloc(64, (bytes + 63) & ~size_t(63));
    if (!p) throw sdk::PluginError(NIBBLE_OUT_OF_MEMORY, "mock device memory exhausted");
    std::lock_guard<std::mutex> lock(mutex_);
    blocks_[reinterpret_cast<uintptr_t>(p)] = Block{bytes, device_id};
    return p;
  }
  void free(int device_id, void* ptr) noexcept override {
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = blocks_.find(reinterpret_cast<uintptr_t>(ptr));
    if (it == blocks_.end() || it->second.device != device_id) return;  // not ours: leave it
    blocks_.erase(it);
    std::free(ptr);
  }
  void copy(int device_id, void* dst, const void* src, size_t bytes, sdk::CopyDirection direction,
            void* stream) override {
    require_device(device_id);
    const bool dst_device = direction != sdk::CopyDirection::device_to_host;
    const bool src_device = direction != sdk::CopyDirection::host_to_device;
    require_range(dst, bytes, device_id, dst_device, "copy destination");
    require_range(src, bytes, device_id, src_device, "copy source");
    count_on(stream, &nibble::test::MockStream::copies);
    std::memcpy(dst, src, bytes);
  }
  void synchronize(int device_id, void* stream) override {
    require_device(device_id);
    count_on(stream, &nibble::test::MockStream::synchronizes);
    if (const char* us = std::getenv("NIBBLE_MOCKDEV_SYNC_US"))
      std::this_thread::sleep_for(std::chrono::microseconds(std::atoi(us)));
  }
  // Work runs when it is queued here, so an event takes the host's clock when it is recorded.
  bool has_events() const override { return events_; }
  void* event_create(int device_id) override {
    require_device(device_id);
    return new Event{device_id};
  }
  void event_destroy(int, void* event) noexcept override { delete static_cast<Event*>(event); }
  void event_record(int device_id, void* event, void*) override {
    Event& e = event_of(event, device_id);
    e.at = std::chrono::steady_clock::now();
    e.recorded = true;
  }
  double event_elapsed(int device_id, void* start, void* end) override {
    const Event &a = event_of(start, device_id), &b = event_of(end, device_id);
    if (!a.recorded || !b.recorded)
      throw sdk::PluginError(NIBBLE_INVALID_ARGUMENT, std::string("mock event elapsed: the ") +
                                                          (a.recorded ? "end" : "start") +
                                                          " event was never recorded");
    return std::chrono::duration<double>(b.at - a.at).count();
  }

  /// Throw unless [p, p + bytes) lies inside one block of device `device_id` (on_device), or
  /// outside every block (host memory); `what` names the pointer.
  void require_range(const void* p, size_t bytes, int device_id, bool on_device,
                     const std::string& what) const {
    const int owner = owner_of(p, bytes);
    if (on_device && owner != device_id)
      throw sdk::PluginError(NIBBLE_INVALID_ARGUMENT,
                             what + ": " + address(p) +
                                 " is not mock memory of ext_dev:" + std::to_string(device_id) +
                                 (owner < 0 ? " (a host pointer?)"
                                            : " (it is on ext_dev:" + std::to_string(owner) + ")"));
    if (!on_device && owner >= 0)
      throw sdk::PluginError(NIBBLE_INVALID_ARGUMENT,
                             what + ": " + address(p) + " is device memory, expected host memory");
  }

 private:
  struct Block {
    size_t bytes;
    int device;
  };
  struct Event {
    int device;
    std::chrono::steady_clock::time_point at{};
    bool recorded = false;
  };
  Event& event_of(void* event, int device_id) const {
    require_device(device_id);
    auto* e = static_cast<Event*>(event);
    if (!e || e->device != device_id)
      throw sdk::PluginError(NIBBLE_INVALID_ARGUMENT,
                             "mock event: not an event of ext_dev:" + std::to_string(device_id));
    return *e;
  }
  bool events_ = sdk::env_integer("NIBBLE_MOCKDEV_EVENTS", 0, 1).value_or(1) == 1;
  void require_device(int device_id) const {
    if (device_id < 0 || device_id >= devices_)
      throw sdk::PluginError(NIBBLE_INVALID_ARGUMENT,
                             "no mock device " + std::to_string(device_id) + " (there are " +
                                 std::to_string(devices_) + ")");
  }
  // The device whose block holds [p, p + bytes), or -1.
  int owner_of(const void* p, size_t bytes) const {
    const uintptr_t a = reinterpret_cast<uintptr_t>(p);
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = blocks_.upper_bound(a);
    if (it == blocks_.begin()) return -1;
    --it;
    if (a + bytes > it->first + it->second.bytes) return -1;
    return it->second.device;
  }
  int devices_;
  std::once_flag leak_once_;
  mutable std::mutex mutex_;
  std::map<uintptr_t, Block> blocks_;
};

// The quantized weight dequantized once to f32 [K][N] (g_idx honoured): the simplest layout the
// portable GEMM runs.
class DequantizedLayout {
 public:
  static DequantizedLayout pack(const sdk::QuantWeight& w) {
    DequantizedLayout l;
    l.K_ = w.K();
    l.N_ = w.N();
    l.wt_.resize(size_t(l.K_ * l.N_));
    for (int64_t n = 0; n < l.N_; ++n)
      for (int64_t k = 0; k < l.K_; ++k) l.wt_[size_t(k * l.N_ + n)] = w.dequant(n, k);
    l.chunks_ = portable::split_chunks(l.K_, {});
    return l;
  }
  int64_t N() const { return N_; }
  int64_t width() const { return K_; }
  const std::vector<int32_t>& input_columns() const { return identity_; }
  int64_t chunk_count() const { return int64_t(chunks_.size()); }
  portable::KRange chunk(int64_t c) const { return chunks_[size_t(c)]; }
  void decode(int64_t c, int64_t n0, int64_t n1, float* tile) const {
    const portable::KRange r = chunks_[size_t(c)];
    const int64_t nb = n1 - n0;
    for (int64_t k = r.begin; k < r.end; ++k)
      std::memcpy(tile + (k - r.begin) * nb, &wt_[size_t(k * N_ + n0)], size_t(nb) * sizeof(float));
  }
  size_t bytes() const { return wt_.size() * sizeof(float); }

 private:
  int64_t K_ = 0, N_ = 0;
  std::vector<float> wt_;
  std::vector<portable::KRange> chunks_;
  std::vector<int32_t> identity_;
};

struct Serial {
  explicit Serial(int) {}
  template <class F>
  void operator()(int64_t count, F&& f) const {
    for (int64_t i = 0; i < count; ++i) f(i);
  }
};

// The bytes a validated matrix spans.
size_t span_of(const sdk::Matrix& m) {
  if (m.rows == 0 || m.cols == 0) return 0;
  return size_t((m.rows - 1) * m.stride + m.cols) * sdk::dtype_bytes(m.dtype);
}

// A portable prepared weight behind a forward that takes only this backend's device memory.
class DevicePrepared : public sdk::Prepared {
 public:
  DevicePrepared(std::unique_ptr<sdk::Prepared> inner, const MockMemory& memory)
      : inner_(std::move(inner)), memory_(memory) {}
  size_t bytes() const override { return inner_->bytes(); }
  size_t workspace_bytes(int64_t M) const override { return inner_->workspace_bytes(M); }
  void forward(const sdk::ForwardArgs& a, const sdk::Exec& e) const override {
    sdk::require(a.device.device_type == kDevice, "forward: the tensors are not on ext_dev");
    const int id = a.device.device_id;
    memory_.require_range(a.x.data, span_of(a.x), id, true, "x");
    memory_.require_range(a.y.data, span_of(a.y), id, true, "y");
    if (desc().op == NIBBLE_OP_MOE) {
      memory_.require_range(a.topk_ids.data, span_of(a.topk_ids), id, true, "topk_ids");
      memory_.require_range(a.topk_weights.data, span_of(a.topk_weights), id, true, "topk_weights");
      // The SDK cannot read device ids; this device can.
      for (int64_t m = 0; m < a.M; ++m)
        for (int64_t j = 0; j < a.topk_ids.cols; ++j) {
          const int64_t expert = a.topk_ids.get_int(m, j);
          sdk::require(expert >= -1 && expert < desc().num_experts,
                       "topk_ids[" + std::to_string(m) + ", " + std::to_string(j) +
                           "] = " + std::to_string(expert) + " is outside [0, " +
                           std::to_string(desc().num_experts) + ") (or -1 for no expert)");
        }
    }
    count_on(e.stream, &nibble::test::MockStream::forwards);
    if (const char* us = std::getenv("NIBBLE_MOCKDEV_FORWARD_US"))
      std::this_thread::sleep_for(std::chrono::microseconds(std::atoi(us)));
    inner_->forward(a, e);
  }

 private:
  std::unique_ptr<sdk::Prepared> inner_;
  const MockMemory& memory_;
};

sdk::KernelInfo info_of(const char* name, nibble_op op, nibble_numeric_mode mode, int32_t device) {
  sdk::KernelInfo k;
  k.name = name;
  k.op = op;
  k.priority = device == kDevice ? 20 : 1;
  k.mode = mode;
  k.bound_f32 = kBoundF32;
  k.bound_f16 = kBoundF16;
  k.bound_bf16 = kBoundBf16;
  k.device_type = device;
  return k;
}

std::string why_not_quantized(const nibble_layer_desc& d) {
  if (d.numeric_mode != NIBBLE_MODE_W4A16) return "the mock device computes w4a16 only";
  if (d.bits != 4 && d.bits != 8) return std::to_string(d.bits) + "-bit weights";
  return portable::why_not_quantized_shape(d);
}

// Every device kernel refuses a device index the backend does not have.
std::string why_not_index(const nibble_layer_desc& d, const MockMemory& memory) {
  const DLDevice device = sdk::layer_device(d);
  if (device.device_type != kDevice) return "";
  if (device.device_id < 0 || device.device_id >= memory.devices())
    return "no mock device " + std::to_string(device.device_id);
  return "";
}

class DeviceLinear : public sdk::Kernel {
 public:
  explicit DeviceLinear(const MockMemory& memory) : memory_(memory) {}
  sdk::KernelInfo info() const override {
    return info_of("mock_linear", NIBBLE_OP_LINEAR, NIBBLE_MODE_W4A16, kDevice);
  }
  std::string why_not(const nibble_layer_desc& d) const override {
    if (d.op != NIBBLE_OP_LINEAR) return "mock_linear computes quantized linear layers only";
    std::string why = why_not_index(d, memory_);
    return why.empty() ? why_not_quantized(d) : why;
  }
  std::unique_ptr<sdk::Prepared> prepare(const nibble_layer_desc& d,
                                         const nibble_weight_input& in) const override {
    return std::make_unique<DevicePrepared>(
        portable::prepare_linear<DequantizedLayout, Serial>(d, in), memory_);
  }

 private:
  const MockMemory& memory_;
};

class DeviceDense : public sdk::Kernel {
 public:
  explicit DeviceDense(const MockMemory& memory)
      : memory_(memory),
        inner_(info_of("mock_dense", NIBBLE_OP_DENSE, NIBBLE_MODE_FLOAT, kDevice)) {}
  sdk::KernelInfo info() const override { return inner_.info(); }
  std::string why_not(const nibble_layer_desc& d) const override {
    std::string why = why_not_index(d, memory_);
    return why.empty() ? inner_.why_not(d) : why;
  }
  std::unique_ptr<sdk::Prepared> prepare(const nibble_layer_desc& d,
                                         const nibble_weight_input& in) const override {
    return std::make_unique<DevicePrepared>(inner_.prepare(d, in), memory_);
  }

 private:
  const MockMemory& memory_;
  portable::DenseKernel<Serial> inner_;
};

class DeviceMoe : public sdk::Kernel {
 public:
  explicit DeviceMoe(const MockMemory& memory) : memory_(memory) {}
  sdk::KernelInfo info() const override {
    return info_of("mock_moe", NIBBLE_OP_MOE, NIBBLE_MODE_W4A16, kDevice);
  }
  std::string why_not(const nibble_layer_desc& d) const override {
    if (d.op != NIBBLE_OP_MOE) return "mock_moe computes MoE layers only";
    std::string why = why_not_index(d, memory_);
    if (why.empty()) why = why_not_quantized(d);
    return why.empty() ? portable::why_not_moe_routing(d) : why;
  }
  std::unique_ptr<sdk::Prepared> prepare(const nibble_layer_desc& d,
                                         const nibble_weight_input& in) const override {
    return std::make_unique<DevicePrepared>(portable::prepare_moe<DequantizedLayout, Serial>(d, in),
                                            memory_);
  }

 private:
  const MockMemory& memory_;
};

// The same linear layer on host memory, for selection between devices.
class HostLinear : public sdk::Kernel {
 public:
  sdk::KernelInfo info() const override {
    return info_of("host_linear", NIBBLE_OP_LINEAR, NIBBLE_MODE_W4A16, kDLCPU);
  }
  std::string why_not(const nibble_layer_desc& d) const override {
    if (d.op != NIBBLE_OP_LINEAR) return "host_linear computes quantized linear layers only";
    return why_not_quantized(d);
  }
  std::unique_ptr<sdk::Prepared> prepare(const nibble_layer_desc& d,
                                         const nibble_weight_input& in) const override {
    return portable::prepare_linear<DequantizedLayout, Serial>(d, in);
  }
};

struct MockDevice : sdk::Backend {
  static constexpr const char* name = "mockdev";
  static constexpr const char* version = "1.0.0";
  static constexpr const char* vendor = "nibble tests";
  static constexpr const char* description = "a device backend whose device is host memory";
  MockDevice() : memory(int(sdk::env_integer("NIBBLE_MOCKDEV_DEVICES", 0, 16).value_or(2))) {}
  sdk::Probe probe() override {
    const int n = memory.device_count();
    static std::once_flag runtime_once;
    if (threads_mode("runtime")) std::call_once(runtime_once, start_sleeper);
    if (n == 0)
      return {false, NIBBLE_PROBE_DEVICE_ABSENT, "no mock device (NIBBLE_MOCKDEV_DEVICES=0)"};
    return {true, 0, std::to_string(n) + " mock ext_dev devices"};
  }
  std::vector<std::unique_ptr<sdk::Kernel>> make_kernels() override {
    std::vector<std::unique_ptr<sdk::Kernel>> k;
    k.push_back(std::make_unique<DeviceLinear>(memory));
    k.push_back(std::make_unique<DeviceDense>(memory));
    k.push_back(std::make_unique<DeviceMoe>(memory));
    k.push_back(std::make_unique<HostLinear>());
    return k;
  }
  sdk::DeviceMemory* device_memory() override { return &memory; }
  MockMemory memory;
};

}  // namespace

NIBBLE_PLUGIN(MockDevice)
