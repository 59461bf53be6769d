// sluice/python/bind.hpp — any sluice loader as a Python iterable of dicts of DLPack tensors.
//
// A trainer that composed its pipeline in C++ hands it to Python in a few lines (pybind11, from
// Debian's pybind11-dev; the CMake target sluice::python builds a module with it):
//
//   #include <sluice/python/bind.hpp>
//   PYBIND11_MODULE(my_loaders, m) {
//     sluice::python::register_types(m);                      // Tensor, Loader, the exceptions
//     m.def("train", [](std::string path, std::size_t batch) {
//       sluice::io::shard_reader r{path};
//       return sluice::python::wrap(sluice::from(sluice::sample::shuffle(r.size(), {.seed = 7}))
//                                   | sluice::read(std::move(r)) | sluice::collate({.batch = batch})
//                                   | sluice::prefetch(2, {.workers = 4}));
//     });
//   }
//
//   loader = my_loaders.train("train.sluice", 256)      # Python
//   for epoch in range(10):
//       loader.set_epoch(epoch)
//       for batch in loader:                             # {"data": Tensor, "label": Tensor}
//           x = torch.from_dlpack(batch["data"])         # no copy: the batch's own memory
//
// What Python sees (class sluice.Loader):
//   iter(loader)          starts the epoch set by set_epoch(e) (0 at first), or resumes the state
//                         given to load_state_dict(); starting an iteration ends the previous one.
//   next(it)              waits for the next batch with the GIL released (the workers never take
//                         it: they are C++ threads), and returns {name: sluice.Tensor}.
//   len(loader)           batches in the epoch set by set_epoch.
//   state_dict()          {"sluice_state": bytes}: where the current epoch stands (delivered batches
//                         count as consumed), with the fingerprint resume checks (core/state.hpp);
//                         load_state_dict(d) makes the next iteration resume from it (a state of
//                         another pipeline is a sluice.UsageError naming each difference).
//   stats()               the pipeline's counters as a dict (diag/report.hpp's JSON, parsed);
//                         epoch_stats(e) one epoch's (per stage, stall, bottleneck), or None.
//   advise(validation_loss={epoch: loss})  the advisor's recommendations on the kept epochs, as
//                         dicts {rule, severity, message, value}.
// A sluice.Tensor holds one DLPack export of a batch tensor, so the batch's slot stays out of the
// ring while a Tensor (or any framework tensor made from it) lives: the slot returns when the last
// of them dies. It implements __dlpack__ / __dlpack_device__ (torch.from_dlpack, numpy.from_dlpack,
// CuPy, JAX take it without a copy) and has .shape, .dtype (numpy-style name), .data_ptr,
// .device.
//
// Errors: every sluice error reaches Python as an exception carrying the full C++ text (the stage,
// the sample, then each nested cause: file, record, field, what was wrong): sluice.FormatError
// (also a ValueError) when any cause is a format_error, sluice.UsageError (also a ValueError) for
// misuse, sluice.IOError (also an OSError), and sluice.Error (a RuntimeError, the base of all
// four) for the rest.
#pragma once

#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <cmath>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <utility>

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

// One tensor of a batch: owns a DLPack export, which holds the batch's slot.
class tensor {
 public:
  explicit tensor(DLManagedTensor* held) noexcept : held_(held) {}
  tensor(const tensor&) = delete;
  tensor& operator=(const tensor&) = delete;
  ~tensor() {
    if (held_ != nullptr && held_->deleter != nullptr) held_->deleter(held_);
  }
  [[nodiscard]] const DLTensor& dl() const noexcept { return held_->dl_tensor; }

 private:
  DLManagedTensor* held_;
};

