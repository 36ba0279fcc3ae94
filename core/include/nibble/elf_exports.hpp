// Reading an ELF file's exported dynamic symbols without loading it.
#pragma once

#include <optional>
#include <string>
#include <vector>

namespace nibble {

/// The defined, default-visibility global symbols of an ELF64 file's .dynsym, or nullopt when
/// the file is not a well-formed ELF64 object.
std::optional<std::vector<std::string>> elf_dynamic_exports(const std::string& path);

}  // namespace nibble
