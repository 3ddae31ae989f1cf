// GPT-2: configuration, weights, the forward pass (full, and prefill + KV-cache decode),
// and evaluation (loss / perplexity).
//
// Shapes use B = batch, T = new tokens, S = positions attended to, C = n_embd,
// H = n_head, hd = C / H, V = vocab_size, L = n_layer, P = n_ctx.
// Every function validates its inputs and throws forge::Error whose message starts with the
// function's name ("gpt2::Model::load: ...", "gpt2::Config: ...").
#pragma once

#include <cstdint>
#include <deque>
#include <memory>
#include <string>
#include <vector>

#include "forge/device.h"
#include "forge/device_queue.h"
#include "forge/tensor.h"

namespace forge {
class Tokenizer;
}

namespace forge::gpt2 {

/// The architecture's sizes. Field names follow HF's GPT2Config.
struct Config {
  int64_t n_layer = 12;
  int64_t n_head = 12;
  int64_t n_embd = 768;
  int64_t n_ctx = 1024;  // positions (HF "n_positions"; older files "n_ctx")
  int64_t vocab_size = 50257;
  float eps = 1e-5f;       // LayerNorm epsilon (HF "layer_norm_epsilon")
  int64_t bos_id = 50256;  // -1: none
  int64_t eos_id = 50256;  // -1: none
  /// The LM head is wte (HF "tie_word_embeddings"). When false, the weights must hold an
  /// own lm_head.weight.
  bool tie_word_embeddings = true;

  /// "gpt2" (124M), "gpt2-medium", "gpt2-large", "gpt2-xl", and two small ones of forge's
  /// own: "tiny" (2 layers, 2 heads, 64 wide, ctx 64, vocab 256, bos = eos = 255; for tests)
  /// and "mini" (4 layers, 4 heads, 256 wide, ctx 256, GPT-2's vocab; for demos and
  /// training from scratch). Error(Format) for any other name.
  static Config preset(const std::string& name);
  static std::vector<std::string> preset_names();

  /// Parses HF's config.json text. Reads n_layer, n_head, n_embd, n_positions (else n_ctx),
  /// vocab_size, layer_norm_epsilon, bos_token_id, eos_token_id; rejects a model_type other
  /// than "gpt2", an activation other than the tanh GELU, n_inner != 4 n_embd, and the
  /// attention variants forge does not implement (Error(Unsupported)). A bos/eos id outside
  /// the vocabulary (HF's default 50256 in a small-vocab model) is stored as -1 (none).
  /// Error(Format) for invalid JSON, missing or non-integer fields; then validate().
  /// `source` names the text in messages (a path).
  static Config from_json(const std::string& text, const std::string& source = "config.json");
  /// Reads and parses a config.json file; Error(Io) if it cannot be read.
  static Config from_json_file(const std::string& path);
  /// HF config.json text (GPT2Config fields, tied embeddings) that transformers can load.
  std::string to_json() const;

  /// Error(Format) unless every size is positive and sane (n_embd % n_head == 0, sizes
  /// below fixed caps so that no config can ask for unbounded memory, eps in (0, 1)).
  void validate() const;

  /// The one check of token ids against the vocabulary, for every entry point that takes
  /// ids: Error(Range) "<fn>: token id X at index i is outside the vocabulary (vocab_size =
  /// V)" for the first id >= vocab_size; with row_len > 0 the index reads "[row, col]".
  void check_token_ids(const uint32_t* ids, size_t n, const char* fn, int64_t row_len = 0) const;

  int64_t head_dim() const { return n_embd / n_head; }
  /// Parameter count: V C + P C + L (12 C^2 + 13 C) + 2 C, plus V C for an untied head.
  int64_t num_params() const;

