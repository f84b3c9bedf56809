// torch.distributed backend "neuron": every collective runs on Gloo over zero-copy CPU views.
//
// Gloo's kernels accept only CPU (or CUDA) tensors, but neuron memory is host memory, so a CPU
// tensor over the same bytes is all Gloo needs: results land in the neuron tensors directly.
// Being a C++ c10d::Backend registered inside an ordinary ProcessGroup, it is reached by
// DDP's C++ reducer, functional collectives (DTensor, FSDP2) and pg._get_backend(device).
// Works and futures report the caller's neuron tensors, not the CPU views.
#include <ATen/core/ivalue.h>
#include <c10/util/intrusive_ptr.h>
#include <torch/csrc/distributed/c10d/Backend.hpp>
#include <torch/csrc/distributed/c10d/Work.hpp>
#include <torch/csrc/utils/pybind.h>

#include <mutex>
#include <set>
#include <string>
#include <utility>
#include <vector>

namespace py = pybind11;

namespace nki_neuron {
namespace {

using Tensors = std::vector<at::Tensor>;
using TensorLists = std::vector<std::vector<at::Tensor>>;
using WorkPtr = c10::intrusive_ptr<c10d::Work>;

void release_storage(void* ctx) {
  c10::raw::intrusive_ptr::decref(static_cast<c10::StorageImpl*>(ctx));
}

// A CPU tensor on a neuron tensor's bytes (it keeps the neuron storage alive); CPU tensors
// pass through. The device extension has the same function; this module is built apart.
at::Tensor host(const at::Tensor& t) {
  if (!t.defined() || !t.is_privateuseone()) {
    return t;
  }
  auto* neuron = t.storage().unsafeGetStorageImpl();
  c10::raw::intrusive_ptr::incref(neuron);
  c10::DataPtr ptr(neuron->mutable_data(), neuron, &release_storage, c10::Device(c10::kCPU));
  c10::Storage storage(c10::make_intrusive<c10::StorageImpl>(
      c10::StorageImpl::use_byte_size_t(), neuron->nbytes(), std::move(ptr), nullptr, false));
  auto out = at::detail::make_tensor<c10::TensorImpl>(
      std::move(storage), c10::DispatchKeySet(c10::DispatchKey::CPU), t.dtype());
  out.unsafeGetTensorImpl()->set_sizes_and_strides(t.sizes(), t.strides(), t.storage_offset());
  return out;
}

Tensors host(const Tensors& ts) {
  Tensors out;
  out.reserve(ts.size());
  for (const auto& t : ts) {
    out.push_back(host(t));
  }
  return out;
}

TensorLists host(const TensorLists& lists) {
  TensorLists out;
  out.reserve(lists.size());
  for (const auto& ts : lists) {
    out.push_back(host(ts));
  }
  return out;
}

Tensors flat(const TensorLists& lists) {
  Tensors out;
  for (const auto& ts : lists) {
    out.insert(out.end(), ts.begin(), ts.end());
  }
  return out;
}

// Gloo's work, reporting the caller's (neuron) tensors as its result.
class NeuronWork : public c10d::Work {
 public:
  NeuronWork(WorkPtr inner, Tensors outputs)
      : c10d::Work(-1, inner->retrieveOpType()),
        inner_(std::move(inner)),
        outputs_(std::move(outputs)) {}

  bool isCompleted() override { return inner_->isCompleted(); }
  bool isSuccess() const override { return inner_->isSuccess(); }
  std::exception_ptr exception() const override { return inner_->exception(); }
  int sourceRank() const override { return inner_->sourceRank(); }
  std::vector<at::Tensor> result() override { return outputs_; }
  void synchronize() override { inner_->synchronize(); }
  bool wait(std::chrono::milliseconds timeout) override { return inner_->wait(timeout); }
  void abort() override { inner_->abort(); }
  c10::intrusive_ptr<c10::ivalue::Future> getFutureResult() override {
    return inner_->getFutureResult();
  }
  c10::intrusive_ptr<c10::ivalue::Future> getFuture() override {
    Tensors outputs = outputs_;
    return inner_->getFuture()->then(
        [outputs](c10::ivalue::Future&) { return c10::IValue(outputs); },
        c10::ListType::ofTensors());
  }

 private:
  WorkPtr inner_;
  Tensors outputs_;
};

WorkPtr wrap(WorkPtr inner, Tensors outputs) {
  return c10::make_intrusive<NeuronWork>(std::move(inner), std::move(outputs));
}

// Gloo's worker threads live as long as its ProcessGroupGloo object: its shutdown() is a no-op,
// and ProcessGroup objects outlive destroy_process_group() wherever Python still refers to them
// (device meshes, FSDP state). A worker that then finishes a collective during interpreter exit
// frees the caller's tensors, which takes the GIL; Python ends such threads with pthread_exit,
// whose unwinding through Gloo's noexcept destructors calls std::terminate ("terminate called
// without an active exception"). So stopping this backend (shutdown/abort, which
// destroy_process_group calls, or stop_all at exit) destroys Gloo's backend here and then:
// its destructor drains the queue and joins the workers, with the GIL released so they can
// finish.
class NeuronBackend : public c10d::Backend {
 public:
  explicit NeuronBackend(c10::intrusive_ptr<c10d::Backend> gloo)
      : c10d::Backend(gloo->getRank(), gloo->getSize()), gloo_(std::move(gloo)) {
    std::lock_guard<std::mutex> lock(registry_mutex());
    registry().insert(this);
  }
  ~NeuronBackend() override {
    {
      std::lock_guard<std::mutex> lock(registry_mutex());
      registry().erase(this);
    }
    stop();
  }

