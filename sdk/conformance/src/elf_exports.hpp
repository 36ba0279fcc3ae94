// (A copy of core/src/registry/elf_exports.*: the kit reads the file the same way the loader
// does, without depending on libnibble's private headers.)
// Reading an ELF file's exported dynamic symbols without loading it.
#pragma once

#include <optional>
#include <string>
#include <vector>

namespace nibble::conformance {

/// The defined, default-visibility global symbols of an ELF64 file's .dynsym, or nullopt when
/// the file is not a well-formed ELF64 object.
std::optional<std::vector<std::string>> elf_dynamic_exports(const std::string& path);

}  // namespace nibble::conformance
