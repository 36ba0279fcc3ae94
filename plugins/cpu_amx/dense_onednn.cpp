// Dense (unquantized) linear layers — routers, modules_to_not_convert — through oneDNN's matmul.
// Two kernels: `dense_onednn_f32` (fp32 weights and activations) for layers up to 64 MiB in fp32,
// which holds every MoE router, so routing scores and top-k ties are decided in fp32; and
// `dense_onednn` (bf16, oneDNN picks its AMX/AVX-512 brgemm) for larger ones (lm_head and other
// modules_to_not_convert), where bf16 halves the memory and the traffic. The weight is converted
// once at prepare; activations per call in the workspace; the fp32 result gets the bias and is
// rounded to y's dtype. Threads: the output columns are split over the linear kernels' worker
// pool, and each slice runs oneDNN with that thread's OpenMP limit at 1 (restored after), so
// Debian's OpenMP build of oneDNN never starts an OpenMP pool — those threads could not be joined
// at shutdown. One primitive per (M, column slice), created on first use and cached. A cached
// primitive runs on whichever thread takes its slice, and concurrent forwards run it at once: with
// the library's scratchpad (shared by all primitives, unless oneDNN is built for concurrent
// execution) that is not allowed, and concurrent MoE calls sometimes got other routing scores. So
// each primitive takes a user scratchpad, one per executing thread.
#include "linear_kernels.hpp"
#include "worker_pool.hpp"

#include <nibble/sdk/numeric.hpp>

#include <omp.h>
#include <dnnl.hpp>

#include <map>
#include <mutex>
#include <tuple>
#include <type_traits>
#include <vector>

namespace nibble::cpu_amx {
namespace {

using dnnl::memory;

// Largest dense layer the fp32 kernel takes, in fp32 bytes.
constexpr size_t kMaxF32Bytes = size_t(64) << 20;

// T: uint16_t (bf16 bits) or float, the precision of weights and activations given to oneDNN.
template <class T>
class DensePrepared final : public sdk::Prepared {
  static constexpr bool kF32 = std::is_same_v<T, float>;
  static constexpr memory::data_type kType =
      kF32 ? memory::data_type::f32 : memory::data_type::bf16;

  static T from_float(float v) {
    if constexpr (kF32)
      return v;
    else
      return sdk::f32_to_bf16(v);
  }

 public:
  DensePrepared(const nibble_dense_weight& w)
      : K_(w.K), N_(w.N), engine_(dnnl::engine::kind::cpu, 0) {
    weight_.resize(size_t(K_ * N_));
    const size_t n = weight_.size();
    if (!kF32 && w.dtype.code == kDLBfloat) {
      std::memcpy(weight_.data(), w.data, n * 2);
    } else {
      for (size_t i = 0; i < n; ++i) weight_[i] = from_float(sdk::load_float(w.data, w.dtype, i));
    }
    if (w.bias) {
      bias_.resize(size_t(N_));
      for (int64_t i = 0; i < N_; ++i)
        bias_[size_t(i)] = sdk::load_float(w.bias, w.bias_dtype, size_t(i));
    }
  }

  size_t bytes() const override {
    return weight_.size() * sizeof(T) + bias_.size() * 4 + sizeof(*this);
  }

  size_t workspace_bytes(int64_t M) const override {
    return size_t(M) * size_t(K_) * sizeof(T) + 64 + size_t(M) * size_t(N_) * 4;
  }

  void forward(const sdk::ForwardArgs& args, const sdk::Exec& exec) const override {
    const int64_t M = args.M;
    auto* xb = static_cast<T*>(exec.workspace);
    auto* yf = reinterpret_cast<float*>(reinterpret_cast<char*>(exec.workspace) +
                                        (size_t(M) * size_t(K_) * sizeof(T) + 63) / 64 * 64);
    for (int64_t m = 0; m < M; ++m) {
      if (!kF32 && args.x.dtype.code == kDLBfloat) {
        std::memcpy(xb + m * K_, args.x.row<uint16_t>(m), size_t(K_) * 2);
      } else {
        for (int64_t k = 0; k < K_; ++k) xb[m * K_ + k] = from_float(args.x.get(m, k));
      }
    }
    // Column slices of at least 64 (multiples of 16), one per thread at most.
    const int threads = std::max(1, exec.num_threads);
    const int64_t parts = std::max<int64_t>(1, std::min<int64_t>(threads, N_ / 64));
    auto slice = [&](int64_t i) {
      const int64_t n0 = (N_ * i / parts) / 16 * 16;
      const int64_t n1 = i + 1 == parts ? N_ : (N_ * (i + 1) / parts) / 16 * 16;
      const int saved = omp_get_max_threads();
      omp_set_num_threads(1);
      const Primitive& p = primitive(M, n0, n1);
      memory src(p.src, engine_, xb);
      memory wei(p.wei, engine_, const_cast<T*>(weight_.data()) + n0 * K_);
      memory dst(p.dst, engine_, yf + n0);
      thread_local std::vector<uint8_t> scratch;  // kept: a warm forward allocates nothing
      if (scratch.size() < p.scratch.get_size()) scratch.resize(p.scratch.get_size());
      memory pad(p.scratch, engine_, scratch.data());
      dnnl::stream stream(engine_);
      p.matmul.execute(stream, {{DNNL_ARG_SRC, src},
                                {DNNL_ARG_WEIGHTS, wei},
                                {DNNL_ARG_DST, dst},
                                {DNNL_ARG_SCRATCHPAD, pad}});
      stream.wait();
      omp_set_num_threads(saved);
    };
    if (parts == 1) {
      slice(0);
    } else {
      WorkerPool::instance().for_each(threads, parts, slice);
    }
    for (int64_t m = 0; m < M; ++m)
      for (int64_t n = 0; n < N_; ++n)
        args.y.set(m, n, yf[m * N_ + n] + (bias_.empty() ? 0.f : bias_[size_t(n)]));
  }

