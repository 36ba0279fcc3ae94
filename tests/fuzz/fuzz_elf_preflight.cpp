// libFuzzer target: the plugin preflight's ELF reader on any byte string. It must never read
// outside the image, never allocate by a size the image claims (the run's -malloc_limit_mb turns
// such an allocation into a finding), and report a problem or symbols, never both.
#include "registry/elf_exports.hpp"

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <span>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::span<const std::byte> bytes(reinterpret_cast<const std::byte*>(data), size);
  nibble::ElfExports e = nibble::read_elf_exports(bytes, "nibble_plugin_entry");
  if (!e.problem.empty() && (e.has_symbol || !e.dynamic_names.empty())) std::abort();
  if (e.dynamic_names.size() > nibble::ElfExports::kMaxListed) std::abort();
  return 0;
}