  // Destroy Gloo's backend now (joining its worker threads); later collectives raise.
  void stop() {
    c10::intrusive_ptr<c10d::Backend> gloo;
    {
      std::lock_guard<std::mutex> lock(gloo_mutex_);
      gloo = std::move(gloo_);
    }
    if (gloo && Py_IsInitialized() && PyGILState_Check()) {
      py::gil_scoped_release release;   // the workers may need the GIL to free tensors
      gloo.reset();
    }
  }

  // Every live backend stopped: run at interpreter exit, before Python finalizes.
  static void stop_all() {
    std::vector<NeuronBackend*> live;
    {
      std::lock_guard<std::mutex> lock(registry_mutex());
      live.assign(registry().begin(), registry().end());
    }
    for (auto* backend : live) {
      backend->stop();
    }
  }

  bool stopped() {
    std::lock_guard<std::mutex> lock(gloo_mutex_);
    return !gloo_;
  }

  const std::string getBackendName() const override { return "neuron"; }
  c10::intrusive_ptr<Options> getBackendOptions() override { return live()->getBackendOptions(); }
  void setTimeout(std::chrono::milliseconds timeout) override { live()->setTimeout(timeout); }
  void setSequenceNumberForGroup() override { live()->setSequenceNumberForGroup(); }
  uint64_t getSequenceNumberForGroup() override { return live()->getSequenceNumberForGroup(); }
  void setGroupUid(const std::string& uid) override {
    c10d::Backend::setGroupUid(uid);
    live()->setGroupUid(uid);
  }
  void enableCollectivesTiming() override { live()->enableCollectivesTiming(); }
  void monitoredBarrier(const c10d::BarrierOptions& opts, bool wait_all) override {
    live()->monitoredBarrier(opts, wait_all);
  }
  void abort() override {
    c10::intrusive_ptr<c10d::Backend> gloo;
    {
      std::lock_guard<std::mutex> lock(gloo_mutex_);
      gloo = gloo_;
    }
    if (gloo) {
      gloo->abort();
    }
    gloo.reset();
    stop();
  }
  void shutdown() override { stop(); }

  WorkPtr broadcast(Tensors& ts, const c10d::BroadcastOptions& opts) override {
    auto h = host(ts);
    return wrap(live()->broadcast(h, opts), ts);
  }
  WorkPtr allreduce(Tensors& ts, const c10d::AllreduceOptions& opts) override {
    auto h = host(ts);
    return wrap(live()->allreduce(h, opts), ts);
  }
  WorkPtr allreduce_coalesced(Tensors& ts,
                              const c10d::AllreduceCoalescedOptions& opts) override {
    auto h = host(ts);
    return wrap(live()->allreduce_coalesced(h, opts), ts);
  }
  WorkPtr reduce(Tensors& ts, const c10d::ReduceOptions& opts) override {
    auto h = host(ts);
    return wrap(live()->reduce(h, opts), ts);
  }
  WorkPtr allgather(TensorLists& outs, Tensors& ins, const c10d::AllgatherOptions& opts) override {
    auto o = host(outs);
    auto i = host(ins);
    return wrap(live()->allgather(o, i, opts), flat(outs));
  }
  WorkPtr _allgather_base(at::Tensor& out, at::Tensor& in,
                          const c10d::AllgatherOptions& opts) override {
    auto o = host(out);
    auto i = host(in);
    return wrap(live()->_allgather_base(o, i, opts), {out});
  }
  WorkPtr allgather_coalesced(TensorLists& outs, Tensors& ins,
                              const c10d::AllgatherOptions& opts) override {
    auto o = host(outs);
    auto i = host(ins);
    return wrap(live()->allgather_coalesced(o, i, opts), flat(outs));
  }
  WorkPtr allgather_into_tensor_coalesced(Tensors& outs, Tensors& ins,
                                          const c10d::AllgatherOptions& opts) override {
    auto o = host(outs);
    auto i = host(ins);
    return wrap(live()->allgather_into_tensor_coalesced(o, i, opts), outs);
  }
  WorkPtr gather(TensorLists& outs, Tensors& ins, const c10d::GatherOptions& opts) override {
    auto o = host(outs);
    auto i = host(ins);
    return wrap(live()->gather(o, i, opts), flat(outs));
  }
  WorkPtr scatter(Tensors& outs, TensorLists& ins, const c10d::ScatterOptions& opts) override {
    auto o = host(outs);
    auto i = host(ins);
    return wrap(live()->scatter(o, i, opts), outs);
  }
  WorkPtr reduce_scatter(Tensors& outs, TensorLists& ins,
                         const c10d::ReduceScatterOptions& opts) override {
    auto o = host(outs);
    auto i = host(ins);
    return wrap(live()->reduce_scatter(o, i, opts), outs);
  }
  WorkPtr _reduce_scatter_base(at::Tensor& out, at::Tensor& in,
                               const c10d::ReduceScatterOptions& opts) override {
    auto o = host(out);
    auto i = host(in);
    return wrap(live()->_reduce_scatter_base(o, i, opts), {out});
  }
  WorkPtr reduce_scatter_tensor_coalesced(Tensors& outs, Tensors& ins,
                                          const c10d::ReduceScatterOptions& opts) override {
    auto o = host(outs);
    auto i = host(ins);
    return wrap(live()->reduce_scatter_tensor_coalesced(o, i, opts), outs);
  }
  WorkPtr alltoall_base(at::Tensor& out, at::Tensor& in, std::vector<int64_t>& out_splits,
                        std::vector<int64_t>& in_splits,
                        const c10d::AllToAllOptions& opts) override {
    auto o = host(out);
    auto i = host(in);
    return wrap(live()->alltoall_base(o, i, out_splits, in_splits, opts), {out});
  }
  WorkPtr alltoall(Tensors& outs, Tensors& ins, const c10d::AllToAllOptions& opts) override {
    auto o = host(outs);
    auto i = host(ins);
    return wrap(live()->alltoall(o, i, opts), outs);
  }
  WorkPtr send(Tensors& ts, int dst, int tag) override {
    auto h = host(ts);
    return wrap(live()->send(h, dst, tag), ts);
  }
  WorkPtr recv(Tensors& ts, int src, int tag) override {
    auto h = host(ts);
    return wrap(live()->recv(h, src, tag), ts);
  }
  WorkPtr recvAnysource(Tensors& ts, int tag) override {
    auto h = host(ts);
    return wrap(live()->recvAnysource(h, tag), ts);
  }
  WorkPtr barrier(const c10d::BarrierOptions& opts) override {
    return wrap(live()->barrier(opts), {});
  }

