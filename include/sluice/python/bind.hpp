// sluice/python/bind.hpp — any sluice loader as a Python iterable of dicts of DLPack tensors,
// with the iteration, epoch and resume habits of PyTorch's DataLoader and StatefulDataLoader.
//
// register_types(m) adds Tensor, Loader and the exceptions to a pybind11 module; wrap(loader)
// hands a composed pipeline to Python. There, each iter(loader) starts the next epoch (set_epoch
// names one), next() waits with the GIL released (Ctrl-C arrives within about 50 ms),
// state_dict()/load_state_dict() resume as StatefulDataLoader does (checked against the pipeline),
// close() and `with` stop the workers, and deleting a loader mid-epoch returns promptly. A Tensor
// holds one DLPack export of a batch tensor (the current protocol: versioned capsules, copy=,
// dl_device=, stream=), so the batch's slot returns to the ring when the last tensor made from it
// dies.
// Errors: every sluice error reaches Python with its full C++ text: FormatError and UsageError
// (both also ValueError), IOError (also OSError), Error (a RuntimeError, the base of all).
// Threads: the workers are C++ threads and never take the GIL. An example, and what each call does
// exactly: docs/bind.md.
#pragma once

#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#if defined(__GLIBCXX__)
#include <cxxabi.h>
#endif

#include <atomic>
#include <chrono>
#include <cmath>
#include <exception>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <mutex>
#include <new>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "sluice/core/dlpack.hpp"
#include "sluice/core/error.hpp"
#include "sluice/core/state.hpp"
#include "sluice/diag/advisor.hpp"
#include "sluice/diag/json.hpp"
#include "sluice/diag/report.hpp"

#if !SLUICE_HAS_DLPACK()
#error "sluice/python/bind.hpp needs <dlpack/dlpack.h> (Debian: libdlpack-dev; CMake target sluice::dlpack)"
#endif

namespace sluice::python {

namespace py = pybind11;

namespace detail {

// DLPack 1.0's versioned managed tensor. Its layout is fixed by the DLPack ABI, so the capsule
// protocol's "dltensor_versioned" is served here even with a 0.x header (Debian's libdlpack-dev
// is 0.6): a consumer reads exactly these fields.
#if SLUICE_DLPACK_VERSIONED
using managed_versioned = DLManagedTensorVersioned;
#else
struct dl_version {
  std::uint32_t major;
  std::uint32_t minor;
};
struct managed_versioned {
  dl_version version;
  void* manager_ctx;
  void (*deleter)(managed_versioned* self);
  std::uint64_t flags;
  DLTensor dl_tensor;
};
#endif
inline constexpr std::uint64_t flag_read_only = 1ULL << 0;
inline constexpr std::uint64_t flag_is_copied = 1ULL << 1;

inline std::size_t element_bytes(DLDataType t) noexcept { return (static_cast<std::size_t>(t.bits) * t.lanes + 7) / 8; }

// Whether the interpreter is shutting down. A thread that takes the GIL then never gets it: before
// Python 3.14 the interpreter ends that thread with pthread_exit, whose unwinding through C++ (a
// noexcept destructor that takes the GIL back, a capsule's deleter) aborts the whole process with
// "terminate called without an active exception" — what a daemon thread iterating a loader met
// when the program ended.
inline bool finalizing() noexcept {
#if PY_VERSION_HEX >= 0x030D0000
  return Py_IsFinalizing() != 0;
#else
  return _Py_IsFinalizing() != 0;
#endif
}

// The interpreter's main thread (Python's threading.main_thread()), read once at import.
inline unsigned long& main_thread_ident() noexcept {
  static unsigned long ident = 0;
  return ident;
}

// A thread that would take the GIL while the interpreter shuts down waits here instead, as Python
// 3.14 makes such threads wait: the process ends around it (only daemon threads can be here; the
// interpreter joined the others before it began to shut down).
inline void wait_out_shutdown_if_finalizing() noexcept {
  while (finalizing()) std::this_thread::sleep_for(std::chrono::hours(1));
}

// py::gil_scoped_release, but a thread that would take the GIL back while the interpreter shuts
// down waits out the shutdown instead (see finalizing()); one that shutdown overtakes while it
// waits for the GIL is ended by the interpreter, and this destructor lets that unwinding pass
// (noexcept(false)) where pybind's would abort. A scope whose code may throw catches into an
// exception_ptr inside, so that this destructor never runs while an exception is in flight.
class without_gil {
 public:
  without_gil() noexcept : state_(PyEval_SaveThread()) {}
  ~without_gil() noexcept(false) {
    wait_out_shutdown_if_finalizing();
    PyEval_RestoreThread(state_);
  }
  without_gil(const without_gil&) = delete;
  without_gil& operator=(const without_gil&) = delete;

