// Reading an ELF file's exported symbols without loading it: the plugin preflight. The reader
// trusts nothing the file claims (section counts, offsets, sizes): every read is bounded by the
// bytes really there, and nothing it allocates is sized by a number from the file.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

namespace nibble {

/// What the preflight learned about an ELF file.
struct ElfExports {
  /// Why the file is not a native ELF64 shared object with readable symbol tables ("" when it is).
  std::string problem;
  /// Whether the symbol the caller asked about is a defined, default-visibility global in .dynsym
  /// or .symtab.
  bool has_symbol = false;
  /// The defined, default-visibility globals of .dynsym, at most kMaxListed of them.
  std::vector<std::string> dynamic_names;
  /// Whether .dynsym had more names than were listed.
  bool truncated = false;
  /// The most names dynamic_names holds (an ELF claiming millions cannot make it grow further).
  static constexpr size_t kMaxListed = 4096;
};

/// The preflight of the ELF image in `bytes` (already in memory), looking for `symbol`.
ElfExports read_elf_exports(std::span<const std::byte> bytes, const std::string& symbol);

/// The preflight of the regular file `path`, read with bounded preads (never more than its real
/// size, never all at once); a FIFO, device or directory is refused without reading from it.
ElfExports read_elf_exports(const std::string& path, const std::string& symbol);

/// The defined, default-visibility global symbols of an ELF64 file's .dynsym, or nullopt when
/// the file is not a well-formed native ELF64 object.
std::optional<std::vector<std::string>> elf_dynamic_exports(const std::string& path);

}  // namespace nibble
