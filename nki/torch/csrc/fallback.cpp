// Every aten op on `neuron` tensors: native kernels for allocation, views and copies; for
// everything else one boxed fallback that runs torch's CPU kernel on zero-copy CPU views.
//
// The fallback (pitfalls 2, 3, 7, 8 of docs/torch-bridge.md):
//  * all views of one neuron storage share one CPU storage within a call, so CPU kernels'
//    aliasing and overlap checks (which compare storages) see what they would see on CPU;
//  * the CPU views are resizable through an allocator of neuron memory: when a kernel resizes
//    an out= argument, the new buffer moves into the neuron storage afterwards;
//  * results that are a CPU view of an argument become neuron views of the argument's storage,
//    fresh results keep their bytes and are relabelled (no copy), in-place results return the
//    very neuron tensor that came in;
//  * tensors on two devices raise CUDA's message (0-dim CPU tensors and CPU indices are fine);
//  * random ops get the device's own generator when none is given.
#include "neuron.h"

#include <ATen/EmptyTensor.h>
#include <ATen/native/Resize.h>
#include <ATen/ops/_local_scalar_dense_native.h>
#include <ATen/ops/_reshape_alias_native.h>
#include <ATen/ops/as_strided_native.h>
#include <ATen/ops/copy.h>
#include <ATen/ops/resize_native.h>
#include <ATen/ops/set_native.h>
#include <ATen/ops/view_native.h>
#include <c10/util/SmallVector.h>
#include <torch/library.h>

#include <atomic>
#include <memory>
#include <mutex>
#include <optional>
#include <string>

namespace nki_neuron {
namespace {

std::atomic<int64_t> g_calls{0};

// Sets the current neuron device for the scope (allocations are counted on it).
class DeviceScope {
 public:
  explicit DeviceScope(c10::DeviceIndex index) : previous_(current_device()) {
    set_current_device(index);
  }
  ~DeviceScope() { set_current_device(previous_); }
  DeviceScope(const DeviceScope&) = delete;
  DeviceScope& operator=(const DeviceScope&) = delete;

 private:
  c10::DeviceIndex previous_;
};

c10::Storage storage_ref(c10::StorageImpl* impl) {
  return c10::Storage(c10::intrusive_ptr<c10::StorageImpl>::reclaim_copy(impl));
}

bool is_optional_generator(const c10::Argument& arg) {
  const auto& type = arg.type();
  return type->kind() == c10::TypeKind::OptionalType &&
         type->expectRef<c10::OptionalType>().getElementType()->kind() ==
             c10::TypeKind::GeneratorType;
}

// The state of one fallback call: the CPU views made for its arguments.
class CpuCall {
 public:
  // A CPU view for an argument; records devices for the mixing check.
  at::Tensor arg(const at::Tensor& t, bool cpu_allowed) {
    if (!t.defined()) {
      return t;
    }
    if (!t.is_privateuseone()) {
      if (t.is_cpu()) {
        cpu_allowed = cpu_allowed || t.dim() == 0;  // scalars, as CUDA allows
        if (t.has_storage()) {
          cpu_inputs_.push_back(t.storage().unsafeGetStorageImpl());
        }
      }
      if (!cpu_allowed) {
        note_device(t.device());
      }
      return t;
    }
    note_device(t.device());
    if (!device_.has_value()) {
      device_ = t.device().index();
    }
    for (const auto& v : viewed_) {  // one tensor passed twice (add_(x, x)) gets one view
      if (v.neuron.unsafeGetTensorImpl() == t.unsafeGetTensorImpl()) {
        return v.view;
      }
    }
    TORCH_CHECK(t.has_storage(), "neuron: tensors without storage are not supported");
    at::Tensor view = tensor_on(shared_cpu_storage(t), t, c10::DispatchKey::CPU);
    viewed_.push_back({t, view});
    return view;
  }

