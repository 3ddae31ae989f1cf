// GPT-2's config parsing (presets, HF JSON, what forge refuses to compute) and every bad
// input the model promises to reject: model folders, forward and cache calls, evaluate and
// from_weights.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "forge/forge.h"
#include "forge/gpt2.h"
#include "forge/safetensors.h"
#include "gpt2_test_util.h"

using namespace forge;
using namespace forge::gpt2;
using namespace forge::test::gpt2_tests;
using nlohmann::json;

// ==========================================================================================
// Config
// ==========================================================================================

TEST(Gpt2Config, Presets) {
  const Config g = Config::preset("gpt2");
  EXPECT_EQ(g.n_layer, 12);
  EXPECT_EQ(g.n_head, 12);
  EXPECT_EQ(g.n_embd, 768);
  EXPECT_EQ(g.n_ctx, 1024);
  EXPECT_EQ(g.vocab_size, 50257);
  EXPECT_EQ(g.eos_id, 50256);
  // HF: sum(p.numel() for p in GPT2LMHeadModel(GPT2Config()).parameters()) = 124439808.
  EXPECT_EQ(g.num_params(), 124439808);
  EXPECT_EQ(Config::preset("gpt2-medium").num_params(), 354823168);
  EXPECT_EQ(Config::preset("gpt2-large").num_params(), 774030080);
  EXPECT_EQ(Config::preset("gpt2-xl").num_params(), 1557611200);
  for (const std::string& n : Config::preset_names()) EXPECT_NO_THROW(Config::preset(n).validate());
  EXPECT_FORGE_ERROR(Config::preset("gpt3"), ErrorKind::Format, "gpt2::Config", "gpt3");
}

TEST(Gpt2Config, ParsesHfJson) {
  const Config c = Config::from_json(R"({"model_type": "gpt2", "n_layer": 3, "n_head": 4,
      "n_embd": 32, "n_positions": 50, "n_ctx": 7, "vocab_size": 99,
      "layer_norm_epsilon": 1e-6, "bos_token_id": 5, "eos_token_id": 50256,
      "activation_function": "gelu_new", "n_inner": null, "resid_pdrop": 0.1})");
  EXPECT_EQ(c.n_layer, 3);
  EXPECT_EQ(c.n_head, 4);
  EXPECT_EQ(c.n_embd, 32);
  EXPECT_EQ(c.n_ctx, 50);  // n_positions wins over n_ctx
  EXPECT_EQ(c.vocab_size, 99);
  EXPECT_FLOAT_EQ(c.eps, 1e-6f);
  EXPECT_EQ(c.bos_id, 5);
  EXPECT_EQ(c.eos_id, -1);  // HF's default 50256 outside a 99-token vocabulary
  EXPECT_TRUE(c.tie_word_embeddings);
  // Older files: n_ctx only.
  EXPECT_EQ(
      Config::from_json(R"({"n_layer":1,"n_head":1,"n_embd":8,"n_ctx":9,"vocab_size":3})").n_ctx,
      9);
}

// Found by fuzz/fuzz_config.cpp: a config without an eos token (-1, written as null) came back
// with GPT2Config's default 50256.
TEST(Gpt2Config, NullSpecialTokenIsNoneAndAbsentIsHfDefault) {
  const std::string sizes = R"("n_layer":1,"n_head":1,"n_embd":8,"n_ctx":9,"vocab_size":50257)";
  const Config absent = Config::from_json("{" + sizes + "}");
  EXPECT_EQ(absent.bos_id, 50256);
  EXPECT_EQ(absent.eos_id, 50256);
  const Config none =
      Config::from_json("{" + sizes + R"(,"bos_token_id":null,"eos_token_id":null})");
  EXPECT_EQ(none.bos_id, -1);
  EXPECT_EQ(none.eos_id, -1);
  Config c = Config::preset("gpt2");
  c.eos_id = -1;
  EXPECT_EQ(Config::from_json(c.to_json()), c);
}

TEST(Gpt2Config, JsonRoundTrip) {
  Config c = Config::preset("tiny");
  c.eps = 1e-5f;
  c.tie_word_embeddings = false;
  const Config back = Config::from_json(c.to_json());
  EXPECT_EQ(back, c);
  const json j = json::parse(c.to_json());
  EXPECT_EQ(j["n_positions"], 64);
  EXPECT_EQ(j["layer_norm_epsilon"].get<double>(), 1e-5);  // shortest form, not 9.99e-06
  EXPECT_EQ(j["model_type"], "gpt2");
}

