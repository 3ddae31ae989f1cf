// The Python package `forge` (its native part, forge._forge): GPT-2 models loaded as the CLI
// loads them, text generation (whole, or streamed by an iterator that releases the GIL while
// the model runs), tokenization, evaluation, logits as NumPy arrays, and training with the
// CLI's own settings. forge::Error becomes forge.Error (a subclass per kind) with the same
// message.
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <CLI/CLI.hpp>
#include <cstdio>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "cli/app.h"
#include "forge/device_queue.h"
#include "forge/devices.h"
#include "forge/error.h"
#include "forge/generate.h"
#include "forge/gpt2.h"
#include "forge/tokenizer.h"

namespace py = pybind11;
using namespace forge;

namespace {

// A loaded model, its tokenizer (if its folder has one) and the device it runs on.
struct PyModel {
  std::shared_ptr<gpt2::Model> model;
  std::shared_ptr<Tokenizer> tokenizer;

  const Tokenizer& tok(const char* what) const {
    if (!tokenizer)
      throw Error(ErrorKind::Tokenizer,
                  std::string(what) + ": the model folder has no tokenizer files");
    return *tokenizer;
  }
  std::vector<uint32_t> ids_of(const py::object& prompt, const char* what) const {
    if (py::isinstance<py::str>(prompt)) return tok(what).encode(prompt.cast<std::string>());
    return prompt.cast<std::vector<uint32_t>>();
  }
};

gpt2::GenerateOptions options(int64_t max_tokens, double temperature, int64_t top_k, double top_p,
                              double repeat_penalty, uint64_t seed, bool greedy,
                              std::vector<std::string> stop, bool ignore_eos) {
  gpt2::GenerateOptions o;
  o.max_new_tokens = max_tokens;
  o.sampling.greedy = greedy;
  o.sampling.temperature = static_cast<float>(temperature);
  o.sampling.top_k = top_k;
  o.sampling.top_p = static_cast<float>(top_p);
  o.sampling.repeat_penalty = static_cast<float>(repeat_penalty);
  o.sampling.seed = seed;
  o.stop = std::move(stop);
  o.stop_at_eos = !ignore_eos;
  return o;
}

// Streamed generation: each next() runs one forward pass (the prompt's, then one token's)
// with the GIL released and returns the text that became final (possibly ""), until done.
class TextStream {
 public:
  TextStream(PyModel m, std::vector<uint32_t> prompt, const gpt2::GenerateOptions& o)
      : m_(std::move(m)),
        gen_(m_.model->config(), prompt, o, m_.tokenizer.get()),
        cache_(*m_.model, 1, gen_.positions_needed()) {}

  std::string next() {
    if (gen_.done()) throw py::stop_iteration();
    py::gil_scoped_release unlocked;
    Tensor logits;
    if (!started_) {
      const auto p = gen_.prompt();
      logits =
          m_.model->forward_cached(Tensor::from_vector(std::vector<uint32_t>(p.begin(), p.end()),
                                                       {1, static_cast<int64_t>(p.size())}),
                                   cache_);
      started_ = true;
    } else {
      logits = m_.model->forward_cached(
          Tensor::from_vector(std::vector<uint32_t>{gen_.result().ids.back()}, {1, 1}), cache_);
    }
    const std::vector<float> host = read_async(logits).get<float>();
    return gen_.accept(gen_.sample(host));
  }
  const gpt2::GenerateResult& result() const { return gen_.result(); }

 private:
  PyModel m_;
  gpt2::Generation gen_;
  gpt2::KVCache cache_;
  bool started_ = false;
};

// forge.train(**settings): the CLI's `forge train` with --name value for each setting
// (underscores read as dashes; True is a flag, False and None leave it out).
void train(const py::kwargs& settings) {
  std::vector<std::string> args = {"forge", "train"};
  for (const auto& [key, value] : settings) {
    if (value.is_none()) continue;
    std::string name = "--" + key.cast<std::string>();
    for (char& c : name)
      if (c == '_') c = '-';
    if (py::isinstance<py::bool_>(value)) {
      if (value.cast<bool>()) args.push_back(name);
      continue;
    }
    args.push_back(name);
    args.push_back(py::str(value).cast<std::string>());
  }
  CLI::App app{"forge", "forge"};
  int threads = 0;
  cli::Action action;
  cli::build_app(app, threads, action);
  std::vector<char*> argv;
  for (std::string& a : args) argv.push_back(a.data());
  try {
    app.parse(static_cast<int>(argv.size()), argv.data());
  } catch (const CLI::ParseError& e) {
    throw Error(ErrorKind::Format, std::string("train: ") + e.what());
  }
  py::gil_scoped_release unlocked;
  if (action() != 0) throw Error(ErrorKind::Io, "train: the run failed");
}

}  // namespace

