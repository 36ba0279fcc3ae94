// nibble run: one linear layer or one MoE block (router included) of a checkpoint, on an input
// tensor from a safetensors file; the result is written as tensor "y" in the input's dtype. A
// layer on a device gets copies of x and y there, through its backend's device memory, and y is
// read back, so the command works the same on every device.
#include <nibble/error.hpp>
#include <nibble/parse_number.hpp>
#include <nibble/placement_text.hpp>
#include <nibble/runtime.hpp>
#include <nibble/safetensors.hpp>
#include <nibble/untrusted_text.hpp>

#include <fmt/core.h>

#include <algorithm>
#include <cstring>

#include "cli_options.hpp"
#include "commands.hpp"
#include "layer_io.hpp"

namespace {

const char* kHelp =
    "usage: nibble run --model DIR --layer PREFIX --input FILE.safetensors:TENSOR\n"
    "                  --output FILE.safetensors [--top-k K] [--no-renormalize | --renormalize]\n"
    "                  [--explain] [runtime flags]\n\n"
    "Runs one linear layer, or one MoE block (recognised from the prefix, router included), on\n"
    "the input tensor [M, K] (f32, bf16 or f16) and writes the result as tensor \"y\" in the\n"
    "input's dtype. --explain prints which backend and kernel ran each part and why the others\n"
    "could not.\n\n";

constexpr int64_t kMaxTopK = 65536;

struct RunArgs {
  std::string model, layer, input, output;
  int top_k = 0;
  std::optional<bool> renormalize;
  bool explain = false;
};

RunArgs parse(std::vector<std::string>& args) {
  RunArgs r;
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& a = args[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= args.size()) throw nibble::Error(a + " needs a value");
      return args[++i];
    };
    if (a == "--model")
      r.model = value();
    else if (a == "--layer")
      r.layer = value();
    else if (a == "--input")
      r.input = value();
    else if (a == "--output")
      r.output = value();
    else if (a == "--top-k") {
      // At most the number of experts, which the MoE block checks once it is known.
      r.top_k = int(nibble::parse_integer(value(), 1, kMaxTopK, "--top-k"));
    } else if (a == "--no-renormalize")
      r.renormalize = false;
    else if (a == "--renormalize")
      r.renormalize = true;
    else if (a == "--explain")
      r.explain = true;
    else
      throw nibble::Error("unknown option " + nibble::quoted_untrusted(a) +
                          " (see nibble run --help)");
  }
  for (auto [flag, v] : {std::pair{"--model", &r.model},
                         {"--layer", &r.layer},
                         {"--input", &r.input},
                         {"--output", &r.output}})
    if (v->empty()) throw nibble::Error(std::string(flag) + " is required (see nibble run --help)");
  return r;
}

// Run `forward(x, y, stream)` where the layer runs (cli::LayerIo), y read back.
template <class Forward>
void run_where(const nibble::sdk::host::Device& device, const DLTensor& x, DLTensor& y,
               Forward&& forward) {
  nibble::cli::LayerIo io(device, x, y);
  forward(io.x(), io.y(), nullptr);
  io.finish();
}

}  // namespace

