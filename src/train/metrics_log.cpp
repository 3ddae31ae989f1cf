// forge/run_dir.h: metrics.jsonl, appended a line at a time, cut back on resume.
#include <fcntl.h>
#include <unistd.h>

#include <fstream>
#include <nlohmann/json.hpp>

#include "forge/error.h"
#include "forge/run_dir.h"

namespace forge::train {

void MetricsLog::add(const std::string& line) {
  const auto rec = nlohmann::json::parse(line);
  const double step = rec.at("step").get<double>();
  if (rec.contains("loss") && rec["loss"].is_number())
    train_.emplace_back(step, rec["loss"].get<double>());
  if (rec.contains("val_loss") && rec["val_loss"].is_number())
    val_.emplace_back(step, rec["val_loss"].get<double>());
}

void MetricsLog::truncate_to(int64_t step) {
  std::ifstream f(path_, std::ios::binary);
  std::string kept, line;
  while (f && std::getline(f, line)) {
    nlohmann::json rec;
    try {
      rec = nlohmann::json::parse(line);
    } catch (const std::exception&) {
      break;  // a line cut by a kill: nothing after it can be trusted
    }
    if (!rec.is_object() || !rec.contains("step") || !rec["step"].is_number_integer() ||
        rec["step"].get<int64_t>() > step)
      break;
    add(line);
    kept += line + "\n";
  }
  write_file_atomic(path_, kept);
}

void MetricsLog::append(const std::string& json_object) {
  // Checked before anything is written: a record truncate_to() could not read back would
  // cut the log there on the next resume.
  bool ok = json_object.find('\n') == std::string::npos;
  if (ok) {
    try {
      const auto rec = nlohmann::json::parse(json_object);
      ok = rec.is_object() && rec.contains("step") && rec["step"].is_number_integer();
    } catch (const std::exception&) {
      ok = false;
    }
  }
  if (!ok)
    throw Error(ErrorKind::Format,
                "train: a metrics record must be one line of a JSON object with an integer "
                "\"step\"");
  const int fd = ::open(path_.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  if (fd < 0) throw Error(ErrorKind::Io, "train: cannot open " + path_ + " for appending");
  const std::string text = json_object + "\n";
  const ssize_t n = ::write(fd, text.data(), text.size());
  ::close(fd);
  if (n != static_cast<ssize_t>(text.size()))
    throw Error(ErrorKind::Io, "train: cannot append to " + path_ + " (disk full?)");
  add(json_object);
}

}  // namespace forge::train
