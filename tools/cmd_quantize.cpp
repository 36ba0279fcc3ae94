// nibble quantize: round-to-nearest quantization of a synthetic model or of an f16/bf16/f32
// checkpoint into GPTQ v1, GPTQ v2 or AWQ GEMM, written in the Hugging Face layout.
#include <nibble/error.hpp>
#include <nibble/parse_number.hpp>
#include <nibble/quantize.hpp>
#include <nibble/untrusted_text.hpp>

#include <fmt/format.h>

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "commands.hpp"
#include "progress.hpp"

namespace {

const char* kQuantizeHelp =
    "usage: nibble quantize (--synthetic | --in DIR) --out DIR [options]\n\n"
    "Round-to-nearest quantization, written as config.json (with quantization_config) and\n"
    "model.safetensors (or shards). With --in, every 2-D linear weight is quantized except\n"
    "routers, embeddings, norms, lm_head and --skip matches; layers the format cannot pack stay\n"
    "dense and are listed in modules_to_not_convert.\n\n"
    "  --synthetic            generate random weights ~ N(0, 1/K) from --seed\n"
    "  --quiet                no progress on stderr\n"
    "  --in DIR               quantize this f16/bf16/f32 checkpoint\n"
    "  --out DIR              where to write (created)\n"
    "  --format F             gptq (v1, default), gptq_v2 or awq (AWQ GEMM)\n"
    "  --bits B               4 (default) or 8 (GPTQ only)\n"
    "  --group-size G         group size along K, or -1 for one group (default 128)\n"
    "  --sym | --asym         symmetric zero points (GPTQ default) or not (AWQ: always --asym)\n"
    "  --act-order            form groups along a random permutation of K (GPTQ only)\n"
    "  --layers KxN,KxN       synthetic linear layers model.layers.{i}.linear (K in, N out;\n"
    "                         each 1..1048576, K x N at most 2^28)\n"
    "  --moe E:K:I:TOPK       synthetic MoE block: E experts (1..1024), hidden K, intermediate\n"
    "                         I, top-k (1..E); E x 3 x I x K at most 2^28\n"
    "  --bias                 synthetic linear layers get a bias\n"
    "  --seed S               random seed (default 0)\n"
    "  --skip A,B             with --in: leave modules whose name contains A or B dense\n"
    "  --shard-bytes N        write shards of about N bytes plus model.safetensors.index.json\n\n"
    "Packing: GPTQ needs K and N multiples of 8 (4-bit) or 4 (8-bit); AWQ needs N % 8 == 0.\n\n"
    "example: nibble quantize --synthetic --out /tmp/tiny --format gptq_v2 --bits 4 --group-size "
    "64 \\\n"
    "           --asym --act-order --layers 512x384,384x512 --moe 8:256:384:2 --seed 1\n";

// Limits on synthetic shapes: each dimension, and the elements of one weight matrix (its float
// copy is made in memory: 2^28 elements are 1 GiB).
constexpr int64_t kMaxDim = int64_t(1) << 20;
constexpr int64_t kMaxElements = int64_t(1) << 28;
constexpr int64_t kMaxExperts = 1024;

int64_t dimension(const std::string& text, const std::string& what) {
  return nibble::parse_integer(text, 1, kMaxDim, what);
}

void check_elements(int64_t a, int64_t b, const std::string& what) {
  if (a * b > kMaxElements)  // both <= 2^20: the product fits
    throw nibble::Error(
        fmt::format("{}: {} x {} = {} elements is more than the {} a synthetic "
                    "weight may have",
                    what, a, b, a * b, kMaxElements));
}

int parse_bits(const std::string& text) {
  const int64_t bits = nibble::parse_integer(text, 4, 8, "--bits");
  if (bits != 4 && bits != 8)
    throw nibble::Error("--bits: " + nibble::quoted_untrusted(text) + " is not 4 or 8");
  return int(bits);
}

int parse_group_size(const std::string& text) {
  const int64_t g = nibble::parse_integer(text, -1, kMaxDim, "--group-size");
  if (g == 0)
    throw nibble::Error("--group-size: '0' is not -1 (one group) or a whole number in [1, " +
                        std::to_string(kMaxDim) + "]");
  return int(g);
}

std::vector<std::string> split(const std::string& s, char sep) {
  std::vector<std::string> out;
  size_t start = 0;
  while (start <= s.size()) {
    size_t end = s.find(sep, start);
    if (end == std::string::npos) end = s.size();
    out.push_back(s.substr(start, end - start));
    start = end + 1;
  }
  return out;
}

}  // namespace