 private:
  PyThreadState* state_;
};

}  // namespace detail

// One tensor of a batch: owns a DLPack export, which holds the batch's slot. Its description
// (dtype, shape) may be a view of the export's: a file's dtype over the bytes collate copied.
class tensor {
 public:
  static constexpr int max_ndim = 8;
  explicit tensor(DLManagedTensor* held) : held_(held) {
    dl_ = held->dl_tensor;
    if (dl_.ndim > max_ndim) throw usage_error("sluice: a tensor of more than 8 dimensions cannot be exported");
    for (int i = 0; i < dl_.ndim; ++i) {
      shape_[i] = dl_.shape[i];
      strides_[i] = dl_.strides != nullptr ? dl_.strides[i] : 0;
    }
    if (dl_.strides == nullptr) {  // row-major
      std::int64_t st = 1;
      for (int i = dl_.ndim - 1; i >= 0; --i) {
        strides_[i] = st;
        st *= shape_[i];
      }
    }
    dl_.shape = shape_;
    dl_.strides = strides_;
  }
  tensor(const tensor&) = delete;
  tensor& operator=(const tensor&) = delete;
  ~tensor() {
    if (held_ != nullptr && held_->deleter != nullptr) held_->deleter(held_);
  }
  [[nodiscard]] const DLTensor& dl() const noexcept { return dl_; }
  [[nodiscard]] std::size_t bytes() const noexcept {
    std::size_t n = detail::element_bytes(dl_.dtype);
    for (int i = 0; i < dl_.ndim; ++i) n *= static_cast<std::size_t>(dl_.shape[i]);
    return n;
  }
  // Describes the contiguous bytes of the first dimension's rows as `type` with per-row shape
  // `row`: a batch of {n, b} bytes becomes {n, row...} of `type` where the row holds exactly b
  // bytes; anything else is a usage_error naming the tensor (never a silent reinterpretation).
  void view_as(std::string_view name, DLDataType type, const std::vector<std::int64_t>& row) {
    if (dl_.ndim < 1 || static_cast<int>(row.size()) + 1 > max_ndim)
      throw usage_error("sluice: tensor '" + std::string(name) + "' cannot take a row shape of " +
                        std::to_string(row.size()) + " dimensions");
    const std::size_t have = bytes() / (dl_.shape[0] == 0 ? 1 : static_cast<std::size_t>(dl_.shape[0]));
    std::size_t want = detail::element_bytes(type);
    for (auto d : row) want *= static_cast<std::size_t>(d);
    if (dl_.shape[0] != 0 && have != want)
      throw usage_error("sluice: tensor '" + std::string(name) + "': a row holds " + std::to_string(have) +
                        " bytes, the file's dtype and shape describe " + std::to_string(want));
    dl_.dtype = type;
    dl_.ndim = static_cast<std::int32_t>(row.size() + 1);
    for (std::size_t i = 0; i < row.size(); ++i) shape_[i + 1] = row[i];
    std::int64_t st = 1;
    for (int i = dl_.ndim - 1; i >= 0; --i) {
      strides_[i] = st;
      st *= shape_[i];
    }
  }

