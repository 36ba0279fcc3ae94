// Round-to-nearest quantization and the checkpoint writer.
#include <nibble/error.hpp>
#include <nibble/output_file.hpp>
#include <nibble/quantize.hpp>
#include <nibble/sdk/numeric.hpp>
#include <nibble/untrusted_text.hpp>

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <fstream>
#include <numeric>

namespace nibble {

namespace {

void check_options(const QuantizeOptions& o) {
  if (o.bits != 4 && o.bits != 8)
    throw Error(fmt::format("quantize: bits={} is not supported (4 or 8)", o.bits));
  if (o.group_size != -1 && o.group_size <= 0) {
    throw Error(
        fmt::format("quantize: group_size={} is not valid (a positive size or -1)", o.group_size));
  }
  if (!sdk::is_float_dtype(o.scales_dtype)) {
    throw Error("quantize: scales dtype " + sdk::dtype_name(o.scales_dtype) +
                " (f16, bf16 or f32)");
  }
  if (o.min_zero < 0 || o.min_zero > 1)
    throw Error(fmt::format("quantize: min_zero={} (0 or 1)", o.min_zero));
}

// The value a float takes once stored as `dtype` (the scale actually written).
double round_to(double v, DLDataType dtype) {
  uint8_t buf[4];
  sdk::store_float(buf, dtype, 0, float(v));
  return sdk::load_float(buf, dtype, 0);
}

}  // namespace

CanonicalWeight quantize_rtn(std::span<const float> weight, int64_t N, int64_t K,
                             const QuantizeOptions& o, std::mt19937_64& rng,
                             std::span<const float> bias) {
  check_options(o);
  if (N <= 0 || K <= 0 || weight.size() != size_t(N * K)) {
    throw Error(
        fmt::format("quantize: weight holds {} values, expected N*K = {}*{}", weight.size(), N, K));
  }
  if (!bias.empty() && bias.size() != size_t(N)) {
    throw Error(fmt::format("quantize: bias holds {} values, expected N = {}", bias.size(), N));
  }
  CanonicalWeight w;
  w.bits = o.bits;
  w.group_size = o.group_size;
  w.K = K;
  w.N = N;
  w.num_groups = groups_for(K, o.group_size);
  w.scales_dtype = o.scales_dtype;
  const int maxq = (1 << o.bits) - 1;
  const int gs = o.group_size == -1 ? int(K) : o.group_size;

  // Channel order along which groups are formed: identity, or a random permutation (act-order).
  std::vector<int32_t> order(static_cast<size_t>(K));
  std::iota(order.begin(), order.end(), 0);
  if (o.act_order && o.group_size != -1) {
    std::shuffle(order.begin(), order.end(), rng);
    w.g_idx.resize(size_t(K));
    for (int64_t i = 0; i < K; ++i) w.g_idx[size_t(order[size_t(i)])] = int32_t(i / gs);
    if (is_identity_grouping(w.g_idx, o.group_size)) w.g_idx.clear();
  }

  w.q.resize(size_t(N * K));
  w.zeros.resize(size_t(w.num_groups * N));
  w.scales.resize(size_t(w.num_groups * N) * sdk::dtype_bytes(o.scales_dtype));
  for (int64_t g = 0; g < w.num_groups; ++g) {
    const int64_t begin = g * gs, end = std::min<int64_t>(K, begin + gs);
    for (int64_t n = 0; n < N; ++n) {
      const float* row = &weight[size_t(n * K)];
      double xmin = 0, xmax = 0;  // the range always includes 0, as GPTQ's quantizer does
      for (int64_t i = begin; i < end; ++i) {
        double v = row[order[size_t(i)]];
        xmin = std::min(xmin, v);
        xmax = std::max(xmax, v);
      }
      double scale = 0;
      int zero = 0;
      if (o.sym) {
        double m = std::max(-xmin, xmax);
        if (m == 0) m = 1;
        scale = 2 * m / maxq;
        zero = (maxq + 1) / 2;
      } else {
        if (xmax == xmin) xmin = -1, xmax = 1;
        scale = (xmax - xmin) / maxq;
      }
      // Compute codes with the scale as stored; a scale too small for the dtype is raised to
      // its smallest normal value so that it never rounds to zero.
      double stored = round_to(scale, o.scales_dtype);
      if (!(stored > 0) || !std::isfinite(stored)) {
        stored = round_to(o.scales_dtype.code == kDLBfloat ? 1.2e-38 : 6.2e-5, o.scales_dtype);
      }
      if (!o.sym) zero = std::clamp(int(std::lround(-xmin / stored)), o.min_zero, maxq);
      sdk::store_float(w.scales.data(), o.scales_dtype, size_t(g * N + n), float(stored));
      w.zeros[size_t(g * N + n)] = uint8_t(zero);
      for (int64_t i = begin; i < end; ++i) {
        int64_t k = order[size_t(i)];
        long code = std::lround(row[k] / stored) + zero;
        w.q[size_t(n * K + k)] = uint8_t(std::clamp<long>(code, 0, maxq));
      }
    }
  }
  if (!bias.empty()) {
    w.bias.resize(size_t(N) * 2);
    w.bias_dtype = sdk::dtype_f16();
    for (int64_t n = 0; n < N; ++n)
      sdk::store_float(w.bias.data(), w.bias_dtype, size_t(n), bias[size_t(n)]);
  }
  return w;
}

QuantConfig make_quant_config(SchemeKind format, const QuantizeOptions& o) {
  QuantConfig qc;
  qc.bits = o.bits;
  qc.group_size = o.group_size;
  if (format == SchemeKind::AwqGemm) {
    qc.method = QuantMethod::Awq;
    qc.sym = false;
    qc.checkpoint_format = "gemm";
  } else {
    qc.method = QuantMethod::Gptq;
    qc.sym = o.sym;
    qc.desc_act = o.act_order;
    qc.true_sequential = true;
    qc.checkpoint_format = format == SchemeKind::GptqV2 ? "gptq_v2" : "gptq";
  }
  return qc;
}

void write_checkpoint(const std::filesystem::path& out, const QuantizedModel& model,
                      SchemeKind format, const QuantizeOptions& options, uint64_t shard_bytes) {
  namespace fs = std::filesystem;
  std::error_code ec;
  fs::create_directories(out, ec);
  if (ec || !fs::is_directory(out))
    throw Error(fmt::format("cannot create the output folder {}: {}",
                            escape_untrusted(out.string()),
                            ec ? ec.message() : "something that is not a folder is there"));
  const Scheme& scheme = get_scheme(format);
  std::map<std::string, OwnedTensor> tensors;
  for (const auto& [prefix, w] : model.quantized) {
    if (w.bits != options.bits || w.group_size != options.group_size) {
      throw Error(fmt::format(
          "writing {}: layer {} has bits={} group_size={}, but the config "
          "records bits={} group_size={}",
          out.string(), prefix, w.bits, w.group_size, options.bits, options.group_size));
    }
    std::map<std::string, OwnedTensor> encoded;
    try {
      encoded = scheme.encode(w);
    } catch (const Error& e) {
      throw e.with_context(fmt::format("writing layer {} to {}", prefix, out.string()));
    }
    for (auto& [suffix, t] : encoded) tensors[prefix + "." + suffix] = std::move(t);
  }
  for (const auto& [name, t] : model.plain) {
    if (!tensors.emplace(name, t).second) {
      throw Error(fmt::format("writing {}: tensor {} is both quantized output and a plain tensor",
                              out.string(), name));
    }
  }
  std::map<std::string, std::string> metadata{{"format", "pt"},
                                              {"nibble_format", std::string(scheme_name(format))}};
  if (shard_bytes == 0) {
    write_safetensors(out / "model.safetensors", tensors, metadata);
  } else {
    // Greedy shards in name order, each at most shard_bytes (a larger tensor gets its own).
    std::vector<std::vector<const std::string*>> shards(1);
    uint64_t used = 0;
    for (const auto& [name, t] : tensors) {
      if (used > 0 && used + t.data.size() > shard_bytes) shards.emplace_back(), used = 0;
      shards.back().push_back(&name);
      used += t.data.size();
    }
    nlohmann::ordered_json index;
    uint64_t total = 0;
    for (const auto& [name, t] : tensors) total += t.data.size();
    index["metadata"] = {{"total_size", total}};
    index["weight_map"] = nlohmann::ordered_json::object();
    for (size_t s = 0; s < shards.size(); ++s) {
      std::string file = fmt::format("model-{:05d}-of-{:05d}.safetensors", s + 1, shards.size());
      std::vector<TensorToWrite> list;
      for (const std::string* name : shards[s]) {
        const OwnedTensor& t = tensors.at(*name);
        list.push_back({*name, t.dtype, t.shape, t.data});
        index["weight_map"][*name] = file;
      }
      write_safetensors(out / file, list, metadata);
    }
    write_output_file(out / "model.safetensors.index.json", index.dump(2) + "\n");
  }
  nlohmann::ordered_json config = model.config;
  QuantConfig qc = make_quant_config(format, options);
  qc.modules_to_not_convert = model.modules_to_not_convert;
  config["quantization_config"] = qc.to_json();
  write_output_file(out / "config.json", config.dump(2) + "\n");
}

}  // namespace nibble
