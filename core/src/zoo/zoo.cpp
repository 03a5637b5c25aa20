#include "partita/zoo/zoo.h"

#include "partita/graph/error.h"
#include "zoo/models.h"

#include <fmt/format.h>
#include <onnx/onnx_pb.h>

#include <algorithm>
#include <charconv>
#include <filesystem>
#include <fstream>
#include <system_error>

namespace partita::zoo {

namespace {

constexpr std::string_view zoo_prefix = "zoo:";

struct ParamDef {
  std::string name;
  std::string default_value; // "" for a size override: the size decides
  std::string help;
  std::vector<std::string> choices;         // empty: a positive integer
  std::int64_t max = std::int64_t{1} << 24; // keeps every builder's arithmetic far from overflow
};

struct Entry {
  std::string name;
  std::string description;
  std::vector<ParamDef> params;
  onnx::ModelProto (*build)(const detail::Params&);
};

ParamDef batch() {
  return {"batch", "1", "samples per iteration", {}};
}
ParamDef image(std::string size) {
  return {"image", std::move(size), "input height and width in pixels", {}};
}
ParamDef size(std::vector<std::string> choices) {
  return {"size", choices.front(), "preset: " + fmt::format("{}", fmt::join(choices, "|")), choices};
}
ParamDef override_of(const std::string& name, const std::string& what) {
  return {name, "", what + " (default: from size)", {}, name == "layers" ? 1000 : std::int64_t{1} << 24};
}
ParamDef layers(std::string def) {
  return {"layers", std::move(def), "number of layers", {}, 1000};
}

const std::vector<Entry>& registry() {
  static const std::vector<Entry> entries{
      {"mlp",
       "multilayer perceptron (Linear+ReLU layers)",
       {batch(),
        {"input", "784", "input features", {}},
        {"hidden", "1024", "hidden layer width", {}},
        layers("3"),
        {"classes", "10", "output classes", {}}},
       detail::build_mlp},
      {"alexnet", "AlexNet, torchvision layout", {batch(), image("224")}, detail::build_alexnet},
      {"vgg16", "VGG-16, torchvision layout", {batch(), image("224")}, detail::build_vgg16},
      {"resnet50", "ResNet-50 v1.5, torchvision layout", {batch(), image("224")}, detail::build_resnet50},
      {"resnet101", "ResNet-101 v1.5, torchvision layout", {batch(), image("224")}, detail::build_resnet101},
      {"inception-v3",
       "Inception-v3, torchvision layout without the auxiliary head",
       {batch(), image("299")},
       detail::build_inception_v3},
      {"densenet",
       "DenseNet-121/169/201, torchvision layout: every layer of a block reads every earlier one's output",
       {size({"121", "169", "201"}),
        batch(),
        image("224"),
        override_of("layers", "layers in every dense block"),
        {"growth", "32", "growth rate: channels each dense layer adds", {}},
        {"classes", "1000", "output classes", {}}},
       detail::build_densenet},
      {"gnmt",
       "GNMT: 8+8 LSTM layers, bidirectional first encoder layer, additive attention",
       {batch(),
        {"seq", "50", "source and target length in tokens", {}},
        layers("8"),
        {"hidden", "1024", "LSTM width", {}},
        {"vocab", "32000", "vocabulary size", {}}},
       detail::build_gnmt},
      {"rnnlm",
       "2-layer LSTM language model (Zaremba et al., large)",
       {batch(),
        {"seq", "35", "unrolled length in tokens", {}},
        {"hidden", "1500", "LSTM width", {}},
        layers("2"),
        {"vocab", "10000", "vocabulary size", {}}},
       detail::build_rnnlm},
      {"transformer",
       "Transformer encoder-decoder (Vaswani et al.), shared embeddings",
       {size({"base", "big"}),
        batch(),
        {"seq", "128", "source and target length in tokens", {}},
        override_of("layers", "encoder and decoder layers each"),
        override_of("hidden", "model width"),
        override_of("heads", "attention heads"),
        override_of("ff", "feed-forward width"),
        {"vocab", "37000", "shared vocabulary size", {}}},
       detail::build_transformer},
      {"bert",
       "BERT encoder with pooler",
       {size({"base", "large"}),
        batch(),
        {"seq", "128", "sequence length in tokens", {}},
        override_of("layers", "encoder layers"),
        override_of("hidden", "model width"),
        override_of("heads", "attention heads"),
        {"vocab", "30522", "vocabulary size", {}},
        {"positions", "512", "position embeddings", {}}},
       detail::build_bert},
      {"gpt2",
       "GPT-2 decoder-only language model, tied LM head",
       {size({"small", "medium", "large", "xl"}),
        batch(),
        {"seq", "1024", "sequence length in tokens", {}},
        override_of("layers", "transformer blocks"),
        override_of("hidden", "model width"),
        override_of("heads", "attention heads"),
        {"vocab", "50257", "vocabulary size", {}},
        {"positions", "1024", "position embeddings (n_ctx)", {}}},
       detail::build_gpt2},
      {"gpt3",
       "GPT-3 decoder-only language model (paper sizes), dense attention, tied LM head",
       {size({"small", "medium", "large", "xl", "2.7b", "6.7b", "13b", "175b"}),
        batch(),
        {"seq", "2048", "sequence length in tokens", {}},
        override_of("layers", "transformer blocks"),
        override_of("hidden", "model width"),
        override_of("heads", "attention heads"),
        {"vocab", "50257", "vocabulary size", {}},
        {"positions", "2048", "position embeddings", {}}},
       detail::build_gpt3},
      {"llama",
       "Llama 2 and 3 decoder-only language models: RMSNorm, SwiGLU, rotary embeddings, grouped-query attention, "
       "untied LM head",
       {size({"2-7b", "2-13b", "2-70b", "3-8b", "3-70b", "3-405b"}), batch(),
        override_of("seq", "sequence length in tokens"), override_of("layers", "transformer blocks"),
        override_of("hidden", "model width"), override_of("heads", "query heads"),
        override_of("kv_heads", "key/value heads, dividing heads"), override_of("ffn", "SwiGLU MLP width"),
        override_of("vocab", "vocabulary size")},
       detail::build_llama},
  };
  return entries;
}

std::string names_of(const auto& items) {
  std::vector<std::string> names;
  for (const auto& i : items)
    names.push_back(i.name);
  return fmt::format("{}", fmt::join(names, ", "));
}

std::string check_value(const Entry& e, const ParamDef& def, const std::string& value) {
  if (!def.choices.empty()) {
    if (std::find(def.choices.begin(), def.choices.end(), value) == def.choices.end())
      throw Error(fmt::format("zoo model '{}': parameter '{}' must be one of {}, got '{}'", e.name, def.name,
                              fmt::join(def.choices, ", "), value));
    return value;
  }
  std::int64_t v = 0;
  const auto* end = value.data() + value.size();
  const auto [ptr, ec] = std::from_chars(value.data(), end, v);
  if (value.empty() || ec != std::errc{} || ptr != end || v <= 0)
    throw Error(
        fmt::format("zoo model '{}': parameter '{}' must be a positive integer, got '{}'", e.name, def.name, value));
  if (v > def.max)
    throw Error(fmt::format("zoo model '{}': parameter '{}' is {}, more than the largest supported value {}", e.name,
                            def.name, value, def.max));
  return value;
}

} // namespace

namespace detail {

Params::Params(std::string model, std::map<std::string, std::string> values)
    : m_model(std::move(model)), m_values(std::move(values)) {}

std::int64_t Params::integer(const std::string& key) const {
  auto v = optional_integer(key);
  if (!v)
    fail(fmt::format("parameter '{}' has no value", key)); // a registry bug: every builder key has a default
  return *v;
}

std::optional<std::int64_t> Params::optional_integer(const std::string& key) const {
  const auto it = m_values.find(key);
  if (it == m_values.end() || it->second.empty())
    return std::nullopt;
  std::int64_t v = 0;
  std::from_chars(it->second.data(), it->second.data() + it->second.size(), v); // checked by build()
  return v;
}

const std::string& Params::text(const std::string& key) const {
  const auto it = m_values.find(key);
  if (it == m_values.end())
    fail(fmt::format("parameter '{}' has no value", key));
  return it->second;
}

void Params::fail(const std::string& message) const {
  throw Error(fmt::format("zoo model '{}': {}", m_model, message));
}

void Params::check_heads(std::int64_t hidden, std::int64_t heads) const {
  if (hidden % heads != 0)
    fail(fmt::format("hidden ({}) is not divisible by heads ({})", hidden, heads));
}

} // namespace detail

const std::vector<ZooModel>& models() {
  static const std::vector<ZooModel> list = [] {
    std::vector<ZooModel> out;
    for (const auto& e : registry()) {
      ZooModel m{e.name, e.description, {}};
      for (const auto& p : e.params)
        m.params.push_back({p.name, p.default_value, p.help});
      out.push_back(std::move(m));
    }
    return out;
  }();
  return list;
}

onnx::ModelProto build(std::string_view spec) {
  if (spec.starts_with(zoo_prefix))
    spec.remove_prefix(zoo_prefix.size());
  const auto question = spec.find('?');
  const std::string name(spec.substr(0, question));
  const auto& entries = registry();
  const auto entry = std::find_if(entries.begin(), entries.end(), [&](const Entry& e) { return e.name == name; });
  if (entry == entries.end() && name == "pase")
    throw Error("zoo:pase?graph=NAME names one of PaSE's benchmark graphs, which exist in PaSE's own cost model only: "
                "plan it with `partita plan zoo:pase?graph=NAME --cost-model pase`");
  if (entry == entries.end())
    throw Error(fmt::format("unknown zoo model '{}' (known models: {})", name, names_of(entries)));

  std::map<std::string, std::string> values;
  for (const auto& p : entry->params)
    values[p.name] = p.default_value;
  std::map<std::string, bool> given;
  std::string_view query = question == std::string_view::npos ? std::string_view{} : spec.substr(question + 1);
  while (!query.empty()) {
    const auto amp = query.find('&');
    const auto item = query.substr(0, amp);
    query = amp == std::string_view::npos ? std::string_view{} : query.substr(amp + 1);
    if (item.empty())
      continue;
    const auto eq = item.find('=');
    const std::string key(item.substr(0, eq));
    if (eq == std::string_view::npos)
      throw Error(fmt::format("zoo model '{}': expected key=value, got '{}'", name, key));
    const auto def =
        std::find_if(entry->params.begin(), entry->params.end(), [&](const ParamDef& p) { return p.name == key; });
    if (def == entry->params.end())
      throw Error(
          fmt::format("zoo model '{}' has no parameter '{}' (parameters: {})", name, key, names_of(entry->params)));
    if (given[key])
      throw Error(fmt::format("zoo model '{}': parameter '{}' given twice", name, key));
    given[key] = true;
    values[key] = check_value(*entry, *def, std::string(item.substr(eq + 1)));
  }
  return entry->build(detail::Params(name, std::move(values)));
}

void export_onnx(std::string_view spec, const std::string& path) {
  const auto model = build(spec);
  std::string bytes;
  if (!model.SerializeToString(&bytes))
    throw Error(fmt::format("{}: cannot serialize the model '{}'", path, spec));
  const std::string tmp = path + ".tmp";
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
    out.close();
    if (!out) {
      std::error_code ignored;
      std::filesystem::remove(tmp, ignored);
      throw Error(fmt::format("{}: cannot write the model (to {})", path, tmp));
    }
  }
  std::error_code ec;
  std::filesystem::rename(tmp, path, ec);
  if (ec) {
    std::error_code ignored;
    std::filesystem::remove(tmp, ignored);
    throw Error(fmt::format("{}: cannot replace the file: {}", path, ec.message()));
  }
}

onnx_import::ImportResult load(std::string_view model, const onnx_import::ImportOptions& options) {
  if (model.starts_with(zoo_prefix))
    return onnx_import::import_model(build(model), model, options);
  const std::filesystem::path path{std::string(model)};
  std::error_code ec;
  if (!std::filesystem::exists(path, ec)) {
    // "resnet50" or "gpt2?layers=2": a built-in model's name without its prefix.
    const auto name = model.substr(0, model.find('?'));
    const auto& entries = registry();
    if (name == "pase" || std::any_of(entries.begin(), entries.end(), [&](const Entry& e) { return e.name == name; }))
      throw Error(fmt::format("{}: no such file; did you mean the built-in model zoo:{}?", model, model));
  }
  return onnx_import::import_file(path, options);
}

} // namespace partita::zoo
