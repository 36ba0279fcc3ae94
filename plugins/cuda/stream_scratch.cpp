// The backend's scratch pools, one per device.
#include "stream_scratch.hpp"

#include <cstdint>
#include <mutex>
#include <vector>

namespace nibble::cuda {

namespace {

std::mutex pools_mutex;
std::vector<cudaMemPool_t> pools;  // by device; null until made
// Loads of the plugin not yet shut down: one load's shutdown must not destroy a pool that another
// load's forward is about to allocate from.
int live_loads = 0;

}  // namespace

cudaMemPool_t scratch_pool(int device) {
  std::lock_guard<std::mutex> lock(pools_mutex);
  if (device < 0) throw sdk::PluginError(NIBBLE_INVALID_ARGUMENT, "scratch pool: no device");
  if (pools.size() <= size_t(device)) pools.resize(size_t(device) + 1, nullptr);
  cudaMemPool_t& pool = pools[size_t(device)];
  if (pool) return pool;
  cudaMemPoolProps props{};
  props.allocType = cudaMemAllocationTypePinned;
  props.handleTypes = cudaMemHandleTypeNone;
  props.location.type = cudaMemLocationTypeDevice;
  props.location.id = device;
  cudaMemPool_t made = nullptr;
  check(cudaMemPoolCreate(&made, &props),
        "scratch pool: cudaMemPoolCreate on cuda:" + std::to_string(device));
  uint64_t kept = kScratchKeptBytes;
  const cudaError_t e = cudaMemPoolSetAttribute(made, cudaMemPoolAttrReleaseThreshold, &kept);
  if (e != cudaSuccess) {
    cudaMemPoolDestroy(made);
    check(e, "scratch pool: setting its release threshold");
  }
  pool = made;
  return pool;
}

void retain_scratch_pools() noexcept {
  std::lock_guard<std::mutex> lock(pools_mutex);
  ++live_loads;
}

void release_scratch_pools() noexcept {
  std::lock_guard<std::mutex> lock(pools_mutex);
  if (live_loads > 0 && --live_loads > 0) return;
  for (cudaMemPool_t& pool : pools)
    if (pool) cudaMemPoolDestroy(pool);
  pools.clear();
}

}  // namespace nibble::cuda
