// The simulated `neuron` device (PrivateUse1): shared declarations of the extension's pieces.
//
// Neuron memory is host memory, so a neuron tensor and a CPU tensor can share bytes: every
// aten op without a neuron kernel runs torch's CPU kernel on zero-copy CPU views (fallback.cpp).
#pragma once

#include <ATen/core/Generator.h>
#include <ATen/core/Tensor.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <c10/core/Allocator.h>
#include <c10/core/Storage.h>

#include <cstdint>

namespace nki_neuron {

constexpr int kMaxDevices = 64;

// ---- devices (device.cpp)
int device_count();
void set_device_count(int n);
c10::DeviceIndex current_device();
void set_current_device(c10::DeviceIndex index);
c10::Device device_of(c10::DeviceIndex index);
void check_index(c10::DeviceIndex index);

// ---- memory (device.cpp): bytes held by live neuron storages, per device
c10::Allocator* device_allocator();
// Allocates counted neuron bytes but labels them CPU: the backing allocator of the CPU views,
// so a CPU kernel that resizes an out= view allocates neuron memory (see fallback.cpp).
c10::Allocator* view_allocator();
int64_t memory_allocated(c10::DeviceIndex index);
int64_t max_memory_allocated(c10::DeviceIndex index);
void reset_peak(c10::DeviceIndex index);
void resize_storage(c10::StorageImpl* storage, size_t nbytes);

// ---- RNG (device.cpp): one CPU generator per device, separate from torch's CPU stream
const at::Generator& default_generator(c10::DeviceIndex index);

// ---- views (device.cpp)
// A CPU tensor on `storage` (a CPU storage over the neuron bytes) with t's geometry.
at::Tensor tensor_on(const c10::Storage& storage, const at::Tensor& like, c10::DispatchKey key);
// A CPU storage over the bytes of a neuron storage; it keeps the neuron storage alive.
c10::Storage cpu_storage_over(c10::StorageImpl* neuron, bool resizable);
// A neuron storage that takes over the bytes of a CPU storage (kept alive, counted).
c10::Storage neuron_storage_over(const c10::Storage& cpu, c10::DeviceIndex index);
at::Tensor as_cpu(const at::Tensor& t);
at::Tensor as_neuron(const at::Tensor& t, c10::DeviceIndex index);

// ---- the boxed fallback (fallback.cpp)
void cpu_fallback(const c10::OperatorHandle& op, torch::jit::Stack* stack);
int64_t mirror_cpu_kernels();
int64_t fallback_calls();

// ---- SDPA (overrideable.cpp)
// Set by nki/torch/routing.py: true while its SDPA backward (which returns the mask gradient)
// is registered and routing is on. Only then may a mask that needs a gradient take the
// overrideable op: the extension's default SDPA backward cannot compute that gradient.
void set_sdpa_mask_grad_routed(bool routed);
bool sdpa_mask_grad_routed();

}  // namespace nki_neuron