TEST(Gpt2Config, RejectsBadJson) {
  const std::string base = R"("n_layer": 2, "n_head": 2, "n_embd": 8, "n_positions": 16)";
  auto with = [&](const std::string& extra) { return "{" + base + ", " + extra + "}"; };
  EXPECT_NO_THROW(Config::from_json(with(R"("vocab_size": 10)")));
  EXPECT_FORGE_ERROR(Config::from_json("{nope"), ErrorKind::Format, "gpt2::Config", "invalid JSON");
  EXPECT_FORGE_ERROR(Config::from_json("[1, 2]"), ErrorKind::Format, "gpt2::Config", "object");
  EXPECT_FORGE_ERROR(Config::from_json("{" + base + "}"), ErrorKind::Format, "gpt2::Config",
                     "vocab_size");
  EXPECT_FORGE_ERROR(Config::from_json(with(R"("vocab_size": "10")")), ErrorKind::Format,
                     "gpt2::Config", "integer");
  EXPECT_FORGE_ERROR(Config::from_json(with(R"("vocab_size": 10.5)")), ErrorKind::Format,
                     "gpt2::Config", "integer");
  EXPECT_FORGE_ERROR(Config::from_json(with(R"("vocab_size": 0)")), ErrorKind::Format,
                     "gpt2::Config", "vocab_size");
  EXPECT_FORGE_ERROR(Config::from_json(with(R"("vocab_size": -3)")), ErrorKind::Format,
                     "gpt2::Config", "vocab_size");
  EXPECT_FORGE_ERROR(Config::from_json(with(R"("vocab_size": 100000000000)")), ErrorKind::Format,
                     "gpt2::Config", "vocab_size");
  EXPECT_FORGE_ERROR(
      Config::from_json(R"({"n_layer": 2, "n_head": 3, "n_embd": 8, "n_ctx": 4, "vocab_size": 5})"),
      ErrorKind::Format, "gpt2::Config", "not divisible");
  EXPECT_FORGE_ERROR(
      Config::from_json(R"({"n_layer": 0, "n_head": 1, "n_embd": 8, "n_ctx": 4, "vocab_size": 5})"),
      ErrorKind::Format, "gpt2::Config", "n_layer");
  EXPECT_FORGE_ERROR(
      Config::from_json(
          R"({"n_layer": 1000, "n_head": 64, "n_embd": 65536, "n_ctx": 4, "vocab_size": 5})"),
      ErrorKind::Format, "gpt2::Config", "parameters");
  EXPECT_FORGE_ERROR(
      Config::from_json(R"({"n_layer": 1, "n_head": 1, "n_embd": 8, "vocab_size": 5})"),
      ErrorKind::Format, "gpt2::Config", "n_positions");
  EXPECT_FORGE_ERROR(Config::from_json(with(R"("vocab_size": 10, "layer_norm_epsilon": -1)")),
                     ErrorKind::Format, "gpt2::Config", "epsilon");
  EXPECT_FORGE_ERROR(Config::from_json(with(R"("vocab_size": 10, "model_type": "llama")")),
                     ErrorKind::Unsupported, "gpt2::Config", "model_type");
  EXPECT_FORGE_ERROR(Config::from_json(with(R"("vocab_size": 10, "activation_function": "relu")")),
                     ErrorKind::Unsupported, "gpt2::Config", "relu");
  EXPECT_FORGE_ERROR(Config::from_json(with(R"("vocab_size": 10, "n_inner": 7)")),
                     ErrorKind::Unsupported, "gpt2::Config", "n_inner");
  EXPECT_FORGE_ERROR(Config::from_json_file(scratch("no_such_config.json")), ErrorKind::Io,
                     "gpt2::Config", "cannot read");
}