 private:
  struct Primitive {
    memory::desc src, wei, dst, scratch;
    dnnl::matmul matmul;
  };

  const Primitive& primitive(int64_t M, int64_t n0, int64_t n1) const {
    std::lock_guard<std::mutex> lock(mutex_);
    const auto key = std::make_tuple(M, n0, n1);
    auto it = cache_.find(key);
    if (it != cache_.end()) return it->second;
    Primitive p;
    const int64_t n = n1 - n0;
    p.src = memory::desc({M, K_}, kType, memory::format_tag::ab);
    // Our weight is [N][K] row-major: the K×N matrix oneDNN wants, in "ba" order; a column slice
    // starts n0 rows further.
    p.wei = memory::desc({K_, n}, kType, memory::dims{1, K_});
    p.dst = memory::desc({M, n}, memory::data_type::f32, memory::dims{N_, 1});
    dnnl::matmul::desc d(p.src, p.wei, p.dst);
    dnnl::primitive_attr attr;
    attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
    const dnnl::matmul::primitive_desc pd(d, attr, engine_);
    p.scratch = pd.scratchpad_desc();
    p.matmul = dnnl::matmul(pd);
    return cache_.emplace(key, std::move(p)).first->second;
  }

  int64_t K_, N_;
  dnnl::engine engine_;
  std::vector<T> weight_;
  std::vector<float> bias_;
  mutable std::mutex mutex_;
  mutable std::map<std::tuple<int64_t, int64_t, int64_t>, Primitive> cache_;
};

template <class T>
class DenseKernel final : public sdk::Kernel {
  static constexpr bool kF32 = std::is_same_v<T, float>;

 public:
  sdk::KernelInfo info() const override {
    sdk::KernelInfo i;
    i.op = NIBBLE_OP_DENSE;
    i.mode = NIBBLE_MODE_FLOAT;
    if (kF32) {
      // fp32 products and sums (oneDNN's f32 matmul); the output's own rounding for f16/bf16.
      i.name = "dense_onednn_f32";
      i.priority = 110;
      i.bound_f32 = 1e-4;
      i.bound_f16 = 2e-3;
      i.bound_bf16 = 1e-2;
    } else {
      // bf16 weights and activations (8-bit mantissas), fp32 accumulation.
      i.name = "dense_onednn";
      i.priority = 100;
      i.bound_f32 = 1e-2;
      i.bound_f16 = 1e-2;
      i.bound_bf16 = 1e-2;
    }
    return i;
  }

  std::string why_not(const nibble_layer_desc& d) const override {
    if (d.op != NIBBLE_OP_DENSE) return "only dense layers (op DENSE)";
    if (d.numeric_mode == NIBBLE_MODE_W4A8) return "w4a8 is not offered for dense layers";
    if (!sdk::is_float_dtype(d.weight_dtype))
      return "weight dtype " + sdk::dtype_name(d.weight_dtype) + " (expected f32, f16 or bf16)";
    if (d.K <= 0 || d.N <= 0) return "empty layer";
    if (kF32 && double(d.K) * double(d.N) * 4 > double(kMaxF32Bytes))
      return "larger than 64 MiB in fp32 (" + std::to_string(d.K) + " x " + std::to_string(d.N) +
             "); dense_onednn runs it in bf16";
    return "";
  }

  std::unique_ptr<sdk::Prepared> prepare(const nibble_layer_desc& d,
                                         const nibble_weight_input& in) const override {
    const nibble_dense_weight& w = *in.dense;
    sdk::require(w.K == d.K && w.N == d.N, "dense weight shape differs from the layer descriptor");
    sdk::require(w.data != nullptr && sdk::is_float_dtype(w.dtype), "dense weight: data or dtype");
    sdk::require(!w.bias || sdk::is_float_dtype(w.bias_dtype), "dense bias dtype");
    return std::make_unique<DensePrepared<T>>(w);
  }
};

}  // namespace

std::unique_ptr<sdk::Kernel> make_dense_onednn_kernel() {
  return std::make_unique<DenseKernel<uint16_t>>();
}
std::unique_ptr<sdk::Kernel> make_dense_onednn_f32_kernel() {
  return std::make_unique<DenseKernel<float>>();
}

}  // namespace nibble::cpu_amx
