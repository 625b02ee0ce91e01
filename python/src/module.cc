// mxtrain._C: the Python bindings. Thin on purpose: every function forwards to the library
// and every check and number comes from it; what is here is the translation between
// Python objects and the library's types (README "Python", docs/decisions.md "Python
// bindings").
//
// Memory crosses the boundary without copies both ways: Tensor.borrow / Tensor.from_buffer
// wrap a numpy array's or a torch tensor's memory (Tensor::Borrow, kept alive by the Python
// object), and a Tensor exports its own memory through the buffer protocol, so that
// numpy.asarray(t) is a view that keeps t's storage alive.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "mxtrain/error.h"
#include "mxtrain/gemm.h"
#include "mxtrain/group_list.h"
#include "mxtrain/grouped_linear.h"
#include "mxtrain/linear.h"
#include "mxtrain/memory.h"
#include "mxtrain/mx_tensor.h"
#include "mxtrain/parameter.h"
#include "mxtrain/quantize.h"
#include "mxtrain/recipe.h"
#include "mxtrain/tensor.h"
#include "mxtrain/weight_cache.h"

namespace py = pybind11;

namespace mxtrain {
namespace {

DType ParseDType(const std::string& name) {
  if (name == "f32") return DType::kF32;
  if (name == "bf16") return DType::kBF16;
  if (name == "u8") return DType::kU8;
  Fail("dtype '", name, "' is not f32, bf16 or u8");
}

BlockAxis ParseAxis(const std::string& name) {
  if (name == "rowwise") return BlockAxis::kRowwise;
  if (name == "columnwise") return BlockAxis::kColumnwise;
  Fail("axis '", name, "' is not rowwise or columnwise");
}

// The buffer-protocol format of each dtype: bf16 travels as its uint16 bit patterns.
const char* BufferFormat(DType dtype) {
  switch (dtype) {
    case DType::kF32:
      return "f";
    case DType::kBF16:
      return "H";
    case DType::kU8:
      return "B";
  }
  return "B";
}

// Keeps a Python object alive for as long as a borrowed storage lives. The storage may die
// with the GIL released (inside a library call), so the release takes it; after the
// interpreter is gone there is nothing left to release.
std::shared_ptr<void> KeepAlive(py::object owner) {
  return std::shared_ptr<void>(new py::object(std::move(owner)), [](void* p) {
    auto* o = static_cast<py::object*>(p);
    if (!Py_IsInitialized()) return;
    py::gil_scoped_acquire gil;
    delete o;
  });
}

Tensor FromBuffer(const py::buffer& b) {
  py::buffer_info info = b.request(/*writable=*/false);
  DType dtype;
  const std::string& f = info.format;
  if (info.itemsize == 4 && (f == "f" || f == "<f" || f == "=f")) {
    dtype = DType::kF32;
  } else if (info.itemsize == 2 && (f == "H" || f == "<H" || f == "=H")) {
    dtype = DType::kBF16;
  } else if (info.itemsize == 1 && (f == "B" || f == "<B" || f == "=B")) {
    dtype = DType::kU8;
  } else {
    Fail("buffer of format '", f, "' is not float32, uint16 (bf16 bits) or uint8");
  }
  int64_t expected = info.itemsize;
  for (int i = static_cast<int>(info.ndim) - 1; i >= 0; --i) {
    MXTRAIN_CHECK(info.shape[i] <= 1 || info.strides[i] == expected, "buffer is not C-contiguous");
    expected *= info.shape[i];
  }
  std::vector<int64_t> dims(info.shape.begin(), info.shape.end());
  return Tensor::Borrow(info.ptr, dtype, Shape(std::move(dims)), KeepAlive(b));
}

py::dict Figures(const MemoryFigures& f) {
  py::dict d;
  d["live_bytes"] = f.live_bytes;
  d["peak_bytes"] = f.peak_bytes;
  return d;
}

py::dict MemoryDict() {
  const MemoryReport r = ReadMemory();
  py::dict by;
  for (int i = 0; i < kNumMemoryCategories; ++i) {
    by[py::str(std::string(Name(static_cast<MemoryCategory>(i))))] = Figures(r.by_category[i]);
  }
  py::dict d;
  d["by_category"] = by;
  d["total"] = Figures(r.total);
  d["cached_bytes"] = r.cached_bytes;
  d["held_for_backward"] = Figures(r.held_for_backward);
  return d;
}

py::object OrNone(const Tensor& t) { return t.defined() ? py::cast(t) : py::none(); }

py::tuple GradsTuple(const Grads& g) {
  return py::make_tuple(OrNone(g.dx), OrNone(g.dw), OrNone(g.db));
}

QuantizeOptions QOptions(const std::string& format, const std::string& scale, int threads) {
  QuantizeOptions q;
  q.format = ParseElementFormat(format);
  q.rule = ParseScaleRule(scale);
  q.threads = threads;
  return q;
}

GemmOptions GOptions(const std::optional<Tensor>& bias, const std::string& out_dtype, int threads) {
  MXTRAIN_CHECK(out_dtype == "f32" || out_dtype == "bf16", "out_dtype '", out_dtype,
                "' is not f32 or bf16");
  GemmOptions o;
  o.out_dtype = ParseDType(out_dtype);
  o.bias = bias ? &*bias : nullptr;
  o.threads = threads;
  return o;
}

template <typename T>
std::optional<T> OptionalParse(const std::optional<std::string>& s, T (*parse)(std::string_view)) {
  if (!s) return std::nullopt;
  return parse(*s);
}

CallOptions Call(bool input_requires_grad, std::optional<bool> weight_requires_grad,
                 std::optional<bool> bias_requires_grad, bool use_weight_cache, int threads) {
  CallOptions c;
  c.input_requires_grad = input_requires_grad;
  c.weight_requires_grad = weight_requires_grad;
  c.bias_requires_grad = bias_requires_grad;
  c.use_weight_cache = use_weight_cache;
  c.threads = threads;
  return c;
}

// A layer's forward, run with the GIL released: (y, ctx).
template <typename Fn>
py::tuple Forward(Fn&& forward) {
  Forwarded f;
  {
    py::gil_scoped_release release;
    f = forward();
  }
  return py::make_tuple(f.y, py::cast(std::move(f.ctx)));
}

// Linear or GroupedLinear over existing parameters, with its backward: (dx, dw, db), None
// for a gradient that was not wanted. Forward differs (the group list) and is bound apart.
template <typename Op>
py::class_<Op> BindLayer(py::module_& m, const char* name) {
  return py::class_<Op>(m, name)
      .def(py::init([](std::shared_ptr<Parameter> weight, std::shared_ptr<Parameter> bias,
                       const Recipe& recipe, int threads) {
             OpOptions o;
             o.threads = threads;
             return std::make_unique<Op>(std::move(weight), std::move(bias), recipe, o);
           }),
           py::arg("weight"), py::arg("bias"), py::arg("recipe"), py::arg("threads") = 0)
      .def(
          "backward",
          [](const Op& op, const Tensor& dy, OpContext& ctx) {
            Grads g;
            {
              py::gil_scoped_release release;
              g = op.Backward(dy, std::move(ctx));
            }
            return GradsTuple(g);
          },
          py::arg("dy"), py::arg("ctx"));
}

}  // namespace
}  // namespace mxtrain