 private:
  DLManagedTensor* held_;
  DLTensor dl_{};
  std::int64_t shape_[max_ndim]{};
  std::int64_t strides_[max_ndim]{};
};

namespace detail {

// What a capsule hands a consumer: the tensor's description, over either the batch's memory (the
// Python Tensor object, and so its export and the slot, kept alive until the consumer's deleter
// runs) or a copy the export owns.
template <class Managed>
struct capsule_export {
  Managed managed{};
  PyObject* owner = nullptr;  // the Tensor, for a view
  void* copy = nullptr;       // the copied bytes, for copy=True
  std::int64_t shape[tensor::max_ndim]{};
  std::int64_t strides[tensor::max_ndim]{};
  static void deleter(Managed* self) noexcept {
    auto* e = static_cast<capsule_export*>(self->manager_ctx);
    if (e->owner != nullptr && !finalizing()) {  // at shutdown the Tensor is left to the process's end
      // The consumer may drop its tensor on any thread, with or without the GIL.
      const PyGILState_STATE g = PyGILState_Ensure();
      Py_DECREF(e->owner);
      PyGILState_Release(g);
    }
    ::operator delete(e->copy, std::align_val_t{64});
    delete e;
  }
};

template <class Managed>
void capsule_destructor(PyObject* cap) noexcept {
  // A consumer renames the capsule ("used_dltensor", "used_dltensor_versioned") when it takes
  // ownership; one never consumed is released here.
  constexpr const char* name = std::is_same_v<Managed, DLManagedTensor> ? "dltensor" : "dltensor_versioned";
  if (PyCapsule_IsValid(cap, name) != 0) {
    auto* m = static_cast<Managed*>(PyCapsule_GetPointer(cap, name));
    if (m != nullptr && m->deleter != nullptr) m->deleter(m);
  } else {
    PyErr_Clear();
  }
}

template <class Managed>
py::capsule make_capsule(py::object self, bool copy) {
  const tensor& t = self.cast<const tensor&>();
  const DLTensor& src = t.dl();
  auto e = std::make_unique<capsule_export<Managed>>();
  e->managed.dl_tensor = src;
  for (int i = 0; i < src.ndim; ++i) {
    e->shape[i] = src.shape[i];
    e->strides[i] = src.strides[i];
  }
  e->managed.dl_tensor.shape = e->shape;
  e->managed.dl_tensor.strides = e->strides;
  e->managed.manager_ctx = e.get();
  e->managed.deleter = &capsule_export<Managed>::deleter;
  if constexpr (!std::is_same_v<Managed, DLManagedTensor>) {
    e->managed.version = {1, 0};
    e->managed.flags = copy ? flag_is_copied : 0;  // the batch's memory is writable
  }
  if (copy) {
    if (src.device.device_type != kDLCPU)
      throw py::buffer_error("sluice: copy=True of a device tensor is not supported (copy it with the framework)");
    const std::size_t n = t.bytes();
    e->copy = ::operator new(n == 0 ? 1 : n, std::align_val_t{64});
    std::memcpy(e->copy, static_cast<const std::byte*>(src.data) + src.byte_offset, n);
    e->managed.dl_tensor.data = e->copy;
    e->managed.dl_tensor.byte_offset = 0;
  } else {
    e->owner = self.release().ptr();  // the reference the deleter drops
  }
  constexpr const char* name = std::is_same_v<Managed, DLManagedTensor> ? "dltensor" : "dltensor_versioned";
  PyObject* cap = PyCapsule_New(&e->managed, name, &capsule_destructor<Managed>);
  if (cap == nullptr) {
    Py_XDECREF(e->owner);
    ::operator delete(e->copy, std::align_val_t{64});
    throw py::error_already_set();
  }
  e.release();
  return py::reinterpret_steal<py::capsule>(cap);
}

// __dlpack__ as the Python array API standard specifies it.
inline py::capsule dlpack(py::object self, py::object stream, py::object max_version, py::object dl_device,
                          py::object copy) {
  const tensor& t = self.cast<const tensor&>();
  const DLDevice dev = t.dl().device;
  if (!stream.is_none()) {
    if (dev.device_type == kDLCPU)
      throw py::buffer_error("sluice: __dlpack__(stream=" + std::string(py::str(py::repr(stream))) +
                             "): a CPU tensor has no stream; pass None");
    if (!py::isinstance<py::int_>(stream))
      throw py::type_error("sluice: __dlpack__: stream must be an int (a CUDA stream handle) or None");
  }
  if (!dl_device.is_none()) {
    const auto want = dl_device.cast<std::pair<int, int>>();
    if (want.first != static_cast<int>(dev.device_type) || want.second != dev.device_id)
      throw py::buffer_error("sluice: __dlpack__(dl_device=(" + std::to_string(want.first) + ", " +
                             std::to_string(want.second) + ")): the tensor is on (" +
                             std::to_string(static_cast<int>(dev.device_type)) + ", " +
                             std::to_string(dev.device_id) + ") and sluice does not copy across devices");
  }
  const bool do_copy = !copy.is_none() && copy.cast<bool>();
  bool versioned = false;
  if (!max_version.is_none()) {
    const auto v = max_version.cast<std::pair<int, int>>();
    versioned = v.first >= 1;
  }
  return versioned ? make_capsule<managed_versioned>(std::move(self), do_copy)
                   : make_capsule<DLManagedTensor>(std::move(self), do_copy);
}

inline std::string dtype_name(DLDataType t) {
  const std::string bits = std::to_string(t.bits);
  switch (t.code) {
    case kDLInt: return "int" + bits;
    case kDLUInt: return "uint" + bits;
    case kDLFloat: return "float" + bits;
    case kDLBfloat: return "bfloat16";
    case kDLComplex: return "complex" + bits;
    default: break;
  }
  if (t.code == 6) return "bool";  // kDLBool (DLPack 0.8 and later)
  return "code" + std::to_string(t.code) + "_" + bits;
}

}  // namespace detail

// How a batch tensor is described to Python where its bytes have a type collate does not know
// (the rows of an .npy array of float32, of fixed records declared as uint32, ...).
struct tensor_view_spec {
  std::string name;
  DLDataType type{};
  std::vector<std::int64_t> row;  // per-sample shape
};

// A loader behind a per-batch (not per-sample) virtual interface, so one Python class serves
// every pipeline type.
class loader_handle {
 public:
  virtual ~loader_handle() = default;
  virtual void begin(std::uint64_t epoch) = 0;
  virtual void begin_resume(const loader_state& st) = 0;
  // The next batch's tensors as (name, export) pairs; empty at the end of the epoch.
  virtual std::vector<std::pair<std::string, DLManagedTensor*>> next() = 0;
  virtual void end() = 0;
  [[nodiscard]] virtual loader_state state() const = 0;
  [[nodiscard]] virtual loader_state state_at(std::uint64_t epoch, std::uint64_t position) const = 0;
  virtual void check(const loader_state& st) const = 0;  // usage_error when st is not this pipeline's
  [[nodiscard]] virtual pipeline_stats stats() const = 0;
  [[nodiscard]] virtual std::uint64_t batches_for(std::uint64_t epoch) const = 0;
  [[nodiscard]] virtual std::uint64_t batches_from(const loader_state& st) const = 0;
  [[nodiscard]] virtual std::vector<epoch_stats> recent_epochs() const = 0;
};

template <class Loader>
class bound_loader final : public loader_handle {
 public:
  explicit bound_loader(Loader l) : loader_(std::move(l)) {
    // Ctrl-C while the trainer waits for a batch: the check takes the GIL for a moment every 50 ms
    // (the waiting thread released it), and Python's signal handlers run in the main thread.
    loader_.set_interrupt(
        [] {
          // Only the main thread receives KeyboardInterrupt (PyErr_CheckSignals does nothing in
          // another), so no other thread takes the GIL here: a daemon thread that took it while
          // the interpreter shuts down would be ended inside the loader's wait (see finalizing()).
          if (PyThread_get_thread_ident() != detail::main_thread_ident()) return false;
          const PyGILState_STATE g = PyGILState_Ensure();
          const bool raised = PyErr_CheckSignals() != 0;  // the exception stays set for the caller
          PyGILState_Release(g);
          return raised;
        },
        std::chrono::milliseconds(50));
  }
  ~bound_loader() override { end(); }