int nibble_cmd_run(int argc, char** argv) {
  auto args = nibble::cli::to_args(argc, argv);
  if (nibble::cli::wants_help(args)) {
    fmt::print(
        "{}{}\nexample: nibble run --model ./ckpt --layer model.layers.0.mlp "
        "--input x.safetensors:x --output y.safetensors --backend cpu_amx --explain\n",
        kHelp, nibble::cli::common_flags_help());
    return 0;
  }
  auto flags = nibble::cli::take_common_flags(args);
  RunArgs r = parse(args);
  size_t colon = r.input.rfind(':');
  if (colon == std::string::npos || colon == 0 || colon + 1 == r.input.size())
    throw nibble::Error("--input " + nibble::quoted_untrusted(r.input) +
                        " must be FILE.safetensors:TENSOR");
  std::string in_file = r.input.substr(0, colon), in_tensor = r.input.substr(colon + 1);
  const std::string x_name = "--input " + nibble::escape_untrusted(in_file, 400) + ": tensor " +
                             nibble::quoted_untrusted(in_tensor);

  nibble::Runtime rt(nibble::cli::resolve_options(flags));
  auto ckpt = nibble::Checkpoint::open(r.model);
  auto input = nibble::SafetensorsFile::open(in_file);
  const nibble::TensorView& xv = input->tensor(in_tensor);
  if (xv.shape.size() != 2)
    throw nibble::Error(x_name + " is " + xv.shape_string() + "; expected 2-D [M, K]");
  if (xv.dtype != nibble::DType::F32 && xv.dtype != nibble::DType::BF16 &&
      xv.dtype != nibble::DType::F16)
    throw nibble::Error(x_name + " is " + std::string(nibble::safetensors_dtype_name(xv.dtype)) +
                        "; expected F32, BF16 or F16");
  const int64_t M = xv.shape[0], K = xv.shape[1];

  // The layer's width is checked against the input before any buffer is sized by M, so a
  // tensor that claims many rows of nothing cannot make nibble allocate.
  auto blocks = ckpt.moe_blocks();
  auto block = std::find_if(blocks.begin(), blocks.end(),
                            [&](const nibble::MoeInfo& b) { return b.prefix == r.layer; });
  const bool is_moe = block != blocks.end();
  int64_t want_K = 0;
  if (is_moe) {
    want_K = block->hidden;
  } else {
    for (const auto& l : ckpt.linear_layers())
      if (l.prefix == r.layer) want_K = l.K;
  }
  if (want_K != 0 && K != want_K)
    throw nibble::Error(x_name + " is " + xv.shape_string() + ", but layer " +
                        nibble::quoted_untrusted(r.layer) + " takes K = " + std::to_string(want_K) +
                        " input features; expected [M, " + std::to_string(want_K) + "]");

  // Mapped data may be unaligned: copy it into an aligned buffer.
  std::vector<uint64_t> xbuf((xv.nbytes + 7) / 8);
  if (xv.nbytes > 0) std::memcpy(xbuf.data(), xv.data, xv.nbytes);
  int64_t xshape[2] = {M, K};
  DLTensor x{xbuf.data(), {kDLCPU, 0}, 2, nibble::to_dlpack(xv.dtype), xshape, nullptr, 0};

  int64_t out_cols = 0;
  std::vector<uint64_t> ybuf;
  int64_t yshape[2] = {M, 0};
  DLTensor y{nullptr, {kDLCPU, 0}, 2, x.dtype, yshape, nullptr, 0};
  // The input's K is checked before the output is allocated: a shape such as [4000000, 0] holds
  // no bytes but would ask for M × N of output.
  auto alloc_y = [&](int64_t k, int64_t cols) {
    if (K != k)
      throw nibble::Error(nibble::escape_untrusted(in_file) + ": tensor " +
                          nibble::quoted_untrusted(in_tensor) + " is " + xv.shape_string() +
                          "; layer " + nibble::quoted_untrusted(r.layer) + " expects [M, " +
                          std::to_string(k) + "]");
    out_cols = cols;
    yshape[1] = cols;
    ybuf.assign((size_t(M * cols) * nibble::dtype_size(xv.dtype) + 7) / 8, 0);
    y.data = ybuf.data();
  };
  std::vector<nibble::Placement> placements;
  if (is_moe) {
    nibble::MoeOptions mo;
    mo.top_k = r.top_k;
    mo.renormalize = r.renormalize;
    auto moe = rt.moe(ckpt, r.layer, mo);
    alloc_y(moe.hidden(), moe.hidden());
    run_where(moe.device_memory(), x, y,
              [&](const DLTensor& xt, DLTensor& yt, void* stream) { moe.forward(xt, yt, stream); });
    placements = moe.placements();
  } else {
    if (r.top_k || r.renormalize)
      throw nibble::Error("--top-k/--renormalize apply to MoE blocks; " +
                          nibble::quoted_untrusted(r.layer) + " is not one");
    auto lin = rt.linear(ckpt, r.layer);
    alloc_y(lin.in_features(), lin.out_features());
    run_where(lin.device_memory(), x, y,
              [&](const DLTensor& xt, DLTensor& yt, void* stream) { lin.forward(xt, yt, stream); });
    placements = {lin.placement()};
  }
  nibble::TensorToWrite out{
      "y",
      xv.dtype,
      {M, out_cols},
      std::span<const std::byte>(reinterpret_cast<const std::byte*>(ybuf.data()),
                                 size_t(M * out_cols) * nibble::dtype_size(xv.dtype))};
  nibble::write_safetensors(r.output, {out});
  if (r.explain)
    for (const auto& p : placements) fmt::print("{}", nibble::placement_text(p));
  fmt::print("wrote y [{}, {}] {} to {}\n", M, out_cols, nibble::safetensors_dtype_name(xv.dtype),
             nibble::escape_untrusted(r.output, 400));
  return 0;
}
