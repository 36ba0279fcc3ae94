// Sharded tensor stores (model.safetensors.index.json), owned tensors and the safetensors writer.
#include <nibble/error.hpp>
#include <nibble/output_file.hpp>
#include <nibble/safetensors.hpp>

#include <fmt/format.h>

#include <cstring>
#include <fstream>
#include <set>
#include <sstream>

#include "safetensors_json.hpp"

namespace nibble {

namespace {

std::string read_small_file(const std::filesystem::path& path, uint64_t limit) {
  std::error_code ec;
  auto size = std::filesystem::file_size(path, ec);
  if (ec) throw Error(fmt::format("cannot read {}: {}", path.string(), ec.message()));
  if (size > limit) {
    throw Error(
        fmt::format("{} is {} bytes, larger than the {}-byte limit", path.string(), size, limit));
  }
  std::ifstream in(path, std::ios::binary);
  if (!in) throw Error(fmt::format("cannot open {}", path.string()));
  std::string text(size_t(size), '\0');
  in.read(text.data(), std::streamsize(size));
  if (!in) throw Error(fmt::format("cannot read {}", path.string()));
  return text;
}

}  // namespace

TensorStore TensorStore::open(const std::filesystem::path& path) {
  TensorStore store;
  store.source_ = path.string();
  auto add_file = [&](std::shared_ptr<const SafetensorsFile> file) {
    for (const auto& t : file->tensors()) {
      auto [it, inserted] = store.index_.emplace(t.name, &t);
      if (!inserted) {
        throw Error(fmt::format("tensor {} appears in both {} and {}", t.name, it->second->file,
                                file->path()));
      }
    }
    store.files_.push_back(std::move(file));
  };
  if (path.filename().string().ends_with(".index.json")) {
    std::string text = read_small_file(path, kMaxHeaderBytes);
    auto index = detail::parse_json(text, "shard index " + path.string());
    auto map = index.is_object() ? index.find("weight_map") : index.end();
    if (!index.is_object() || map == index.end() || !map->is_object()) {
      throw Error(fmt::format("shard index {}: expected an object with a \"weight_map\" object",
                              path.string()));
    }
    std::set<std::string> shards;
    for (const auto& [name, shard] : map->items()) {
      if (!shard.is_string()) {
        throw Error(fmt::format("shard index {}: weight_map[\"{}\"] must be a file name string",
                                path.string(), name));
      }
      std::string s = shard.get<std::string>();
      // Shards live beside the index: a path that leaves the directory is refused.
      if (s.empty() || s.find('/') != std::string::npos || s == "." || s == "..") {
        throw Error(
            fmt::format("shard index {}: weight_map[\"{}\"] = \"{}\" is not a plain file "
                        "name in the checkpoint directory",
                        path.string(), name, s));
      }
      shards.insert(s);
    }
    if (shards.empty())
      throw Error(fmt::format("shard index {}: weight_map is empty", path.string()));
    for (const auto& s : shards) add_file(SafetensorsFile::open(path.parent_path() / s));
    for (const auto& [name, shard] : map->items()) {
      auto it = store.index_.find(name);
      std::string expected = (path.parent_path() / shard.get<std::string>()).string();
      if (it == store.index_.end()) {
        throw Error(fmt::format("shard index {} maps tensor {} to {}, which does not contain it",
                                path.string(), name, expected));
      }
      if (it->second->file != expected) {
        throw Error(fmt::format("shard index {} maps tensor {} to {}, but it is in {}",
                                path.string(), name, expected, it->second->file));
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
  throw Error(fmt::format("tensor {} is not in {}", name, source_));
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
                      path.string(), t.name, t.data.size(), dtype_name(t.dtype),
                      fmt::join(t.shape, ", "), numel * dtype_size(t.dtype)));
    }
    header[t.name] = {{"dtype", dtype_name(t.dtype)},
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