  bool operator==(const Config&) const = default;
};

/// One transformer block's weights. Linear weights in F32 have HF's "Conv1D" orientation,
/// y = x @ W + b with W [in, out] = [K, N] (matmul's b untransposed); in F16, BF16, Q8_0 or
/// Q4_0 they are stored [out, in] = [N, K], as GGUF files store them (ggml's ne = {in, out},
/// blocks along `in`), and enter matmul with trans_b. The shapes below are the F32 ones.
/// LayerNorm parameters and biases are F32.
struct LayerWeights {
  Tensor ln_1_w, ln_1_b;  // [C]
  Tensor attn_w;          // [C, 3C]  (q | k | v, heads contiguous in each)
  Tensor attn_b;          // [3C]
  Tensor attn_proj_w;     // [C, C]
  Tensor attn_proj_b;     // [C]
  Tensor ln_2_w, ln_2_b;  // [C]
  Tensor fc_w;            // [C, 4C]
  Tensor fc_b;            // [4C]
  Tensor fc_proj_w;       // [4C, C]
  Tensor fc_proj_b;       // [C]
};

/// All weights, on the model's device: linear weights as LayerWeights says; wte and an
/// untied head [V, C] in any weight dtype; the position embedding F32.
struct Weights {
  /// Token embedding [V, C], also the tied LM head. One tensor on every device: a backend
  /// whose kernels bind less than its bytes splits the binding itself (in windows).
  Tensor wte;
  Tensor wpe;                        // [P, C], F32
  std::vector<LayerWeights> layers;  // L blocks
  Tensor ln_f_w, ln_f_b;             // [C]
  /// An untied LM head [V, C]; undefined when tied (the usual case,
  /// config.tie_word_embeddings).
  Tensor lm_head;
};

/// How to place a model's weights.
struct ModelOptions {
  Device device = Device::cpu();
};

class KVCache;
struct DecodeGraph;  // decode_graph.h: a recorded decode step

/// Evaluation settings; see evaluate().
struct EvalOptions {
  int64_t window = 0;  // input tokens per window; 0: n_ctx
  int64_t stride = 0;  // new targets scored per window, 1..window; 0: window
};

/// Evaluation of next-token prediction: loss = mean over targets i >= 1 of
/// -log p(ids[i] | ids[..i)), in nats (HF's loss with labels = input_ids).
struct EvalResult {
  double loss = 0.0;
  double perplexity = 0.0;  // exp(loss)
  int64_t tokens = 0;       // input tokens
  int64_t predictions = 0;  // scored targets (tokens - 1 per sequence)
  int64_t windows = 0;      // forward passes used
};

class Model {
 public:
  /// Loads a model folder: config.json + model.safetensors, or a sharded checkpoint
  /// (model.safetensors.index.json + shards). Tensor names with or without the
  /// "transformer." prefix; F32, F16 or BF16. 2-D weights keep their dtype (linear ones in
  /// the [out, in] layout of LayerWeights), on a device that runs it (device_runs_weights;
  /// else they are widened to F32); the 1-D ones and wpe become F32. F32 CPU tensors are used
  /// in place from the mapped file where possible. "lm_head.weight" is used only when present
  /// and different from wte (the loaded config then says tie_word_embeddings = false); a
  /// config with tie_word_embeddings = false needs it. Errors: missing folder/files (Io), malformed
  /// files (Format), a missing tensor or one whose shape does not match the config (Format).
  /// `dir` may also be a GGUF file ("*.gguf") of llama.cpp's gpt2 architecture: the config
  /// from its metadata (gpt2.block_count, .embedding_length, .context_length,
  /// .attention.head_count, .attention.layer_norm_epsilon; the vocabulary from token_embd;
  /// an untied head when output.weight is there), the weights in their dtypes (F32, F16,
  /// BF16, Q8_0, Q4_0) as above. Error(Format) for a missing, unexpected or misshapen tensor
  /// and missing metadata; Error(Unsupported) for another architecture or a ggml type forge
  /// lacks; the file's own errors as forge/gguf.h says.
  static Model load(const std::string& dir, const ModelOptions& options);
  static Model load(const std::string& dir, Device device = Device::cpu());

