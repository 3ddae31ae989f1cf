// forge/run_dir.h: the output folder's lock, atomic files, staged model saves.
#include "forge/run_dir.h"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <filesystem>

#include "forge/error.h"
#include "io/atomic_file.h"

namespace forge::train {
namespace fs = std::filesystem;
namespace {

constexpr const char* kStagingDir = ".model_staging";

[[noreturn]] void fail(const std::string& what) { throw Error(ErrorKind::Io, "train: " + what); }

/// Removes temp files that an earlier process killed mid-write left in OUT ("<name>.tmp.<pid>",
/// io::AtomicFile's naming). Called while holding OUT's lock, so none belongs to a live run.
void remove_stale_temp_files(const fs::path& out) {
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(out, ec)) {
    const std::string name = e.path().filename().string();
    const size_t pos = name.rfind(".tmp.");
    if (pos == std::string::npos || pos + 5 >= name.size()) continue;
    if (name.find_first_not_of("0123456789", pos + 5) != std::string::npos) continue;
    std::error_code rm;
    if (e.is_regular_file(rm)) fs::remove(e.path(), rm);
  }
}

}  // namespace

void claim_run_dir(const std::string& dir) {
  const fs::path out(dir);
  const fs::path lock = out / ".forge_train.lock";
  const int fd = ::open(lock.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (fd < 0) fail("cannot create " + lock.string());
  if (::flock(fd, LOCK_EX | LOCK_NB) != 0) {
    ::close(fd);
    fail("another forge train is writing " + out.string());
  }
  // The descriptor stays open (and the lock held) until the process exits.
  remove_stale_temp_files(out);
  std::error_code ec;
  fs::remove_all(out / kStagingDir, ec);  // a save that a kill interrupted
}

void write_file_atomic(const std::string& path, const std::string& text, const char* who) {
  io::AtomicFile f(path, who);
  f.write(text.data(), text.size());
  f.commit();
}

// gpt2::Model::save rewrites config.json in place, hence the staging folder.
void save_model_atomically(const gpt2::Model& model, const std::string& dir) {
  const fs::path out(dir);
  const fs::path stage = out / kStagingDir;
  std::error_code ec;
  fs::remove_all(stage, ec);
  try {
    model.save(stage.string());
    for (const char* name : {"model.safetensors", "config.json"}) {
      const fs::path from = stage / name;
      const int fd = ::open(from.c_str(), O_RDONLY | O_CLOEXEC);
      const bool synced = fd >= 0 && ::fsync(fd) == 0;
      if (fd >= 0) ::close(fd);
      if (!synced) fail("cannot sync " + from.string());
      fs::rename(from, out / name, ec);  // never publishes data that is not on disk
      if (ec)
        fail("cannot move " + from.string() + " to " + (out / name).string() + ": " + ec.message());
    }
  } catch (...) {
    fs::remove_all(stage, ec);
    throw;
  }
  fs::remove_all(stage, ec);
}

}  // namespace forge::train