// Attention variants HF's GPT2Config can ask for and forge does not compute: refused, not
// silently run as plain GPT-2 (their defaults and explicit plain values load); flags of the
// wrong type are format errors.
TEST(Gpt2Config, RejectsAttentionVariantsForgeDoesNotCompute) {
  const std::string base =
      R"("n_layer": 2, "n_head": 2, "n_embd": 8, "n_positions": 16, "vocab_size": 10)";
  auto with = [&](const std::string& extra) { return "{" + base + ", " + extra + "}"; };
  EXPECT_NO_THROW(Config::from_json(with(R"("scale_attn_weights": true)")));
  EXPECT_NO_THROW(Config::from_json(with(R"("scale_attn_by_inverse_layer_idx": false)")));
  EXPECT_NO_THROW(Config::from_json(with(R"("add_cross_attention": false)")));
  EXPECT_NO_THROW(Config::from_json(with(R"("scale_attn_weights": null)")));
  EXPECT_FORGE_ERROR(Config::from_json(with(R"("scale_attn_weights": false)")),
                     ErrorKind::Unsupported, "gpt2::Config", "scale_attn_weights = false");
  EXPECT_FORGE_ERROR(Config::from_json(with(R"("scale_attn_by_inverse_layer_idx": true)")),
                     ErrorKind::Unsupported, "gpt2::Config", "scale_attn_by_inverse_layer_idx");
  EXPECT_FORGE_ERROR(Config::from_json(with(R"("add_cross_attention": true)")),
                     ErrorKind::Unsupported, "gpt2::Config", "add_cross_attention");
  EXPECT_FORGE_ERROR(Config::from_json(with(R"("add_cross_attention": 1)")), ErrorKind::Format,
                     "gpt2::Config", "true or false");
  EXPECT_FORGE_ERROR(Config::from_json(with(R"("scale_attn_weights": "yes")")), ErrorKind::Format,
                     "gpt2::Config", "true or false");
}

// A config.json over 1 MiB is refused before it is read (a real one is ~1 KB); one just
// under the cap, padded with whitespace, still loads.
TEST(Gpt2Config, RefusesAConfigFileOverOneMebibyte) {
  const std::string body =
      R"({"n_layer": 2, "n_head": 2, "n_embd": 8, "n_positions": 16, "vocab_size": 10})";
  const std::string under = scratch("config_under_1mib.json"), over = scratch("config_1mib.json");
  const size_t cap = size_t{1} << 20;
  std::ofstream(under, std::ios::binary) << body << std::string(cap - body.size(), ' ');
  std::ofstream(over, std::ios::binary) << body << std::string(cap + 1 - body.size(), ' ');
  EXPECT_EQ(fs::file_size(under), cap);
  EXPECT_EQ(Config::from_json_file(under).n_layer, 2);
  EXPECT_FORGE_ERROR(Config::from_json_file(over), ErrorKind::Format, "gpt2::Config",
                     "too large for a config");
  fs::remove(under);
  fs::remove(over);
}

// ==========================================================================================
// Bad input
// ==========================================================================================

