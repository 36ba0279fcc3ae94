// Probe (not part of the product; docs/cpu_amx.md "Ceilings on the AMX host"): the M = 1 W4A16
// streaming loop of kernels_avx512.cpp in miniature (4 panel streams, VDPBF16PS, 3 shifts + 4
// ternary-logic ops per 64 bytes), with its weights hot in L2 and cold from DRAM, next to a plain
// read of the same bytes. Variants: accumulators per panel (ch), panels per pass (np). If the hot
// rate is not well above the cold read rate, the kernel is bound by its instructions, not memory.
// Usage: nibble_probe_decode_stream [threads] [rounds]
// Standalone on purpose: each probe is one experiment in one file, so it repeats what it needs
// of the kernels, of amx_peak.cpp and of the other probes rather than sharing code with them.
#include <immintrin.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <string>
#include <thread>
#include <vector>

constexpr int K = 4096, KT = K / 32, G = 128;
constexpr size_t kPanelBytes = size_t(KT) * 256;  // 32 KB per 16-column panel

static inline __m512i tl(__m512i x) {
  return _mm512_ternarylogic_epi32(x, _mm512_set1_epi16(0x000F), _mm512_set1_epi16(0x4300), 0xEA);
}

template <int V>
static inline void unpack(__m512i w, __m512i* n) {
  if (V == 0) {  // shifts (current)
    n[0] = tl(w);
    n[1] = tl(_mm512_srli_epi16(w, 4));
    n[2] = tl(_mm512_srli_epi16(w, 8));
    n[3] = tl(_mm512_srli_epi16(w, 12));
  } else if (V == 1) {  // one shift, two byte shuffles (port 5)
    const __m512i hi = _mm512_set4_epi32(0x0F0F0D0D, 0x0B0B0909, 0x07070505, 0x03030101);
    const __m512i t = _mm512_srli_epi16(w, 4);
    n[0] = tl(w);
    n[1] = tl(t);
    n[2] = tl(_mm512_shuffle_epi8(w, hi));
    n[3] = tl(_mm512_shuffle_epi8(t, hi));
  } else {  // VPMULTISHIFTQB-free: srli_epi32 on 32-bit lanes counts the same as 16 (control)
    const __m512i t = _mm512_srli_epi32(w, 4);
    n[0] = tl(w);
    n[1] = tl(t);
    n[2] = tl(_mm512_srli_epi32(w, 8));
    n[3] = tl(_mm512_srli_epi32(t, 8));
  }
}

// One pass over `panels` panels from `w` (NP=4 streams), x bf16 [K]; returns bytes read.
template <int V, bool PF, int CH = 2, int NP = 4>
static double stream(const uint8_t* w, int panels, const uint16_t* x, const float* sc, float* out) {
  for (int p = 0; p < panels; p += NP) {
    const uint8_t* base = w + size_t(p) * kPanelBytes;
    __m512 o[NP];
    for (int j = 0; j < NP; ++j) o[j] = _mm512_setzero_ps();
    for (int g = 0; g < K / G; ++g) {
      __m512 acc[NP][CH];
      for (int j = 0; j < NP; ++j)
        for (int c = 0; c < CH; ++c) acc[j][c] = _mm512_setzero_ps();
      for (int t = g * 4; t < g * 4 + 4; ++t) {
        if (PF)
          for (int j = 0; j < NP; ++j)
            for (int l = 0; l < 256; l += 64)
              _mm_prefetch((const char*)base + j * kPanelBytes + size_t(t) * 256 + 4096 + l,
                           _MM_HINT_T0);
        for (int u = 0; u < 4; ++u) {
          __m512i v[NP][4];
          for (int j = 0; j < NP; ++j)
            unpack<V>(_mm512_loadu_si512(base + j * kPanelBytes + size_t(t) * 256 + u * 64), v[j]);
          const int k = t * 32 + 8 * u;
          for (int s = 0; s < 4; ++s) {
            int32_t xv;
            std::memcpy(&xv, x + k + 2 * s, 4);
            const __m512bh xb = (__m512bh)_mm512_set1_epi32(xv);
            for (int j = 0; j < NP; ++j)
              acc[j][(u * 4 + s) % CH] =
                  _mm512_dpbf16_ps(acc[j][(u * 4 + s) % CH], xb, (__m512bh)v[j][s]);
          }
        }
      }
      for (int j = 0; j < NP; ++j) {
        __m512 a = acc[j][0];
        for (int c = 1; c < CH; ++c) a = _mm512_add_ps(a, acc[j][c]);
        o[j] = _mm512_fmadd_ps(_mm512_loadu_ps(sc + (size_t(p + j) * (K / G) + g) * 16), a, o[j]);
      }
    }
    for (int j = 0; j < NP; ++j) _mm512_storeu_ps(out + (p + j) * 16, o[j]);
  }
  return double(panels) * kPanelBytes;
}

using Fn = std::function<double(int t, size_t rot)>;

