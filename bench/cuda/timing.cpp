// Device setup and event timing for the cuda bench.
#include "timing.hpp"

#include <chrono>

namespace nibble::cuda::bench {

Device open_device(bool legacy_stream) {
  Device d;
  check_cuda(cudaSetDevice(0), "cudaSetDevice(0)");
  cudaDeviceProp p{};
  check_cuda(cudaGetDeviceProperties(&p, 0), "cudaGetDeviceProperties");
  d.name = p.name;
  d.sms = p.multiProcessorCount;
  d.l2_bytes = size_t(p.l2CacheSize);
  int clock_khz = 0, bus_bits = 0;
  if (cudaDeviceGetAttribute(&clock_khz, cudaDevAttrMemoryClockRate, 0) == cudaSuccess &&
      cudaDeviceGetAttribute(&bus_bits, cudaDevAttrGlobalMemoryBusWidth, 0) == cudaSuccess)
    d.nominal_tbs = 2.0 * double(clock_khz) * 1e3 * double(bus_bits) / 8.0 / 1e12;
  if (!legacy_stream)
    check_cuda(cudaStreamCreateWithFlags(&d.stream, cudaStreamNonBlocking), "cudaStreamCreate");
  const size_t bytes = size_t(1) << 30;
  DeviceArray a(bytes), b(bytes);
  check_cuda(cudaMemsetAsync(a.get(), 1, bytes, d.stream), "cudaMemset");
  const double us =
      time_calls(10, d.stream, [&](int) {
        check_cuda(cudaMemcpyAsync(b.get(), a.get(), bytes, cudaMemcpyDeviceToDevice, d.stream),
                   "cudaMemcpyAsync");
      }).device_us;
  d.copy_tbs = 2.0 * double(bytes) / (us * 1e-6) / 1e12;
  return d;
}

Timing time_calls(int iters, cudaStream_t stream, const std::function<void(int)>& call) {
  for (int i = 0; i < 10; ++i) call(i);
  cudaEvent_t start, stop;
  check_cuda(cudaEventCreate(&start), "cudaEventCreate");
  check_cuda(cudaEventCreate(&stop), "cudaEventCreate");
  check_cuda(cudaEventRecord(start, stream), "cudaEventRecord");
  const auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < iters; ++i) call(i);
  const auto t1 = std::chrono::steady_clock::now();
  check_cuda(cudaEventRecord(stop, stream), "cudaEventRecord");
  check_cuda(cudaEventSynchronize(stop), "cudaEventSynchronize");
  float ms = 0;
  check_cuda(cudaEventElapsedTime(&ms, start, stop), "cudaEventElapsedTime");
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
  Timing t;
  t.device_us = double(ms) * 1000.0 / iters;
  t.host_us = std::chrono::duration<double, std::micro>(t1 - t0).count() / iters;
  return t;
}

}  // namespace nibble::cuda::bench