  void begin(std::uint64_t epoch) override {
    end();
    range_.reset(new range_type(loader_.epoch(epoch)));
  }
  void begin_resume(const loader_state& st) override {
    end();
    range_.reset(new range_type(loader_.resume(st)));
  }
  std::vector<std::pair<std::string, DLManagedTensor*>> next() override {
    if (!range_) throw usage_error("sluice: next() before an epoch was started");
    if (!it_) it_.emplace(range_->begin());
    else ++*it_;
    std::vector<std::pair<std::string, DLManagedTensor*>> out;
    if (*it_ == std::default_sentinel) return out;
    const batch& b = **it_;
    out.reserve(b.tensor_count());
    try {
      for (std::size_t i = 0; i < b.tensor_count(); ++i)
        out.emplace_back(std::string(b.tensor(i).name()), to_dlpack(b, i));
    } catch (...) {
      for (auto& [n, m] : out) m->deleter(m);
      throw;
    }
    return out;
  }
  void end() override {
    it_.reset();
    range_.reset();
  }
  [[nodiscard]] loader_state state() const override { return loader_.state(); }
  [[nodiscard]] loader_state state_at(std::uint64_t e, std::uint64_t p) const override { return loader_.state(e, p); }
  void check(const loader_state& st) const override {
    const loader_state now = loader_.state(st.epoch, st.position);
    check_resumable(st, now.fingerprint, now.seed);
  }
  [[nodiscard]] pipeline_stats stats() const override { return loader_.stats(); }
  [[nodiscard]] std::uint64_t batches_for(std::uint64_t e) const override { return loader_.batches_for(e); }
  [[nodiscard]] std::uint64_t batches_from(const loader_state& st) const override { return loader_.batches_from(st); }
  [[nodiscard]] std::vector<epoch_stats> recent_epochs() const override { return loader_.recent_epochs(); }

 private:
  using range_type = typename Loader::epoch_range;
  Loader loader_;
  std::optional<typename range_type::iterator> it_;  // destroyed before the range
  std::unique_ptr<range_type> range_;
};

// What Python holds: the handle and where the loader stands between epochs.
struct py_loader {
  std::unique_ptr<loader_handle> handle;
  // Serialises the handle (begin, next, end, state) between Python threads. Taken only with the
  // GIL released, so a thread waiting here never blocks the one inside next() from returning.
  std::mutex iterating;
  std::uint64_t next_epoch = 0;           // what the next iter() starts
  std::optional<std::uint64_t> current;   // the epoch of the running (or last) iteration
  bool finished = false;                  // the current iteration delivered its last batch
  // Bumped by iter(), load_state_dict() and close() while they hold `iterating`, so that a thread
  // waiting there in next() for an iterator they ended sees it before taking a batch of the new
  // epoch; atomic, as next() also reads it with the GIL alone.
  std::atomic<std::uint64_t> generation = 0;
  std::optional<loader_state> pending;    // load_state_dict's state, for the next iter()
  std::optional<loader_state> at_close;   // where close() left it: state_dict() still answers
  std::atomic<bool> closed = false;  // set under `iterating` too (see generation)
  std::vector<tensor_view_spec> views;
  // What the source found when it was made and the user should hear (a video too short for any
  // clip, ...): the Python layer warns each, pointing at the line that built the loader.
  std::vector<std::string> notes;