TEST(Gpt2BadInput, ModelFolders) {
  const char* load = "gpt2::Model::load";
  EXPECT_FORGE_ERROR(Model::load(scratch("nowhere")), ErrorKind::Io, load, "no model folder");
  const std::string empty = scratch("empty");
  fs::create_directories(empty);
  EXPECT_FORGE_ERROR(Model::load(empty), ErrorKind::Io, load, "config.json");

  const Config c = odd_config();
  const Model good = Model::random(c, 1);
  const std::string dir = scratch("good");
  good.save(dir);
  EXPECT_NO_THROW(Model::load(dir));

  auto copy_of = [&](const std::string& name) {
    const std::string d = scratch(name);
    fs::copy(dir, d);
    return d;
  };
  auto write = [](const std::string& path, const std::string& text) {
    std::ofstream(path, std::ios::binary | std::ios::trunc) << text;
  };
  {  // weights missing
    const std::string d = copy_of("no_weights");
    fs::remove(d + "/model.safetensors");
    EXPECT_FORGE_ERROR(Model::load(d), ErrorKind::Io, load, "model.safetensors");
  }
  {  // invalid config.json
    const std::string d = copy_of("bad_json");
    write(d + "/config.json", "{\"n_layer\": 2,");
    EXPECT_FORGE_ERROR(Model::load(d), ErrorKind::Format, load, "invalid JSON");
  }
  {  // config inconsistent with itself
    const std::string d = copy_of("bad_heads");
    std::string text = c.to_json();
    text.replace(text.find("\"n_head\": 3"), 11, "\"n_head\": 5");
    write(d + "/config.json", text);
    EXPECT_FORGE_ERROR(Model::load(d), ErrorKind::Format, load, "not divisible");
  }
  {  // config that does not match the tensors
    const std::string d = copy_of("bad_vocab");
    Config bad = c;
    bad.vocab_size = 204;
    write(d + "/config.json", bad.to_json());
    EXPECT_FORGE_ERROR(Model::load(d), ErrorKind::Format, load, "[204, 48]");
  }
  {  // more layers than the file holds
    const std::string d = copy_of("bad_layers");
    Config bad = c;
    bad.n_layer = 3;
    write(d + "/config.json", bad.to_json());
    EXPECT_FORGE_ERROR(Model::load(d), ErrorKind::Format, load, "missing tensor \"h.2.");
  }
  // Tensor-level damage: rewrite model.safetensors from the good model's tensors.
  const SafeTensorsFile src = SafeTensorsFile::open(dir + "/model.safetensors");
  auto rewrite = [&](const std::string& name, auto edit) {
    const std::string d = copy_of(name);
    NamedTensors ts;
    for (const std::string& n : src.names()) ts.emplace_back(n, src.load(n).clone());
    edit(ts);
    save_safetensors(d + "/model.safetensors", ts);
    return d;
  };
  {
    const std::string d = rewrite("missing_tensor", [](NamedTensors& ts) {
      ts.erase(
          std::find_if(ts.begin(), ts.end(), [](auto& p) { return p.first == "h.1.ln_2.bias"; }));
    });
    EXPECT_FORGE_ERROR(Model::load(d), ErrorKind::Format, load, "missing tensor \"h.1.ln_2.bias\"");
  }
  {
    const std::string d = rewrite("wrong_shape", [](NamedTensors& ts) {
      for (auto& [n, t] : ts)
        if (n == "h.0.attn.c_attn.weight") t = Tensor::zeros({144, 48});  // transposed
    });
    EXPECT_FORGE_ERROR(Model::load(d), ErrorKind::Format, load, "h.0.attn.c_attn.weight");
  }
  {
    const std::string d = rewrite("int_tensor", [](NamedTensors& ts) {
      for (auto& [n, t] : ts)
        if (n == "ln_f.bias") t = Tensor::zeros({48}, DType::U32);
    });
    EXPECT_FORGE_ERROR(Model::load(d), ErrorKind::Unsupported, load, "ln_f.bias");
  }
  {  // untied config without a head
    const std::string d = copy_of("untied_no_head");
    Config bad = c;
    bad.tie_word_embeddings = false;
    write(d + "/config.json", bad.to_json());
    EXPECT_FORGE_ERROR(Model::load(d), ErrorKind::Format, load, "lm_head.weight");
  }
  {  // a head stored but identical to wte stays tied
    const std::string d = rewrite("tied_copy", [](NamedTensors& ts) {
      for (auto& [n, t] : ts)
        if (n == "wte.weight") ts.emplace_back("lm_head.weight", t.clone());
    });
    const Model m = Model::load(d);
    EXPECT_FALSE(m.weights().lm_head.defined());
    EXPECT_TRUE(m.config().tie_word_embeddings);
  }
  {  // a truncated weights file
    const std::string d = copy_of("truncated");
    fs::resize_file(d + "/model.safetensors", fs::file_size(d + "/model.safetensors") / 2);
    EXPECT_FORGE_ERROR(Model::load(d), ErrorKind::Format, load, "");
  }
}

