// The aten ops torch reserves for out-of-tree backends ("overrideable"): convolution and
// scaled dot-product attention on `neuron`.
//
// Convolution on a PrivateUse1 tensor lands on convolution_overrideable (+ backward), which
// has no CPU kernel for the fallback to run: ours run torch's CPU convolution on views.
//
// torch picks SDPA's backend through a C++ DispatchStub that Python cannot reach; we answer
// OVERRIDEABLE, so F.scaled_dot_product_attention lands on
// aten::_scaled_dot_product_fused_attention_overrideable (and its backward), which nki.torch
// may route to an NKI kernel. The default kernels below run torch's CPU flash attention on
// zero-copy views, so SDPA works (forward and backward) before anything is routed.
// That default backward has no mask gradient, so a mask that requires grad is let onto the
// overrideable op only while routing.py says its backward (which has one) is in charge.
#include "neuron.h"

#include <ATen/native/DispatchStub.h>
#include <ATen/native/transformers/attention.h>
#include <ATen/ops/_scaled_dot_product_flash_attention_for_cpu.h>
#include <ATen/ops/_scaled_dot_product_flash_attention_for_cpu_backward.h>
#include <ATen/ops/convolution.h>
#include <ATen/ops/convolution_backward.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/empty_like.h>
#include <ATen/ops/zeros.h>
#include <ATen/SDPBackend.h>
#include <torch/library.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <limits>
#include <numeric>
#include <vector>

