// forge serve's Prometheus metrics (metrics.h).
#include "serve/metrics.h"

#include <cstdio>

namespace forge::serve {
namespace {

void metric(std::string& out, const char* name, const char* type, const char* help) {
  out += std::string("# HELP ") + name + " " + help + "\n# TYPE " + name + " " + type + "\n";
}

std::string num(double x) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.9g", x);
  return buf;
}

// A metric with one unlabelled sample.
void metric(std::string& out, const char* name, const char* type, const char* help,
            const std::string& value) {
  metric(out, name, type, help);
  out += std::string(name) + " " + value + "\n";
}

}  // namespace

void Metrics::count_request(const std::string& route, int status) {
  std::lock_guard lk(mu_);
  ++requests_[{route, status}];
}

void Metrics::count_rejected() {
  std::lock_guard lk(mu_);
  ++rejected_;
}

std::string Metrics::render(const std::optional<EngineStats>& engine) const {
  std::string out;
  {
    std::lock_guard lk(mu_);
    metric(out, "forge_requests_total", "counter", "HTTP requests answered, by route and status.");
    for (const auto& [key, n] : requests_)
      out += "forge_requests_total{route=\"" + key.first + "\",status=\"" +
             std::to_string(key.second) + "\"} " + std::to_string(n) + "\n";
    metric(out, "forge_requests_rejected_total", "counter",
           "Requests refused with 503 because every slot and the queue were full.",
           std::to_string(rejected_));
  }
  metric(out, "forge_model_ready", "gauge", "1 once the model has loaded.", engine ? "1" : "0");
  if (!engine) return out;
  const EngineStats& s = *engine;
  metric(out, "forge_prompt_tokens_total", "counter", "Prompt tokens prefilled.",
         std::to_string(s.prompt_tokens));
  metric(out, "forge_generated_tokens_total", "counter", "Tokens generated.",
         std::to_string(s.generated_tokens));
  metric(out, "forge_sequences_total", "counter", "Sequences (choices) finished.",
         std::to_string(s.jobs_done));
  metric(out, "forge_time_to_first_token_seconds", "summary",
         "From a sequence's submission to its first token (queueing and prefill included).");
  out += "forge_time_to_first_token_seconds_sum " + num(s.ttft_seconds_sum) + "\n";
  out += "forge_time_to_first_token_seconds_count " + std::to_string(s.ttft_count) + "\n";
  metric(out, "forge_tokens_per_second", "gauge", "Tokens generated per second over the last 10 s.",
         num(s.tokens_per_second));
  metric(out, "forge_queue_depth", "gauge", "Sequences waiting for a slot.",
         std::to_string(s.queue_depth));
  metric(out, "forge_slots", "gauge", "Slots (sequences decoded together at most).",
         std::to_string(s.slots));
  metric(out, "forge_slots_busy", "gauge", "Slots holding a sequence.",
         std::to_string(s.slots_busy));
  metric(out, "forge_decode_steps_total", "counter",
         "Batched decode steps, by how many sequences each decoded together.");
  for (size_t k = 1; k < s.decode_steps.size(); ++k)
    out += "forge_decode_steps_total{batch_size=\"" + std::to_string(k) + "\"} " +
           std::to_string(s.decode_steps[k]) + "\n";
  return out;
}

}  // namespace forge::serve