PYBIND11_MODULE(_C, m) {
  using namespace mxtrain;
  m.doc() = "mxtrain's C++ library (thin bindings; use the mxtrain package)";

  py::register_exception_translator([](std::exception_ptr p) {
    try {
      if (p) std::rethrow_exception(p);
    } catch (const Error& e) {
      PyErr_SetString(PyExc_ValueError, e.what());
    }
  });

  py::class_<Tensor>(m, "Tensor", py::buffer_protocol())
      .def_static(
          "borrow",
          [](uintptr_t ptr, const std::string& dtype, std::vector<int64_t> shape,
             py::object owner) {
            return Tensor::Borrow(reinterpret_cast<void*>(ptr), ParseDType(dtype),
                                  Shape(std::move(shape)), KeepAlive(std::move(owner)));
          },
          py::arg("ptr"), py::arg("dtype"), py::arg("shape"), py::arg("owner"),
          "A tensor over C-contiguous memory at ptr, kept alive by owner (not copied).")
      .def_static("from_buffer", &FromBuffer, py::arg("buffer"),
                  "A tensor over a C-contiguous float32 / uint16 (bf16) / uint8 buffer.")
      .def_property_readonly("dtype", [](const Tensor& t) { return std::string(Name(t.dtype())); })
      .def_property_readonly("shape", [](const Tensor& t) { return t.shape().dims(); })
      .def_property_readonly("nbytes", &Tensor::NumBytes)
      .def_property_readonly("data_ptr",
                             [](const Tensor& t) { return reinterpret_cast<uintptr_t>(t.raw()); })
      .def_property_readonly("borrowed",
                             [](const Tensor& t) { return t.defined() && t.storage()->borrowed(); })
      .def_buffer([](const Tensor& t) {
        const auto item = static_cast<py::ssize_t>(DTypeSize(t.dtype()));
        std::vector<py::ssize_t> shape(t.shape().dims().begin(), t.shape().dims().end());
        std::vector<py::ssize_t> strides(shape.size());
        py::ssize_t stride = item;
        for (int i = static_cast<int>(shape.size()) - 1; i >= 0; --i) {
          strides[i] = stride;
          stride *= shape[i];
        }
        return py::buffer_info(t.raw(), item, BufferFormat(t.dtype()),
                               static_cast<py::ssize_t>(shape.size()), shape, strides);
      });

  py::class_<GroupList>(m, "GroupList")
      .def(py::init([](std::vector<int64_t> values, const std::string& type, int64_t m) {
             return GroupList::Make(values, ParseGroupListType(type), m);
           }),
           py::arg("values"), py::arg("type"), py::arg("m"))
      .def_property_readonly("num_groups", &GroupList::num_groups)
      .def_property_readonly("ends", &GroupList::ends)
      .def("__repr__", &GroupList::ToString);

  py::class_<MxTensor>(m, "MxTensor")
      .def(py::init([](Tensor data, Tensor scales, const std::string& format,
                       const std::string& rule, const std::string& axis,
                       std::optional<GroupList> groups) {
             return MxTensor(std::move(data), std::move(scales), ParseElementFormat(format),
                             ParseScaleRule(rule), ParseAxis(axis), std::move(groups));
           }),
           py::arg("data"), py::arg("scales"), py::arg("format"), py::arg("rule"), py::arg("axis"),
           py::arg("groups") = std::nullopt)
      .def_property_readonly("data", &MxTensor::data)
      .def_property_readonly("scales", &MxTensor::scales)
      .def_property_readonly("format",
                             [](const MxTensor& t) { return std::string(Name(t.format())); })
      .def_property_readonly("axis", [](const MxTensor& t) { return std::string(Name(t.axis())); });

  auto gil = py::call_guard<py::gil_scoped_release>();
  m.def(
      "quantize_rowwise",
      [](const Tensor& x, const std::string& format, const std::string& scale, int threads) {
        return QuantizeRowwise(x, QOptions(format, scale, threads));
      },
      py::arg("x"), py::arg("format"), py::arg("scale"), py::arg("threads") = 0, gil);
  m.def(
      "quantize_columnwise",
      [](const Tensor& x, const std::string& format, const std::string& scale, int threads) {
        return QuantizeColumnwise(x, QOptions(format, scale, threads));
      },
      py::arg("x"), py::arg("format"), py::arg("scale"), py::arg("threads") = 0, gil);
  // The name of mxtrain 0.1, kept for one release: "columnwise" is the library's, the CLI's
  // and the package's word for 32x1 blocks.
  m.def(
      "quantize_colwise",
      [](const Tensor& x, const std::string& format, const std::string& scale, int threads) {
        if (PyErr_WarnEx(PyExc_DeprecationWarning,
                         "mxtrain._C.quantize_colwise is deprecated; use quantize_columnwise",
                         1) != 0) {
          throw py::error_already_set();
        }
        py::gil_scoped_release release;
        return QuantizeColumnwise(x, QOptions(format, scale, threads));
      },
      py::arg("x"), py::arg("format"), py::arg("scale"), py::arg("threads") = 0);
  m.def(
      "quantize_dual",
      [](const Tensor& x, const std::string& format, const std::string& scale, int threads) {
        DualMx d = QuantizeDual(x, QOptions(format, scale, threads));
        return std::make_pair(std::move(d.rowwise), std::move(d.columnwise));
      },
      py::arg("x"), py::arg("format"), py::arg("scale"), py::arg("threads") = 0, gil);
  m.def(
      "quantize_grouped",
      [](const Tensor& x, const GroupList& groups, const std::string& format,
         const std::string& scale,
         int threads) { return QuantizeGrouped(x, groups, QOptions(format, scale, threads)); },
      py::arg("x"), py::arg("groups"), py::arg("format"), py::arg("scale"), py::arg("threads") = 0,
      gil);
  m.def(
      "dequantize",
      [](const MxTensor& q, const std::string& dtype, int threads) {
        MXTRAIN_CHECK(dtype == "f32" || dtype == "bf16", "dtype '", dtype, "' is not f32 or bf16");
        return Dequantize(q, ParseDType(dtype), threads);
      },
      py::arg("q"), py::arg("dtype") = "f32", py::arg("threads") = 0, gil);
  m.def(
      "gemm",
      [](const MxTensor& a, const MxTensor& b, std::optional<Tensor> bias,
         const std::string& out_dtype,
         int threads) { return MxGemm(a, b, GOptions(bias, out_dtype, threads)); },
      py::arg("a"), py::arg("b"), py::arg("bias") = std::nullopt, py::arg("out_dtype") = "f32",
      py::arg("threads") = 0, gil);
  m.def(
      "grouped_gemm",
      [](const MxTensor& x, const MxTensor& w, const GroupList& groups, std::optional<Tensor> bias,
         const std::string& out_dtype,
         int threads) { return MxGroupedGemm(x, w, groups, GOptions(bias, out_dtype, threads)); },
      py::arg("x"), py::arg("w"), py::arg("groups"), py::arg("bias") = std::nullopt,
      py::arg("out_dtype") = "f32", py::arg("threads") = 0, gil);
  m.def("gemm_paths", &AvailableGemmPaths);
  m.def("current_gemm_path", &CurrentGemmPath);

  py::class_<Recipe>(m, "Recipe")
      .def(py::init([](const std::string& precision, std::optional<std::string> formats,
                       std::optional<std::string> scale, std::optional<std::string> input_policy,
                       std::optional<std::string> weight_policy, bool reuse,
                       std::optional<std::string> hp_gemms,
                       std::optional<std::string> hp_precision) {
             RecipeOptions o;
             o.precision = ParsePrecision(precision);
             o.formats = OptionalParse(formats, &ParseRecipeFormats);
             o.scale = OptionalParse(scale, &ParseScaleRule);
             o.input_policy = OptionalParse(input_policy, &ParseSavePolicy);
             o.weight_policy = OptionalParse(weight_policy, &ParseSavePolicy);
             o.reuse_quantized_weights = reuse;
             o.hp_gemms = OptionalParse(hp_gemms, &ParseGemmSet);
             o.hp_precision = OptionalParse(hp_precision, &ParsePrecision);
             return Recipe::Make(o);
           }),
           py::arg("precision") = "mxfp8", py::arg("formats") = std::nullopt,
           py::arg("scale") = std::nullopt, py::arg("input_policy") = std::nullopt,
           py::arg("weight_policy") = std::nullopt, py::arg("reuse_quantized_weights") = false,
           py::arg("hp_gemms") = std::nullopt, py::arg("hp_precision") = std::nullopt)
      .def("__repr__", &Recipe::ToString)
      .def("__str__", &Recipe::ToString);

  py::class_<Parameter, std::shared_ptr<Parameter>>(m, "Parameter")
      .def(py::init([](Tensor value, std::string name, bool requires_grad) {
             return std::make_shared<Parameter>(std::move(value), std::move(name), requires_grad);
           }),
           py::arg("value"), py::arg("name") = "", py::arg("requires_grad") = true)
      .def_property_readonly("value", &Parameter::value)
      .def_property_readonly("name", &Parameter::name)
      .def_property_readonly("id", &Parameter::id)
      .def_property("version", &Parameter::version, &Parameter::SetVersion)
      .def_property("requires_grad", &Parameter::requires_grad, &Parameter::set_requires_grad)
      .def("mark_modified", &Parameter::MarkModified);

  py::class_<OpContext>(m, "OpContext")
      .def_property_readonly("defined", &OpContext::defined)
      .def_property_readonly("spent", &OpContext::spent)
      .def_property_readonly("input_policy",
                             [](const OpContext& c) -> std::optional<std::string> {
                               const auto p = c.input_policy();
                               if (!p) return std::nullopt;
                               return std::string(Name(*p));
                             })
      .def_property_readonly("weight_policy",
                             [](const OpContext& c) -> std::optional<std::string> {
                               const auto p = c.weight_policy();
                               if (!p) return std::nullopt;
                               return std::string(Name(*p));
                             })
      .def_property_readonly("saved_memory", [](const OpContext& c) {
        const SavedMemory s = c.saved_memory();
        py::dict d;
        d["allocated_bytes"] = s.allocated_bytes;
        d["referenced_bytes"] = s.referenced_bytes;
        d["persistent_bytes"] = s.persistent_bytes;
        return d;
      });

  // forward(x, [groups,] input_requires_grad, weight_requires_grad, bias_requires_grad,
  // use_weight_cache, threads): every per-call choice is an argument (CallOptions), never
  // state on the shared layer or parameters, so threads may share a layer.
  BindLayer<Linear>(m, "Linear")
      .def(
          "forward",
          [](const Linear& l, const Tensor& x, bool input_requires_grad,
             std::optional<bool> weight_requires_grad, std::optional<bool> bias_requires_grad,
             bool use_weight_cache, int threads) {
            const CallOptions c = Call(input_requires_grad, weight_requires_grad,
                                       bias_requires_grad, use_weight_cache, threads);
            return Forward([&] { return l.Forward(x, c); });
          },
          py::arg("x"), py::arg("input_requires_grad") = true,
          py::arg("weight_requires_grad") = std::nullopt,
          py::arg("bias_requires_grad") = std::nullopt, py::arg("use_weight_cache") = true,
          py::arg("threads") = -1);
  BindLayer<GroupedLinear>(m, "GroupedLinear")
      .def(
          "forward",
          [](const GroupedLinear& l, const Tensor& x, const GroupList& groups,
             bool input_requires_grad, std::optional<bool> weight_requires_grad,
             std::optional<bool> bias_requires_grad, bool use_weight_cache, int threads) {
            const CallOptions c = Call(input_requires_grad, weight_requires_grad,
                                       bias_requires_grad, use_weight_cache, threads);
            return Forward([&] { return l.Forward(x, groups, c); });
          },
          py::arg("x"), py::arg("groups"), py::arg("input_requires_grad") = true,
          py::arg("weight_requires_grad") = std::nullopt,
          py::arg("bias_requires_grad") = std::nullopt, py::arg("use_weight_cache") = true,
          py::arg("threads") = -1);

  m.def("weight_cache_stats", [] {
    const WeightCacheStats s = WeightQuantCache::Global().stats();
    py::dict d;
    d["hits"] = s.hits;
    d["misses"] = s.misses;
    d["entries"] = s.entries;
    d["bytes_held"] = s.bytes_held;
    return d;
  });
  m.def("weight_cache_clear", [] { WeightQuantCache::Global().Clear(); });
  m.def(
      "weight_cache_forget", [](const Parameter& p) { WeightQuantCache::Global().Forget(p); },
      py::arg("parameter"));
  m.def("weight_cache_reset_stats", [] { WeightQuantCache::Global().ResetStats(); });
  m.def("memory", &MemoryDict);
  m.def("reset_memory_peaks", &ResetMemoryPeaks);
  m.def("release_cached_memory", &ReleaseCachedMemory);
}