  void check_devices(const c10::OperatorName& name) const {
    if (!device_.has_value() || !other_.has_value()) {
      return;
    }
    std::string op = name.name;
    if (!name.overload_name.empty()) {
      op += "." + name.overload_name;
    }
    TORCH_CHECK(false, "Expected all tensors to be on the same device, but found at least two "
                "devices, ", first_->str(), " and ", other_->str(), "! (in ", op, ")");
  }

  c10::DeviceIndex device() const { return device_.value_or(current_device()); }

  // After the kernel: buffers of resized views and changed geometry go back to neuron.
  void sync_mutated() {
    for (auto& s : shared_) {
      auto* cpu = s.cpu.unsafeGetStorageImpl();
      if (cpu->data() != s.data || cpu->nbytes() != s.nbytes) {
        c10::DataPtr moved = cpu->set_data_ptr(c10::DataPtr());
        moved.unsafe_set_device(s.neuron->device());
        s.neuron->set_data_ptr_noswap(std::move(moved));
        s.neuron->set_nbytes(cpu->nbytes());
      }
    }
    for (auto& v : viewed_) {
      sync_geometry(v);
    }
  }

  // A kernel's result as a neuron tensor.
  at::Tensor result(const at::Tensor& out) {
    if (!out.defined() || !out.is_cpu()) {
      return out;
    }
    for (const auto& v : viewed_) {
      if (v.view.unsafeGetTensorImpl() == out.unsafeGetTensorImpl()) {
        return v.neuron;
      }
    }
    TORCH_CHECK(out.layout() == c10::kStrided, "neuron: only strided results are supported");
    auto* st = out.storage().unsafeGetStorageImpl();
    for (const auto& s : shared_) {
      if (s.cpu.unsafeGetStorageImpl() == st) {
        return tensor_on(storage_ref(s.neuron), out, c10::DispatchKey::PrivateUse1);
      }
    }
    for (const auto& f : fresh_) {
      if (f.first == st) {
        return tensor_on(f.second, out, c10::DispatchKey::PrivateUse1);
      }
    }
    for (auto* cpu : cpu_inputs_) {
      if (cpu == st) {  // a result aliasing a genuine CPU argument is copied, never shared
        return result(out.clone());
      }
    }
    c10::Storage adopted = neuron_storage_over(out.storage(), device());
    fresh_.emplace_back(st, adopted);
    return tensor_on(adopted, out, c10::DispatchKey::PrivateUse1);
  }

 private:
  struct Shared {
    c10::StorageImpl* neuron;
    c10::Storage cpu;
    const void* data;
    size_t nbytes;
  };
  struct Viewed {
    at::Tensor neuron;
    at::Tensor view;  // held, so its TensorImpl address cannot be reused by a result
  };

  const c10::Storage& shared_cpu_storage(const at::Tensor& t) {
    auto* neuron = t.storage().unsafeGetStorageImpl();
    for (const auto& s : shared_) {
      if (s.neuron == neuron) {
        return s.cpu;
      }
    }
    shared_.push_back({neuron, cpu_storage_over(neuron, true), neuron->data(), neuron->nbytes()});
    return shared_.back().cpu;
  }

  void sync_geometry(Viewed& v) {
    auto* view = v.view.unsafeGetTensorImpl();
    auto* neuron = v.neuron.unsafeGetTensorImpl();
    const auto* view_storage = view->storage().unsafeGetStorageImpl();
    bool ours = false;
    for (const auto& s : shared_) {
      ours = ours || s.cpu.unsafeGetStorageImpl() == view_storage;
    }
    if (!ours) {  // the kernel gave the argument a storage of its own (set_ on an out=)
      neuron->set_storage_keep_dtype(neuron_storage_over(view->storage(), device()));
    }
    if (view->sizes() != neuron->sizes() || view->strides() != neuron->strides() ||
        view->storage_offset() != neuron->storage_offset()) {
      neuron->set_sizes_and_strides(view->sizes(), view->strides(), view->storage_offset());
    }
  }

  void note_device(c10::Device d) {
    if (!first_.has_value()) {
      first_ = d;
    } else if (d != *first_ && !other_.has_value()) {
      other_ = d;
    }
  }