  /// A freshly initialized model (GPT-2 init: weights and embeddings N(0, 0.02), the two
  /// residual projections scaled by 1/sqrt(2 L), zero biases, unit LayerNorm weights).
  /// Deterministic in `seed` on every machine.
  static Model random(const Config& config, uint64_t seed, const ModelOptions& options);
  static Model random(const Config& config, uint64_t seed = 0, Device device = Device::cpu());

  /// Builds a model from weights already in place (training code, converters); checks
  /// every shape and dtype against the config and Weights' layout (Error(Format) /
  /// Error(DType)) and that all are on one device; weights.lm_head must be undefined exactly
  /// when config.tie_word_embeddings.
  static Model from_weights(const Config& config, Weights weights);

  /// This model with every 2-D weight (the linear weights, wte and an untied head) in
  /// `dtype` (the layout of LayerWeights), rounded by convert_weights (forge/quantize.h);
  /// wpe, LayerNorm parameters and biases stay F32. From F32 weights: a lower-precision
  /// weight is rounded once. Error(DType) for U32; Error(Shape) for a block dtype when
  /// n_embd is not a multiple of 32.
  Model converted(DType dtype) const;
  /// This model with every weight F32 (HF's layout), exactly widened: what training and
  /// save() work on.
  Model widened() const;
  /// The dtype of the linear weights (of wte when there are no layers).
  DType weight_dtype() const;
  /// Bytes that the weights take in memory.
  uint64_t weight_bytes() const;

  /// Writes config.json + model.safetensors (F32, widened from other dtypes; HF names
  /// without prefix, wte as one tensor) into `dir`, creating it. Error(Io) if it cannot be
  /// written.
  void save(const std::string& dir) const;

  /// Writes a GGUF file that llama.cpp loads (architecture gpt2, its tensor names; every
  /// weight in its current dtype, linear F32 ones stored [out, in] as GGUF wants), with the
  /// byte-level BPE `tokenizer` in its metadata when defined (its vocabulary must be the
  /// model's). `name` goes to general.name. Atomic (forge/gguf.h's save). Error(Format) for a
  /// tokenizer of another size, Error(Tokenizer) for a character-level one, Error(Io).
  void save_gguf(const std::string& path, const Tokenizer& tokenizer,
                 const std::string& name = "gpt2") const;

  /// Every weight tensor (handles sharing the model's storage) with its HF name, in HF's
  /// order: wte, wpe, the 12 tensors of each block, ln_f, then an untied head's
  /// "lm_head.weight". The order and names train::parameters() uses.
  std::vector<std::pair<std::string, Tensor>> named_weights() const;

  const Config& config() const { return config_; }
  const Weights& weights() const { return weights_; }
  Weights& weights() { return weights_; }
  Device device() const { return device_; }
  int64_t num_params() const { return config_.num_params(); }

  /// Full forward without a cache. ids: U32 [B, T] (or [T] as B = 1), any device; every id
  /// < V; 1 <= T <= n_ctx. Returns logits [B, T, V] on the model's device.
  Tensor forward(const Tensor& ids) const;

  /// Forward of T new tokens per sequence that continue the sequences held by `cache`: row
  /// b's tokens take positions cache.length(b) .. cache.length(b) + T - 1. Appends their
  /// keys/values to the cache and advances it. T > 1 is a prefill, T = 1 a decode step (the
  /// rows may then be at different positions). ids: U32 [B, T] with B = cache.batch().
  /// Returns the logits of the last new position [B, V], or with `all_logits` those of every
  /// new position [B, T, V].
  /// Errors: Range if a row's length + T exceeds the cache's capacity or n_ctx; Range for ids
  /// >= V; Shape for a batch other than the cache's; Device if the cache belongs to another
  /// device. On error the cache is left unchanged.
  Tensor forward_cached(const Tensor& ids, KVCache& cache, bool all_logits = false) const;

