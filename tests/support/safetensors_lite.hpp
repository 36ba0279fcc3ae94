// Test support: read a small .safetensors file whole (8-byte header length, JSON header, data) and
// hand out its tensors as raw bytes with dtype and shape. For fixtures only: no validation beyond
// what a test needs to fail loudly.
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <cstring>
#include <fstream>
#include <iterator>
#include <map>
#include <stdexcept>
#include <string>
#include <vector>

namespace nibble::test {

struct StTensor {
  std::string dtype;  ///< "F32", "F16", "BF16", "I32", "I8", ...
  std::vector<int64_t> shape;
  std::vector<uint8_t> bytes;
  template <class T>
  T at(size_t i) const {
    T v;
    std::memcpy(&v, bytes.data() + i * sizeof(T), sizeof(T));
    return v;
  }
  int64_t numel() const {
    int64_t n = 1;
    for (int64_t d : shape) n *= d;
    return n;
  }
};

class SafetensorsFile {
 public:
  explicit SafetensorsFile(const std::string& path) {
    std::ifstream f(path, std::ios::binary);
    if (!f) throw std::runtime_error("cannot open " + path);
    std::vector<uint8_t> all((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
    if (all.size() < 8) throw std::runtime_error(path + ": too short");
    uint64_t n = 0;
    std::memcpy(&n, all.data(), 8);
    auto header = nlohmann::json::parse(all.begin() + 8, all.begin() + 8 + long(n));
    const size_t base = 8 + n;
    for (auto& [name, v] : header.items()) {
      if (name == "__metadata__") continue;
      StTensor t;
      t.dtype = v["dtype"].get<std::string>();
      t.shape = v["shape"].get<std::vector<int64_t>>();
      auto off = v["data_offsets"].get<std::vector<size_t>>();
      t.bytes.assign(all.begin() + long(base + off[0]), all.begin() + long(base + off[1]));
      tensors_[name] = std::move(t);
    }
  }
  const StTensor& get(const std::string& name) const {
    auto it = tensors_.find(name);
    if (it == tensors_.end()) throw std::runtime_error("no tensor " + name);
    return it->second;
  }

 private:
  std::map<std::string, StTensor> tensors_;
};

}  // namespace nibble::test
