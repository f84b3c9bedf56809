// torch.autocast("neuron"): CUDA's cast policy lists applied to the AutocastPrivateUse1 key.
//
// Without the fallthrough every op inside an autocast region fails with "Could not run
// 'aten::...' with arguments from the 'Autocastneuron' backend".
#include <ATen/autocast_mode.h>
#include <torch/library.h>

// Inside at::autocast, as torch's own registrations: the KERNEL_* macros and the policy lists
// name types and wrappers unqualified.
namespace at::autocast {
namespace {

TORCH_LIBRARY_IMPL(_, AutocastPrivateUse1, m) {
  m.fallback(torch::CppFunction::makeFallthrough());
}

#define NEURON_LOW_PRECISION(...) KERNEL_PRIVATEUSEONE(__VA_ARGS__, lower_precision_fp)
#define NEURON_FP32(...) KERNEL_PRIVATEUSEONE(__VA_ARGS__, fp32)
#define NEURON_FP32_SET_OPT_DTYPE(...) KERNEL_PRIVATEUSEONE(__VA_ARGS__, fp32_set_opt_dtype)
#define NEURON_PROMOTE(...) KERNEL_PRIVATEUSEONE(__VA_ARGS__, promote)
#define NEURON_REDISPATCH(FUNC, NAME, SIGNATURE, REDISPATCH, POLICY) \
  KERNEL_DIFFERENT_REDISPATCH_SIGNATURE_PRIVATEUSEONE(FUNC, NAME, SIGNATURE, REDISPATCH, POLICY)

TORCH_LIBRARY_IMPL(aten, AutocastPrivateUse1, m) {
  AT_FORALL_LOWER_PRECISION_FP(NEURON_LOW_PRECISION)
  AT_FORALL_FP32(NEURON_FP32)
  AT_FORALL_FP32_SET_OPT_DTYPE(NEURON_FP32_SET_OPT_DTYPE)
  AT_FORALL_DIFFERENT_REDISPATCH_SIGNATURE(NEURON_REDISPATCH)
  AT_FORALL_PROMOTE(NEURON_PROMOTE)
}

}  // namespace
}  // namespace at::autocast