  [[nodiscard]] std::uint64_t epoch() const noexcept {
    if (pending) return pending->epoch;
    if (current && !finished) return *current;
    return next_epoch;
  }
};

// One iteration of a loader (what iter(loader) returns).
struct py_iterator {
  std::shared_ptr<py_loader> loader;
  std::uint64_t generation = 0;
};

template <class Loader>
std::shared_ptr<py_loader> wrap(Loader&& l) {
  auto p = std::make_shared<py_loader>();
  p->handle = std::make_unique<bound_loader<std::remove_cvref_t<Loader>>>(std::forward<Loader>(l));
  return p;
}

namespace detail {

inline constexpr const char* tensor_compare_hint =
    "sluice: a sluice.Tensor does not compare with ==; take it with torch.from_dlpack(t) or numpy.asarray(t) "
    "and compare that";

// The error's text with every nested cause, and the most specific sluice kind among them.
enum class error_kind { other, format, usage, io };
inline void describe(const std::exception& e, std::string& text, error_kind& kind) {
  const std::string_view what = e.what();
  if (text.find(what) == std::string::npos) {  // a stage_error's text already quotes its cause
    if (!text.empty()) text += ": ";
    text += what;
  }
  if (kind == error_kind::other || kind == error_kind::usage) {
    if (dynamic_cast<const format_error*>(&e) != nullptr) kind = error_kind::format;
    else if (dynamic_cast<const io_error*>(&e) != nullptr) kind = error_kind::io;
    else if (dynamic_cast<const usage_error*>(&e) != nullptr) kind = error_kind::usage;
  }
  try {
    std::rethrow_if_nested(e);
  } catch (const std::exception& inner) {
    describe(inner, text, kind);
  } catch (...) {
  }
}

// The exception types, created once per process and never freed (raw references: a py::object
// in a static would be released after the interpreter is gone).
struct exception_types {
  PyObject* base = nullptr;
  PyObject* format = nullptr;
  PyObject* usage = nullptr;
  PyObject* io = nullptr;
};
inline exception_types& exceptions() {
  static exception_types t;
  return t;
}

inline PyObject* new_exception(py::module_& m, const std::string& prefix, const char* name, py::tuple bases,
                               const char* doc) {
  const std::string full = prefix + "." + name;
  PyObject* t = PyErr_NewExceptionWithDoc(full.c_str(), doc, bases.ptr(), nullptr);
  if (t == nullptr) throw py::error_already_set();
  m.attr(name) = py::reinterpret_borrow<py::object>(t);  // the module's reference; ours is kept
  return t;
}

template <class T>
py::object json_of(const T& s) {
  diag::json_writer w;
  diag::to_json(w, s);
  return py::module_::import("json").attr("loads")(std::move(w).str());
}

// The advisor on the loader's kept epochs (complete ones, oldest first), with the trainer's
// validation losses by epoch where it gives them; recommendations as dicts.
inline py::list advise(const loader_handle& h, const py::dict& validation_loss) {
  const pipeline_stats now = h.stats();
  const std::size_t workers = now.workers;
  std::vector<diag::epoch_observation> history;
  for (const auto& e : h.recent_epochs()) {
    if (!e.complete) continue;
    auto o = diag::observe(e, workers);
    o.prefetch_depth = static_cast<double>(now.depth);  // R2 then says "(now N)" where it differs
    const py::int_ key(e.epoch);
    if (validation_loss.contains(key)) o.validation_loss = validation_loss[key].cast<double>();
    history.push_back(std::move(o));
  }
  py::list out;
  for (const auto& r : diag::advise(history)) {
    py::dict d;
    d["rule"] = r.rule;
    d["severity"] = std::string(diag::to_string(r.level));
    d["message"] = r.message;
    d["value"] = std::isnan(r.value) ? py::object(py::none()) : py::object(py::float_(r.value));
    out.append(std::move(d));
  }
  return out;
}

// The handle of a loader that is not closed.
inline loader_handle& open_handle(const py_loader& self) {
  if (self.closed || !self.handle) throw usage_error("sluice: the loader is closed (close() or the end of a `with` block)");
  return *self.handle;
}

// The loader's state as state_dict() reports it (see the top of this header), `iterating` held.
inline loader_state state_locked(py_loader& self) {
  if (self.current && !self.finished) return self.handle->state();
  return self.handle->state_at(self.next_epoch, 0);
}

// close(): the running epoch ends, the workers are joined and the ring freed (batches the trainer
// still holds stay valid: their memory is reference-counted). The state is kept first: a
// checkpoint written after the `with` block (in a finally, after a break) still gets where the
// loader stood.
inline void close(py_loader& self) {
  {
    detail::without_gil nogil;
    const std::lock_guard lk(self.iterating);
    if (self.handle && !self.closed) {
      try {
        self.at_close = self.pending ? *self.pending : state_locked(self);
      } catch (const std::exception&) {  // no state to keep: state_dict() then says closed
      }
    }
    self.handle.reset();
    self.closed = true;
    ++self.generation;
  }
}

inline loader_state state_now(py_loader& self) {
  if (self.closed && self.at_close) return *self.at_close;
  if (self.pending) return *self.pending;
  detail::without_gil nogil;
  const std::lock_guard lk(self.iterating);
  return state_locked(self);
}

inline constexpr const char* ended_iterator =
    "sluice: this iterator was ended by a later iter(loader) or load_state_dict(); iterate the newest one (each "
    "iter(loader) starts an epoch)";

inline py::dict next_batch(py_iterator& it) {
  py_loader& self = *it.loader;
  if (self.closed) throw py::stop_iteration();
  if (it.generation != self.generation) throw usage_error(ended_iterator);
  if (self.finished) throw py::stop_iteration();
  std::vector<std::pair<std::string, DLManagedTensor*>> ts;
  std::exception_ptr failed;  // rethrown with the GIL back (see without_gil)
  {
    detail::without_gil nogil;  // workers run, the trainer's other threads too
    try {
      const std::lock_guard lk(self.iterating);
      // Another thread's iter(), load_state_dict() or close() may have come first: then the batch
      // here is the new iterator's, never taken by this one.
      if (self.handle && it.generation == self.generation) ts = self.handle->next();
#if defined(__GLIBCXX__)
    } catch (abi::__forced_unwind&) {
      throw;
#endif
    } catch (...) {
      failed = std::current_exception();
    }
  }
  if (failed) {
    try {
      std::rethrow_exception(failed);
    } catch (const interrupted&) {
      if (PyErr_Occurred() != nullptr) throw py::error_already_set();  // KeyboardInterrupt, from the check
      throw;
    }
  }
  if (self.closed || it.generation != self.generation) {
    // Ended meanwhile: a batch taken before that belongs to the abandoned epoch.
    for (auto& [name, m] : ts) m->deleter(m);
    if (self.closed) throw py::stop_iteration();
    throw usage_error(ended_iterator);
  }
  if (ts.empty()) {
    self.finished = true;
    throw py::stop_iteration();
  }
  std::vector<std::shared_ptr<tensor>> held;
  held.reserve(ts.size());
  try {
    for (auto& [name, m] : ts) held.push_back(std::make_shared<tensor>(std::exchange(m, nullptr)));
  } catch (...) {
    for (auto& [name, m] : ts)
      if (m != nullptr) m->deleter(m);
    throw;
  }
  py::dict d;
  for (std::size_t i = 0; i < ts.size(); ++i) {
    for (const auto& v : self.views)
      if (v.name == ts[i].first) held[i]->view_as(v.name, v.type, v.row);
    d[py::str(ts[i].first)] = py::cast(held[i]);
  }
  return d;
}

inline std::shared_ptr<py_iterator> start_iteration(const std::shared_ptr<py_loader>& self) {
  (void)open_handle(*self);
  std::optional<loader_state> st = std::exchange(self->pending, std::nullopt);
  const std::uint64_t e = st ? st->epoch : self->next_epoch;
  std::uint64_t generation = 0;
  try {
    detail::without_gil nogil;
    const std::lock_guard lk(self->iterating);
    if (!self->handle) throw usage_error("sluice: the loader is closed (close() or the end of a `with` block)");
    if (st) self->handle->begin_resume(*st);
    else self->handle->begin(e);
    generation = ++self->generation;
  } catch (...) {
    self->pending = st;  // nothing started: the resume is still to come
    throw;
  }
  self->current = e;
  self->finished = false;
  self->next_epoch = e + 1;
  return std::make_shared<py_iterator>(py_iterator{self, generation});
}

}  // namespace detail

// Registers Tensor, Loader, LoaderIterator and the exception types in module m (once per
// module). `qualified` names the exceptions' module (default: m's name), e.g. "sluice" for the
// package whose extension module is sluice._sluice.
inline void register_types(py::module_& m, std::string qualified = {}) {
  if (qualified.empty()) qualified = py::str(m.attr("__name__"));
  if (detail::main_thread_ident() == 0) {
    detail::main_thread_ident() = py::module_::import("threading").attr("main_thread")().attr("ident").cast<unsigned long>();
    // A forked child's one thread is its main thread.
    py::module_::import("os").attr("register_at_fork")(
        py::arg("after_in_child") = py::cpp_function([] { detail::main_thread_ident() = PyThread_get_thread_ident(); }));
  }
  auto& ex = detail::exceptions();
  if (ex.base == nullptr) {
    ex.base = detail::new_exception(m, qualified, "Error", py::make_tuple(py::handle(PyExc_RuntimeError)),
                                    "A sluice error; str() is the C++ message with every nested cause.");
    ex.format = detail::new_exception(m, qualified, "FormatError",
                                      py::make_tuple(py::handle(ex.base), py::handle(PyExc_ValueError)),
                                      "A bad file or record: names the file, the record, the field and the cause.");
    ex.usage = detail::new_exception(m, qualified, "UsageError",
                                     py::make_tuple(py::handle(ex.base), py::handle(PyExc_ValueError)),
                                     "A pipeline used or configured wrongly: names the keyword or call and what "
                                     "would be accepted.");
    ex.io = detail::new_exception(m, qualified, "IOError", py::make_tuple(py::handle(ex.base), py::handle(PyExc_OSError)),
                                  "A file that cannot be opened or read.");
    py::register_exception_translator([](std::exception_ptr p) {
      try {
        if (p) std::rethrow_exception(p);
      } catch (const error& e) {
        std::string text;
        auto kind = detail::error_kind::other;
        detail::describe(e, text, kind);
        auto& x = detail::exceptions();
        PyObject* type = kind == detail::error_kind::format ? x.format
                                 : kind == detail::error_kind::usage ? x.usage
                                 : kind == detail::error_kind::io    ? x.io
                                                                     : x.base;
        PyErr_SetString(type, text.c_str());
      }
    });
  } else {  // a second module in the same process: the same types, so one except clause catches both
    m.attr("Error") = py::reinterpret_borrow<py::object>(ex.base);
    m.attr("FormatError") = py::reinterpret_borrow<py::object>(ex.format);
    m.attr("UsageError") = py::reinterpret_borrow<py::object>(ex.usage);
    m.attr("IOError") = py::reinterpret_borrow<py::object>(ex.io);
  }

  // module_local: a trainer may import the sluice module and its own module built with this header.
  py::class_<tensor, std::shared_ptr<tensor>>(m, "Tensor", py::module_local(),
                                              "One tensor of a batch, in the batch's memory (DLPack, no copy). "
                                              "torch.from_dlpack(t) / numpy.from_dlpack(t) take it without a copy; "
                                              "the batch's slot returns to the ring when the last tensor made from it "
                                              "dies.")
      .def("__dlpack__", &detail::dlpack, py::arg("stream") = py::none(), py::kw_only(),
           py::arg("max_version") = py::none(), py::arg("dl_device") = py::none(), py::arg("copy") = py::none(),
           "The DLPack capsule of the Python array API standard: versioned when max_version >= (1, 0), a copy "
           "when copy=True.")
      .def("__dlpack_device__",
           [](const tensor& t) { return py::make_tuple(static_cast<int>(t.dl().device.device_type), t.dl().device.device_id); })
      // numpy.asarray / numpy.array take it through __array__ (numpy does not look for __dlpack__
      // there): without it numpy made a 0-d object array holding the Tensor.
      .def(
          "__array__",
          [](py::object self, py::object dtype, py::object copy) -> py::object {
            const auto& t = self.cast<const tensor&>();
            if (t.dl().device.device_type != kDLCPU)
              throw py::type_error("sluice: a CUDA tensor has no numpy array; take it with torch.from_dlpack (or "
                                   "cupy.from_dlpack), or copy it to the host there");
            py::object np = py::module_::import("numpy");
            py::object a = np.attr("from_dlpack")(self);  // a view of the batch, which it keeps alive
            const bool must_copy = !copy.is_none() && copy.cast<bool>();
            const bool may_copy = copy.is_none() || must_copy;
            if (!dtype.is_none()) {
              py::object want = np.attr("dtype")(dtype);
              if (!py::object(a.attr("dtype")).equal(want)) {
                if (!may_copy)
                  throw py::value_error("sluice: __array__(dtype=" + std::string(py::str(want)) +
                                        ", copy=False): the batch holds " + detail::dtype_name(t.dl().dtype) +
                                        "; converting needs a copy");
                return a.attr("astype")(want);
              }
            }
            return must_copy ? a.attr("copy")() : a;
          },
          py::arg("dtype") = py::none(), py::arg("copy") = py::none(),
          "numpy's array protocol: numpy.asarray(t) is a view of the batch (no copy), numpy.array(t) a copy; "
          "dtype= converts (a copy).")
      .def_property_readonly("shape",
                             [](const tensor& t) {
                               py::tuple s(t.dl().ndim);
                               for (int i = 0; i < t.dl().ndim; ++i) s[i] = t.dl().shape[i];
                               return s;
                             })
      .def_property_readonly("dtype", [](const tensor& t) { return detail::dtype_name(t.dl().dtype); })
      .def_property_readonly("data_ptr",
                             [](const tensor& t) { return reinterpret_cast<std::uintptr_t>(t.dl().data) + t.dl().byte_offset; })
      .def_property_readonly("device", [](const tensor& t) { return t.dl().device.device_type == kDLCPU ? "cpu" : "cuda"; })
      // len(), bool() and == as numpy and torch answer them: len() of a 0-d tensor is a TypeError
      // (it was 0, so a 0-d tensor of 5 was falsy), truth only for exactly one element (a batch
      // of labels in an `if` was true whenever it was non-empty), and == is refused with where
      // to compare instead of Python's identity test, which said False for equal values.
      .def("__len__",
           [](const tensor& t) -> std::int64_t {
             if (t.dl().ndim == 0) throw py::type_error("sluice: len() of a 0-d sluice.Tensor");
             return t.dl().shape[0];
           })
      .def("__bool__",
           [](py::object self) -> bool {
             const auto& t = self.cast<const tensor&>();
             std::int64_t n = 1;
             for (int i = 0; i < t.dl().ndim; ++i) n *= t.dl().shape[i];
             if (n != 1)
               throw py::value_error("sluice: the truth value of a sluice.Tensor of " + std::to_string(n) +
                                     " elements is ambiguous; take it with torch.from_dlpack(t) or numpy.asarray(t) "
                                     "and use .any() or .all()");
             if (t.dl().device.device_type != kDLCPU)
               throw py::type_error("sluice: the truth value of a CUDA sluice.Tensor needs its value on the host; "
                                    "take it with torch.from_dlpack(t)");
             return py::module_::import("numpy").attr("asarray")(self).attr("item")().cast<bool>();
           })
      .def("__eq__", [](const tensor&, py::object) -> py::object { throw py::type_error(detail::tensor_compare_hint); })
      .def("__ne__", [](const tensor&, py::object) -> py::object { throw py::type_error(detail::tensor_compare_hint); })
      .def("__hash__", [](py::object self) { return static_cast<py::ssize_t>(reinterpret_cast<std::uintptr_t>(self.ptr()) >> 4); })
      // pickle (torch.save(batch), a multiprocessing queue) and copy.deepcopy: a numpy array of the
      // values, a copy, since the batch's memory belongs to this process's ring.
      .def("__reduce__",
           [](py::object self) -> py::object {
             if (self.cast<const tensor&>().dl().device.device_type != kDLCPU)
               throw py::type_error("sluice: a CUDA sluice.Tensor does not pickle; take it with torch.from_dlpack(t) "
                                    "and save that");
             return py::module_::import("numpy").attr("array")(self).attr("__reduce__")();
           })
      // Only for names normal lookup did not find: a torch.Tensor habit (t.to(device), t.float(),
      // t.numpy()) is told where those methods are, instead of a bare AttributeError.
      .def("__getattr__",
           [](const tensor&, const std::string& name) -> py::object {
             if (name.starts_with("_")) throw py::attribute_error("'sluice.Tensor' object has no attribute '" + name + "'");
             throw py::attribute_error(
                 "'sluice.Tensor' object has no attribute '" + name +
                 "': a sluice.Tensor is the batch's memory, handed over through DLPack; take it as a torch tensor "
                 "with torch.from_dlpack(t) (no copy), then t." + name +
                 " is torch's, or as a numpy array with numpy.asarray(t)");
           })
      .def("__repr__", [](const tensor& t) {
        std::string s = "sluice.Tensor(shape=(";
        for (int i = 0; i < t.dl().ndim; ++i) s += std::to_string(t.dl().shape[i]) + (t.dl().ndim == 1 || i + 1 < t.dl().ndim ? "," : "");
        return s + "), dtype=" + detail::dtype_name(t.dl().dtype) + ")";
      });

  py::class_<py_iterator, std::shared_ptr<py_iterator>>(m, "LoaderIterator", py::module_local(),
                                                        "One epoch of a Loader: next() gives the next batch.")
      .def("__iter__", [](std::shared_ptr<py_iterator> self) { return self; })
      .def("__next__", &detail::next_batch)
      .def("__len__", [](const py_iterator& it) {
        const auto& l = *it.loader;  // 0 once closed: list(it) asks for a length hint
        return l.current && !l.closed && l.handle ? l.handle->batches_for(*l.current) : 0;
      });

  py::class_<py_loader, std::shared_ptr<py_loader>>(m, "Loader", py::module_local(),
                                                    "A sluice pipeline: iterate it for batches, an epoch each time.")
      .def("__iter__", &detail::start_iteration, "Starts the next epoch (or the resumed one) and returns its iterator.")
      .def("__len__", [](const py_loader& self) { return detail::open_handle(self).batches_for(self.epoch()); })
      .def(
          "set_epoch",
          [](py_loader& self, std::uint64_t e) {
            if (self.pending && self.pending->epoch != e)
              throw usage_error("sluice: set_epoch(" + std::to_string(e) + ") after load_state_dict() of a state in epoch " +
                                std::to_string(self.pending->epoch) +
                                " would discard the resume; call set_epoch(" + std::to_string(self.pending->epoch) +
                                ") (or nothing) before iterating, or make a new loader to start afresh");
            self.next_epoch = e;
          },
          py::arg("epoch"), "The epoch the next iter() runs (each iter() advances by itself; this is for "
                            "DistributedSampler-style loops).")
      .def_property_readonly("epoch", &py_loader::epoch,
                             "The epoch being iterated, or, between iterations, the one the next iter() starts.")
      .def(
          "state_dict",
          [](py_loader& self) {
            if (!self.closed || !self.at_close) (void)detail::open_handle(self);
            const loader_state st = detail::state_now(self);
            py::dict d;
            d["sluice_state"] = py::bytes(state_to_string(st));
            d["epoch"] = st.epoch;
            d["position"] = st.position;
            return d;
          },
          "Where the loader stands, for load_state_dict() in this or another process.")
      .def(
          "load_state_dict",
          [](py_loader& self, const py::dict& d) {
            if (!d.contains("sluice_state"))
              throw usage_error("sluice: load_state_dict: the dict has no 'sluice_state' (it is what state_dict() returns)");
            (void)detail::open_handle(self);
            const std::string raw = d["sluice_state"].cast<std::string>();
            loader_state st = state_from_string(raw, "<state_dict>");
            {
              detail::without_gil nogil;
              const std::lock_guard lk(self.iterating);
              self.handle->check(st);
              self.handle->end();
              // A state after an epoch's last batch: the next epoch, from its start.
              if (self.handle->batches_from(st) == 0) st = self.handle->state_at(st.epoch + 1, 0);
              ++self.generation;
            }
            self.pending = st;
            self.current.reset();
            self.finished = false;
            self.next_epoch = st.epoch;
          },
          py::arg("state_dict"), "The next iter() resumes where state_dict() said the loader stood.")
      .def("stats", [](const py_loader& self) { return detail::json_of(detail::open_handle(self).stats()); },
           "The pipeline's counters (diag/report.hpp's JSON) as a dict.")
      .def(
          "epoch_stats",
          [](const py_loader& self, std::uint64_t e) -> py::object {
            const auto runs = detail::open_handle(self).recent_epochs();  // oldest first: the latest run of e
            for (auto s = runs.rbegin(); s != runs.rend(); ++s)
              if (s->epoch == e) return detail::json_of(*s);
            return py::none();
          },
          py::arg("epoch"), "One epoch's figures (per stage, stall, bottleneck), or None when no longer kept.")
      .def(
          "advise", [](const py_loader& self, const py::dict& v) { return detail::advise(detail::open_handle(self), v); },
          py::arg("validation_loss") = py::dict(),
          "The advisor's recommendations on the kept epochs: a list of {rule, severity, message, value}.")
      .def_property_readonly("closed", [](const py_loader& self) { return self.closed.load(); })
      .def_property_readonly("notes", [](const py_loader& self) { return self.notes; },
                             "What the source found when it was made and the user should hear (warned by sluice.Loader).")
      .def(
          "close",
          [](py_loader& self) { detail::close(self); },
          "Ends the epoch and joins the workers; iterators end (StopIteration), and iter(), len(), stats() and "
          "advise() raise UsageError; state_dict() still says where the loader stood. Batches already taken stay "
          "valid. Closing twice is harmless.")
      .def("__enter__", [](std::shared_ptr<py_loader> self) { return self; })
      .def("__exit__", [](py_loader& self, py::args) {
        detail::close(self);
        return false;
      });
}

}  // namespace sluice::python
