// One quantized layer from tensors an engine holds, on its way to the schemes: the format read
// into a scheme and its parameters, the tensors as views, a row-parallel shard's g_idx rebased,
// the v1/v2 label resolved, then the scheme's own check and decode. Shared by decode_tensors,
// Runtime::linear_from_tensors and Runtime::moe_from_tensors.
#pragma once

#include <nibble/checkpoint_scheme.hpp>
#include <nibble/layer_tensors.hpp>

#include <optional>
#include <string>
#include <vector>

#include "group_rows.hpp"

namespace nibble::detail {

/// The scheme a QuantFormat labels and the parameters it gives every layer.
struct FormatScheme {
  SchemeKind labelled = SchemeKind::GptqV1;
  SchemeParams params;
};

/// Read `format` (for messages about layer `name`); throws nibble::Error listing the valid values
/// of a method, checkpoint_format, bits or group_size it does not know.
FormatScheme format_scheme(const QuantFormat& format, const std::string& name);

/// One layer's tensors as views named NAME.qweight, ... (the views own nothing; the engine's
/// tensors must outlive this object), with the scheme that reads them once resolve() has run.
class EngineLayer {
 public:
  /// Views of an engine's DLTensors (each checked: device, dtype, contiguity, offset).
  EngineLayer(const std::string& name, const QuantTensors& tensors);
  /// Views made already (slices of tensors stacked over experts).
  EngineLayer(const std::string& name, std::optional<TensorView> qweight,
              std::optional<TensorView> qzeros, std::optional<TensorView> scales,
              std::optional<TensorView> g_idx, std::optional<TensorView> bias);
  EngineLayer(const EngineLayer&) = delete;
  EngineLayer& operator=(const EngineLayer&) = delete;

  /// Check the shapes, rebase a shard's g_idx and resolve the v1/v2 label (warnings appended).
  /// Returns the layer's sizes.
  LayerShape resolve(const FormatScheme& format, std::vector<std::string>& warnings);
  /// Decode (after resolve) and validate the canonical weight.
  CanonicalWeight decode() const;
  /// The scheme resolve() chose.
  SchemeKind kind() const { return kind_; }
  /// Whether the decoded weight keeps a g_idx (act-order), from the values alone.
  bool act_order() const;
  /// The tensors as the schemes take them.
  LayerTensors tensors() const;
  /// The layer's name.
  const std::string& name() const { return name_; }

 private:
  void rebase_g_idx();

  std::string name_;
  std::optional<TensorView> qweight_, qzeros_, scales_, g_idx_, bias_;
  std::optional<OwnedTensor> rebased_;  // a shard's g_idx minus its first group
  std::optional<TensorView> rebased_view_;
  SchemeKind kind_ = SchemeKind::GptqV1;
  SchemeParams params_;
  schemes::GroupRows rows_ = schemes::GroupRows::FromGroupSize;
  LayerShape shape_;
  bool resolved_ = false;
};

/// The label messages use for tensors of layer `name` ("<tensors of NAME>", escaped).
std::string tensors_label(const std::string& name);

}  // namespace nibble::detail