TEST(Gpt2BadInput, ForwardAndCache) {
  const Config c = odd_config();
  const Model m = Model::random(c, 1);
  const char* fwd = "gpt2::Model::forward";
  EXPECT_FORGE_ERROR(m.forward(u32({1u, 203u}, {1, 2})), ErrorKind::Range, fwd, "token id 203");
  EXPECT_FORGE_ERROR(m.forward(Tensor::from_vector(random_ids(41, 203, 1), {1, 41})),
                     ErrorKind::Range, fwd, "n_ctx = 40");
  EXPECT_FORGE_ERROR(m.forward(Tensor::from_vector(std::vector<float>{1, 2}, {1, 2})),
                     ErrorKind::DType, fwd, "u32");
  EXPECT_FORGE_ERROR(m.forward(Tensor::zeros({1, 0}, DType::U32)), ErrorKind::Shape, fwd,
                     "no tokens");
  EXPECT_FORGE_ERROR(m.forward(Tensor::zeros({1, 2, 3}, DType::U32)), ErrorKind::Shape, fwd,
                     "[B, T]");
  EXPECT_FORGE_ERROR(m.forward(Tensor()), ErrorKind::Shape, fwd, "undefined");
  // [T] is B = 1.
  EXPECT_EQ(m.forward(u32({1u, 2u, 3u}, {3})).shape(), Shape({1, 3, 203}));

  const char* fc = "gpt2::Model::forward_cached";
  KVCache cache(m, 2, 10);
  EXPECT_FORGE_ERROR(m.forward_cached(u32({1u, 2u}, {1, 2}), cache), ErrorKind::Shape, fc, "batch");
  EXPECT_FORGE_ERROR(m.forward_cached(Tensor::zeros({2, 11}, DType::U32), cache), ErrorKind::Range,
                     fc, "capacity of 10");
  EXPECT_FORGE_ERROR(m.forward_cached(u32({1u, 999u}, {2, 1}), cache), ErrorKind::Range, fc,
                     "token id 999");
  EXPECT_EQ(cache.length(), 0);
  EXPECT_EQ(m.forward_cached(Tensor::zeros({2, 10}, DType::U32), cache).shape(), Shape({2, 203}));
  EXPECT_FORGE_ERROR(m.forward_cached(Tensor::zeros({2, 1}, DType::U32), cache), ErrorKind::Range,
                     fc, "overflow");
  // A cache of another model shape.
  Config other = c;
  other.n_head = 4;
  const Model m4 = Model::random(other, 1);
  KVCache c4(m4, 1);
  EXPECT_FORGE_ERROR(m.forward_cached(Tensor::zeros({1, 1}, DType::U32), c4), ErrorKind::Shape, fc,
                     "another model");

  EXPECT_FORGE_ERROR(KVCache(m, 0), ErrorKind::Range, "gpt2::KVCache", "batch");
  EXPECT_FORGE_ERROR(KVCache(m, 1, 41), ErrorKind::Range, "gpt2::KVCache", "capacity");
  EXPECT_FORGE_ERROR(KVCache(m, 1, -1), ErrorKind::Range, "gpt2::KVCache", "capacity");
  EXPECT_FORGE_ERROR(KVCache(m, int64_t{1} << 40), ErrorKind::Range, "gpt2::KVCache", "memory");
}

TEST(Gpt2BadInput, EvaluateAndBuild) {
  const Config c = odd_config();
  const Model m = Model::random(c, 1);
  const char* ev = "gpt2::evaluate";
  EXPECT_FORGE_ERROR(evaluate(m, std::vector<uint32_t>{5}), ErrorKind::Shape, ev, "at least 2");
  EXPECT_FORGE_ERROR(evaluate(m, std::vector<uint32_t>{5, 203}), ErrorKind::Range, ev,
                     "token id 203");
  EXPECT_FORGE_ERROR(evaluate(m, std::vector<uint32_t>{5, 6}, {.window = 41, .stride = 0}),
                     ErrorKind::Range, ev, "window");
  EXPECT_FORGE_ERROR(evaluate(m, std::vector<uint32_t>{5, 6}, {.window = 10, .stride = 11}),
                     ErrorKind::Range, ev, "stride");
  EXPECT_FORGE_ERROR(evaluate(m, Tensor::zeros({1, 41}, DType::U32)), ErrorKind::Range, ev,
                     "n_ctx");
  EXPECT_FORGE_ERROR(evaluate(m, Tensor::zeros({2, 1}, DType::U32)), ErrorKind::Shape, ev,
                     "T >= 2");

  Config bad = c;
  bad.n_embd = 50;
  EXPECT_FORGE_ERROR(Model::random(bad, 1), ErrorKind::Format, "gpt2::Model::random",
                     "not divisible");
  Weights w = m.weights();
  w.layers[1].fc_w = Tensor::zeros({48, 100});
  EXPECT_FORGE_ERROR(Model::from_weights(c, w), ErrorKind::Format, "gpt2::Model::from_weights",
                     "h.1.mlp.c_fc.weight");
  w = m.weights();
  w.wte = w.wte.narrow_rows(0, 100);
  EXPECT_FORGE_ERROR(Model::from_weights(c, w), ErrorKind::Format, "gpt2::Model::from_weights",
                     "wte.weight has shape [100, ");
  w = m.weights();
  w.layers.pop_back();
  EXPECT_FORGE_ERROR(Model::from_weights(c, w), ErrorKind::Format, "gpt2::Model::from_weights",
                     "layers");
}
