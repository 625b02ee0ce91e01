// The non-matmul layers of the training model (model.h), forward and backward in fp32:
// embedding, RMSNorm, the causal attention core, SwiGLU, the top-k router with its
// load-balancing loss, token permutation for the experts, and cross-entropy. Every matmul
// with a weight stays in Linear / GroupedLinear (linear.h); these are the pieces between.
//
// Plain functions over f32 tensors [rows, features] (C-contiguous), each backward taking
// what its forward returned. Loops run over OpenMP threads (threads 0: all cores) and
// every output element is computed by one thread in one fixed order, so results do not
// depend on the thread count.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "mxtrain/group_list.h"
#include "mxtrain/tensor.h"

namespace mxtrain::nn {

// y [T, D] = table [V, D] rows ids[t]. Throws Error on an id outside [0, V).
Tensor EmbeddingForward(const Tensor& table, std::span<const int32_t> ids, int threads = 0);
// dtable [V, D] += dy [T, D] scattered by ids (rows summed in token order).
void EmbeddingBackward(const Tensor& dy, std::span<const int32_t> ids, Tensor& dtable);

// RMSNorm: y = x / sqrt(mean(x^2) + eps) * gain, over the last axis of x [T, D].
struct RmsNormOut {
  Tensor y;     // [T, D]
  Tensor rstd;  // [T]: 1 / sqrt(mean(x^2) + eps), kept for the backward
};
RmsNormOut RmsNormForward(const Tensor& x, const Tensor& gain, float eps = 1e-5f, int threads = 0);
// dx [T, D]; dgain [D] += the gain's gradient.
Tensor RmsNormBackward(const Tensor& dy, const Tensor& x, const Tensor& gain, const Tensor& rstd,
                       Tensor& dgain, int threads = 0);

// Causal multi-head attention core, out = softmax(Q K^T / sqrt(d) + causal mask) V per
// sequence and head. q, k, v: [B * T, H * d], rows sequence-major (row b * T + t), head h in
// columns [h * d, (h + 1) * d).
struct AttentionOut {
  Tensor out;    // [B * T, H * d]
  Tensor probs;  // [B, H, T, T] softmax probabilities (0 above the diagonal), for backward
};
AttentionOut CausalAttentionForward(const Tensor& q, const Tensor& k, const Tensor& v,
                                    int64_t batch, int64_t heads, int threads = 0);
struct AttentionGrads {
  Tensor dq, dk, dv;
};
AttentionGrads CausalAttentionBackward(const Tensor& dout, const Tensor& q, const Tensor& k,
                                       const Tensor& v, const Tensor& probs, int64_t batch,
                                       int64_t heads, int threads = 0);

// SwiGLU on a fused gate/up projection gu [M, 2F] (gate in columns [0, F), up in [F, 2F)):
// h [M, F] = silu(gate) * up, in fp32. gu is f32 or bf16 and h has its dtype: a bf16 gu is
// widened and h rounded once (SwiGluBf16, elementwise.h), the bits of the f32 form on the
// widened values cast to bf16.
Tensor SwiGluForward(const Tensor& gu, int threads = 0);
// dgu [M, 2F] for dh [M, F], both of gu's dtype (f32 or bf16, as the forward).
Tensor SwiGluBackward(const Tensor& dh, const Tensor& gu, int threads = 0);

// Top-k softmax router (Mixtral): for logits [T, E], each token goes to its k largest
// logits (ties to the lower index), weighted by the softmax over those k. The load-balancing
// loss is Switch Transformer's aux = E * sum_e f_e * P_e, with f_e the fraction of the T * k
// assignments that go to expert e and P_e the mean over tokens of the full softmax.
struct RouterOut {
  std::vector<int32_t> experts;  // [T * k]: token t's choices at t * k .. t * k + k - 1
  Tensor weights;                // [T, k]
  Tensor probs;                  // [T, E] full softmax (for the aux loss's gradient)
  std::vector<double> fraction;  // [E] f_e
  double aux_loss = 0;
  int k = 0;
};
RouterOut RouterForward(const Tensor& logits, int k);
// dlogits [T, E] for dweights [T, k] plus aux_scale * d(aux)/dlogits.
Tensor RouterBackward(const RouterOut& r, const Tensor& dweights, double aux_scale);

// Tokens sorted by expert for GroupedLinear: assignment a = t * k + j (token t's j-th
// choice) lands at sorted row `position[a]`; sorted rows keep token order within an expert.
struct Permutation {
  std::vector<int64_t> position;  // [T * k]
  std::vector<int64_t> token;     // [T * k]: the token of each sorted row
  std::vector<int64_t> counts;    // [E] rows per expert
  GroupList groups;               // counts as a group list over T * k rows
  int64_t num_tokens = 0;
  int k = 0;
};
Permutation MakePermutation(std::span<const int32_t> experts, int64_t num_tokens, int k,
                            int num_experts);
// xs [T * k, D]: row i = x row token[i].
Tensor Permute(const Tensor& x, const Permutation& p, int threads = 0);
// dx [T, D] = sum over a token's sorted rows of dxs.
Tensor PermuteBackward(const Tensor& dxs, const Permutation& p, int threads = 0);
// y [T, D] = sum_j weights[t, j] * ys row position[t * k + j].
Tensor Unpermute(const Tensor& ys, const Permutation& p, const Tensor& weights, int threads = 0);
struct UnpermuteGrads {
  Tensor dys;       // [T * k, D]
  Tensor dweights;  // [T, k]
};
UnpermuteGrads UnpermuteBackward(const Tensor& dy, const Tensor& ys, const Permutation& p,
                                 const Tensor& weights, int threads = 0);

// Mean cross-entropy of logits [N, V] against targets [N] (each in [0, V)), in double
// over the rows. When dlogits is given it receives d(loss * grad_scale)/dlogits [N, V].
double CrossEntropy(const Tensor& logits, std::span<const int32_t> targets,
                    Tensor* dlogits = nullptr, float grad_scale = 1.0f, int threads = 0);

// Elementwise helpers for the residual stream: a + b, and a += b in place.
Tensor Add(const Tensor& a, const Tensor& b, int threads = 0);
void AddInPlace(Tensor& a, const Tensor& b, int threads = 0);

}  // namespace mxtrain::nn
