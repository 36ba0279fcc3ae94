#include "onednn_baseline.hpp"

#include <nibble/sdk/numeric.hpp>

#include <omp.h>
#include <dnnl.hpp>

#include <map>

namespace nibble::bench {

using dnnl::memory;

struct OnednnMatmul::Impl {
  dnnl::engine engine{dnnl::engine::kind::cpu, 0};
  dnnl::stream stream{engine};
  int64_t K = 0, N = 0;
  int threads = 1;
  memory::desc wei_md;  // the layout the copies are in
  std::vector<memory> copies;
  std::map<int64_t, dnnl::matmul> by_m;

  memory::desc src_md(int64_t M) const {
    return memory::desc({M, K}, memory::data_type::bf16, memory::format_tag::ab);
  }
  memory::desc dst_md(int64_t M) const {
    return memory::desc({M, N}, memory::data_type::bf16, memory::format_tag::ab);
  }

  dnnl::matmul& primitive(int64_t M) {
    auto it = by_m.find(M);
    if (it != by_m.end()) return it->second;
    // The copies' layout first; if oneDNN has no implementation for it at this M, re-lay them.
    try {
      dnnl::matmul::desc d(src_md(M), wei_md, dst_md(M));
      return by_m.emplace(M, dnnl::matmul(dnnl::matmul::primitive_desc(d, engine))).first->second;
    } catch (const dnnl::error&) {
    }
    memory::desc any({K, N}, memory::data_type::bf16, memory::format_tag::any);
    dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(src_md(M), any, dst_md(M)), engine);
    relayout(pd.weights_desc());
    by_m.clear();
    return by_m.emplace(M, dnnl::matmul(pd)).first->second;
  }

  void relayout(const memory::desc& md) {
    for (auto& c : copies) {
      memory to(md, engine);
      dnnl::reorder(c, to).execute(stream, c, to);
      c = to;
    }
    stream.wait();
    wei_md = md;
  }
};

OnednnMatmul::OnednnMatmul(const std::vector<float>& weight, int64_t K, int64_t N, int copies,
                           int threads)
    : impl_(std::make_unique<Impl>()) {
  omp_set_num_threads(threads);
  impl_->threads = threads;
  impl_->K = K;
  impl_->N = N;
  std::vector<uint16_t> bf(weight.size());
  for (size_t i = 0; i < bf.size(); ++i) bf[i] = sdk::f32_to_bf16(weight[i]);
  // W[n][k] row-major is the K×N matrix in "ba" order.
  memory::desc plain({K, N}, memory::data_type::bf16, memory::format_tag::ba);
  memory::desc any({K, N}, memory::data_type::bf16, memory::format_tag::any);
  dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(impl_->src_md(64), any, impl_->dst_md(64)),
                                  impl_->engine);
  impl_->wei_md = pd.weights_desc();
  memory src(plain, impl_->engine, bf.data());
  for (int c = 0; c < copies; ++c) {
    memory to(impl_->wei_md, impl_->engine);
    dnnl::reorder(src, to).execute(impl_->stream, src, to);
    impl_->copies.push_back(to);
  }
  impl_->stream.wait();
}

OnednnMatmul::~OnednnMatmul() = default;

size_t OnednnMatmul::weight_bytes() const { return impl_->wei_md.get_size(); }
int OnednnMatmul::copies() const { return int(impl_->copies.size()); }

void OnednnMatmul::run(int copy, const uint16_t* x, uint16_t* y, int64_t M) {
  // Another matmul of a run at a different thread count may have set OpenMP's since.
  omp_set_num_threads(impl_->threads);
  dnnl::matmul& mm = impl_->primitive(M);
  memory src(impl_->src_md(M), impl_->engine, const_cast<uint16_t*>(x));
  memory dst(impl_->dst_md(M), impl_->engine, y);
  mm.execute(impl_->stream, {{DNNL_ARG_SRC, src},
                             {DNNL_ARG_WEIGHTS, impl_->copies[size_t(copy) % impl_->copies.size()]},
                             {DNNL_ARG_DST, dst}});
  impl_->stream.wait();
}

}  // namespace nibble::bench