namespace detail {

// What a capsule hands a consumer: a view of a tensor's DLTensor that keeps the Python Tensor
// object (and so its export and the slot) alive until the consumer's deleter runs.
struct capsule_export {
  DLManagedTensor managed{};
  PyObject* owner = nullptr;
  std::int64_t shape[8]{};
  std::int64_t strides[8]{};
  static void deleter(DLManagedTensor* self) noexcept {
    auto* e = static_cast<capsule_export*>(self->manager_ctx);
    // The consumer may drop its tensor on any thread, with or without the GIL.
    const PyGILState_STATE g = PyGILState_Ensure();
    Py_XDECREF(e->owner);
    PyGILState_Release(g);
    delete e;
  }
};

inline void capsule_destructor(PyObject* cap) noexcept {
  // A consumer renames the capsule "used_dltensor" when it takes ownership; one never consumed
  // is released here.
  if (PyCapsule_IsValid(cap, "dltensor") != 0) {
    auto* m = static_cast<DLManagedTensor*>(PyCapsule_GetPointer(cap, "dltensor"));
    if (m != nullptr && m->deleter != nullptr) m->deleter(m);
  } else {
    PyErr_Clear();
  }
}

inline py::capsule make_capsule(py::object self) {
  const tensor& t = self.cast<const tensor&>();
  const DLTensor& src = t.dl();
  if (src.ndim > 8) throw usage_error("sluice: a tensor of more than 8 dimensions cannot be exported");
  auto e = std::make_unique<capsule_export>();
  e->managed.dl_tensor = src;
  for (int i = 0; i < src.ndim; ++i) {
    e->shape[i] = src.shape[i];
    e->strides[i] = src.strides != nullptr ? src.strides[i] : 0;
  }
  e->managed.dl_tensor.shape = e->shape;
  e->managed.dl_tensor.strides = src.strides != nullptr ? e->strides : nullptr;
  e->managed.manager_ctx = e.get();
  e->managed.deleter = &capsule_export::deleter;
  e->owner = self.release().ptr();  // the reference the deleter drops
  PyObject* cap = PyCapsule_New(&e->managed, "dltensor", &capsule_destructor);
  if (cap == nullptr) {
    Py_DECREF(e->owner);
    throw py::error_already_set();
  }
  e.release();
  return py::reinterpret_steal<py::capsule>(cap);
}

inline std::string dtype_name(DLDataType t) {
  const std::string bits = std::to_string(t.bits);
  switch (t.code) {
    case kDLInt: return "int" + bits;
    case kDLUInt: return "uint" + bits;
    case kDLFloat: return "float" + bits;
    case kDLBfloat: return "bfloat16";
    default: break;
  }
#if defined(DLPACK_VERSION) && DLPACK_VERSION >= 80
  if (t.code == kDLBool) return "bool";
#endif
  return "code" + std::to_string(t.code) + "_" + bits;
}

}  // namespace detail

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
  [[nodiscard]] virtual pipeline_stats stats() const = 0;
  [[nodiscard]] virtual std::uint64_t batches_for(std::uint64_t epoch) const = 0;
  [[nodiscard]] virtual std::vector<epoch_stats> recent_epochs() const = 0;
};

template <class Loader>
class bound_loader final : public loader_handle {
 public:
  explicit bound_loader(Loader l) : loader_(std::move(l)) {}
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
  [[nodiscard]] pipeline_stats stats() const override { return loader_.stats(); }
  [[nodiscard]] std::uint64_t batches_for(std::uint64_t e) const override { return loader_.batches_for(e); }
  [[nodiscard]] std::vector<epoch_stats> recent_epochs() const override { return loader_.recent_epochs(); }

 private:
  using range_type = typename Loader::epoch_range;
  Loader loader_;
  std::optional<typename range_type::iterator> it_;  // destroyed before the range
  std::unique_ptr<range_type> range_;
};

// What Python holds: the handle, the epoch set_epoch chose and a state to resume from.
struct py_loader {
  std::unique_ptr<loader_handle> handle;
  // Serialises iteration (begin, next, end) between Python threads. Taken only with the GIL
  // released, so a thread waiting here never blocks the one inside next() from returning.
  std::mutex iterating;
  std::uint64_t epoch = 0;
  std::optional<loader_state> pending;
  bool running = false;
};

template <class Loader>
std::shared_ptr<py_loader> wrap(Loader&& l) {
  auto p = std::make_shared<py_loader>();
  p->handle = std::make_unique<bound_loader<std::remove_cvref_t<Loader>>>(std::forward<Loader>(l));
  return p;
}