PYBIND11_MODULE(_forge, mod) {
  mod.doc() = "forge: GPT-2 inference and training (native part)";
  static py::exception<Error> error(mod, "Error");
  static std::vector<std::pair<ErrorKind, py::object>> kinds;
  for (const auto& [kind, name] :
       std::vector<std::pair<ErrorKind, const char*>>{{ErrorKind::Shape, "ShapeError"},
                                                      {ErrorKind::Device, "DeviceError"},
                                                      {ErrorKind::DType, "DTypeError"},
                                                      {ErrorKind::Io, "IoError"},
                                                      {ErrorKind::Format, "FormatError"},
                                                      {ErrorKind::Tokenizer, "TokenizerError"},
                                                      {ErrorKind::Backend, "BackendError"},
                                                      {ErrorKind::Unsupported, "UnsupportedError"},
                                                      {ErrorKind::Range, "RangeError"}}) {
    py::object cls = py::reinterpret_steal<py::object>(
        PyErr_NewException((std::string("forge._forge.") + name).c_str(), error.ptr(), nullptr));
    mod.attr(name) = cls;
    kinds.emplace_back(kind, cls);
  }
  py::register_exception_translator([](std::exception_ptr p) {
    try {
      if (p) std::rethrow_exception(p);
    } catch (const Error& e) {
      for (const auto& [kind, cls] : kinds)
        if (kind == e.kind()) {
          PyErr_SetString(cls.ptr(), e.what());
          return;
        }
      PyErr_SetString(error.ptr(), e.what());
    }
  });

  py::class_<TextStream>(mod, "TextStream")
      .def("__iter__", [](TextStream& s) -> TextStream& { return s; })
      .def("__next__", &TextStream::next)
      .def_property_readonly("ids", [](const TextStream& s) { return s.result().ids; })
      .def_property_readonly("stop_reason",
                             [](const TextStream& s) { return s.result().stop_reason; });

  py::class_<PyModel>(mod, "Model")
      .def_static(
          "load",
          [](const std::string& path, const std::string& device, const std::string& tokenizer) {
            PyModel m;
            py::gil_scoped_release unlocked;
            m.model = std::make_shared<gpt2::Model>(gpt2::Model::load(path, parse_device(device)));
            const std::string tok = tokenizer.empty() ? path : tokenizer;
            if (!tokenizer.empty() || Tokenizer::available(tok))
              m.tokenizer = std::make_shared<Tokenizer>(Tokenizer::load(tok));
            return m;
          },
          py::arg("path"), py::arg("device") = "cpu", py::arg("tokenizer") = "")
      .def_property_readonly("config",
                             [](const PyModel& m) {
                               const gpt2::Config& c = m.model->config();
                               py::dict d;
                               d["n_layer"] = c.n_layer;
                               d["n_head"] = c.n_head;
                               d["n_embd"] = c.n_embd;
                               d["n_ctx"] = c.n_ctx;
                               d["vocab_size"] = c.vocab_size;
                               d["eos_id"] = c.eos_id;
                               return d;
                             })
      .def("tokenize",
           [](const PyModel& m, const std::string& text) { return m.tok("tokenize").encode(text); })
      .def("detokenize",
           [](const PyModel& m, const std::vector<uint32_t>& ids) {
             return py::bytes(m.tok("detokenize").decode(ids)).attr("decode")("utf-8", "replace");
           })
      .def(
          "generate",
          [](const PyModel& m, const py::object& prompt, int64_t max_tokens, double temperature,
             int64_t top_k, double top_p, double repeat_penalty, uint64_t seed, bool greedy,
             std::vector<std::string> stop, bool ignore_eos, bool stream) -> py::object {
            const std::vector<uint32_t> ids = m.ids_of(prompt, "generate");
            const gpt2::GenerateOptions o =
                options(max_tokens, temperature, top_k, top_p, repeat_penalty, seed, greedy,
                        std::move(stop), ignore_eos);
            if (stream) return py::cast(TextStream(m, ids, o));
            gpt2::GenerateResult r;
            {
              py::gil_scoped_release unlocked;
              r = gpt2::generate(*m.model, ids, o, m.tokenizer.get());
            }
            py::dict d;
            d["text"] = py::bytes(r.text).attr("decode")("utf-8", "replace");
            d["ids"] = r.ids;
            d["stop_reason"] = r.stop_reason;
            d["prompt_tokens"] = r.prompt_tokens;
            return d;
          },
          py::arg("prompt"), py::arg("max_tokens") = 64, py::arg("temperature") = 0.8,
          py::arg("top_k") = 40, py::arg("top_p") = 0.95, py::arg("repeat_penalty") = 1.0,
          py::arg("seed") = 0, py::arg("greedy") = false,
          py::arg("stop") = std::vector<std::string>{}, py::arg("ignore_eos") = false,
          py::arg("stream") = false)
      .def("eval_loss",
           [](const PyModel& m, const std::vector<uint32_t>& ids) {
             py::gil_scoped_release unlocked;
             return gpt2::evaluate(*m.model, ids).loss;
           })
      .def("logits", [](const PyModel& m, const std::vector<uint32_t>& ids) {
        // [T, V] float32. On the CPU the array views the result tensor's memory (no copy);
        // the capsule keeps the tensor alive as long as the array.
        Tensor t;
        {
          py::gil_scoped_release unlocked;
          t = m.model->forward(Tensor::from_vector(ids, {1, static_cast<int64_t>(ids.size())}));
          if (!t.device().is_cpu()) t = t.to(Device::cpu());
        }
        const int64_t T = t.dim(1), V = t.dim(2);
        auto* keep = new Tensor(t);
        py::capsule owner(keep, [](void* p) { delete static_cast<Tensor*>(p); });
        return py::array_t<float>(
            {T, V}, {V * static_cast<int64_t>(sizeof(float)), static_cast<int64_t>(sizeof(float))},
            keep->data<float>(), owner);
      });

  mod.def("train", &train, "Train as `forge train` does, with its settings as keyword arguments");
  mod.def("devices", [] {
    std::vector<std::string> names;
    for (const DeviceInfo& d : list_devices()) names.push_back(d.device.str());
    return names;
  });
}
