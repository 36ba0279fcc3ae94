// Quantized layers as inference engines hold them: a layer's checkpoint tensors (qweight, qzeros,
// scales, g_idx, bias) as DLPack tensors in the engine's own memory, possibly cut for tensor
// parallelism, and the quantization_config fields that say how to read them. Runtime's
// linear_from_tensors and moe_from_tensors (runtime.hpp) build layers from them; decode_tensors
// gives the canonical weight they decode to.
//
// Tensor-parallel shards, as engines cut them (docs/host-api.md#tensor-parallel-shards):
//   - column-parallel (N split): qweight, qzeros, scales and bias cut along N; an ordinary smaller
//     layer.
//   - row-parallel (K split): qweight and g_idx cut along K. g_idx holds global group numbers.
//     With act-order the engine keeps every group's scales and qzeros (all G rows) and g_idx picks
//     the rows it uses; without act-order scales and qzeros are cut along groups too, and g_idx
//     (if given) starts at the shard's first global group. The rule: when every g_idx value
//     indexes the given scales rows, g_idx is used as it is; otherwise it is rebased by its
//     smallest value (the shard's first group), and then every value must index them. With a
//     g_idx, scales may have any number of rows that covers every (rebased) g_idx value; without
//     one they must have exactly ceil(K / group_size). The bias belongs to one shard only.
#pragma once

#include <nibble/canonical_weight.hpp>
#include <nibble/export.hpp>

#include <dlpack/dlpack.h>

#include <string>
#include <vector>

namespace nibble {

/// One quantized linear layer's tensors as a checkpoint stores them and an engine holds them:
/// borrowed DLTensors in CPU memory (kDLCPU/kDLCUDAHost), row-major contiguous, for the call only.
struct QuantTensors {
  const DLTensor* qweight = nullptr;
  const DLTensor* qzeros = nullptr;
  const DLTensor* scales = nullptr;
  const DLTensor* g_idx = nullptr;  ///< optional (GPTQ act-order or a row-parallel shard)
  const DLTensor* bias = nullptr;   ///< optional
};

/// How to read them: the quantization_config fields that matter.
struct QuantFormat {
  std::string method = "gptq";             ///< "gptq" or "awq"
  std::string checkpoint_format = "gptq";  ///< GPTQ: "gptq" (v1) or "gptq_v2"; AWQ: "gemm"
  int bits = 4;                            ///< 4 or 8 (AWQ: 4)
  int group_size = 128;                    ///< > 0, or -1 for one group
  bool sym = true;                         ///< GPTQ only (AWQ always stores zero points)
};

/// A MoE block's experts as engines hold them: either per expert (gate, up, down each a
/// QuantTensors) or stacked over experts, [E, ...] with gate and up concatenated along N
/// (as fused-MoE engines keep w13 / w2). Exactly one of the two forms is set.
struct ExpertTensors {
  QuantTensors gate, up, down;
};
struct MoeTensors {
  std::vector<ExpertTensors> experts;  ///< per-expert form
  QuantTensors w13;                    ///< stacked form: [E, ...] gate rows then up rows
  QuantTensors w2;                     ///< stacked form: [E, ...]
};

/// Decode one layer's tensors into the canonical weight, with the same checks and messages as a
/// checkpoint layer (`name` stands for the layer's prefix; each tensor is called NAME.qweight,
/// ...). A GPTQ v1 label on v2-style symmetric zeros is relabelled as the checkpoint path does;
/// such findings are appended to `warnings` when given, else logged.
NIBBLE_API CanonicalWeight decode_tensors(const std::string& name, const QuantTensors& tensors,
                                          const QuantFormat& format,
                                          std::vector<std::string>* warnings = nullptr);

}  // namespace nibble
