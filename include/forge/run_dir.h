// What `forge train` does to its output folder, so that a kill at any instant loses nothing:
// one run at a time per folder (a lock), every file replaced atomically, the model files
// staged and renamed, the metrics log appended a whole line at a time and cut back to the
// checkpoint on resume, and SIGINT/SIGTERM turned into "finish this step, then save".
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "forge/gpt2.h"

namespace forge::train {

/// Takes an exclusive lock on the folder `out` for the life of the process (two runs writing
/// one folder would corrupt each other's checkpoints), then removes what a killed run left
/// there: temp files of io::AtomicFile ("<name>.tmp.<pid>") and a half-staged model.
/// Error(Io) "another forge train is writing OUT" if a live process holds the lock.
void claim_run_dir(const std::string& out);

/// Replaces `path` atomically (temp file, fsync, rename) with `text`. Error(Io) "<who>:
/// <path>: ..." naming the caller.
void write_file_atomic(const std::string& path, const std::string& text, const char* who = "train");

/// Writes config.json + model.safetensors into `out` so that each replaces its old version
/// atomically: saved into a staging folder in `out`, each file synced, then renamed over
/// its final name. Error(Io/...) from the save; the staging folder is removed either way.
void save_model_atomically(const gpt2::Model& model, const std::string& out);

/// The first SIGINT or SIGTERM sets stop_signal() (the loop finishes its step, saves and
/// exits with 128 + signal); a second one exits at once (every file is replaced atomically,
/// so only the unsaved steps are lost).
void install_stop_signals();
/// 0, or the first stop signal received.
int stop_signal();

/// metrics.jsonl: one JSON object per step ({"step": N, "loss": ..., ["val_loss": ...]}).
class MetricsLog {
 public:
  using Points = std::vector<std::pair<double, double>>;  // (step, loss)

  explicit MetricsLog(std::string path) : path_(std::move(path)) {}
  /// Keeps the records of steps <= `step` (a resumed run's file then continues exactly
  /// where the checkpoint was taken) and drops everything from the first unreadable line
  /// on (a line cut by a kill); rewrites the file atomically.
  void truncate_to(int64_t step);
  /// Appends one record, one line of a JSON object with an integer "step", in one write()
  /// (a kill leaves the whole line or none of it). Error(Format) for anything else, before
  /// writing; Error(Io) when the disk is full.
  void append(const std::string& json_object);
  const Points& train() const { return train_; }
  const Points& val() const { return val_; }

 private:
  void add(const std::string& json_object);
  std::string path_;
  Points train_, val_;
};

}  // namespace forge::train