namespace detail {

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

inline PyObject* new_exception(py::module_& m, const char* name, py::tuple bases, const char* doc) {
  const std::string full = std::string(py::str(m.attr("__name__"))) + "." + name;
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
  const std::size_t workers = h.stats().workers;
  std::vector<diag::epoch_observation> history;
  for (const auto& e : h.recent_epochs()) {
    if (!e.complete) continue;
    auto o = diag::observe(e, workers);
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

}  // namespace detail

// Registers sluice.Tensor, sluice.Loader and the exception types in module m (once per module).
inline void register_types(py::module_& m) {
  auto& ex = detail::exceptions();
  if (ex.base == nullptr) {
    ex.base = detail::new_exception(m, "Error", py::make_tuple(py::handle(PyExc_RuntimeError)),
                                    "A sluice error; str() is the C++ message with every nested cause.");
    ex.format = detail::new_exception(m, "FormatError", py::make_tuple(py::handle(ex.base), py::handle(PyExc_ValueError)),
                                      "A bad file or record: names the file, the record, the field and the cause.");
    ex.usage = detail::new_exception(m, "UsageError", py::make_tuple(py::handle(ex.base), py::handle(PyExc_ValueError)),
                                     "A pipeline used or configured wrongly.");
    ex.io = detail::new_exception(m, "IOError", py::make_tuple(py::handle(ex.base), py::handle(PyExc_OSError)),
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
                                              "One tensor of a batch, in the batch's memory (DLPack, no copy).")
      .def("__dlpack__", [](py::object self, py::object /*stream*/) { return detail::make_capsule(std::move(self)); },
           py::arg("stream") = py::none())
      .def("__dlpack_device__",
           [](const tensor& t) { return py::make_tuple(static_cast<int>(t.dl().device.device_type), t.dl().device.device_id); })
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
      .def("__repr__", [](const tensor& t) {
        std::string s = "sluice.Tensor(shape=(";
        for (int i = 0; i < t.dl().ndim; ++i) s += std::to_string(t.dl().shape[i]) + (t.dl().ndim == 1 || i + 1 < t.dl().ndim ? "," : "");
        return s + "), dtype=" + detail::dtype_name(t.dl().dtype) + ")";
      });

  py::class_<py_loader, std::shared_ptr<py_loader>>(m, "Loader", py::module_local(),
                                                    "A sluice pipeline: iterate it for batches.")
      .def("__iter__",
           [](std::shared_ptr<py_loader> self) {
             {
               py::gil_scoped_release nogil;
               const std::lock_guard lk(self->iterating);
               if (self->pending) {
                 const loader_state st = *self->pending;
                 self->handle->begin_resume(st);
                 self->epoch = st.epoch;
               } else {
                 self->handle->begin(self->epoch);
               }
             }
             self->pending.reset();
             self->running = true;
             return self;
           })
      .def("__next__",
           [](py_loader& self) {
             if (!self.running) throw py::stop_iteration();
             std::vector<std::pair<std::string, DLManagedTensor*>> ts;
             {
               py::gil_scoped_release nogil;  // workers run, the trainer's other threads too
               const std::lock_guard lk(self.iterating);
               ts = self.handle->next();
             }
             if (ts.empty()) {
               self.running = false;
               throw py::stop_iteration();
             }
             py::dict d;
             for (auto& [name, m] : ts) d[py::str(name)] = py::cast(std::make_shared<tensor>(m));
             return d;
           })
      .def("__len__", [](const py_loader& self) { return self.handle->batches_for(self.epoch); })
      .def("set_epoch", [](py_loader& self, std::uint64_t e) { self.epoch = e; self.pending.reset(); }, py::arg("epoch"))
      .def_property_readonly("epoch", [](const py_loader& self) { return self.epoch; })
      .def("state_dict",
           [](const py_loader& self) {
             py::dict d;
             d["sluice_state"] = py::bytes(state_to_string(self.handle->state()));
             return d;
           })
      .def(
          "load_state_dict",
          [](py_loader& self, const py::dict& d) {
            if (!d.contains("sluice_state"))
              throw usage_error("sluice: load_state_dict: the dict has no 'sluice_state' (it is what state_dict() returns)");
            const std::string raw = d["sluice_state"].cast<std::string>();
            self.pending = state_from_string(raw, "<state_dict>");
            {
              py::gil_scoped_release nogil;
              const std::lock_guard lk(self.iterating);
              self.handle->end();
            }
            self.running = false;
          },
          py::arg("state_dict"))
      .def("stats", [](const py_loader& self) { return detail::json_of(self.handle->stats()); })
      .def(
          "epoch_stats",
          [](const py_loader& self, std::uint64_t e) -> py::object {
            for (const auto& s : self.handle->recent_epochs())
              if (s.epoch == e) return detail::json_of(s);
            return py::none();
          },
          py::arg("epoch"), "One epoch's figures (per stage, stall, bottleneck), or None when no longer kept.")
      .def(
          "advise", [](const py_loader& self, const py::dict& v) { return detail::advise(*self.handle, v); },
          py::arg("validation_loss") = py::dict(),
          "The advisor's recommendations on the kept epochs: a list of {rule, severity, message, value}.")
      .def("close", [](py_loader& self) {
        {
          py::gil_scoped_release nogil;
          const std::lock_guard lk(self.iterating);
          self.handle->end();
        }
        self.running = false;
      });
}

}  // namespace sluice::python
