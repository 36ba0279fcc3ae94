// Sharded tensor stores (model.safetensors.index.json), owned tensors and the safetensors writer.
#include <nibble/error.hpp>
#include <nibble/output_file.hpp>
#include <nibble/safetensors.hpp>
#include <nibble/untrusted_text.hpp>

#include <fmt/format.h>

#include <cstring>
#include <fstream>
#include <set>

#include "io/regular_file.hpp"
#include "json/untrusted_json.hpp"
#include "text/name_text.hpp"

namespace nibble {

namespace {

// A shard named by an index must be a plain file name whose real location (symlinks resolved) is
// inside the index's directory: a downloaded index cannot make nibble read files elsewhere.
std::filesystem::path shard_path(const std::filesystem::path& index, const std::string& shard,
                                 const std::string& tensor) {
  namespace fs = std::filesystem;
  const std::string where =
      fmt::format("shard index {}: weight_map[{}] = {}", escape_untrusted(index.string(), 400),
                  detail::name_text(tensor), detail::name_text(shard));
  if (shard.empty() || shard.find('/') != std::string::npos || shard == "." || shard == ".." ||
      shard.find('\0') != std::string::npos) {
    throw Error(where + " is not a plain file name in the checkpoint directory");
  }
  const fs::path dir = index.parent_path().empty() ? fs::path(".") : index.parent_path();
  const fs::path path = dir / shard;
  std::error_code ec;
  const fs::path real_dir = fs::canonical(dir, ec);
  if (ec) throw Error(where + ": cannot resolve the checkpoint directory: " + ec.message());
  const fs::path real = fs::weakly_canonical(path, ec);
  if (ec) throw Error(where + ": cannot resolve " + detail::name_text(path.string()));
  auto inside = [&](const fs::path& root) {
    const fs::path rel = real.lexically_relative(root);
    return !rel.empty() && *rel.begin() != ".." && !rel.is_absolute() && rel != ".";
  };
  // The Hugging Face cache keeps a revision's files in <repo>/snapshots/<rev>/ as links into
  // <repo>/blobs/: that one place outside the folder belongs to the same download.
  const bool hub_snapshot = real_dir.parent_path().filename() == "snapshots";
  if (!inside(real_dir) &&
      !(hub_snapshot && inside(real_dir.parent_path().parent_path() / "blobs"))) {
    throw Error(where + " leads to " + detail::name_text(real.string()) +
                ", outside the checkpoint directory " + detail::name_text(real_dir.string()) +
                "; shards must live beside the index");
  }
  return path;
}

}  // namespace

TensorStore TensorStore::open(const std::filesystem::path& path) {
  TensorStore store;
  store.source_ = escape_untrusted(path.string(), 400);
  std::map<const TensorView*, const SafetensorsFile*> owner;
  auto add_file = [&](std::shared_ptr<const SafetensorsFile> file) {
    for (const auto& t : file->tensors()) {
      auto [it, inserted] = store.index_.emplace(t.name, &t);
      if (!inserted) {
        throw Error(fmt::format("tensor {} appears in both {} and {}", detail::name_text(t.name),
                                it->second->file, t.file));
      }
      owner.emplace(&t, file.get());
    }
    store.files_.push_back(std::move(file));
  };
  if (path.filename().string().ends_with(".index.json")) {
    const std::string label = "shard index " + escape_untrusted(path.string(), 400);
    std::string text = detail::read_regular_file(path, kMaxHeaderBytes, "shard index");
    auto index = detail::parse_json(text, label);
    auto map = index.is_object() ? index.find("weight_map") : index.end();
    if (!index.is_object() || map == index.end() || !map->is_object()) {
      throw Error(label + ": expected an object with a \"weight_map\" object");
    }
    std::map<std::string, std::filesystem::path> shards;
    for (const auto& [name, shard] : map->items()) {
      if (!shard.is_string()) {
        throw Error(fmt::format("{}: weight_map[{}] must be a file name string, found {}", label,
                                detail::name_text(name), shard.type_name()));
      }
      const std::string& s = shard.get_ref<const std::string&>();
      if (!shards.count(s)) shards.emplace(s, shard_path(path, s, name));
    }
    if (shards.empty()) throw Error(label + ": weight_map is empty");
    std::map<std::string, const SafetensorsFile*> by_name;
    for (const auto& [s, p] : shards) {
      add_file(SafetensorsFile::open(p));
      by_name.emplace(s, store.files_.back().get());
    }
    for (const auto& [name, shard] : map->items()) {
      auto it = store.index_.find(name);
      const SafetensorsFile* expected = by_name.at(shard.get<std::string>());
      if (it == store.index_.end()) {
        throw Error(fmt::format("{} maps tensor {} to {}, which does not contain it", label,
                                detail::name_text(name), escape_untrusted(expected->path(), 400)));
      }
      if (owner.at(it->second) != expected) {
        throw Error(fmt::format("{} maps tensor {} to {}, but it is in {}", label,
                                detail::name_text(name), escape_untrusted(expected->path(), 400),
                                it->second->file));
      }
    }
  } else {
    add_file(SafetensorsFile::open(path));
  }
  return store;
}

const TensorView* TensorStore::find(std::string_view name) const {
  auto it = index_.find(name);
  return it == index_.end() ? nullptr : it->second;
}

const TensorView& TensorStore::tensor(std::string_view name) const {
  if (const TensorView* t = find(name)) return *t;
  throw Error(fmt::format("tensor {} is not in {}", detail::name_text(name), source_));
}

std::vector<std::string> TensorStore::names() const {
  std::vector<std::string> out;
  out.reserve(index_.size());
  for (const auto& [name, view] : index_) out.push_back(name);
  return out;
}

TensorView OwnedTensor::view(const std::string& name) const {
  TensorView v;
  v.name = name;
  v.file = "<memory>";
  v.dtype = dtype;
  v.shape = shape;
  v.data = data.data();
  v.nbytes = data.size();
  return v;
}

OwnedTensor OwnedTensor::zeros(DType dtype, std::vector<int64_t> shape) {
  OwnedTensor t;
  t.dtype = dtype;
  size_t n = 1;
  for (int64_t d : shape) n *= size_t(d);
  t.shape = std::move(shape);
  t.data.assign(n * dtype_size(dtype), std::byte{0});
  return t;
}

void OwnedTensor::set_i32(size_t i, int32_t v) { std::memcpy(data.data() + i * 4, &v, 4); }

void write_safetensors(const std::filesystem::path& path, const std::vector<TensorToWrite>& tensors,
                       const std::map<std::string, std::string>& metadata) {
  nlohmann::ordered_json header = nlohmann::ordered_json::object();
  if (!metadata.empty()) header["__metadata__"] = metadata;
  uint64_t offset = 0;
  std::set<std::string> seen;
  for (const auto& t : tensors) {
    if (t.name == "__metadata__" || !seen.insert(t.name).second) {
      throw Error(
          fmt::format("writing {}: tensor name {} is reserved or repeated", path.string(), t.name));
    }
    uint64_t numel = 1;
    for (int64_t d : t.shape) numel *= uint64_t(d);
    if (numel * dtype_size(t.dtype) != t.data.size()) {
      throw Error(
          fmt::format("writing {}: tensor {} has {} bytes but dtype {} x shape [{}] needs {}",
                      path.string(), t.name, t.data.size(), safetensors_dtype_name(t.dtype),
                      fmt::join(t.shape, ", "), numel * dtype_size(t.dtype)));
    }
    header[t.name] = {{"dtype", safetensors_dtype_name(t.dtype)},
                      {"shape", t.shape},
                      {"data_offsets", {offset, offset + t.data.size()}}};
    offset += t.data.size();
  }
  std::string text = header.dump();
  // Pad with spaces so the data section starts 8-byte aligned (allowed by the format).
  text.append((8 - text.size() % 8) % 8, ' ');
  OutputFile out(path);
  uint64_t len = text.size();
  out.write(std::span<const std::byte>(reinterpret_cast<const std::byte*>(&len), 8));
  out.write(text);
  for (const auto& t : tensors) out.write(t.data);
  out.commit();
}

void write_safetensors(const std::filesystem::path& path,
                       const std::map<std::string, OwnedTensor>& tensors,
                       const std::map<std::string, std::string>& metadata) {
  std::vector<TensorToWrite> list;
  list.reserve(tensors.size());
  for (const auto& [name, t] : tensors) list.push_back({name, t.dtype, t.shape, t.data});
  write_safetensors(path, list, metadata);
}

}  // namespace nibble
