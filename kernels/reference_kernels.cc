#include "kernels/reference_kernels.h"

#include <cmath>

namespace kvcanary::kernels::reference {

void Matmul(const float* w, const float* x, float* y, int n, int d, int batch) {
  for (int b = 0; b < batch; ++b) {
    for (int i = 0; i < d; ++i) {
      double s = 0;
      for (int j = 0; j < n; ++j) {
        s += static_cast<double>(w[i * n + j]) * x[b * n + j];
      }
      y[b * d + i] = static_cast<float>(s);
    }
  }
}

void RmsNorm(float* out, const float* x, const float* weight, int size) {
  double ss = 0;
  for (int j = 0; j < size; ++j) ss += static_cast<double>(x[j]) * x[j];
  const double inv = 1.0 / std::sqrt(ss / size + 1e-5);
  for (int j = 0; j < size; ++j)
    out[j] = static_cast<float>(weight[j] * inv * x[j]);
}

void Softmax(float* x, int size) {
  double max_val = x[0];
  for (int i = 1; i < size; ++i) max_val = std::fmax(max_val, x[i]);
  double sum = 0;
  std::vector<double> e(size);
  for (int i = 0; i < size; ++i) sum += e[i] = std::exp(x[i] - max_val);
  for (int i = 0; i < size; ++i) x[i] = static_cast<float>(e[i] / sum);
}

void Rope(float* q, float* k, int dim, int kv_dim, int head_dim, int pos) {
  for (int i = 0; i < dim; i += 2) {
    const double freq =
        std::pow(10000.0, -static_cast<double>(i % head_dim) / head_dim);
    const double c = std::cos(pos * freq), s = std::sin(pos * freq);
    float* vecs[2] = {q, k};
    for (int v = 0; v < (i < kv_dim ? 2 : 1); ++v) {
      const double a = vecs[v][i], b = vecs[v][i + 1];
      vecs[v][i] = static_cast<float>(a * c - b * s);
      vecs[v][i + 1] = static_cast<float>(a * s + b * c);
    }
  }
}

void SwiGlu(float* hb, const float* hb2, int size) {
  for (int i = 0; i < size; ++i) {
    const double v = hb[i];
    hb[i] = static_cast<float>(v / (1.0 + std::exp(-v)) * hb2[i]);
  }
}

void Attention(const float* q, const float* keys, const float* values,
               float* out, int pos, int n_heads, int n_kv_heads, int head_dim) {
  const int kv_mul = n_heads / n_kv_heads;
  const int kv_row = n_kv_heads * head_dim;
  std::vector<double> att(pos + 1);
  for (int h = 0; h < n_heads; ++h) {
    const int g = h / kv_mul;
    double max_s = -INFINITY;
    for (int t = 0; t <= pos; ++t) {
      double s = 0;
      for (int i = 0; i < head_dim; ++i) {
        s += static_cast<double>(q[h * head_dim + i]) *
             keys[t * kv_row + g * head_dim + i];
      }
      att[t] = s / std::sqrt(static_cast<double>(head_dim));
      max_s = std::fmax(max_s, att[t]);
    }
    double sum = 0;
    for (int t = 0; t <= pos; ++t) sum += att[t] = std::exp(att[t] - max_s);
    for (int i = 0; i < head_dim; ++i) {
      double o = 0;
      for (int t = 0; t <= pos; ++t)
        o += att[t] / sum * values[t * kv_row + g * head_dim + i];
      out[h * head_dim + i] = static_cast<float>(o);
    }
  }
}

}  // namespace kvcanary::kernels::reference
