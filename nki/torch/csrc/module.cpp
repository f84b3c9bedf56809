// Python bindings of the neuron device extension (nki/torch/device.py is their only user).
#include "neuron.h"

#include <torch/csrc/Generator.h>
#include <torch/csrc/utils/pybind.h>

namespace py = pybind11;
using namespace nki_neuron;

namespace {

c10::DeviceIndex index_arg(int index) {
  return static_cast<c10::DeviceIndex>(index < 0 ? current_device() : index);
}

}  // namespace

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.doc() = "the simulated neuron device (PrivateUse1)";
  m.def("device_count", &device_count);
  m.def("set_device_count", &set_device_count);
  m.def("current_device", [] { return static_cast<int>(current_device()); });
  m.def("set_device", [](int index) { set_current_device(index_arg(index)); });
  m.def("memory_allocated", [](int index) { return memory_allocated(index_arg(index)); });
  m.def("max_memory_allocated",
        [](int index) { return max_memory_allocated(index_arg(index)); });
  m.def("reset_peak_memory_stats", [](int index) { reset_peak(index_arg(index)); });
  m.def("default_generator", [](int index) {
    return py::reinterpret_steal<py::object>(
        THPGenerator_Wrap(default_generator(index_arg(index))));
  });
  m.def("as_cpu", &as_cpu, py::arg("tensor"));
  m.def("as_neuron", [](const at::Tensor& t, int index) { return as_neuron(t, index_arg(index)); },
        py::arg("tensor"), py::arg("device") = -1);
  m.def("mirror_cpu_kernels", &mirror_cpu_kernels);
  m.def("fallback_calls", &fallback_calls);
  m.def("set_sdpa_mask_grad_routed", &set_sdpa_mask_grad_routed, py::arg("routed"));
  m.def("sdpa_mask_grad_routed", &sdpa_mask_grad_routed);
}
