#include "cli/train_args.h"

#include "cli/args.h"
#include "forge/devices.h"

namespace forge::cli {

void add_train_options(CLI::App& cmd_app, TrainArgs& a, std::vector<Setting>& settings) {
  const int64_t big = int64_t{1} << 40;
  auto add = [&](Setting s, CLI::Option* opt) {
    s.option = opt;
    settings.push_back(std::move(s));
    return opt;
  };
  using R = OnResume;
  // Data and model.
  add(setting("data", &TrainArgs::data, R::Input),
      cmd_app.add_option("--data", a.data,
                         "A text file, a folder of .txt files, or a token file (llm.c layout)"));
  cmd_app.add_option("--out", a.out, "Output folder: checkpoints, metrics.jsonl, loss.svg")
      ->required();
  add(setting("tokenizer", &TrainArgs::tokenizer, R::Input),
      cmd_app.add_option("--tokenizer", a.tokenizer,
                         "GPT-2 BPE tokenizer folder, or 'char' for a character vocabulary of the "
                         "data (default: GPT-2's files from scripts/fetch_tokenizer.sh, or the "
                         "--init-from model's)"));
  add(setting("val_fraction", &TrainArgs::val_fraction, R::Fixed),
      cmd_app
          .add_option("--val-fraction", a.val_fraction,
                      "The last fraction of the tokens, in [0, 0.5], is the validation split")
          ->capture_default_str());
  add(setting("preset", &TrainArgs::preset, R::Fixed),
      cmd_app.add_option("--preset", a.preset,
                         "Model shapes: tiny, mini, gpt2, gpt2-medium, ... (default: mini)"));
  add(setting("layers", &TrainArgs::layers, R::Fixed),
      cmd_app.add_option("--layers", a.layers, "Transformer blocks (overrides the preset's)")
          ->check(int_in_range(1, 1024)));
  add(setting("heads", &TrainArgs::heads, R::Fixed),
      cmd_app.add_option("--heads", a.heads, "Attention heads (overrides the preset's)")
          ->check(int_in_range(1, 1024)));
  add(setting("embd", &TrainArgs::embd, R::Fixed),
      cmd_app.add_option("--embd", a.embd, "Embedding width (overrides the preset's)")
          ->check(int_in_range(1, 1 << 16)));
  add(setting("ctx", &TrainArgs::ctx, R::Fixed),
      cmd_app.add_option("--ctx", a.ctx, "Context positions (overrides the preset's)")
          ->check(int_in_range(1, 1 << 20)));
  add(setting("init_from", &TrainArgs::init_from, R::Input),
      cmd_app.add_option("--init-from", a.init_from,
                         "Fine-tune this HF GPT-2 model folder instead of a random init"));
  // Optimization.
  add(setting("batch", &TrainArgs::batch, R::Fixed),
      cmd_app.add_option("-b,--batch", a.batch, "Sequences per optimizer step")
          ->check(int_in_range(1, 1 << 20))
          ->capture_default_str());
  add(setting("micro_batch", &TrainArgs::micro_batch, R::Fixed),
      cmd_app
          .add_option("--micro-batch", a.micro_batch,
                      "Sequences per forward/backward (gradient accumulation; must divide "
                      "--batch; default: --batch)")
          ->check(int_in_range(1, 1 << 20)));
  add(setting("seq", &TrainArgs::seq, R::Fixed),
      cmd_app.add_option("-t,--seq", a.seq, "Tokens per sequence (default: the context)")
          ->check(int_in_range(1, 1 << 20)));
  add(setting("steps", &TrainArgs::steps, R::Fixed),
      cmd_app.add_option("--steps", a.steps, "Optimizer steps of the whole run")
          ->check(int_in_range(1, big))
          ->capture_default_str());
  add(setting("lr", &TrainArgs::lr, R::Fixed),
      cmd_app.add_option("--lr", a.lr, "Peak learning rate (cosine decay to 10% at --steps)")
          ->capture_default_str());
  add(setting("warmup", &TrainArgs::warmup, R::Fixed),
      cmd_app.add_option("--warmup", a.warmup, "Linear warmup steps")
          ->check(int_in_range(0, big))
          ->capture_default_str());
  add(setting("weight_decay", &TrainArgs::weight_decay, R::Fixed),
      cmd_app.add_option("--weight-decay", a.weight_decay, "AdamW weight decay (matrices only)")
          ->capture_default_str());
  add(setting("clip", &TrainArgs::clip, R::Fixed),
      cmd_app.add_option("--clip", a.clip, "Global grad-norm clip (0: off)")
          ->capture_default_str());
  add(setting("dropout", &TrainArgs::dropout, R::Fixed),
      cmd_app.add_option("--dropout", a.dropout, "Dropout probability, in [0, 1)")
          ->capture_default_str());
  {
    Setting s = setting("precision", &TrainArgs::precision, R::Fixed);
    s.absent = "fp32";  // state files from before --precision
    add(std::move(s),
        cmd_app
            .add_option("--precision", a.precision,
                        "The matrix products' arithmetic: fp32, or tensor cores on fp32 tensors "
                        "with tf32 or bf16 operands (devices that have them: cuda)")
            ->check(CLI::IsMember({"fp32", "tf32", "bf16"}))
            ->capture_default_str());
  }
  add(setting("seed", &TrainArgs::seed, R::Fixed),
      cmd_app.add_option("--seed", a.seed, "Seed of the init, the batches and dropout")
          ->capture_default_str());
  // Around the step: free to change on resume.
  add(setting("eval_every", &TrainArgs::eval_every, R::Free),
      cmd_app
          .add_option("--eval-every", a.eval_every,
                      "Validation loss every N steps (and at the end; 0: only at the end)")
          ->check(int_in_range(0, big))
          ->capture_default_str());
  add(setting("eval_batches", &TrainArgs::eval_batches, R::Free),
      cmd_app
          .add_option("--eval-batches", a.eval_batches,
                      "Validation batches per evaluation, at most (0: the whole split)")
          ->check(int_in_range(0, big))
          ->capture_default_str());
  add(setting("sample_every", &TrainArgs::sample_every, R::Free),
      cmd_app
          .add_option("--sample-every", a.sample_every,
                      "Print a generated sample every N steps (0: never)")
          ->check(int_in_range(0, big))
          ->capture_default_str());
  add(setting("sample_tokens", &TrainArgs::sample_tokens, R::Free),
      cmd_app.add_option("--sample-tokens", a.sample_tokens, "Tokens per sample")
          ->check(int_in_range(1, 1 << 20))
          ->capture_default_str());
  add(setting("save_every", &TrainArgs::save_every, R::Free),
      cmd_app
          .add_option("--save-every", a.save_every,
                      "Checkpoint every N steps (and at the end, and on Ctrl-C; 0: only then)")
          ->check(int_in_range(0, big))
          ->capture_default_str());
  cmd_app
      .add_option("--stop-after", a.stop_after,
                  "Train at most N steps in this run, then checkpoint and exit 0 (for "
                  "time-limited jobs; continue with --resume)")
      ->check(int_in_range(1, big));
  cmd_app.add_flag("--resume", a.resume, "Continue the run in --out from its training state");
  cmd_app.add_option("--device", a.device, "Device (" + device_choices() + ")")
      ->capture_default_str();
  cmd_app.add_option("--sum-timeline", a.sum_timeline,
                     "GPU data-parallel runs: write each step's gradient-sum timeline (when "
                     "each bucket was ready, when its NCCL sum ran) to FILE as a Chrome trace");
  cmd_app.add_flag("--json", a.json, "Print the final summary as one JSON object on stdout");
}

}  // namespace forge::cli
