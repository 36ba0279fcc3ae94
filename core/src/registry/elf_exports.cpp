// Lists the dynamic symbols an ELF shared object exports, by reading the file (no code of it
// runs). Boost 1.74's library_info reads only .symtab, which stripped libraries lack; .dynsym is
// what the dynamic loader resolves, so the preflight consults both.
#include <nibble/elf_exports.hpp>

#include <elf.h>

#include <cstring>
#include <fstream>
#include <iterator>

namespace nibble {

namespace {

template <class T>
bool read_at(const std::vector<char>& file, uint64_t offset, T* out) {
  if (offset > file.size() || file.size() - offset < sizeof(T)) return false;
  std::memcpy(out, file.data() + offset, sizeof(T));
  return true;
}

}  // namespace

std::optional<std::vector<std::string>> elf_dynamic_exports(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return std::nullopt;
  in.seekg(0, std::ios::end);
  std::streamoff size = in.tellg();
  // Plugins are at most a few hundred MB; refuse absurd sizes instead of reading them.
  if (size < std::streamoff(sizeof(Elf64_Ehdr)) || size > (std::streamoff(1) << 31))
    return std::nullopt;
  in.seekg(0);
  std::vector<char> file(static_cast<size_t>(size));
  if (!in.read(file.data(), size)) return std::nullopt;

  Elf64_Ehdr eh;
  if (!read_at(file, 0, &eh) || std::memcmp(eh.e_ident, ELFMAG, SELFMAG) != 0 ||
      eh.e_ident[EI_CLASS] != ELFCLASS64 || eh.e_shentsize != sizeof(Elf64_Shdr))
    return std::nullopt;
  std::vector<std::string> names;
  for (uint16_t i = 0; i < eh.e_shnum; ++i) {
    Elf64_Shdr sh;
    if (!read_at(file, eh.e_shoff + uint64_t(i) * sizeof(Elf64_Shdr), &sh)) return std::nullopt;
    if (sh.sh_type != SHT_DYNSYM) continue;
    Elf64_Shdr strtab;
    if (sh.sh_link >= eh.e_shnum ||
        !read_at(file, eh.e_shoff + uint64_t(sh.sh_link) * sizeof(Elf64_Shdr), &strtab))
      return std::nullopt;
    if (strtab.sh_offset > file.size() || file.size() - strtab.sh_offset < strtab.sh_size)
      return std::nullopt;
    uint64_t count = sh.sh_size / sizeof(Elf64_Sym);
    for (uint64_t s = 0; s < count; ++s) {
      Elf64_Sym sym;
      if (!read_at(file, sh.sh_offset + s * sizeof(Elf64_Sym), &sym)) return std::nullopt;
      int bind = ELF64_ST_BIND(sym.st_info);
      if (sym.st_shndx == SHN_UNDEF || (bind != STB_GLOBAL && bind != STB_WEAK) ||
          ELF64_ST_VISIBILITY(sym.st_other) != STV_DEFAULT || sym.st_name >= strtab.sh_size)
        continue;
      const char* base = file.data() + strtab.sh_offset + sym.st_name;
      size_t max = strtab.sh_size - sym.st_name;
      names.emplace_back(base, strnlen(base, max));
    }
  }
  return names;
}

}  // namespace nibble
