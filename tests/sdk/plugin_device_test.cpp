// The plugin side of devices (ABI 1.3), driven through the C tables the glue makes: a kernel's
// device type and the backend's device memory reach a 1.3 host and stay hidden from older ones,
// layers on another device are refused with a reason, forward's tensors must be on the kernel's
// device, and the stream reaches the kernel. Device memory's events reach the backend through the
// C table and the host's Device, and a table with some of them only is refused with a reason.
#include <nibble/sdk/host/device.hpp>
#include <nibble/sdk/plugin.hpp>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdlib>
#include <set>

using ::testing::HasSubstr;

namespace {

namespace sdk = nibble::sdk;

// What the last forward saw.
struct Seen {
  void* stream = nullptr;
  DLDevice device{kDLCPU, 0};
  int calls = 0;
};
Seen seen;

class RecordingPrepared : public sdk::Prepared {
 public:
  size_t bytes() const override { return 0; }
  void forward(const sdk::ForwardArgs& a, const sdk::Exec& e) const override {
    seen.stream = e.stream;
    seen.device = a.device;
    ++seen.calls;
  }
};

class RecordingKernel : public sdk::Kernel {
 public:
  RecordingKernel(const char* name, int32_t device_type) : name_(name), type_(device_type) {}
  sdk::KernelInfo info() const override {
    sdk::KernelInfo k;
    k.name = name_;
    k.op = NIBBLE_OP_DENSE;
    k.mode = NIBBLE_MODE_FLOAT;
    k.bound_f32 = k.bound_f16 = k.bound_bf16 = 1e-2;
    k.device_type = type_;
    return k;
  }
  std::string why_not(const nibble_layer_desc&) const override { return ""; }
  std::unique_ptr<sdk::Prepared> prepare(const nibble_layer_desc&,
                                         const nibble_weight_input&) const override {
    return std::make_unique<RecordingPrepared>();
  }