int main(int argc, char** argv) {
  const int threads = argc > 1 ? atoi(argv[1]) : 2;
  const int rounds = argc > 2 ? atoi(argv[2]) : 15;
  // Cold: 1 GiB of weights per thread; one "layer" = 448 panels (4096x7168) = 14 MiB.
  const int layer_panels = 448;
  const size_t layer_bytes = layer_panels * kPanelBytes;
  const size_t cold_layers = (size_t(1) << 30) / layer_bytes;
  std::vector<uint8_t*> wbuf(threads);
  for (int t = 0; t < threads; ++t) {
    wbuf[t] = (uint8_t*)std::aligned_alloc(4096, cold_layers * layer_bytes);
    for (size_t i = 0; i < cold_layers * layer_bytes; i += 8)
      *(uint64_t*)(wbuf[t] + i) = 0x1234567890abcdefull * (i + 1);
  }
  std::vector<uint16_t> x(K, 0x3f80);
  std::vector<float> sc(size_t(layer_panels) * (K / G) * 16, 0.5f);
  std::vector<std::vector<float>> out(threads, std::vector<float>(layer_panels * 16));
  struct V {
    std::string name;
    bool cold;
    std::function<double(const uint8_t*, int, float*)> fn;
  };
  std::vector<V> vs = {
      {"ch2 np4 hot", false,
       [&](const uint8_t* w, int n, float* o) {
         return stream<0, true, 2, 4>(w, n, x.data(), sc.data(), o);
       }},
      {"ch1 np4 hot", false,
       [&](const uint8_t* w, int n, float* o) {
         return stream<0, true, 1, 4>(w, n, x.data(), sc.data(), o);
       }},
      {"ch4 np4 hot", false,
       [&](const uint8_t* w, int n, float* o) {
         return stream<0, true, 4, 4>(w, n, x.data(), sc.data(), o);
       }},
      {"ch2 np8 hot", false,
       [&](const uint8_t* w, int n, float* o) {
         return stream<0, true, 2, 8>(w, n, x.data(), sc.data(), o);
       }},
      {"ch4 np2 hot", false,
       [&](const uint8_t* w, int n, float* o) {
         return stream<0, true, 4, 2>(w, n, x.data(), sc.data(), o);
       }},
      {"ch2 np4 cold", true,
       [&](const uint8_t* w, int n, float* o) {
         return stream<0, true, 2, 4>(w, n, x.data(), sc.data(), o);
       }},
      {"ch4 np4 cold", true,
       [&](const uint8_t* w, int n, float* o) {
         return stream<0, true, 4, 4>(w, n, x.data(), sc.data(), o);
       }},
      {"ch2 np8 cold", true,
       [&](const uint8_t* w, int n, float* o) {
         return stream<0, true, 2, 8>(w, n, x.data(), sc.data(), o);
       }},
      {"read    cold", true,
       [&](const uint8_t* w, int n, float*) {
         __m512i a = _mm512_setzero_si512(), b = a, c = a, d = a;
         const size_t bytes = size_t(n) * kPanelBytes;
         for (size_t i = 0; i < bytes; i += 256) {
           a = _mm512_xor_si512(a, _mm512_load_si512(w + i));
           b = _mm512_xor_si512(b, _mm512_load_si512(w + i + 64));
           c = _mm512_xor_si512(c, _mm512_load_si512(w + i + 128));
           d = _mm512_xor_si512(d, _mm512_load_si512(w + i + 192));
         }
         // Keep the loads: the xor of everything read is an input of an empty asm statement.
         const __m512i all = _mm512_xor_si512(_mm512_xor_si512(a, b), _mm512_xor_si512(c, d));
         __asm__ volatile("" : : "v"(all));
         return double(bytes);
       }},
  };
  // Hot: each thread's 64 panels (2 MiB... too big for L2) -> 32 panels = 1 MiB per thread
  const int hot_panels = 32;
  std::vector<std::vector<double>> gbs(vs.size());
  size_t rot = 0;
  for (int r = 0; r < rounds; ++r)
    for (size_t i = 0; i < vs.size(); ++i) {
      std::atomic<bool> go{false};
      std::atomic<int> ready{0};
      std::vector<double> bytes(threads);
      std::vector<std::thread> ts;
      const size_t layer = rot++ % cold_layers;
      for (int t = 0; t < threads; ++t)
        ts.emplace_back([&, t] {
          ready++;
          while (!go) {
          }
          if (vs[i].cold) {
            bytes[t] = vs[i].fn(wbuf[t] + layer * layer_bytes, layer_panels, out[t].data());
          } else {
            double b = 0;
            for (int rep = 0; rep < 14; ++rep) b += vs[i].fn(wbuf[t], hot_panels, out[t].data());
            bytes[t] = b;
          }
        });
      while (ready < threads) {
      }
      auto t0 = std::chrono::steady_clock::now();
      go = true;
      for (auto& t : ts) t.join();
      const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      double b = 0;
      for (double x : bytes) b += x;
      gbs[i].push_back(b / s / 1e9);
    }
  for (size_t i = 0; i < vs.size(); ++i) {
    auto v = gbs[i];
    std::sort(v.begin(), v.end());
    printf("%-20s GB/s med %6.1f  [%6.1f .. %6.1f]\n", vs[i].name.c_str(), v[v.size() / 2],
           v[v.size() / 4], v[v.size() * 3 / 4]);
  }
}