 private:
  c10::intrusive_ptr<c10d::Backend> live() {
    std::lock_guard<std::mutex> lock(gloo_mutex_);
    TORCH_CHECK(gloo_, "the 'neuron' process group was shut down (destroy_process_group or "
                "interpreter exit); create a new one with dist.init_process_group");
    return gloo_;
  }
  static std::set<NeuronBackend*>& registry() {
    static auto* backends = new std::set<NeuronBackend*>();   // never destroyed: used at exit
    return *backends;
  }
  static std::mutex& registry_mutex() {
    static auto* mutex = new std::mutex();
    return *mutex;
  }

  std::mutex gloo_mutex_;
  c10::intrusive_ptr<c10d::Backend> gloo_;
};

// torch's own holder for c10d types (releases the GIL while a backend is destroyed, since
// destroying Gloo joins its threads); same layout as c10::intrusive_ptr.
template <typename T>
class NoGilPtr {
 public:
  NoGilPtr() = default;
  explicit NoGilPtr(T* raw) : impl_(c10::intrusive_ptr<T>::unsafe_steal_from_new(raw)) {}
  explicit NoGilPtr(c10::intrusive_ptr<T> impl) : impl_(std::move(impl)) {}
  NoGilPtr(const NoGilPtr&) = default;
  NoGilPtr(NoGilPtr&&) = default;
  NoGilPtr& operator=(const NoGilPtr&) = default;
  NoGilPtr& operator=(NoGilPtr&&) = default;
  ~NoGilPtr() {
    if (impl_ && PyGILState_Check()) {
      py::gil_scoped_release release;
      impl_.reset();
    }
  }
  T& operator*() const noexcept { return *impl_; }
  T* operator->() const noexcept { return impl_.get(); }
  T* get() const noexcept { return impl_.get(); }

 private:
  c10::intrusive_ptr<T> impl_;
};

}  // namespace
}  // namespace nki_neuron

PYBIND11_DECLARE_HOLDER_TYPE(T, nki_neuron::NoGilPtr<T>, true)

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  using nki_neuron::NeuronBackend;
  m.doc() = "torch.distributed backend 'neuron' (Gloo over zero-copy CPU views)";
  py::class_<NeuronBackend, c10d::Backend, nki_neuron::NoGilPtr<NeuronBackend>>(m,
                                                                               "NeuronBackend")
      .def(py::init<c10::intrusive_ptr<c10d::Backend>>(), py::arg("gloo"),
           py::call_guard<py::gil_scoped_release>())
      .def("stop", &NeuronBackend::stop, "destroy Gloo's backend now, joining its threads")
      .def_property_readonly("stopped", &NeuronBackend::stopped);
  m.def("stop_all", &NeuronBackend::stop_all, "stop every live neuron backend (at exit)");
}
