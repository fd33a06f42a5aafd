#include "kernels/cpu_kernels.h"

#include <cmath>
#include <cstring>

#include "common/check.h"
#include "kernels/simd.h"

namespace kvcanary::kernels {
namespace {

// Multiply-adds below which a matmul runs on the calling thread alone: a
// parallel region costs a few microseconds (measured by kvcanary-bench).
constexpr long kParallelMinWork = 1L << 17;
// Weight matrices with at least this many elements (256 KiB) are treated as
// streaming from memory rather than resident in cache.
constexpr long kStreamMinElements = 1L << 16;

// Computes y[c][r] for R consecutive rows of W and C consecutive rows of x.
// Each output uses exactly one vector accumulator over the n8 prefix, a fixed
// horizontal sum, then the scalar tail in order: the arithmetic of an output
// does not depend on R or C.
template <int R, int C>
inline void MicroKernel(const float* w, const float* x, float* y, int n,
                        int d) {
  const int n8 = n & ~7;
  F32x8 acc[R][C];
  for (int r = 0; r < R; ++r)
    for (int c = 0; c < C; ++c) acc[r][c] = F32x8::Zero();
  for (int j = 0; j < n8; j += 8) {
    F32x8 xv[C];
    for (int c = 0; c < C; ++c) xv[c] = F32x8::Load(x + c * n + j);
    for (int r = 0; r < R; ++r) {
      const F32x8 wv = F32x8::Load(w + r * n + j);
      for (int c = 0; c < C; ++c) acc[r][c] = MulAdd(wv, xv[c], acc[r][c]);
    }
  }
  // Horizontal sums, eight at a time where possible (bitwise equal to
  // HorizontalSum() of each), then the scalar tails.
  float sums[R * C];
  const F32x8* flat = &acc[0][0];
  int i = 0;
  for (; i + 8 <= R * C; i += 8) HorizontalSums8(flat + i).Store(sums + i);
  for (; i < R * C; ++i) sums[i] = flat[i].HorizontalSum();
  for (int r = 0; r < R; ++r) {
    for (int c = 0; c < C; ++c) {
      float s = sums[r * C + c];
      for (int j = n8; j < n; ++j) s += w[r * n + j] * x[c * n + j];
      y[c * d + r] = s;
    }
  }
}

template <int R>
inline void RowBlock(const MatmulArgs& a, int row) {
  const float* w = a.w + static_cast<size_t>(row) * a.n;
  float* y = a.y + row;
  int c = 0;
  for (; c + 4 <= a.batch; c += 4) {
    MicroKernel<R, 4>(w, a.x + static_cast<size_t>(c) * a.n,
                      y + static_cast<size_t>(c) * a.d, a.n, a.d);
  }
  for (; c < a.batch; ++c) {
    MicroKernel<R, 1>(w, a.x + static_cast<size_t>(c) * a.n,
                      y + static_cast<size_t>(c) * a.d, a.n, a.d);
  }
}

}  // namespace

void MatmulRowRange(const MatmulArgs& a, int row_begin, int row_end) {
  int i = row_begin;
  if (a.batch < 4) {
    if (static_cast<long>(a.n) * a.d >= kStreamMinElements) {
      // A matrix too big to stay in cache streams from memory: one row at a
      // time keeps the access a single sequential stream, which the hardware
      // prefetcher follows (measured: 2x the bandwidth of 8 interleaved rows).
      for (; i < row_end; ++i) RowBlock<1>(a, i);
      return;
    }
    for (; i + 8 <= row_end; i += 8) RowBlock<8>(a, i);
  }
  for (; i + 4 <= row_end; i += 4) RowBlock<4>(a, i);
  for (; i < row_end; ++i) RowBlock<1>(a, i);
}

void Matmul(const MatmulArgs& a, ThreadPool* pool) {
  CHECK(a.x != a.y);
  const long work = static_cast<long>(a.n) * a.d * a.batch;
  if (pool == nullptr || pool->num_threads() == 1 || work < kParallelMinWork) {
    MatmulRowRange(a, 0, a.d);
    return;
  }
  // Split along output rows in blocks of 8 so every thread uses the same
  // micro-kernels as a single thread would.
  const int blocks = (a.d + 7) / 8;
  pool->ParallelFor(blocks, [&](int b0, int b1) {
    MatmulRowRange(a, b0 * 8, b1 * 8 < a.d ? b1 * 8 : a.d);
  });
}

void RmsNorm(float* out, const float* x, const float* weight, int size) {
  float ss = 0.0f;
  for (int j = 0; j < size; ++j) ss += x[j] * x[j];
  ss /= size;
  ss += 1e-5f;
  ss = 1.0f / sqrtf(ss);
  for (int j = 0; j < size; ++j) out[j] = weight[j] * (ss * x[j]);
}

void Softmax(float* x, int size) {
  const int size8 = size & ~7;
  float max_val = x[0];
  if (size8 > 0) {
    F32x8 m = F32x8::Load(x);
    for (int i = 8; i < size8; i += 8) m = Max(m, F32x8::Load(x + i));
    float lanes[8];
    m.Store(lanes);
    for (float v : lanes) max_val = v > max_val ? v : max_val;
  }
  for (int i = size8; i < size; ++i) max_val = x[i] > max_val ? x[i] : max_val;
  const F32x8 max8 = F32x8::Broadcast(max_val);
  F32x8 sum8 = F32x8::Zero();
  for (int i = 0; i < size8; i += 8) {
    const F32x8 e = ExpNonPositive(F32x8::Load(x + i) - max8);
    e.Store(x + i);
    sum8 = sum8 + e;
  }
  if (size8 < size) {  // the tail, padded with -inf (whose exp is 0)
    float pad[8];
    for (int i = 0; i < 8; ++i)
      pad[i] = size8 + i < size ? x[size8 + i] : -INFINITY;
    const F32x8 e = ExpNonPositive(F32x8::Load(pad) - max8);
    e.Store(pad);
    for (int i = size8; i < size; ++i) x[i] = pad[i - size8];
    sum8 = sum8 + e;
  }
  const float total = sum8.HorizontalSum();
  const F32x8 total8 = F32x8::Broadcast(total);
  for (int i = 0; i < size8; i += 8) (F32x8::Load(x + i) / total8).Store(x + i);
  for (int i = size8; i < size; ++i) x[i] /= total;
}

namespace {

// The angle of pair (i, i+1) at `pos`, exactly as llama2.c computes it.
inline void RopeAngle(int i, int head_dim, int pos, float* fcr, float* fci) {
  const int hd = i % head_dim;
  const float freq = 1.0f / powf(10000.0f, hd / static_cast<float>(head_dim));
  const float val = pos * freq;
  *fcr = cosf(val);
  *fci = sinf(val);
}

inline void Rotate(float* vec, int i, float fcr, float fci) {
  const float v0 = vec[i];
  const float v1 = vec[i + 1];
  vec[i] = v0 * fcr - v1 * fci;
  vec[i + 1] = v0 * fci + v1 * fcr;
}

}  // namespace

void Rope(float* q, float* k, int dim, int kv_dim, int head_dim, int pos) {
  for (int i = 0; i < dim; i += 2) {
    float fcr, fci;
    RopeAngle(i, head_dim, pos, &fcr, &fci);
    Rotate(q, i, fcr, fci);
    if (i < kv_dim) Rotate(k, i, fcr, fci);
  }
}

std::vector<float> MakeRopeTable(int head_dim, int seq_len) {
  std::vector<float> table(static_cast<size_t>(seq_len) * head_dim);
  for (int pos = 0; pos < seq_len; ++pos) {
    float* row = table.data() + static_cast<size_t>(pos) * head_dim;
    for (int i = 0; i < head_dim; i += 2)
      RopeAngle(i, head_dim, pos, &row[i], &row[i + 1]);
  }
  return table;
}

void RopeFromTable(float* q, float* k, int dim, int kv_dim, int head_dim,
                   const float* row) {
  for (int i = 0; i < dim; i += 2) {
    const int hd = i % head_dim;
    Rotate(q, i, row[hd], row[hd + 1]);
    if (i < kv_dim) Rotate(k, i, row[hd], row[hd + 1]);
  }
}

namespace {

// silu(x) * gate per lane: sigmoid from e = exp(-|x|), which never
// overflows: 1 / (1 + e) for x >= 0, e / (1 + e) for x < 0.
F32x8 SiluTimes(F32x8 x, F32x8 gate) {
  const F32x8 e = ExpNonPositive(NegAbs(x));
  const F32x8 one = F32x8::Broadcast(1.0f);
  const F32x8 denom = one + e;
  return x * IfNegative(x, e / denom, one / denom) * gate;
}

}  // namespace

void SwiGlu(float* hb, const float* hb2, int size) {
  int i = 0;
  for (; i + 8 <= size; i += 8) {
    SiluTimes(F32x8::Load(hb + i), F32x8::Load(hb2 + i)).Store(hb + i);
  }
  if (i == size) return;
  // The tail through the same lanes, so that an element's value never
  // depends on where the call's size puts it (batch invariance).
  float x[8] = {}, gate[8] = {};
  for (int j = i; j < size; ++j) x[j - i] = hb[j], gate[j - i] = hb2[j];
  SiluTimes(F32x8::Load(x), F32x8::Load(gate)).Store(x);
  for (int j = i; j < size; ++j) hb[j] = x[j - i];
}

void AddInPlace(float* y, const float* x, int size) {
  for (int i = 0; i < size; ++i) y[i] += x[i];
}

int Argmax(const float* x, int size) {
  // What `if (x[i] > x[best]) best = i` from best = 0 finds: index 0 if
  // x[0] is NaN, else the first index of the largest non-NaN value (Max()
  // ignores a NaN first operand). The maximum in 8 lanes, then a scan for
  // its first index: no chain of dependent loads.
  if (size <= 0 || std::isnan(x[0])) return 0;
  const int size8 = size & ~7;
  F32x8 lanes = F32x8::Broadcast(x[0]);
  for (int i = 0; i < size8; i += 8) lanes = Max(F32x8::Load(x + i), lanes);
  float m[8];
  lanes.Store(m);
  float best = m[0];
  for (int l = 1; l < 8; ++l) best = m[l] > best ? m[l] : best;
  for (int i = size8; i < size; ++i) best = x[i] > best ? x[i] : best;
  int i = 0;
  while (!(x[i] == best)) ++i;
  return i;
}

}  // namespace kvcanary::kernels
