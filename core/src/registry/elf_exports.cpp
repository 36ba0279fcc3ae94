// The plugin preflight: which symbols an ELF shared object exports, read from the file without
// running any of it. .dynsym is what the dynamic loader resolves and survives stripping; .symtab
// is read too. A crafted file may claim any counts, offsets and sizes, so every read is checked
// against the bytes really there, symbols are read in small batches, and the only buffer sized by
// the file (a string table) is bounded by both the real size and a fixed limit.
#include "elf_exports.hpp"

#include <elf.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cstring>
#include <functional>

#include "../file_kind.hpp"

namespace nibble {

namespace {

#if defined(__x86_64__)
constexpr int kNativeMachine = EM_X86_64;
#elif defined(__aarch64__)
constexpr int kNativeMachine = EM_AARCH64;
#else
constexpr int kNativeMachine = -1;  // not checked
#endif

// Real plugin string tables are kilobytes (.dynstr) to a few megabytes (.strtab with symbols).
constexpr uint64_t kMaxStringTable = uint64_t(64) << 20;
// Longer names are cut when listed; the entry symbol is far shorter.
constexpr size_t kMaxListedName = 512;

// Reads `n` bytes at `offset` into `out`; false when they are not all there.
using ReadAt = std::function<bool(uint64_t offset, size_t n, void* out)>;

bool within(uint64_t offset, uint64_t length, uint64_t size) {
  return offset <= size && length <= size - offset;
}

struct Reader {
  uint64_t size;
  ReadAt read;
};

// One symbol table (.dynsym or .symtab): looks for `symbol`, and lists names when `names` is set.
std::string scan_table(const Reader& r, const Elf64_Ehdr& eh, const Elf64_Shdr& sh,
                       const std::string& symbol, ElfExports& out, bool list) {
  const char* which = sh.sh_type == SHT_DYNSYM ? ".dynsym" : ".symtab";
  if (sh.sh_entsize != sizeof(Elf64_Sym))
    return std::string(which) + " has entries of " + std::to_string(sh.sh_entsize) +
           " bytes; ELF64 symbols are " + std::to_string(sizeof(Elf64_Sym));
  if (!within(sh.sh_offset, sh.sh_size, r.size))
    return std::string(which) + " claims " + std::to_string(sh.sh_size) + " bytes at offset " +
           std::to_string(sh.sh_offset) + ", past the end of the " + std::to_string(r.size) +
           "-byte file";
  if (sh.sh_link == 0 || sh.sh_link >= eh.e_shnum)
    return std::string(which) + " links to string table section " + std::to_string(sh.sh_link) +
           ", which does not exist";
  Elf64_Shdr st;
  if (!r.read(eh.e_shoff + uint64_t(sh.sh_link) * sizeof(Elf64_Shdr), sizeof st, &st))
    return "the section headers cannot be read";
  if (st.sh_type != SHT_STRTAB)
    return std::string(which) + "'s string table section is not of type STRTAB";
  if (!within(st.sh_offset, st.sh_size, r.size))
    return std::string(which) + "'s string table claims " + std::to_string(st.sh_size) +
           " bytes at offset " + std::to_string(st.sh_offset) + ", past the end of the " +
           std::to_string(r.size) + "-byte file";
  if (st.sh_size > kMaxStringTable)
    return std::string(which) + "'s string table of " + std::to_string(st.sh_size) +
           " bytes is larger than the " + std::to_string(kMaxStringTable) + "-byte limit";
  std::string strings(size_t(st.sh_size), '\0');
  if (!strings.empty() && !r.read(st.sh_offset, strings.size(), strings.data()))
    return std::string(which) + "'s string table cannot be read";

  const uint64_t count = sh.sh_size / sizeof(Elf64_Sym);
  Elf64_Sym batch[256];
  for (uint64_t first = 0; first < count; first += std::size(batch)) {
    const size_t n = size_t(std::min<uint64_t>(std::size(batch), count - first));
    if (!r.read(sh.sh_offset + first * sizeof(Elf64_Sym), n * sizeof(Elf64_Sym), batch))
      return std::string(which) + " cannot be read";
    for (size_t i = 0; i < n; ++i) {
      const Elf64_Sym& sym = batch[i];
      const int bind = ELF64_ST_BIND(sym.st_info);
      if (sym.st_shndx == SHN_UNDEF || (bind != STB_GLOBAL && bind != STB_WEAK) ||
          ELF64_ST_VISIBILITY(sym.st_other) != STV_DEFAULT || sym.st_name >= strings.size())
        continue;
      const char* base = strings.data() + sym.st_name;
      const size_t len = strnlen(base, strings.size() - sym.st_name);
      const std::string_view name(base, len);
      if (name == symbol) out.has_symbol = true;
      if (!list) continue;
      if (out.dynamic_names.size() < ElfExports::kMaxListed)
        out.dynamic_names.emplace_back(name.substr(0, kMaxListedName));
      else
        out.truncated = true;
    }
  }
  return "";
}

// The program headers: a loadable segment and a dynamic section, each inside the file.
std::string check_segments(const Reader& r, const Elf64_Ehdr& eh) {
  if (eh.e_phnum == 0) return "an ELF file without program headers (nothing a loader could map)";
  if (eh.e_phentsize != sizeof(Elf64_Phdr))
    return "program headers of " + std::to_string(eh.e_phentsize) + " bytes; ELF64 uses " +
           std::to_string(sizeof(Elf64_Phdr));
  if (!within(eh.e_phoff, uint64_t(eh.e_phnum) * sizeof(Elf64_Phdr), r.size))
    return std::to_string(eh.e_phnum) + " program headers at offset " + std::to_string(eh.e_phoff) +
           " run past the end of the " + std::to_string(r.size) + "-byte file";
  bool load = false, dynamic = false;
  for (uint16_t i = 0; i < eh.e_phnum; ++i) {
    Elf64_Phdr ph;
    if (!r.read(eh.e_phoff + uint64_t(i) * sizeof(Elf64_Phdr), sizeof ph, &ph))
      return "the program headers cannot be read";
    if (ph.p_type != PT_LOAD && ph.p_type != PT_DYNAMIC) continue;
    if (!within(ph.p_offset, ph.p_filesz, r.size))
      return "segment " + std::to_string(i) + " claims " + std::to_string(ph.p_filesz) +
             " bytes at offset " + std::to_string(ph.p_offset) + ", past the end of the " +
             std::to_string(r.size) + "-byte file";
    if (ph.p_type == PT_LOAD && ph.p_filesz > ph.p_memsz)
      return "segment " + std::to_string(i) + " holds more bytes in the file than in memory";
    (ph.p_type == PT_LOAD ? load : dynamic) = true;
  }
  if (!load) return "an ELF shared object without a loadable segment";
  if (!dynamic) return "an ELF shared object without a dynamic section";
  return "";
}

ElfExports read_exports(const Reader& r, const std::string& symbol) {
  ElfExports out;
  auto fail = [&](std::string why) {
    out = ElfExports{};
    out.problem = std::move(why);
    return out;
  };
  Elf64_Ehdr eh;
  if (r.size < sizeof eh || !r.read(0, sizeof eh, &eh))
    return fail("not an ELF file: " + std::to_string(r.size) +
                " bytes, shorter than an ELF64 header");
  if (std::memcmp(eh.e_ident, ELFMAG, SELFMAG) != 0) return fail("not an ELF file");
  if (eh.e_ident[EI_CLASS] != ELFCLASS64) return fail("not a 64-bit ELF file");
  const int native_data = std::endian::native == std::endian::little ? ELFDATA2LSB : ELFDATA2MSB;
  if (eh.e_ident[EI_DATA] != native_data) return fail("an ELF file of the other byte order");
  if (eh.e_type != ET_DYN) return fail("an ELF file that is not a shared object");
  if (kNativeMachine >= 0 && eh.e_machine != kNativeMachine)
    return fail("an ELF shared object for another machine (e_machine " +
                std::to_string(eh.e_machine) + ")");
  if (eh.e_shentsize != sizeof(Elf64_Shdr))
    return fail("section headers of " + std::to_string(eh.e_shentsize) + " bytes; ELF64 uses " +
                std::to_string(sizeof(Elf64_Shdr)));
  if (eh.e_shnum == 0) return fail("an ELF file without section headers");
  if (!within(eh.e_shoff, uint64_t(eh.e_shnum) * sizeof(Elf64_Shdr), r.size))
    return fail(std::to_string(eh.e_shnum) + " section headers at offset " +
                std::to_string(eh.e_shoff) + " run past the end of the " + std::to_string(r.size) +
                "-byte file");
  bool any_table = false;
  for (uint16_t i = 0; i < eh.e_shnum; ++i) {
    Elf64_Shdr sh;
    if (!r.read(eh.e_shoff + uint64_t(i) * sizeof(Elf64_Shdr), sizeof sh, &sh))
      return fail("the section headers cannot be read");
    if (sh.sh_type != SHT_DYNSYM && sh.sh_type != SHT_SYMTAB) continue;
    any_table = true;
    std::string why = scan_table(r, eh, sh, symbol, out, sh.sh_type == SHT_DYNSYM);
    if (!why.empty()) return fail(why);
  }
  if (!any_table) return fail("an ELF shared object without symbol tables");
  // Checked after the symbols so a fuzzer explores those; the dynamic loader maps segments, and
  // one that lies past the end of the file is refused here instead of reaching it.
  std::string why = check_segments(r, eh);
  if (!why.empty()) return fail(why);
  return out;
}

}  // namespace

ElfExports read_elf_exports(std::span<const std::byte> bytes, const std::string& symbol) {
  Reader r{bytes.size(), [&](uint64_t offset, size_t n, void* dst) {
             if (!within(offset, n, bytes.size())) return false;
             std::memcpy(dst, bytes.data() + offset, n);
             return true;
           }};
  return read_exports(r, symbol);
}

ElfExports read_elf_exports(const std::string& path, const std::string& symbol) {
  ElfExports out;
  // O_NONBLOCK: opening a FIFO must not wait for a writer; it is refused below anyway.
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOCTTY | O_NONBLOCK);
  if (fd < 0) {
    out.problem = std::string("cannot be opened: ") + std::strerror(errno);
    return out;
  }
  struct stat st;
  if (::fstat(fd, &st) != 0) {
    out.problem = std::string("cannot be examined: ") + std::strerror(errno);
    ::close(fd);
    return out;
  }
  if (!S_ISREG(st.st_mode)) {
    out.problem = std::string("is ") + detail::file_kind(st.st_mode) + ", not a regular file";
    ::close(fd);
    return out;
  }
  Reader r{uint64_t(st.st_size), [fd](uint64_t offset, size_t n, void* dst) {
             auto* p = static_cast<char*>(dst);
             while (n > 0) {
               const ssize_t got = ::pread(fd, p, n, off_t(offset));
               if (got < 0 && errno == EINTR) continue;
               if (got <= 0) return false;  // an error, or the file shrank meanwhile
               p += got, offset += uint64_t(got), n -= size_t(got);
             }
             return true;
           }};
  out = read_exports(r, symbol);
  ::close(fd);
  return out;
}

std::optional<std::vector<std::string>> elf_dynamic_exports(const std::string& path) {
  ElfExports e = read_elf_exports(path, "");
  if (!e.problem.empty()) return std::nullopt;
  return std::move(e.dynamic_names);
}

}  // namespace nibble