  /// forward_cached() of one sequence, the one in cache row `row` (a sequence joining a
  /// batch: cache.reset(row), then prefill its prompt here). ids: U32 [T] or [1, T].
  /// Returns [1, V] (or [1, T, V]). Errors as forward_cached's; Range for a row outside
  /// [0, cache.batch()).
  Tensor prefill(const Tensor& ids, KVCache& cache, int64_t row, bool all_logits = false) const;

  /// One decode step of sequences at their own positions: tokens[i] continues the sequence
  /// in cache row rows[i], at position cache.length(rows[i]). Returns logits [n, V] (row i
  /// for tokens[i]) and advances those rows by one; rows not named are untouched, so
  /// sequences join (reset(row) + prefill) and leave between steps. This is the one decode
  /// path: forward_cached's T = 1 steps come here, and on a GPU that replays recorded steps a
  /// one-sequence cache runs its recorded step.
  /// Errors: tokens and rows empty or of different sizes (Shape); a row outside
  /// [0, batch) or named twice, a full row, ids >= V (Range); the cache's errors as above.
  /// On error the cache is left unchanged.
  Tensor decode(const std::vector<uint32_t>& tokens, const std::vector<int64_t>& rows,
                KVCache& cache) const;

  /// Hidden states after the final LayerNorm, [B, T, C], without the LM head (for scoring
  /// in slices). Same contract as forward().
  Tensor hidden(const Tensor& ids) const;
  /// Logits of hidden states: h [..., C] -> [..., V] (the tied or untied LM head).
  Tensor lm_head(const Tensor& h) const;

 private:
  // The one forward pass behind forward/forward_cached/prefill/decode/hidden: ids [n, T]
  // (range-checked) for cache rows `rows` (one per sequence; none without a cache), each
  // sequence at its row's length; returns hidden states after ln_f (`head` false) or
  // logits; of every position (`all`) or only the last one ([n, *]).
  Tensor run(const Tensor& ids, KVCache* cache, const std::vector<int64_t>& rows, bool head,
             bool all, const char* fn) const;
  friend class GreedyDecoder;
  // Error(Shape) for a cache made for another model shape, Error(Device) for one on another
  // device; `fn` names the caller.
  void check_cache(const KVCache& cache, const char* fn) const;
  // Whether the 2-D weights are of more than one dtype.
  bool mixed_dtypes() const;
  // The cache's captured batch-1 decode step (recorded on first use, again when the
  // weights' or caches' buffers change); `greedy`: the step that writes its argmax into its
  // own token (GreedyDecoder), else the one whose logits the caller reads.
  std::shared_ptr<DecodeGraph> decode_graph(KVCache& cache, bool greedy) const;
  // A batch-1 decode step through decode_graph(); `token` is range-checked.
  Tensor decode_replayed(uint32_t token, KVCache& cache) const;

  Config config_;
  Weights weights_;
  Device device_ = Device::cpu();
};

/// Per-layer key and value caches of a batch of sequences, preallocated once:
/// K, V: [B * H, capacity, hd] on the model's device. Reused across steps (and across
/// prompts through reset()); decoding never reallocates them.
class KVCache {
 public:
  /// capacity 0 means n_ctx. Errors: batch < 1, capacity < 0 or > n_ctx (Range).
  KVCache(const Model& model, int64_t batch, int64_t capacity = 0);

  int64_t batch() const { return batch_; }
  int64_t capacity() const { return capacity_; }
  /// Positions row `row` already holds (its next token's position). Error(Range) for a row
  /// outside [0, batch).
  int64_t length(int64_t row = 0) const;
  Device device() const { return device_; }
  /// Forgets the cached positions of every row (keeps the buffers).
  void reset();
  /// Forgets row `row`'s positions (a sequence leaves; another may start there).
  void reset(int64_t row);