  c10::SmallVector<Shared, 4> shared_;
  c10::SmallVector<Viewed, 4> viewed_;
  c10::SmallVector<std::pair<c10::StorageImpl*, c10::Storage>, 2> fresh_;
  c10::SmallVector<c10::StorageImpl*, 2> cpu_inputs_;
  std::optional<c10::DeviceIndex> device_;
  std::optional<c10::Device> first_;
  std::optional<c10::Device> other_;
};

c10::IValue convert_arg(CpuCall& call, const c10::IValue& v) {
  if (v.isTensor()) {
    return call.arg(v.toTensor(), false);
  }
  if (v.isTensorList()) {
    c10::List<at::Tensor> out;
    for (const at::Tensor& t : v.toTensorList()) {
      out.push_back(call.arg(t, false));
    }
    return out;
  }
  if (v.isOptionalTensorList()) {  // index tensors: CPU ones are allowed, as on CUDA
    c10::List<std::optional<at::Tensor>> out;
    for (const std::optional<at::Tensor>& t : v.toOptionalTensorList()) {
      out.push_back(t.has_value() ? std::optional<at::Tensor>(call.arg(*t, true)) : t);
    }
    return out;
  }
  return v;
}

c10::IValue convert_result(CpuCall& call, const c10::IValue& v) {
  if (v.isTensor()) {
    return call.result(v.toTensor());
  }
  if (v.isTensorList()) {
    c10::List<at::Tensor> out;
    for (const at::Tensor& t : v.toTensorList()) {
      out.push_back(call.result(t));
    }
    return out;
  }
  return v;
}

// ---------------------------------------------------------------- native kernels

at::Tensor empty_memory_format(c10::SymIntArrayRef size, std::optional<c10::ScalarType> dtype,
                               std::optional<c10::Layout> layout,
                               std::optional<c10::Device> device, std::optional<bool> pin,
                               std::optional<c10::MemoryFormat> memory_format) {
  TORCH_CHECK(c10::layout_or_default(layout) == c10::kStrided,
              "neuron: only strided tensors are supported");
  TORCH_CHECK(!c10::pinned_memory_or_default(pin), "Only dense CPU tensors can be pinned");
  const auto d = c10::device_or_default(device);
  DeviceScope scope(d.has_index() ? d.index() : current_device());
  return at::detail::empty_generic(C10_AS_INTARRAYREF_SLOW(size), device_allocator(),
                                   c10::DispatchKeySet(c10::DispatchKey::PrivateUse1),
                                   c10::dtype_or_default(dtype), memory_format);
}

at::Tensor empty_strided(c10::SymIntArrayRef size, c10::SymIntArrayRef stride,
                         std::optional<c10::ScalarType> dtype, std::optional<c10::Layout> layout,
                         std::optional<c10::Device> device, std::optional<bool> pin) {
  TORCH_CHECK(c10::layout_or_default(layout) == c10::kStrided,
              "neuron: only strided tensors are supported");
  TORCH_CHECK(!c10::pinned_memory_or_default(pin), "Only dense CPU tensors can be pinned");
  const auto d = c10::device_or_default(device);
  DeviceScope scope(d.has_index() ? d.index() : current_device());
  return at::detail::empty_strided_generic(
      C10_AS_INTARRAYREF_SLOW(size), C10_AS_INTARRAYREF_SLOW(stride), device_allocator(),
      c10::DispatchKeySet(c10::DispatchKey::PrivateUse1), c10::dtype_or_default(dtype));
}

at::Tensor as_strided(const at::Tensor& self, c10::SymIntArrayRef size,
                      c10::SymIntArrayRef stride, std::optional<c10::SymInt> offset) {
  std::optional<int64_t> off;
  if (offset.has_value()) {
    off = offset->expect_int();
  }
  return at::native::as_strided_tensorimpl(self, C10_AS_INTARRAYREF_SLOW(size),
                                           C10_AS_INTARRAYREF_SLOW(stride), off);
}

at::Tensor view(const at::Tensor& self, c10::SymIntArrayRef size) {
  return at::native::view(self, C10_AS_INTARRAYREF_SLOW(size));
}

at::Tensor reshape_alias(const at::Tensor& self, c10::SymIntArrayRef size,
                         c10::SymIntArrayRef stride) {
  return at::native::_reshape_alias(self, C10_AS_INTARRAYREF_SLOW(size),
                                    C10_AS_INTARRAYREF_SLOW(stride));
}

const at::Tensor& resize_(const at::Tensor& self, c10::SymIntArrayRef size,
                          std::optional<c10::MemoryFormat> memory_format) {
  DeviceScope scope(self.device().index());
  return at::native::resize_(self, C10_AS_INTARRAYREF_SLOW(size), memory_format);
}

at::Tensor& set_storage(at::Tensor& self, c10::Storage source, c10::SymInt offset,
                        c10::SymIntArrayRef size, c10::SymIntArrayRef stride) {
  DeviceScope scope(self.device().index());
  return at::native::set_storage_cpu_(self, source, offset.expect_int(),
                                      C10_AS_INTARRAYREF_SLOW(size),
                                      C10_AS_INTARRAYREF_SLOW(stride));
}

at::Tensor& set_source_storage(at::Tensor& self, c10::Storage source) {
  return at::native::set_(self, source);
}

at::Tensor& set_source_tensor(at::Tensor& self, const at::Tensor& source) {
  return at::native::set_tensor_(self, source);
}

at::Tensor& set_empty(at::Tensor& self) {
  DeviceScope scope(self.device().index());
  c10::Storage empty(c10::Storage::use_byte_size_t(), 0, device_allocator(), true);
  return at::native::set_storage_cpu_(self, empty, 0, {0}, {});
}

// Copies between neuron and CPU (either way) and within neuron: torch's CPU copy on views.
at::Tensor copy_from(const at::Tensor& self, const at::Tensor& dst, bool non_blocking) {
  at::Tensor src_cpu;
  at::Tensor dst_cpu;
  if (self.is_privateuseone() && dst.is_privateuseone() && self.has_storage() &&
      dst.has_storage() && self.storage().is_alias_of(dst.storage())) {
    // One CPU storage for both, so copy_ sees (and handles) the overlap.
    auto shared = cpu_storage_over(self.storage().unsafeGetStorageImpl(), false);
    src_cpu = tensor_on(shared, self, c10::DispatchKey::CPU);
    dst_cpu = tensor_on(shared, dst, c10::DispatchKey::CPU);
  } else {
    src_cpu = as_cpu(self);
    dst_cpu = as_cpu(dst);
  }
  dst_cpu.copy_(src_cpu, non_blocking);
  return dst;
}

at::Tensor copy_from_and_resize(const at::Tensor& self, const at::Tensor& dst) {
  if (dst.is_privateuseone()) {
    resize_(dst, self.sym_sizes(), std::nullopt);
  } else {
    dst.resize_(self.sizes());
  }
  return copy_from(self, dst, false);
}

at::Scalar local_scalar_dense(const at::Tensor& self) {
  return at::native::_local_scalar_dense_cpu(as_cpu(self));
}

// Work on a stream is finished when its op returns: nothing to record.
void record_stream(at::Tensor&, c10::Stream) {}

}  // namespace

void cpu_fallback(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  g_calls.fetch_add(1, std::memory_order_relaxed);
  const auto& schema = op.schema();
  const auto& args = schema.arguments();
  const size_t base = stack->size() - args.size();
  CpuCall call;
  c10::SmallVector<size_t, 2> generators;
  for (size_t i = 0; i < args.size(); ++i) {
    auto& v = (*stack)[base + i];
    if (v.isNone()) {
      if (is_optional_generator(args[i])) {
        generators.push_back(base + i);
      }
      continue;
    }
    v = convert_arg(call, v);
  }
  call.check_devices(schema.operator_name());
  for (size_t i : generators) {
    (*stack)[i] = c10::IValue(default_generator(call.device()));
  }
  {
    DeviceScope scope(call.device());
    op.redispatchBoxed(c10::DispatchKeySet(c10::DispatchKey::CPU), stack);
  }
  call.sync_mutated();
  const size_t returns = schema.returns().size();
  for (size_t i = stack->size() - returns; i < stack->size(); ++i) {
    (*stack)[i] = convert_result(call, (*stack)[i]);
  }
}

int64_t fallback_calls() { return g_calls.load(); }

// Ops with both a CPU kernel and a CompositeExplicitAutogradNonFunctional one would take the
// composite on neuron (which differs, e.g. in how out= is resized); give them the fallback as
// their neuron kernel so they run exactly the CPU kernel.
int64_t mirror_cpu_kernels() {
  static std::mutex mutex;
  static std::unique_ptr<torch::Library> lib;
  static int64_t mirrored = 0;
  std::lock_guard<std::mutex> lock(mutex);
  if (lib) {
    return mirrored;
  }
  lib = std::make_unique<torch::Library>(torch::Library::IMPL, "aten",
                                         c10::DispatchKey::PrivateUse1, __FILE__, __LINE__);
  auto& dispatcher = c10::Dispatcher::singleton();
  for (const auto& name : dispatcher.getAllOpNames()) {
    if (name.name.rfind("aten::", 0) != 0) {
      continue;
    }
    auto handle = dispatcher.findOp(name);
    if (!handle || !handle->hasKernelForDispatchKey(c10::DispatchKey::CPU) ||
        !handle->hasKernelForDispatchKey(
            c10::DispatchKey::CompositeExplicitAutogradNonFunctional) ||
        handle->hasKernelForDispatchKey(c10::DispatchKey::PrivateUse1)) {
      continue;
    }
    std::string full = name.name;
    if (!name.overload_name.empty()) {
      full += "." + name.overload_name;
    }
    lib->impl(full.c_str(), torch::CppFunction::makeFromBoxedFunction<&cpu_fallback>());
    ++mirrored;
  }
  return mirrored;
}

TORCH_LIBRARY_IMPL(_, PrivateUse1, m) {
  m.fallback(torch::CppFunction::makeFromBoxedFunction<&cpu_fallback>());
}

// torch's conjugate/negative fallbacks materialise a lazily conjugated source by cloning it,
// and a clone copies through _copy_from again: endless recursion. Our _copy_from copies with
// the conj/neg bits on its CPU views, which torch's CPU copy resolves.
TORCH_LIBRARY_IMPL(aten, Conjugate, m) {
  m.impl("_copy_from", torch::CppFunction::makeFallthrough());
  m.impl("_copy_from_and_resize", torch::CppFunction::makeFallthrough());
}

TORCH_LIBRARY_IMPL(aten, Negative, m) {
  m.impl("_copy_from", torch::CppFunction::makeFallthrough());
  m.impl("_copy_from_and_resize", torch::CppFunction::makeFallthrough());
}

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("empty.memory_format", TORCH_FN(empty_memory_format));
  m.impl("empty_strided", TORCH_FN(empty_strided));
  m.impl("as_strided", TORCH_FN(as_strided));
  m.impl("view", TORCH_FN(view));
  m.impl("_reshape_alias", TORCH_FN(reshape_alias));
  m.impl("resize_", TORCH_FN(resize_));
  m.impl("set_.source_Storage_storage_offset", TORCH_FN(set_storage));
  m.impl("set_.source_Storage", TORCH_FN(set_source_storage));
  m.impl("set_.source_Tensor", TORCH_FN(set_source_tensor));
  m.impl("set_", TORCH_FN(set_empty));
  m.impl("_copy_from", TORCH_FN(copy_from));
  m.impl("_copy_from_and_resize", TORCH_FN(copy_from_and_resize));
  m.impl("_local_scalar_dense", TORCH_FN(local_scalar_dense));
  m.impl("record_stream", TORCH_FN(record_stream));
}

}  // namespace nki_neuron