int nibble_cmd_quantize(int argc, char** argv) {
  std::vector<std::string> args(argv + 1, argv + argc);
  bool synthetic = false, act_order = false, bias = false, quiet = false;
  std::optional<bool> sym;
  std::string in, out, format = "gptq";
  nibble::QuantizeOptions options;
  nibble::SyntheticSpec spec;
  std::vector<std::string> skip;
  uint64_t shard_bytes = 0;
  auto usage_error = [](const std::string& msg) {
    fmt::print(stderr, "nibble quantize: {}\n\n{}", msg, kQuantizeHelp);
    return 2;
  };
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& a = args[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= args.size()) throw nibble::Error(fmt::format("{} needs a value", a));
      return args[++i];
    };
    if (a == "-h" || a == "--help") {
      fmt::print("{}", kQuantizeHelp);
      return 0;
    } else if (a == "--synthetic") {
      synthetic = true;
    } else if (a == "--quiet") {
      quiet = true;
    } else if (a == "--in") {
      in = value();
    } else if (a == "--out") {
      out = value();
    } else if (a == "--format") {
      format = value();
    } else if (a == "--bits") {
      options.bits = parse_bits(value());
    } else if (a == "--group-size") {
      options.group_size = parse_group_size(value());
    } else if (a == "--sym") {
      sym = true;
    } else if (a == "--asym") {
      sym = false;
    } else if (a == "--act-order") {
      act_order = true;
    } else if (a == "--bias") {
      bias = true;
    } else if (a == "--seed") {
      spec.seed = uint64_t(nibble::parse_integer(value(), 0, INT64_MAX, "--seed"));
    } else if (a == "--shard-bytes") {
      // 0 writes one file, as without the flag.
      shard_bytes = uint64_t(nibble::parse_integer(value(), 0, int64_t(1) << 50, "--shard-bytes"));
    } else if (a == "--skip") {
      skip = split(value(), ',');
    } else if (a == "--layers") {
      for (const auto& item : split(value(), ',')) {
        auto kn = split(item, 'x');
        if (kn.size() != 2)
          return usage_error(
              fmt::format("--layers item {} is not KxN", nibble::quoted_untrusted(item)));
        const int64_t K = dimension(kn[0], "--layers K"), N = dimension(kn[1], "--layers N");
        check_elements(K, N, "--layers " + nibble::quoted_untrusted(item));
        spec.layers.emplace_back(K, N);
      }
    } else if (a == "--moe") {
      auto parts = split(value(), ':');
      if (parts.size() != 4) return usage_error("--moe expects E:K:I:TOPK");
      const int64_t E = nibble::parse_integer(parts[0], 1, kMaxExperts, "--moe E");
      const int64_t K = dimension(parts[1], "--moe K"), I = dimension(parts[2], "--moe I");
      const int64_t top_k = nibble::parse_integer(parts[3], 1, E, "--moe TOPK");
      check_elements(E, 3 * I * K, "--moe: E x (3 x I x K), the weights of all experts,");
      spec.moe = nibble::SyntheticMoe{int(E), K, I, int(top_k)};
    } else {
      return usage_error(fmt::format("unknown option {}", nibble::quoted_untrusted(a)));
    }
  }
  if (synthetic == !in.empty()) return usage_error("give exactly one of --synthetic and --in DIR");
  if (out.empty()) return usage_error("missing --out DIR");
  nibble::SchemeKind kind;
  if (format == "gptq" || format == "gptq_v1") {
    kind = nibble::SchemeKind::GptqV1;
  } else if (format == "gptq_v2") {
    kind = nibble::SchemeKind::GptqV2;
  } else if (format == "awq" || format == "awq_gemm") {
    kind = nibble::SchemeKind::AwqGemm;
  } else {
    return usage_error(fmt::format("--format {} is not one of gptq, gptq_v2, awq",
                                   nibble::quoted_untrusted(format)));
  }
  options.sym = sym.value_or(kind != nibble::SchemeKind::AwqGemm);
  options.act_order = act_order;
  spec.bias = bias;
  if (!synthetic && (!spec.layers.empty() || spec.moe || bias)) {
    return usage_error(
        "--layers, --moe and --bias describe a synthetic model; use them with --synthetic");
  }
  // Progress on stderr (a bar on a terminal, lines otherwise); --quiet silences it.
  std::unique_ptr<nibble::cli::Progress> progress;
  options.on_layer = [&](const std::string& layer, size_t, size_t total) {
    if (!progress)
      progress = std::make_unique<nibble::cli::Progress>("quantizing", int(total), quiet);
    progress->step(layer);
  };
  nibble::QuantizedModel model = synthetic ? nibble::make_synthetic_model(spec, options, kind)
                                           : nibble::quantize_checkpoint(in, options, kind, skip);
  progress.reset();
  nibble::write_checkpoint(out, model, kind, options, shard_bytes);
  fmt::print(
      "wrote {}: {} quantized layer(s) as {} ({}-bit, group size {}, {}{}), {} other tensor(s)\n",
      out, model.quantized.size(), nibble::scheme_name(kind), options.bits, options.group_size,
      options.sym ? "sym" : "asym", options.act_order ? ", act-order" : "", model.plain.size());
  for (const auto& note : model.notes) fmt::print("  note: {}\n", note);
  return 0;
}