namespace nki_neuron {
namespace {

// Written from Python, read by whichever thread picks an SDPA backend.
std::atomic<bool> mask_grad_routed{false};

// Whether the NKI kernels take this mask (needing a gradient) as it is: q's dtype, one the
// kernels compute in, and [Sq, Sk] or [1|B, 1|H, Sq, Sk] (the layouts nki.torch.ops.kernel_mask
// hands the kernel unexpanded). Other masks go to the math path, whose autograd is general.
bool kernel_takes_mask_grad(const at::Tensor& q, const at::Tensor& k, const at::Tensor& mask) {
  const auto dtype = q.scalar_type();
  if (mask.scalar_type() != dtype || (dtype != at::kFloat && dtype != at::kBFloat16)) {
    return false;
  }
  if (mask.dim() == 2) {
    return mask.size(0) == q.size(2) && mask.size(1) == k.size(2);
  }
  return mask.dim() == 4 && mask.size(2) == q.size(2) && mask.size(3) == k.size(2) &&
         (mask.size(0) == 1 || mask.size(0) == q.size(0)) &&
         (mask.size(1) == 1 || mask.size(1) == q.size(1));
}

// Dropout, GQA and non-4-D inputs take the math path (which decomposes into matmuls and
// softmax, all running on neuron); so do masks that need a gradient unless the routed NKI
// backward will compute it.
int64_t choose_sdp_backend(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                           const std::optional<at::Tensor>& mask, double dropout_p,
                           bool /*is_causal*/, std::optional<double> /*scale*/,
                           bool enable_gqa) {
  const auto math = static_cast<int64_t>(at::SDPBackend::math);
  if (dropout_p > 0.0 || enable_gqa || q.is_nested() || q.dim() != 4 || k.dim() != 4 ||
      v.dim() != 4) {
    return math;
  }
  if (!at::isFloatingType(q.scalar_type()) || k.scalar_type() != q.scalar_type() ||
      v.scalar_type() != q.scalar_type() || q.size(-1) != k.size(-1) || q.size(1) != k.size(1) ||
      k.size(1) != v.size(1) || q.size(2) == 0 || k.size(2) == 0) {
    return math;
  }
  if (mask.has_value() && mask->defined()) {
    if (mask->dim() > 4) {
      return math;
    }
    if (mask->requires_grad() &&
        !(mask_grad_routed.load() && kernel_takes_mask_grad(q, k, *mask))) {
      return math;
    }
  }
  return static_cast<int64_t>(at::SDPBackend::overrideable);
}

// An uninitialised neuron tensor of `shape` laid out like `like` (the meta kernel's
// alloc_with_matching_layout: compiled graphs rely on the strides matching).
at::Tensor empty_matching(const at::Tensor& like, at::IntArrayRef shape) {
  if (like.sizes() == shape) {
    return at::empty_like(like);
  }
  std::vector<int64_t> order(like.dim());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(),
                   [&](int64_t a, int64_t b) { return like.stride(a) > like.stride(b); });
  std::vector<int64_t> permuted;
  std::vector<int64_t> inverse(order.size());
  for (size_t i = 0; i < order.size(); ++i) {
    permuted.push_back(shape[order[i]]);
    inverse[order[i]] = static_cast<int64_t>(i);
  }
  return at::empty(permuted, like.options()).permute(inverse);
}

std::optional<at::Tensor> cpu_mask(const std::optional<at::Tensor>& mask, const at::Tensor& q) {
  if (!mask.has_value() || !mask->defined()) {
    return std::nullopt;
  }
  at::Tensor m = as_cpu(*mask);
  if (m.scalar_type() == at::kBool) {  // additive form: 0 where attended, -inf elsewhere
    return at::zeros(m.sizes(), m.options().dtype(q.scalar_type()))
        .masked_fill_(m.logical_not(), -std::numeric_limits<double>::infinity());
  }
  return m;
}

at::Tensor batched(const at::Tensor& t) { return t.dim() == 3 ? t.unsqueeze(0) : t; }

using FwdOut = std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor, c10::SymInt,
                          c10::SymInt, at::Tensor, at::Tensor, at::Tensor>;

FwdOut sdpa_forward(const at::Tensor& query, const at::Tensor& key, const at::Tensor& value,
                    const std::optional<at::Tensor>& bias, double dropout_p, bool is_causal,
                    bool /*return_debug_mask*/, std::optional<double> scale) {
  TORCH_CHECK(dropout_p == 0.0, "neuron SDPA: dropout runs on the math path");
  const at::Tensor q = batched(query);
  const at::Tensor k = batched(key);
  const at::Tensor v = batched(value);
  auto [out_cpu, lse_cpu] = at::_scaled_dot_product_flash_attention_for_cpu(
      as_cpu(q), as_cpu(k), as_cpu(v), 0.0, is_causal, cpu_mask(bias, q), scale);
  std::vector<int64_t> shape(query.sizes().begin(), query.sizes().end());
  shape.back() = value.size(-1);
  at::Tensor out = empty_matching(query, shape);
  as_cpu(out).copy_(out_cpu.view(shape));
  at::Tensor lse = as_neuron(lse_cpu, query.device().index());
  auto opts = query.options().dtype(at::kLong);
  return {out, lse, at::Tensor(), at::Tensor(), c10::SymInt(q.size(2)), c10::SymInt(k.size(2)),
          at::zeros({}, opts), at::zeros({}, opts), at::Tensor()};
}

at::Tensor neuron_like(const at::Tensor& like, const at::Tensor& cpu) {
  at::Tensor out = at::empty_like(like);
  as_cpu(out).copy_(cpu.view(like.sizes()));
  return out;
}

std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor> sdpa_backward(
    const at::Tensor& grad_out, const at::Tensor& query, const at::Tensor& key,
    const at::Tensor& value, const at::Tensor& bias, std::array<bool, 4> grad_input_mask,
    const at::Tensor& out, const at::Tensor& logsumexp, const at::Tensor& /*cum_seq_q*/,
    const at::Tensor& /*cum_seq_k*/, c10::SymInt /*max_q*/, c10::SymInt /*max_k*/,
    double dropout_p, bool is_causal, const at::Tensor& /*philox_seed*/,
    const at::Tensor& /*philox_offset*/, std::optional<double> scale) {
  // Reached with a mask needing a gradient only by calling the op directly (the backend
  // choice keeps such masks away): refuse rather than return no gradient.
  TORCH_CHECK(!grad_input_mask[3], "neuron SDPA: the default backward has no attn_mask "
              "gradient; it comes from nki.torch.routing (or use the math path)");
  const at::Tensor q = batched(query);
  std::optional<at::Tensor> mask;
  if (bias.defined()) {
    mask = bias;
  }
  auto [gq, gk, gv] = at::_scaled_dot_product_flash_attention_for_cpu_backward(
      as_cpu(batched(grad_out)), as_cpu(q), as_cpu(batched(key)), as_cpu(batched(value)),
      as_cpu(batched(out)), as_cpu(logsumexp), dropout_p, is_causal, cpu_mask(mask, q), scale);
  return {neuron_like(query, gq), neuron_like(key, gk), neuron_like(value, gv), at::Tensor()};
}

// ---------------------------------------------------------------- convolution

at::Tensor conv_forward(const at::Tensor& input, const at::Tensor& weight,
                        const std::optional<at::Tensor>& bias, c10::SymIntArrayRef stride,
                        c10::SymIntArrayRef padding, c10::SymIntArrayRef dilation,
                        bool transposed, c10::SymIntArrayRef output_padding, c10::SymInt groups) {
  std::optional<at::Tensor> bias_cpu;
  if (bias.has_value() && bias->defined()) {
    bias_cpu = as_cpu(*bias);
  }
  at::Tensor out = at::convolution_symint(as_cpu(input), as_cpu(weight), bias_cpu, stride,
                                          padding, dilation, transposed, output_padding, groups);
  return as_neuron(out, input.device().index());
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> conv_backward(
    const at::Tensor& grad_out, const at::Tensor& input, const at::Tensor& weight,
    c10::SymIntArrayRef stride, c10::SymIntArrayRef padding, c10::SymIntArrayRef dilation,
    bool transposed, c10::SymIntArrayRef output_padding, c10::SymInt groups,
    std::array<bool, 3> mask) {
  const at::Tensor g = as_cpu(grad_out);
  auto [gi, gw, gb] = at::convolution_backward_symint(
      g, as_cpu(input), as_cpu(weight), std::nullopt, stride, padding, dilation, transposed,
      output_padding, groups, {mask[0], mask[1], false});
  if (mask[2]) {  // the bias gradient: grad_out summed over all but the channel dimension
    std::vector<int64_t> dims{0};
    for (int64_t d = 2; d < g.dim(); ++d) {
      dims.push_back(d);
    }
    gb = g.sum(dims);
  }
  const auto index = input.device().index();
  return {as_neuron(gi, index), as_neuron(gw, index), as_neuron(gb, index)};
}

}  // namespace

void set_sdpa_mask_grad_routed(bool routed) { mask_grad_routed.store(routed); }
bool sdpa_mask_grad_routed() { return mask_grad_routed.load(); }

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("convolution_overrideable", TORCH_FN(conv_forward));
  m.impl("convolution_backward_overrideable", TORCH_FN(conv_backward));
  // torch._fused_sdp_choice (used by compile-time tracing) must answer like the stub; its CPU
  // kernel would otherwise run through the fallback and answer for CPU.
  m.impl("_fused_sdp_choice", TORCH_FN(choose_sdp_backend));
  m.impl("_scaled_dot_product_fused_attention_overrideable", TORCH_FN(sdpa_forward));
  m.impl("_scaled_dot_product_fused_attention_overrideable_backward", TORCH_FN(sdpa_backward));
}

}  // namespace nki_neuron

namespace at::native {
REGISTER_PRIVATEUSE1_DISPATCH(_fused_sdp_choice_stub, &nki_neuron::choose_sdp_backend)
}  // namespace at::native