 private:
  const char* name_;
  int32_t type_;
};

// Memory from malloc, counted, so the test sees every call arrive.
class CountingMemory : public sdk::DeviceMemory {
 public:
  int32_t device_type() const override { return kDLExtDev; }
  int device_count() override { return 2; }
  void* alloc(int device_id, size_t bytes) override {
    if (device_id != 0) throw sdk::PluginError(NIBBLE_INVALID_ARGUMENT, "no such device");
    void* p = std::malloc(bytes);
    live.insert(p);
    return p;
  }
  void free(int, void* p) noexcept override {
    live.erase(p);
    std::free(p);
  }
  void copy(int, void* dst, const void* src, size_t bytes, sdk::CopyDirection, void*) override {
    std::memcpy(dst, src, bytes);
  }
  void synchronize(int, void*) override {}
  std::set<void*> live;
};

struct DeviceBackend : sdk::Backend {
  static constexpr const char* name = "device_test";
  static constexpr const char* version = "1.0.0";
  static constexpr const char* vendor = "test";
  static constexpr const char* description = "a CPU and a device kernel";
  std::vector<std::unique_ptr<sdk::Kernel>> make_kernels() override {
    std::vector<std::unique_ptr<sdk::Kernel>> k;
    k.push_back(std::make_unique<RecordingKernel>("on_cpu", kDLCPU));
    k.push_back(std::make_unique<RecordingKernel>("on_device", kDLExtDev));
    return k;
  }
  sdk::DeviceMemory* device_memory() override { return &memory; }
  CountingMemory memory;
};

// CountingMemory with events whose clock the test sets: an event takes `clock` when recorded.
class TimedMemory : public CountingMemory {
 public:
  struct Event {
    double at = 0;
    bool recorded = false;
  };
  bool has_events() const override { return true; }
  void* event_create(int) override {
    ++live_events;
    return new Event;
  }
  void event_destroy(int, void* e) noexcept override {
    --live_events;
    delete static_cast<Event*>(e);
  }
  void event_record(int, void* e, void* stream) override {
    static_cast<Event*>(e)->at = clock;
    static_cast<Event*>(e)->recorded = true;
    recorded_on = stream;
  }
  double event_elapsed(int, void* start, void* end) override {
    const Event &a = *static_cast<Event*>(start), &b = *static_cast<Event*>(end);
    if (!a.recorded || !b.recorded)
      throw sdk::PluginError(NIBBLE_INVALID_ARGUMENT, "an event was never recorded");
    return b.at - a.at;
  }
  double clock = 0;
  int live_events = 0;
  void* recorded_on = nullptr;
};

struct TimedBackend : DeviceBackend {
  sdk::DeviceMemory* device_memory() override { return &timed; }
  TimedMemory timed;
};

struct NoMemoryBackend : DeviceBackend {
  sdk::DeviceMemory* device_memory() override { return nullptr; }
};

nibble_host host_of_minor(int minor) {
  nibble_host h{};
  h.struct_size = sizeof h;
  h.abi_major = NIBBLE_ABI_MAJOR;
  h.abi_minor = uint16_t(minor);
  h.host_version = "test";
  return h;
}

// One load of B entered by a host of `minor`; ended with shutdown2 when the test is done.
template <class B>
struct Entered {
  explicit Entered(int minor) : host(host_of_minor(minor)) {
    plugin.struct_size = sizeof plugin;
    error.struct_size = sizeof error;
    status = sdk::detail::entry<B>(&host, &plugin, &error);
  }
  ~Entered() {
    if (status == NIBBLE_OK) plugin.shutdown2(plugin.plugin_context);
  }
  const nibble_kernel* kernel(const std::string& name) const {
    for (uint32_t i = 0; i < plugin.kernel_count; ++i)
      if (name == plugin.kernels[i]->name) return plugin.kernels[i];
    return nullptr;
  }
  nibble_host host;
  nibble_plugin plugin{};
  nibble_error error{};
  nibble_status status = NIBBLE_INTERNAL;
};

nibble_layer_desc dense_on(DLDevice device) {
  nibble_layer_desc d{};
  d.struct_size = sizeof d;
  d.op = NIBBLE_OP_DENSE;
  d.name = "layer";
  d.K = 4;
  d.N = 3;
  d.group_size = -1;
  d.weight_dtype = {kDLFloat, 32, 1};
  d.act_dtypes = NIBBLE_DTYPE_F32;
  d.device_type = device.device_type;
  d.device_id = device.device_id;
  return d;
}

std::string refusal(const nibble_kernel* k, const nibble_layer_desc& d) {
  nibble_error reason{};
  reason.struct_size = sizeof reason;
  return k->can_implement(k, &d, &reason) ? std::string() : std::string(reason.message);
}

TEST(PluginDevice, AHostOf13SeesDeviceKernelsAndTheirMemory) {
  Entered<DeviceBackend> p(3);
  ASSERT_EQ(p.status, NIBBLE_OK) << p.error.message;
  ASSERT_EQ(p.plugin.kernel_count, 2u);
  EXPECT_EQ(p.kernel("on_cpu")->device_type, kDLCPU);
  EXPECT_EQ(p.kernel("on_device")->device_type, kDLExtDev);
  ASSERT_NE(p.plugin.device_memory, nullptr);
  EXPECT_EQ(p.plugin.device_memory->device_type, kDLExtDev);
}

TEST(PluginDevice, AnOlderHostSeesOnlyTheCpuKernels) {
  Entered<DeviceBackend> p(2);
  ASSERT_EQ(p.status, NIBBLE_OK) << p.error.message;
  ASSERT_EQ(p.plugin.kernel_count, 1u);
  EXPECT_STREQ(p.plugin.kernels[0]->name, "on_cpu");
  EXPECT_EQ(p.plugin.device_memory, nullptr);
}

TEST(PluginDevice, ADeviceKernelWithoutDeviceMemoryFailsTheEntry) {
  Entered<NoMemoryBackend> p(3);
  EXPECT_EQ(p.status, NIBBLE_INTERNAL);
  EXPECT_THAT(p.error.message, HasSubstr("on_device runs on ext_dev"));
  EXPECT_THAT(p.error.message, HasSubstr("no device memory"));
}

TEST(PluginDevice, ALayerOnAnotherDeviceIsRefusedWithAReason) {
  Entered<DeviceBackend> p(3);
  ASSERT_EQ(p.status, NIBBLE_OK);
  const nibble_layer_desc on_cpu = dense_on({kDLCPU, 0});
  const nibble_layer_desc on_device = dense_on({kDLExtDev, 1});
  EXPECT_EQ(refusal(p.kernel("on_cpu"), on_cpu), "");
  EXPECT_EQ(refusal(p.kernel("on_device"), on_device), "");
  EXPECT_EQ(refusal(p.kernel("on_device"), on_cpu),
            "on_device runs on ext_dev, the layer is on cpu");
  EXPECT_EQ(refusal(p.kernel("on_cpu"), on_device),
            "on_cpu runs on cpu, the layer is on ext_dev:1");
  // A descriptor of a host before 1.3 ends before the device fields: the layer is on the CPU.
  nibble_layer_desc old = on_device;
  old.struct_size = offsetof(nibble_layer_desc, device_type);
  EXPECT_EQ(refusal(p.kernel("on_cpu"), old), "");
  EXPECT_THAT(refusal(p.kernel("on_device"), old), HasSubstr("the layer is on cpu"));
}

// Prepare with kernel `k` for `d`, then forward x/y on `device` with `stream`; "" or the error.
std::string forward_on(const nibble_kernel* k, const nibble_layer_desc& d, DLDevice device,
                       void* stream, uint32_t exec_size = sizeof(nibble_exec)) {
  float w[12] = {}, xb[8] = {}, yb[6] = {};
  nibble_dense_weight dw{sizeof dw, 4, 3, w, {kDLFloat, 32, 1}, nullptr, {}};
  nibble_weight_input in{sizeof in, nullptr, &dw, nullptr};
  nibble_prepared* prepared = nullptr;
  nibble_error err{};
  err.struct_size = sizeof err;
  if (k->prepare(k, &d, &in, &prepared, &err) != NIBBLE_OK) return err.message;
  int64_t xs[2] = {2, 4}, ys[2] = {2, 3};
  DLTensor x{xb, device, 2, {kDLFloat, 32, 1}, xs, nullptr, 0};
  DLTensor y{yb, device, 2, {kDLFloat, 32, 1}, ys, nullptr, 0};
  nibble_forward_args a{sizeof a, &x, &y, nullptr, nullptr};
  nibble_exec e{};
  e.struct_size = exec_size;
  e.num_threads = 1;
  e.stream = stream;
  const nibble_status s = k->forward(k, prepared, &a, &e, &err);
  k->release(k, prepared);
  return s == NIBBLE_OK ? std::string() : std::string(err.message);
}

TEST(PluginDevice, ForwardTakesTensorsOnlyOnTheKernelsDevice) {
  Entered<DeviceBackend> p(3);
  ASSERT_EQ(p.status, NIBBLE_OK);
  const nibble_layer_desc on_cpu = dense_on({kDLCPU, 0});
  const nibble_layer_desc on_device = dense_on({kDLExtDev, 1});
  EXPECT_EQ(forward_on(p.kernel("on_device"), on_device, {kDLCPU, 0}, nullptr),
            "x: the tensor is on cpu, the kernel runs on ext_dev:1");
  EXPECT_EQ(forward_on(p.kernel("on_device"), on_device, {kDLExtDev, 0}, nullptr),
            "x: the tensor is on ext_dev:0, the kernel runs on ext_dev:1");
  EXPECT_EQ(forward_on(p.kernel("on_cpu"), on_cpu, {kDLExtDev, 1}, nullptr),
            "x: the tensor is on ext_dev:1, the kernel runs on cpu (host memory: cpu, cuda_host "
            "or rocm_host)");
  EXPECT_EQ(forward_on(p.kernel("on_cpu"), on_cpu, {kDLCUDAHost, 0}, nullptr), "");
}

TEST(PluginDevice, TheStreamAndTheDeviceReachTheKernel) {
  Entered<DeviceBackend> p(3);
  ASSERT_EQ(p.status, NIBBLE_OK);
  int stream_object = 0;
  seen = Seen{};
  ASSERT_EQ(
      forward_on(p.kernel("on_device"), dense_on({kDLExtDev, 1}), {kDLExtDev, 1}, &stream_object),
      "");
  EXPECT_EQ(seen.calls, 1);
  EXPECT_EQ(seen.stream, &stream_object);
  EXPECT_EQ(seen.device.device_type, kDLExtDev);
  EXPECT_EQ(seen.device.device_id, 1);
  // An exec of a host before 1.3 has no stream: the kernel sees the default one.
  ASSERT_EQ(forward_on(p.kernel("on_cpu"), dense_on({kDLCPU, 0}), {kDLCPU, 0}, &stream_object,
                       uint32_t(offsetof(nibble_exec, stream))),
            "");
  EXPECT_EQ(seen.stream, nullptr);
  EXPECT_EQ(seen.device.device_type, kDLCPU);
}

TEST(PluginDevice, DeviceMemoryCallsReachTheBackendAndErrorsBecomeStatuses) {
  Entered<DeviceBackend> p(3);
  ASSERT_EQ(p.status, NIBBLE_OK);
  const nibble_device_memory& m = *p.plugin.device_memory;
  void* ctx = p.plugin.plugin_context;
  EXPECT_EQ(m.device_count(ctx), 2);
  nibble_error err{};
  err.struct_size = sizeof err;
  void* ptr = nullptr;
  ASSERT_EQ(m.alloc(ctx, 0, 16, &ptr, &err), NIBBLE_OK);
  ASSERT_NE(ptr, nullptr);
  const char text[16] = "device bytes";
  char back[16] = {};
  EXPECT_EQ(m.copy(ctx, 0, ptr, text, sizeof text, NIBBLE_COPY_HOST_TO_DEVICE, nullptr, &err),
            NIBBLE_OK);
  EXPECT_EQ(m.copy(ctx, 0, back, ptr, sizeof back, NIBBLE_COPY_DEVICE_TO_HOST, nullptr, &err),
            NIBBLE_OK);
  EXPECT_EQ(m.synchronize(ctx, 0, nullptr, &err), NIBBLE_OK);
  EXPECT_STREQ(back, "device bytes");
  EXPECT_EQ(m.copy(ctx, 0, back, ptr, sizeof back, 7, nullptr, &err), NIBBLE_INVALID_ARGUMENT);
  EXPECT_THAT(err.message, HasSubstr("unknown direction 7"));
  m.free(ctx, 0, ptr);
  void* none = &err;
  EXPECT_EQ(m.alloc(ctx, 1, 16, &none, &err), NIBBLE_INVALID_ARGUMENT);
  EXPECT_EQ(none, nullptr);
  EXPECT_STREQ(err.message, "no such device");
  EXPECT_EQ(m.alloc(ctx, 0, 0, &none, &err), NIBBLE_INVALID_ARGUMENT);
  auto* load = static_cast<sdk::detail::Load<DeviceBackend>*>(ctx);
  EXPECT_TRUE(load->backend->memory.live.empty());
}

TEST(PluginDevice, EventsReachTheBackendAndTimeQueuedWork) {
  Entered<TimedBackend> p(3);
  ASSERT_EQ(p.status, NIBBLE_OK);
  const nibble_device_memory& m = *p.plugin.device_memory;
  void* ctx = p.plugin.plugin_context;
  ASSERT_EQ(sdk::host::Device::events_in(m), 4);
  TimedMemory& memory = static_cast<sdk::detail::Load<TimedBackend>*>(ctx)->backend->timed;
  nibble_error err{};
  err.struct_size = sizeof err;
  void *a = nullptr, *b = nullptr;
  ASSERT_EQ(m.event_create(ctx, 0, &a, &err), NIBBLE_OK);
  ASSERT_EQ(m.event_create(ctx, 0, &b, &err), NIBBLE_OK);
  double seconds = -1;
  EXPECT_EQ(m.event_elapsed(ctx, 0, a, b, &seconds, &err), NIBBLE_INVALID_ARGUMENT);
  EXPECT_STREQ(err.message, "an event was never recorded");
  EXPECT_EQ(m.event_elapsed(ctx, 0, a, b, nullptr, &err), NIBBLE_INVALID_ARGUMENT);
  EXPECT_EQ(m.event_create(ctx, 0, nullptr, &err), NIBBLE_INVALID_ARGUMENT);
  int stream = 0;
  memory.clock = 1.0;
  EXPECT_EQ(m.event_record(ctx, 0, a, &stream, &err), NIBBLE_OK);
  EXPECT_EQ(memory.recorded_on, &stream);
  memory.clock = 1.25;
  EXPECT_EQ(m.event_record(ctx, 0, b, nullptr, &err), NIBBLE_OK);
  EXPECT_EQ(m.event_elapsed(ctx, 0, a, b, &seconds, &err), NIBBLE_OK);
  EXPECT_DOUBLE_EQ(seconds, 0.25);
  m.event_destroy(ctx, 0, a);
  m.event_destroy(ctx, 0, b);
  EXPECT_EQ(memory.live_events, 0);

  // The same through the host's Device, whose events go when their values do.
  const sdk::host::Device device = sdk::host::device_of(p.plugin, 0);
  ASSERT_TRUE(device.has_events());
  {
    const sdk::host::DeviceEvent start = device.event(), end = device.event();
    EXPECT_EQ(memory.live_events, 2);
    EXPECT_THROW(device.elapsed_seconds(start, end), sdk::host::CallError);
    memory.clock = 3.0;
    start.record(nullptr);
    memory.clock = 3.5;
    end.record(nullptr);
    EXPECT_DOUBLE_EQ(device.elapsed_seconds(start, end), 0.5);
  }
  EXPECT_EQ(memory.live_events, 0);
}

TEST(PluginDevice, DeviceMemoryWithoutEventsOffersNone) {
  Entered<DeviceBackend> p(3);
  ASSERT_EQ(p.status, NIBBLE_OK);
  const nibble_device_memory& m = *p.plugin.device_memory;
  EXPECT_EQ(m.event_create, nullptr);
  EXPECT_EQ(m.event_elapsed, nullptr);
  EXPECT_EQ(sdk::host::device_memory_problem(p.plugin), "");
  const sdk::host::Device device = sdk::host::device_of(p.plugin, 0);
  ASSERT_TRUE(device);
  EXPECT_FALSE(device.has_events());
  try {
    (void)device.event();
    ADD_FAILURE() << "an event from a device without events";
  } catch (const sdk::host::CallError& e) {
    EXPECT_EQ(e.status(), NIBBLE_UNSUPPORTED);
    EXPECT_THAT(e.what(), HasSubstr("this device has no events"));
  }
  // An event wrapped by hand around such a device is refused, and dropped without a call.
  int handle = 0;
  sdk::host::DeviceEvent by_hand(device, &handle);
  EXPECT_THROW(by_hand.record(nullptr), sdk::host::CallError);
  by_hand.reset();
  EXPECT_EQ(by_hand.get(), nullptr);
}

// A table that ends at synchronize (a plugin built before the events) has none and is usable; one
// with some of the four calls is refused, with the count, by the host's check of the table.
TEST(PluginDevice, EventCallsAreAllOrNone) {
  Entered<TimedBackend> p(3);
  ASSERT_EQ(p.status, NIBBLE_OK);
  nibble_device_memory table = *p.plugin.device_memory;
  nibble_plugin plugin = p.plugin;
  plugin.device_memory = &table;
  table.struct_size = uint32_t(offsetof(nibble_device_memory, event_create));
  EXPECT_EQ(sdk::host::device_memory_problem(plugin), "");
  EXPECT_FALSE(sdk::host::device_of(plugin, 0).has_events());
  table.struct_size = sizeof table;
  EXPECT_TRUE(sdk::host::device_of(plugin, 0).has_events());
  table.event_record = nullptr;
  EXPECT_THAT(sdk::host::device_memory_problem(plugin), HasSubstr("has 3 of the four event calls"));
  EXPECT_FALSE(sdk::host::device_of(plugin, 0)) << "a refused table gives no device";
}

}  // namespace