  /// Layer l's caches [B * H, capacity, hd]; row b's heads are groups b H .. b H + H - 1,
  /// and the first length(b) positions of each are valid.
  const Tensor& k(int64_t layer) const { return k_.at(static_cast<size_t>(layer)); }
  const Tensor& v(int64_t layer) const { return v_.at(static_cast<size_t>(layer)); }

 private:
  friend class Model;
  friend class GreedyDecoder;
  int64_t batch_ = 0, capacity_ = 0;
  std::vector<int64_t> lengths_;  // per row
  int64_t n_layer_ = 0, n_head_ = 0, head_dim_ = 0;
  Device device_ = Device::cpu();
  std::vector<Tensor> k_, v_;
  // The captured decode step on a GPU that can capture (shared by copies of the cache, which
  // share its buffers too).
  std::shared_ptr<DecodeGraph> graph_, greedy_graph_;
};

/// Greedy decoding of one sequence after a KV cache's contents, the device choosing each
/// token and feeding it to the next step itself. On a GPU that replays recorded steps, every
/// step is the cache's recorded greedy step (one submit each), and next() queues the step after the
/// one whose token it returns before it waits: the device does not wait for the host
/// between steps. (That step may run for nothing when the caller stops; its position is not
/// counted in the cache.) Elsewhere a step is forward_cached + argmax_rows. Either way the
/// tokens are those of argmax_rows(forward_cached(...)) step by step. The decoder uses the
/// cache until it is destroyed; the weights must not change meanwhile.
class GreedyDecoder {
 public:
  /// Decodes from `token`, the next input (not yet in the cache), for at most `max_steps`
  /// steps. Errors: a cache of batch != 1 or another model's shape (Shape) or device
  /// (Device); token >= vocab_size, max_steps < 0, or more steps than the cache has room
  /// for (Range).
  GreedyDecoder(const Model& model, KVCache& cache, uint32_t token, int64_t max_steps);
  ~GreedyDecoder();
  GreedyDecoder(const GreedyDecoder&) = delete;
  GreedyDecoder& operator=(const GreedyDecoder&) = delete;

  /// Runs the next step (its input token joins the cache) and returns the token it chose.
  /// Error(Range) after max_steps steps.
  uint32_t next();
  /// Steps whose tokens next() has returned.
  int64_t steps() const { return done_; }
  /// Host seconds the last next() spent before it waited for the device.
  double host_seconds() const { return host_seconds_; }

 private:
  void queue();  // the next step, on the device (graph path)

  const Model& model_;
  KVCache& cache_;
  std::shared_ptr<DecodeGraph> graph_;  // null: step by step through forward_cached
  uint32_t token_;                      // the next input (host path)
  int64_t start_, max_steps_, queued_ = 0, done_ = 0;
  std::deque<PendingRead> tokens_;  // the queued steps' tokens, oldest first
  double host_seconds_ = 0.0;
};

/// Loss and perplexity of one token sequence (>= 2 tokens). Sequences longer than the
/// window are scored in windows: window k holds `window` input tokens and scores the next
/// `stride` targets not scored yet, the tokens before them in the window serving as
/// context. With stride == window (the default) the input windows tile the sequence
/// without overlap and every target i >= 1 is scored exactly once, target k*W+j+1 seeing the
/// j+1 tokens of its own window; a smaller stride gives each target more context at more
/// cost. A sequence of at most window + 1 tokens uses one pass, identical to HF's loss.
/// Errors: fewer than 2 tokens, ids >= V (Range), window outside [1, n_ctx], stride outside
/// [1, window].
EvalResult evaluate(const Model& model, const std::vector<uint32_t>& ids,
                    const EvalOptions& options = {});

/// Loss over a batch of equal-length sequences: ids U32 [B, T], 2 <= T <= n_ctx; the mean
/// over all B (T - 1) targets.
EvalResult evaluate(const Model& model, const Tensor& ids);

}  // namespace forge::gpt2
